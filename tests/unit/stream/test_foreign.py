"""A 2xx body that is not the stream its framing promised: what came instead, said once for
every framing (``addon.stream.foreign``), in the whole answer and in the stream."""

from __future__ import annotations

import pytest

from addon.model import UnsupportedShape
from addon.plan.answer import AnswerState, decode_answer
from addon.stream.foreign import FRAMINGS, not_a_stream
from tests import eventstream_frames as ef
from tests.unit.dialects.kiro.conftest import CLIENTS, TEXT_ANSWER, plan_for, run

PAGE = b"<!DOCTYPE html><html><title>Sign in</title> sk-ant-api03-" + b"Z" * 40 + b"</html>"
FRAMES = ef.CONTENT_TYPE


@pytest.mark.parametrize(
    ("framing", "head", "starts"),
    [
        pytest.param("aws_eventstream", TEXT_ANSWER[:12], True, id="frames-prelude"),
        pytest.param("aws_eventstream", PAGE, False, id="frames-html"),
        pytest.param("aws_eventstream", b'{"message": "no"}', False, id="frames-json"),
        pytest.param("aws_eventstream", PAGE[:11], None, id="frames-too-few"),
        pytest.param("sse", b"data: {}\n\n", True, id="sse"),
        pytest.param("sse", b"\xef\xbb\xbf: ping\n", True, id="sse-comment"),
        pytest.param("sse", b"\n <html>", False, id="sse-html"),
        pytest.param("sse", b"", None, id="sse-nothing-yet"),
        pytest.param("json_array", b" [{", True, id="array"),
        pytest.param("json_array", b"<html>", False, id="array-html"),
    ],
)
def test_each_framing_declares_how_its_stream_starts(
    framing: str, head: bytes, starts: bool | None
) -> None:
    assert FRAMINGS[framing].starts(head) is starts  # type: ignore[index]


def test_what_came_names_status_type_and_first_bytes_cleaned() -> None:
    why = not_a_stream("aws_eventstream", PAGE, status=200, content_type="text/html; charset=x")
    assert why is not None
    assert why.startswith(
        "the upstream answered HTTP 200 with text/html instead of an AWS event stream "
        "(application/vnd.amazon.eventstream): '<!DOCTYPE html><html><title>Sign in</title> "
    )
    assert "sk-ant-api03" not in why and "[REDACTED]" in why
    framed = not_a_stream("aws_eventstream", PAGE, status=200, content_type=FRAMES)
    assert framed is not None and "although sent as application/vnd.amazon.eventstream" in framed
    assert not_a_stream("aws_eventstream", TEXT_ANSWER, status=200, content_type=FRAMES) is None
    empty = not_a_stream("aws_eventstream", b"", status=204, content_type="text/plain")
    assert empty is not None and empty.endswith("(an empty body)")


@pytest.mark.parametrize("client", list(CLIENTS))
@pytest.mark.parametrize("chunk", [1, 5, len(PAGE)], ids=["bytewise", "small", "whole"])
def test_a_page_sent_as_frames_ends_the_clients_stream_saying_so(client: str, chunk: int) -> None:
    pieces = [PAGE[i : i + chunk] for i in range(0, len(PAGE), chunk)]
    out = run(client, pieces).decode()
    assert "not an AWS event stream" in out
    assert "<!DOCTYPE ht" in out
    assert "prelude" not in out


@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_whole_answer_that_is_a_page_is_refused_saying_what_came(client: str) -> None:
    plan = plan_for(client, stream=False)
    with pytest.raises(
        UnsupportedShape, match="HTTP 200 with text/html instead of an AWS event stream"
    ):
        decode_answer(plan, AnswerState.of(plan), PAGE, status=200, content_type="text/html")
    # without the headers (a retried body), its bytes alone tell
    with pytest.raises(
        UnsupportedShape, match="with a body that is not an AWS event stream: '<!DOC"
    ):
        decode_answer(plan, AnswerState.of(plan), PAGE)
    assert decode_answer(
        plan, AnswerState.of(plan), TEXT_ANSWER, status=200, content_type=FRAMES
    ).parts
