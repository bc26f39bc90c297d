"""The Gemini tests' shared pieces: every Gemini recording read as the JSON texts of its
chunks (``STREAMS``), what each says (``expected``), and ``no_json_repair``."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from addon.dialects.gemini import malformed as gemini_malformed
from addon.dialects.gemini.stream import GeminiStreamDecoder
from addon.model import Event
from tests.realdata import FIXTURES, fixture_names
from tests.unit.helpers import payloads


def _text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def _load() -> dict[str, list[str]]:
    """Every recorded Gemini stream, as the JSON texts of its chunks, by a readable id."""
    streams: dict[str, list[str]] = {}
    if not FIXTURES.is_dir():
        return streams
    for name in fixture_names("gemini-api-") + fixture_names("gemini-vertex-"):
        streams[name] = [line for line in _text(name).splitlines() if line.strip()]
    for name in fixture_names("gemini-cli-recorded-"):
        for n, line in enumerate(_text(name).splitlines()):
            turn = json.loads(line)
            if turn["method"] == "generateContentStream":
                streams[f"{name}#{n}"] = [json.dumps(c) for c in turn["response"]]
    for name in fixture_names("antigravity-"):
        streams[name] = re.findall(r"^\s*'data: (.*)',?$", _text(name), re.M)
    for name in fixture_names("gemini-codeassist-"):
        streams[name] = [json.dumps(codeassist_log(name)[0])]
    clients = FIXTURES / "clients"
    if clients.is_dir():
        for path in sorted(clients.glob("gemini-cli-*.response.sse")):
            streams[f"clients/{path.name}"] = payloads(path.read_bytes())
    return streams


def codeassist_log(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The gcli2api log: (the parsed stream chunk, the whole answer)."""
    text = _text(name)
    decoder = json.JSONDecoder()
    chunk_at = text.index("{", text.index("解析后的JSON:"))
    whole_at = text.index("{", text.index("响应内容 (原始):"))
    chunk = decoder.raw_decode(text, chunk_at)[0]
    whole = decoder.raw_decode(text, whole_at)[0]
    return chunk, whole


@pytest.fixture
def no_json_repair(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if ``json_repair`` were not installed (it is optional): what cannot be read back
    without guessing stays unrecovered."""

    def absent(text: str) -> Any:
        raise ValueError("json_repair not installed")

    monkeypatch.setattr(gemini_malformed, "_with_json_repair", absent)


STREAMS = _load()
NAMES = sorted(STREAMS)
needs_streams = pytest.mark.skipif(not STREAMS, reason=f"recordings not available ({FIXTURES})")


def inner(chunk: dict[str, Any]) -> dict[str, Any]:
    if "response" in chunk and "candidates" not in chunk:
        chunk = chunk["response"]
    return chunk


def wire_parts(chunks: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for c in chunks:
        for cand in inner(json.loads(c)).get("candidates") or []:
            out += (cand.get("content") or {}).get("parts") or []
    return out


PARTIAL_CALLS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "gemini-vertex-stream-functionCall-partialArgs-2calls.vercel-ai.chunks.txt": [
        ("getWeather", {"location": "Boston"}),
        ("getWeather", {"location": "San Francisco"}),
    ],
    "gemini-vertex-stream-thought-parts-parallel-functionCall-partialArgs.vercel-ai.chunks.txt": [
        ("read_theme", {}),
        ("read_screen", {"id": "A"}),
        ("read_screen", {"id": "B"}),
        ("read_screen", {"id": "C"}),
    ],
}
NESTED = "gemini-vertex-stream-functionCall-nested-partialArgs.vercel-ai.chunks.txt"


def expected(name: str) -> dict[str, Any]:
    """What the recording says, read straight from its chunks."""
    chunks = STREAMS[name]
    parts = wire_parts(chunks)
    calls: list[tuple[str, dict[str, Any]]]
    if name in PARTIAL_CALLS:
        calls = PARTIAL_CALLS[name]
    elif name == NESTED:
        calls = [("cookRecipe", nested_recipe_args())]
    else:
        calls = [
            (p["functionCall"]["name"], p["functionCall"].get("args") or {})
            for p in parts
            if "functionCall" in p
        ]
    finish = usage = None
    for c in chunks:
        body = inner(json.loads(c))
        for cand in body.get("candidates") or []:
            finish = cand.get("finishReason") or finish
        u = body.get("usageMetadata") or {}
        if "promptTokenCount" in u:
            usage = u
    return {
        "text": "".join(p["text"] for p in parts if "text" in p and not p.get("thought")),
        "reasoning": "".join(p["text"] for p in parts if p.get("thought")),
        "calls": calls,
        "signatures": [p["thoughtSignature"] for p in parts if p.get("thoughtSignature")],
        "call_signatures": [
            p.get("thoughtSignature")
            for p in parts
            if "functionCall" in p and p["functionCall"].get("name")
        ],
        "finish": finish,
        "usage": usage,
    }


def nested_recipe_args() -> dict[str, Any]:
    """The nested recording's arguments, from its partialArgs read by hand (paths in order)."""
    chunks = STREAMS[NESTED]
    ingredients: dict[int, dict[str, str]] = {}
    steps: dict[int, str] = {}
    name = ""
    for p in wire_parts(chunks):
        for pa in p["functionCall"].get("partialArgs") or []:
            path, value = pa["jsonPath"], pa["stringValue"]
            if m := re.fullmatch(r"\$\.recipe\.ingredients\[(\d+)\]\.(\w+)", path):
                slot = ingredients.setdefault(int(m[1]), {})
                slot[m[2]] = slot.get(m[2], "") + value
            elif m := re.fullmatch(r"\$\.recipe\.steps\[(\d+)\]", path):
                steps[int(m[1])] = steps.get(int(m[1]), "") + value
            elif path == "$.recipe.name":
                name += value
    return {
        "recipe": {
            "ingredients": [ingredients[i] for i in sorted(ingredients)],
            "name": name,
            "steps": [steps[i] for i in sorted(steps)],
        }
    }


def decode(chunks: list[str]) -> list[Event]:
    dec = GeminiStreamDecoder()
    return [e for c in chunks for e in dec.feed(c, None)] + dec.finish()
