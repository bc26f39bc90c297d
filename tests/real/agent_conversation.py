"""A coding agent's conversation, driven turn by turn as three real clients run their loop.

For the prompt-cache test (``test_prompt_cache_llama.py``, issue 35). The conversation: a
system prompt of ~1.7k tokens, four tools, a task and the work done on it so far (three tool
calls with their results, ~1k tokens: a search, a file, a failing test run), so that the
first measured turn is one in the middle of a loop. Each ``turn()`` sends the whole history,
appends the answer as the client's SDK gave it, then the results of its tool calls or, after a
text answer, the user's next message. Glossary: *prior* calls are those already in the history
before the first measured turn.

- ``ChatAgent``: OpenAI chat completions through the openai SDK (Cursor, OpenCode); the bridge
  names the conversation by its opening (system prompt and first message).
- ``ClaudeAgent``: Anthropic messages through the anthropic SDK, with Claude Code's session id
  in ``metadata.user_id``.
- ``CodexAgent``: the Responses API through the openai SDK, ``store: false`` and Codex's
  ``prompt_cache_key``.

All stream, as the clients do, with temperature 0 and a small ``max_tokens``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import anthropic
import openai

TIMEOUT = 180.0
MAX_TOKENS = 64
KEY = "sk-real-bridge-key"


def _system_prompt() -> str:
    topics = [
        ("Reading code", "read the files you change and the tests that cover them first"),
        ("Editing", "keep each change small, in the style of the code around it"),
        ("Tests", "run the tests of the package you changed before you say you are done"),
        ("Errors", "quote the exact error message and the file and line it names"),
        ("Dependencies", "add none unless the task needs it, and say why it does"),
        ("Security", "never print secrets, keys or tokens found in files or the environment"),
        ("Git", "never commit, push or rewrite history unless the user asks for it"),
        ("Answers", "answer in short plain sentences, and name the files you looked at"),
    ]
    lines = [
        "You are a coding agent working in the user's repository, a Python web service "
        "with a PostgreSQL database, a task queue and a command-line tool. You help the user "
        "find bugs, change code and run its tests, using the tools you are given.",
        "",
    ]
    for n, (topic, rule) in enumerate(topics, 1):
        lines.append(f"## {n}. {topic}")
        for k in range(1, 5):
            lines.append(
                f"- {topic} rule {n}.{k}: {rule}; when in doubt, look at how the "
                f"module next to it does it and ask the user before guessing (case {k})."
            )
        lines.append("")
    lines.append("Be precise. Use a tool when it would help rather than guessing.")
    return "\n".join(lines)


SYSTEM = _system_prompt()
TASK = "The test tests/test_orders.py::test_total fails since yesterday. Find out why."
FOLLOW_UPS = (
    "Look again at the discount in orders/total.py.",
    "Now run the tests of the orders package.",
    "What would you change?",
)
TOOLS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("read_file", "Read a file of the repository", {"path": {"type": "string"}}),
    ("list_dir", "List a directory of the repository", {"path": {"type": "string"}}),
    ("run_tests", "Run pytest on a path", {"target": {"type": "string"}}),
    ("search", "Search the repository for a text", {"query": {"type": "string"}}),
)

SEARCH_RESULT = "\n".join(
    f"{path}:{line}: {text}"
    for path, line, text in [
        ("orders/total.py", 12, "def total(lines: list[Line], coupon: Coupon | None) -> Decimal:"),
        ("orders/total.py", 31, "def subtotal(lines: list[Line]) -> Decimal:"),
        ("orders/api.py", 58, "    amount = total(order.lines, order.coupon)"),
        ("orders/api.py", 97, "    return {'total': str(total(cart.lines, None))}"),
        ("orders/tasks.py", 22, "    invoice.amount = total(order.lines, order.coupon)"),
        ("tests/test_orders.py", 40, "def test_total(order_with_coupon):"),
        ("tests/test_orders.py", 44, "    assert total(lines, coupon) == Decimal('90.00')"),
        ("tests/test_orders.py", 61, "def test_total_without_coupon(plain_order):"),
        ("tests/test_api.py", 118, "    assert response.json()['total'] == '100.00'"),
        ("cli/report.py", 75, "        print(f'{order.id}: {total(order.lines, order.coupon)}')"),
    ]
)
ORDERS_PY = '''"""Order totals: the subtotal of the lines, less the coupon's discount, plus VAT."""

from decimal import ROUND_HALF_UP, Decimal

from orders.models import Coupon, Line

VAT = Decimal("0.20")
CENT = Decimal("0.01")


def total(lines: list[Line], coupon: Coupon | None) -> Decimal:
    """What the customer pays, rounded to the cent."""
    amount = subtotal(lines)
    if coupon is not None and coupon.active:
        amount -= discount(amount, coupon)
    amount += amount * VAT
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


def discount(amount: Decimal, coupon: Coupon) -> Decimal:
    """A percentage or a fixed amount, never more than the amount itself."""
    if coupon.kind == "percent":
        off = amount * coupon.value / 100
    else:
        off = coupon.value
    return min(off, amount)


def subtotal(lines: list[Line]) -> Decimal:
    """The lines' prices times their quantities; a returned line counts negative."""
    result = Decimal(0)
    for line in lines:
        sign = -1 if line.returned else 1
        result += sign * line.price * line.quantity
    return result
'''
PYTEST_OUTPUT = """============================= test session starts ==============================
platform linux -- Python 3.12.1, pytest-8.3.4, pluggy-1.5.0
rootdir: /home/user/shop
configfile: pyproject.toml
collected 14 items

tests/test_orders.py F.............                                      [100%]

=================================== FAILURES ===================================
__________________________________ test_total __________________________________

order_with_coupon = Order(id=17, lines=[Line(sku='A-1', price=Decimal('50.00'), quantity=2,
returned=False)], coupon=Coupon(code='TEN', kind='percent', value=Decimal('10'), active=True))

    def test_total(order_with_coupon):
        lines, coupon = order_with_coupon.lines, order_with_coupon.coupon
>       assert total(lines, coupon) == Decimal('90.00')
E       AssertionError: assert Decimal('108.00') == Decimal('90.00')
E        +  where Decimal('108.00') = total([Line(sku='A-1', price=Decimal('50.00'),
E           quantity=2, returned=False)], Coupon(code='TEN', kind='percent',
E           value=Decimal('10'), active=True))

tests/test_orders.py:44: AssertionError
=========================== short test summary info ============================
FAILED tests/test_orders.py::test_total - AssertionError: assert Decimal('108.00') == ...
========================= 1 failed, 13 passed in 0.41s =========================
"""
PRIOR: tuple[tuple[str, dict[str, str], str], ...] = (
    ("search", {"query": "def total"}, SEARCH_RESULT),
    ("read_file", {"path": "orders/total.py"}, ORDERS_PY),
    ("run_tests", {"target": "tests/test_orders.py"}, PYTEST_OUTPUT),
)
"""The calls made before the first measured turn: (tool, arguments, result)."""


def schema(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props)}


def tool_result(name: str, arguments: str) -> str:
    """What the client's tool gives back to a call the model made."""
    lines = [f"{name}({arguments}):"]
    lines += [
        f"orders/total.py:{14 + i}:     amount -= discount(amount, coupon)  # checked {i}"
        for i in range(4)
    ]
    return "\n".join(lines)


def follow_up(turn: int) -> str:
    return FOLLOW_UPS[min(turn, len(FOLLOW_UPS)) - 1]


class Agent(Protocol):
    answers: list[str]
    """What each turn's answer was: the names of its tool calls, else ``text``."""

    def turn(self) -> None:
        """Send the history, append the answer and what the client sends after it."""


def _names(names: list[str]) -> str:
    return "+".join(names) or "text"


# --------------------------------------------------------------------------- Cursor-style chat


class ChatAgent:
    """OpenAI chat completions, streamed, read by the openai SDK. ``cache_key`` (a callable
    given the turn's number) sends a ``prompt_cache_key``."""

    def __init__(
        self, base_url: str, model: str, cache_key: Callable[[int], str] | None = None
    ) -> None:
        self.sdk = openai.OpenAI(
            base_url=f"{base_url}/v1", api_key=KEY, max_retries=0, timeout=TIMEOUT
        )
        self.model = model
        self.cache_key = cache_key
        self.turns = 0
        self.answers: list[str] = []
        self.messages: list[Any] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": TASK},
        ]
        for i, (name, arguments, result) in enumerate(PRIOR):
            call = {
                "id": f"call_prior_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            self.messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        self.tools: list[Any] = [
            {
                "type": "function",
                "function": {"name": n, "description": d, "parameters": schema(p)},
            }
            for n, d, p in TOOLS
        ]

    def turn(self) -> None:
        self.turns += 1
        extra: dict[str, Any] = {}
        if self.cache_key is not None:
            extra["prompt_cache_key"] = self.cache_key(self.turns)
        chunks = self.sdk.chat.completions.create(
            model=self.model,
            messages=self.messages,
            tools=self.tools,
            temperature=0,
            max_tokens=MAX_TOKENS,
            stream=True,
            extra_body=extra,
        )
        text, calls = "", dict[int, dict[str, str]]()
        for chunk in chunks:  # the SDK's stream helper refuses an answer cut at max_tokens
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for d in choice.delta.tool_calls or []:
                    call = calls.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] += d.id or ""
                    if d.function is not None:
                        call["name"] += d.function.name or ""
                        call["arguments"] += d.function.arguments or ""
        answer: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            answer["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in calls.values()
            ]
        self.messages.append(answer)
        self.answers.append(_names([c["name"] for c in calls.values()]))
        for c in calls.values():
            result = tool_result(c["name"], c["arguments"])
            self.messages.append({"role": "tool", "tool_call_id": c["id"], "content": result})
        if not calls:
            self.messages.append({"role": "user", "content": follow_up(self.turns)})


# --------------------------------------------------------------------------- Claude Code


class ClaudeAgent:
    """Anthropic messages, streamed, read by the anthropic SDK, with Claude Code's session id."""

    def __init__(self, base_url: str, model: str) -> None:
        self.sdk = anthropic.Anthropic(
            base_url=base_url, api_key=KEY, max_retries=0, timeout=TIMEOUT
        )
        self.model = model
        self.session = str(uuid.uuid4())
        self.turns = 0
        self.answers: list[str] = []
        self.messages: list[Any] = [{"role": "user", "content": TASK}]
        for i, (name, arguments, result) in enumerate(PRIOR):
            use = {"type": "tool_use", "id": f"toolu_prior_{i}", "name": name, "input": arguments}
            self.messages.append({"role": "assistant", "content": [use]})
            content = {"type": "tool_result", "tool_use_id": use["id"], "content": result}
            self.messages.append({"role": "user", "content": [content]})
        self.tools: list[Any] = [
            {"name": n, "description": d, "input_schema": schema(p)} for n, d, p in TOOLS
        ]

    def turn(self) -> None:
        self.turns += 1
        with self.sdk.messages.stream(
            model=self.model,
            system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            messages=self.messages,
            tools=self.tools,
            max_tokens=MAX_TOKENS,
            metadata={"user_id": json.dumps({"session_id": self.session})},
            extra_body={"temperature": 0},
        ) as s:
            message = s.get_final_message()
        blocks = [b.model_dump(exclude_none=True) for b in message.content]
        # Anthropic refuses an empty text block in the history; Claude Code leaves it out.
        blocks = [b for b in blocks if b["type"] != "text" or b["text"]]
        self.messages.append({"role": "assistant", "content": blocks or "(no answer)"})
        uses = [b for b in message.content if b.type == "tool_use"]
        self.answers.append(_names([u.name for u in uses]))
        if uses:
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": u.id,
                    "content": tool_result(u.name, json.dumps(u.input)),
                }
                for u in uses
            ]
            self.messages.append({"role": "user", "content": results})
        else:
            self.messages.append({"role": "user", "content": follow_up(self.turns)})


# --------------------------------------------------------------------------- Codex CLI


def _input_text(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


class CodexAgent:
    """The Responses API, streamed, read by the openai SDK, with Codex's ``prompt_cache_key``
    and ``store: false`` (the whole history in every request)."""

    def __init__(self, base_url: str, model: str) -> None:
        self.sdk = openai.OpenAI(
            base_url=f"{base_url}/v1", api_key=KEY, max_retries=0, timeout=TIMEOUT
        )
        self.model = model
        self.key = str(uuid.uuid4())
        self.turns = 0
        self.answers: list[str] = []
        self.items: list[Any] = [_input_text(TASK)]
        for i, (name, arguments, result) in enumerate(PRIOR):
            call_id = f"call_prior_{i}"
            args = json.dumps(arguments)
            self.items.append(
                {"type": "function_call", "call_id": call_id, "name": name, "arguments": args}
            )
            self.items.append(
                {"type": "function_call_output", "call_id": call_id, "output": result}
            )
        self.tools: list[Any] = [
            {
                "type": "function",
                "name": n,
                "description": d,
                "parameters": schema(p),
                "strict": False,
            }
            for n, d, p in TOOLS
        ]

    def turn(self) -> None:
        self.turns += 1
        events = self.sdk.responses.create(
            model=self.model,
            instructions=SYSTEM,
            input=self.items,
            tools=self.tools,
            store=False,
            prompt_cache_key=self.key,
            temperature=0,
            max_output_tokens=MAX_TOKENS,
            stream=True,
        )
        # The SDK's stream helper wants ``response.completed``; an answer cut at
        # max_output_tokens ends with ``response.incomplete``.
        final = [
            e.response for e in events if e.type in ("response.completed", "response.incomplete")
        ]
        assert final, "the stream ended without its response"
        calls = []
        for item in final[-1].output:
            if item.type == "function_call":
                calls.append(item)
                self.items.append(
                    {
                        "type": "function_call",
                        "call_id": item.call_id,
                        "name": item.name,
                        "arguments": item.arguments,
                    }
                )
            elif item.type == "message":
                self.items.append(item.model_dump(exclude_none=True))
        self.answers.append(_names([c.name for c in calls]))
        for c in calls:
            output = tool_result(c.name, c.arguments)
            self.items.append(
                {"type": "function_call_output", "call_id": c.call_id, "output": output}
            )
        if not calls:
            self.items.append(_input_text(follow_up(self.turns)))


AGENTS: dict[str, type[ChatAgent] | type[ClaudeAgent] | type[CodexAgent]] = {
    "chat": ChatAgent,
    "claude": ClaudeAgent,
    "codex": CodexAgent,
}
