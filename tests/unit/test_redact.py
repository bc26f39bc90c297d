"""``addon.redact``: what the bridge writes is secret-free, one line, valid UTF-8, and never raises."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon import redact as redact_module
from addon.plan import short
from addon.redact import REDACTED, clean, clean_data, escape, redact

GOOGLE_KEY = "AIzaSyA1234567890abcdefghijklmnopqrst"
SECRETS = {
    "openai": "sk-proj-ECHOEDSECRET123456789",
    "anthropic": "sk-ant-api03-Zx9_secret-VALUE-0123456789",
    "openrouter": "sk-or-v1-0123456789abcdef0123",
    "google": GOOGLE_KEY,
    "oauth": "ya29.a0AfH6SMBx-secret_token.value",
    "github": "ghp_0123456789abcdefghijABCDEFGHIJ",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXNlY3JldA",
    "hex": "0123456789abcdef0123456789abcdef01",
    "base64": "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo1234567890ab",
}


@pytest.mark.parametrize("secret", list(SECRETS.values()), ids=list(SECRETS))
def test_key_shaped_strings_are_redacted_wherever_they_are(secret: str) -> None:
    for text in (
        secret,
        f"Incorrect API key provided: {secret}.",
        f"invalid key ({secret}) for project 12",
        f'{{"detail": "bad key {secret}"}}',
    ):
        out = redact(text)
        assert secret not in out and REDACTED in out


@pytest.mark.parametrize(
    "name",
    ["key", "api_key", "apikey", "api-key", "access_token", "token", "x-goog-api-key",
     "client_secret", "password", "X-Amz-Signature", "refresh_token", "KEY"],
)  # fmt: skip
def test_credential_named_parameters_are_redacted(name: str) -> None:
    path = f"/v1beta/models/g:streamGenerateContent?alt=sse&{name}=hunter2-not-key-shaped&n=1"
    out = redact(path)
    assert "hunter2" not in out
    assert out.endswith(f"&{name}={REDACTED}&n=1") and "alt=sse" in out
    quoted = redact(f'{{"{name}": "hunter2", "model": "m"}}')
    assert "hunter2" not in quoted and json.loads(quoted)["model"] == "m"
    assert "hunter2" not in redact(f"{{'{name}': 'hunter2'}}")  # a Python repr


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "Basic", "Token"])
def test_authorization_credentials_are_redacted_scheme_kept(scheme: str) -> None:
    assert redact(f"Authorization: {scheme} abc.def~ghi") == f"Authorization: {scheme} {REDACTED}"


@pytest.mark.parametrize(
    "text",
    [
        "model anthropic-claude-3-7-sonnet-20250219-v1 not found",
        "request 89772e65-a5f6-45d5-b37c-e27ca2ea17d4 failed",
        "/v1/projects/my-project-123/locations/us-central1/publishers/google/models/x",
        "max_tokens=5 monkey=3 tokens=9 task-force disk-space",
        "messages.3.content.0.tool_use_id: unknown id toolu_01ABCdef",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text) == text


def test_long_tokens_can_be_kept_for_the_content_view() -> None:
    signature = SECRETS["base64"]
    assert redact(f'"signature_of_thought": 1 {signature}', tokens=False).endswith(signature)
    assert SECRETS["openai"] not in redact(SECRETS["openai"], tokens=False)


def test_clean_escapes_surrogates_controls_and_line_breaks() -> None:
    out = clean("a\nb\r\tc\x00\x1b[31m\x7f\x85\u2028\ud83d\udcff é 🙂")
    assert out == "a\\nb\\r\\tc\\x00\\x1b[31m\\x7f\\x85\\u2028\\ud83d\\udcff é 🙂"
    out.encode("utf-8")  # valid UTF-8: no lone surrogate left
    assert escape("plain") == "plain"


def test_clean_cuts_after_redacting() -> None:
    text = "x" * 190 + " " + SECRETS["openai"] + " tail"
    out = clean(text, 200)
    assert len(out) == 200 and out.endswith("...") and "sk-proj" not in out
    assert clean("short", 200) == "short"
    assert len(short("é" * 10_000)) == 200


def test_clean_never_raises_on_odd_objects() -> None:
    class Bad:
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert clean(Bad()) == "<Bad>"
    assert clean(ValueError("\ud800 key=abc")) == "\\ud800 key=[REDACTED]"


def test_clean_data_cleans_keys_and_values_and_keeps_numbers() -> None:
    data = {"changes": {"fields not sent: \ud83d": 1}, "error": f"key={GOOGLE_KEY}", "n": 2.5}
    out = clean_data(data)
    assert out == {
        "changes": {"fields not sent: \\ud83d": 1},
        "error": f"key={REDACTED}",
        "n": 2.5,
    }
    json.dumps(out).encode("utf-8")
    deep: list[object] = []
    for _ in range(50):
        deep = [deep]
    assert "nested too deeply" in json.dumps(clean_data(deep))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400), st.one_of(st.none(), st.integers(min_value=3, max_value=300)))
def test_clean_is_total_one_line_utf8_and_bounded(text: str, limit: int | None) -> None:
    out = clean(text, limit)
    out.encode("utf-8")
    assert "\n" not in out and "\r" not in out
    if limit is not None:
        assert len(out) <= limit


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(list(SECRETS.values())),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30),
    st.text(alphabet=" .,:;()[]{}'\"\n=", min_size=1, max_size=3),
)
def test_a_secret_never_survives_whatever_surrounds_it(secret: str, before: str, sep: str) -> None:
    assert secret not in clean(before + sep + secret + sep + before)


# --------------------------------------------------------------------------- the fast path

# What ``redact`` and ``escape`` were before their text was first checked for the parts a
# secret needs: every pattern run over all of the text. The shortcut must change nothing.
_WORD = (
    r"(?:api[_-]?key|apikey|key|access[_-]?token|refresh[_-]?token|id[_-]?token|token"
    r"|secret|client[_-]?secret|password|passwd|pwd|auth|authorization|credentials?"
    r"|signature|sig|jwt)"
)
_REF_NAME = rf"(?:[A-Za-z0-9]+[_-])*{_WORD}"
_REF_PARAM = re.compile(rf"(?<![A-Za-z0-9_.-])({_REF_NAME})(=)([^&\s#\"'<>;,]+)", re.IGNORECASE)
_REF_QUOTED = re.compile(
    rf"([\"']{_REF_NAME}[\"']\s*:\s*[\"'])((?:\\.|[^\"'\\])*)([\"'])", re.IGNORECASE
)
_REF_SCHEME = re.compile(r"\b(Bearer|Basic|Token)(\s+)[A-Za-z0-9._~+/=\-]{4,}", re.IGNORECASE)
_REF_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def reference_redact(text: str, tokens: bool = True) -> str:
    if not text:
        return text
    text = _REF_QUOTED.sub(lambda m: f"{m[1]}{REDACTED}{m[3]}", text)
    text = _REF_PARAM.sub(lambda m: f"{m[1]}={REDACTED}", text)
    text = _REF_SCHEME.sub(lambda m: f"{m[1]}{m[2]}{REDACTED}", text)
    text = redact_module._SHAPES.sub(REDACTED, text)
    if tokens:
        text = redact_module._TOKEN.sub(redact_module._token, text)
    return text


FRAGMENTS = [
    *("key", "KEY", "api_key", "x-goog-api-key", "access_token", "id-Token", "secret"),
    *("password", "pwd", "Authorization", "credentials", "X-Amz-Signature", "sig", "jwt"),
    *("Bearer ", "basic\t", "token ", "=", "&", "?", '"', "'", ": ", " ", ".", "-", "_"),
    *("sk-", "AIza", "ya29.", "ghp_", "github_pat_", "AKIA", "ASIA", "xoxb-", "eyJ"),
    *("\u0130", "\u0131", "\u017f", "\u212a", "\u0307", "é", "→", "\ud83d", "\n", "\x7f"),
    "\u2028",
    *("abcdefghij", "ABCDEFGHIJ", "0123456789", "0123456789abcdef", "+/", "==", "http://h/p"),
    *("credent\u0130als", "s\u0131g", "\u017fecret", "\u212aey", "tOKEN", "BEARER ", "AUTH"),
]


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=24), st.booleans())
def test_the_fast_path_redacts_exactly_what_every_pattern_over_all_text_does(
    pieces: list[str], tokens: bool
) -> None:
    text = "".join(pieces)
    assert redact(text, tokens=tokens) == reference_redact(text, tokens)
    assert escape(text) == _REF_UNSAFE.sub(redact_module._escape_char, text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.booleans())
def test_the_fast_path_agrees_on_any_text(text: str, tokens: bool) -> None:
    assert redact(text, tokens=tokens) == reference_redact(text, tokens)
    assert escape(text) == _REF_UNSAFE.sub(redact_module._escape_char, text)


# --------------------------------------------------------------------------- the memo


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(st.text(max_size=300), st.sampled_from(list(SECRETS.values()))),
    st.one_of(st.none(), st.integers(min_value=3, max_value=300)),
)
def test_a_short_text_cleaned_again_comes_from_the_memo_and_says_the_same(
    text: str, limit: int | None
) -> None:
    first = clean(text, limit)
    assert first == redact_module._clean(text, limit)  # what cleaning it anew gives
    assert clean(text, limit) == first
    if len(text) <= redact_module.MEMO_CHARS:
        hits = redact_module._clean_short.cache_info().hits
        clean(text, limit)
        assert redact_module._clean_short.cache_info().hits == hits + 1


def test_the_memo_is_bounded_and_long_texts_never_enter_it() -> None:
    info = redact_module._clean_short.cache_info()
    assert info.maxsize is not None and info.maxsize <= 4096
    long_secret = "x" * redact_module.MEMO_CHARS + " " + SECRETS["openai"]
    before = redact_module._clean_short.cache_info().currsize
    assert SECRETS["openai"] not in clean(long_secret, 2000)
    assert redact_module._clean_short.cache_info().currsize == before
