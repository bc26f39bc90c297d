"""The table of what an upstream's error says about the key (issue 40, point 1): the bodies
each provider answers for a key that is invalid, revoked or out of credit, against those it
answers per request (a model the key may not use, moderation, a permission). Each body is the
provider's documented shape; ``SOURCES`` says where each comes from."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from addon.plan.key_errors import RULES, Blame, judge

LITELLM = Path(__file__).parents[2] / "fixtures" / "litellm"


def body(doc: Any) -> bytes:
    return json.dumps(doc).encode()


KEY_ERRORS: dict[str, tuple[int, bytes, str]] = {
    # OpenAI's API reference, "Error codes": 401 Incorrect API key provided.
    "openai invalid key": (401, body({"error": {
        "message": "Incorrect API key provided: sk-proj-****abcd. You can find your API key at "
        "https://platform.openai.com/account/api-keys.", "type": "invalid_request_error",
        "param": None, "code": "invalid_api_key"}}), "invalid_api_key"),
    # OpenAI: 429 "You exceeded your current quota" — no rate limit, waiting does not help.
    "openai quota": (429, body({"error": {
        "message": "You exceeded your current quota, please check your plan and billing "
        "details.", "type": "insufficient_quota", "param": None,
        "code": "insufficient_quota"}}), "insufficient_quota"),
    # Anthropic's "Errors" page: 401 authentication_error.
    "anthropic invalid key": (401, body({"type": "error", "error": {
        "type": "authentication_error", "message": "invalid x-api-key"},
        "request_id": "req_011"}), "authentication_error"),
    # Anthropic: a 400 when the organisation's credit is spent.
    "anthropic credit": (400, body({"type": "error", "error": {
        "type": "invalid_request_error", "message": "Your credit balance is too low to access "
        "the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}}),
        "credit balance is too low"),
    # Gemini API (Google APIs' error model, google.rpc.ErrorInfo): a 400 for a bad key.
    "gemini invalid key": (400, body({"error": {
        "code": 400, "message": "API key not valid. Please pass a valid API key.",
        "status": "INVALID_ARGUMENT", "details": [{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
            "domain": "googleapis.com",
            "metadata": {"service": "generativelanguage.googleapis.com"}}]}}),
        "API_KEY_INVALID"),
    # Gemini's streamed answer is a JSON array: the error is its first item.
    "gemini invalid key streamed": (400, body([{"error": {
        "code": 400, "message": "API key expired. Please renew the API key.",
        "status": "INVALID_ARGUMENT", "details": [{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "API_KEY_EXPIRED"}]}}]), "API_KEY_EXPIRED"),
    "gemini unauthenticated": (401, body({"error": {
        "code": 401, "message": "Request had invalid authentication credentials.",
        "status": "UNAUTHENTICATED"}}), "UNAUTHENTICATED"),
    # OpenRouter's "Errors" page: 401 for a disabled or invalid key, 402 out of credits.
    "openrouter invalid key": (401, body({"error": {"message": "User not found.",
                                                    "code": 401}}), "user not found"),
    "openrouter no credits": (402, body({"error": {
        "message": "Insufficient credits. Add more using https://openrouter.ai/credits",
        "code": 402}}), "insufficient credits"),
    # LiteLLM's proxy (litellm/proxy/auth/user_api_key_auth.py): a virtual key it does not
    # know, one past its expiry, one past its budget.
    "litellm invalid key": (401, body({"error": {
        "message": "Authentication Error, Invalid proxy server token passed. Received API "
        "Key = sk-...abcd, Key Hash (Token) =ab12. Unable to find token in cache or "
        "`LiteLLM_VerificationTokenTable`", "type": "auth_error", "param": "None",
        "code": "401"}}), "auth_error"),
    "litellm expired key": (400, body({"error": {
        "message": "Authentication Error - Expired Key. Key Expiry time 2025-01-01 and current "
        "time 2025-06-01", "type": "expired_key", "param": "sk-...abcd", "code": "400"}}),
        "expired_key"),
    "litellm budget": (400, body({"error": {
        "message": "Budget has been exceeded! Current cost: 10.2, Max budget: 10.0",
        "type": "budget_exceeded", "param": None, "code": "400"}}), "budget_exceeded"),
}  # fmt: skip

REQUEST_ERRORS: dict[str, tuple[int, bytes, str]] = {
    # LiteLLM (ProxyErrorTypes.key_model_access_denied, a 401): the key may not use the model.
    "litellm forbidden model": (401, body({"error": {
        "message": "key not allowed to access model. This key can only access models="
        "['gpt-5']. Tried to access gpt-forbidden", "type": "key_model_access_denied",
        "param": "model", "code": "401"}}), "key_model_access_denied"),
    "litellm team model": (401, body({"error": {
        "message": "team not allowed to access model. This team can only access models="
        "['gpt-5']. Tried to access gpt-forbidden", "type": "team_model_access_denied",
        "param": "model", "code": "401"}}), "team_model_access_denied"),
    # OpenAI: a project without access to a model is answered 403 model_not_found.
    "openai forbidden model": (403, body({"error": {
        "message": "Project `proj_abc` does not have access to model `gpt-forbidden`",
        "type": "invalid_request_error", "param": None, "code": "model_not_found"}}),
        "model_not_found"),
    # OpenRouter's "Errors" page: 403 when the model requires moderation and the input was
    # flagged (ModerationErrorMetadata).
    "openrouter moderation": (403, body({"error": {
        "code": 403, "message": "openai/gpt-4o requires moderation on OpenAI. Your input was "
        "flagged for \"violence\". No credits were charged.", "metadata": {
            "reasons": ["violence"], "flagged_input": "...", "provider_name": "OpenAI",
            "model_slug": "openai/gpt-4o"}}}), "moderation"),
    # Anthropic: 403 permission_error, the key may not use that resource.
    "anthropic permission": (403, body({"type": "error", "error": {
        "type": "permission_error", "message": "Your API key does not have permission to use "
        "the specified resource."}}), "permission_error"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(KEY_ERRORS))
def test_the_keys_own_errors_blame_the_key(name: str) -> None:
    status, raw, why = KEY_ERRORS[name]
    judged = judge(status, raw)
    assert judged is not None and judged.blame is Blame.KEY and judged.why == why


@pytest.mark.parametrize("name", sorted(REQUEST_ERRORS))
def test_refusals_of_the_request_blame_the_request(name: str) -> None:
    status, raw, why = REQUEST_ERRORS[name]
    judged = judge(status, raw)
    assert judged is not None and judged.blame is Blame.REQUEST and judged.why == why


def test_litellms_error_about_its_own_deployment_key_is_not_our_keys() -> None:
    """Recorded (tests/fixtures/litellm/README.md): the deployment behind LiteLLM refused
    LiteLLM's key for one model group; the key we sent passed LiteLLM's check."""
    raw = (LITELLM / "gemini_error_bad_key.json").read_bytes()
    assert json.loads(raw)["error"]["type"] == "authentication_error"
    judged = judge(401, raw)
    assert judged is not None and judged.blame is Blame.REQUEST and judged.why == "litellm."


@pytest.mark.parametrize(
    "raw",
    [b"", b"<html>403 Forbidden</html>", body({"error": {"message": "Forbidden"}}),
     body({"detail": "Not authenticated"}), body([]), body("text"), b'{"error":', b"[[[[" * 9000],
)  # fmt: skip
def test_a_401_or_403_no_row_names_is_unknown(raw: bytes) -> None:
    for status in (401, 403):
        judged = judge(status, raw)
        assert judged is not None and judged.blame is Blame.UNKNOWN and judged.why == ""


def test_other_statuses_say_nothing_of_the_key_unless_a_key_row_names_them() -> None:
    assert judge(500, KEY_ERRORS["openai invalid key"][1]) is None
    assert judge(200, KEY_ERRORS["openai invalid key"][1]) is None
    assert judge(429, body({"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}})) is None  # fmt: skip
    assert judge(400, body({"error": {"message": "messages: field required"}})) is None
    # A request row never turns a 400 or a 429 into anything: those follow the usual rules.
    assert judge(400, REQUEST_ERRORS["openai forbidden model"][1]) is None


def test_the_key_rows_never_take_the_request_rows_place() -> None:
    """Every request row comes before every key row: a LiteLLM refusal typed
    ``key_model_access_denied`` with the code "401" is the request's."""
    blames = [r.blame for r in RULES]
    assert blames == sorted(blames, key=lambda b: b is Blame.KEY)
    assert {r.provider for r in RULES if r.blame is Blame.KEY} >= {
        "OpenAI", "Anthropic", "Gemini", "OpenRouter", "LiteLLM"
    }  # fmt: skip


def test_a_compressed_body_is_not_read_here() -> None:
    """The shell undoes ``Content-Encoding`` first; bytes that are no JSON blame nobody."""
    judged = judge(401, gzip.compress(KEY_ERRORS["openai invalid key"][1]))
    assert judged is not None and judged.blame is Blame.UNKNOWN
