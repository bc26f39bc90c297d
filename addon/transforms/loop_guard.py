"""The loop guard: an agent repeating the same failing tool call, judged on the model's answer.

Contract: pure functions over ``addon.model`` values, cost linear in the history; nothing is
kept between requests. ``check_loop`` says when the latest calls are ``max_repeat`` identical
failures in a row; only an answer that makes that call once more has it replaced by
``terminal_message`` (``guard_response`` whole, ``addon.stream.guard_stage`` streamed)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Final, Literal

from addon.model import (
    FinishReason,
    Message,
    Part,
    Request,
    Response,
    Text,
    ToolCall,
    ToolResult,
)
from addon.transforms.arguments import parse_arguments

type ErrorClass = Literal[
    "not_found", "permission", "invalid_arguments", "timeout", "nonzero_exit", "unknown"
]

MAX_ERROR_TEXT: Final = 500
"""Characters of the last error quoted in the verdict and the terminal message."""

_HEAD = 600
_TAIL = 300
"""Where a result's text is read for error signs: its start and its end (a shell's exit code)."""


# --------------------------------------------------------------------------- classification

_ERROR_LEAD = re.compile(
    r"""^\s*(?:
        <tool_use_error> | <error> | \[error\]
      | (?:error|err)\s*(?:[:!\-(\[]|$)
      | error\s+(?:occurred|while|when|during|executing|running|calling|reading|writing|in\b)
      | [\w.]*(?:error|exception)\s*:
      | (?-i:E[A-Z]{3,})\s*:
      | \{\s*"(?:error|isError)"\s*:(?!\s*(?:null|false|""|\{\s*\}))
      | failed\b | failure\s*: | fatal\s*:
      | traceback\s+\(most\s+recent\s+call
      | (?:the\s+)?user\s+(?:doesn't|does\s+not|denied|rejected|declined|refused)
      | (?:tool\s+)?(?:call|execution|use)\s+(?:was\s+)?(?:rejected|denied|refused)
      | permission\s+denied | access\s+denied
      | command\s+(?:failed|timed\s+out)
    )""",
    re.IGNORECASE | re.VERBOSE,
)
_EXIT = re.compile(
    r"\b(?:exit(?:ed)?(?:\s+with)?\s*(?:code|status)|exit_code|returncode|return\s+code)\b"
    r"\s*[:=]?\s*(-?\d+)",
    re.IGNORECASE,
)
_CLASSES: Final[tuple[tuple[ErrorClass, re.Pattern[str]], ...]] = (
    (
        "invalid_arguments",
        re.compile(
            r"invalid\s+(?:argument|param|input|arguments|parameters?|json|value)"
            r"|validation\s*error|inputvalidationerror|schema\s+validation|does\s+not\s+match\s+(?:the\s+)?schema"
            r"|missing\s+required"
            r"|required\s+(?:parameter|argument|property|field)|is\s+a\s+required"
            r"|unexpected\s+(?:keyword|argument|parameter|property)|unknown\s+(?:argument|parameter)"
            r"|must\s+be\s+(?:a|an|one\s+of)\b|not\s+of\s+type|typeerror|badrequest|bad\s+request",
            re.IGNORECASE,
        ),
    ),
    (
        "permission",
        re.compile(
            r"permission|access\s+denied|not\s+permitted|operation\s+not\s+allowed|forbidden"
            r"|eacces|eperm|unauthori[sz]ed|\b403\b|read-only\s+file\s*system"
            r"|user\s+(?:doesn't|does\s+not|denied|rejected|declined|refused)"
            r"|(?:rejected|denied|declined|refused)\s+by\s+(?:the\s+)?user"
            r"|(?:call|execution|use)\s+(?:was\s+)?(?:rejected|denied|refused)",
            re.IGNORECASE,
        ),
    ),
    (
        "timeout",
        re.compile(
            r"timed?\s*-?\s*out|timeout|deadline\s+exceeded|etimedout|took\s+too\s+long",
            re.IGNORECASE,
        ),
    ),
    (
        "not_found",
        re.compile(
            r"not\s+found|no\s+such\s+file|does\s+not\s+exist|doesn't\s+exist|enoent"
            r"|cannot\s+find|can't\s+find|could\s+not\s+find|couldn't\s+find|filenotfound"
            r"|no\s+such\s+(?:directory|path|command)|unknown\s+(?:file|path|tool)|\b404\b",
            re.IGNORECASE,
        ),
    ),
)


def result_text(result: ToolResult) -> str:
    """The text of a tool result (its text parts joined; images and other parts skipped)."""
    if isinstance(result.content, str):
        return result.content
    return "\n".join(p.text for p in result.content if isinstance(p, Text))


def _nonzero_exit(text: str) -> bool:
    for part in (text[:_HEAD], text[-_TAIL:]):
        for m in _EXIT.finditer(part):
            if int(m.group(1)) != 0:
                return True
    return False


def classify(result: ToolResult) -> ErrorClass | None:
    """``None`` when the result is a success, else its error class (the rules:
    docs/tools.md#the-loop-guard)."""
    text = result_text(result)
    head = text[:_HEAD]
    exited = _nonzero_exit(text)
    if not (result.is_error or _ERROR_LEAD.match(head) or exited):
        return None
    probe = head if len(text) <= _HEAD else f"{head}\n{text[-_TAIL:]}"
    for cls, pattern in _CLASSES:
        if pattern.search(probe):
            return cls
    return "nonzero_exit" if exited else "unknown"


# --------------------------------------------------------------------------- fingerprints

_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_READ_WORDS: Final = frozenset(
    {
        "read",
        "view",
        "list",
        "ls",
        "search",
        "grep",
        "glob",
        "find",
        "cat",
        "get",
        "show",
        "lookup",
        "fetch",
        "stat",
        "tree",
        "dir",
    }
)
_WRITE_WORDS: Final = frozenset(
    {
        "write",
        "edit",
        "replace",
        "create",
        "delete",
        "remove",
        "rm",
        "move",
        "mv",
        "rename",
        "apply",
        "patch",
        "update",
        "run",
        "exec",
        "execute",
        "bash",
        "shell",
        "set",
        "insert",
        "append",
        "put",
        "post",
        "commit",
        "push",
        "install",
        "kill",
        "todo",
        "todowrite",
        "save",
        "make",
        "mkdir",
        "multiedit",
    }
)


def is_read_only(name: str) -> bool:
    """A read/list/search-like tool name (``read_file``, ``Grep``, ``list_dir``,
    ``codebase_search``), and no word that says it changes anything (``find_and_replace``)."""
    words = {w.lower() for w in _WORDS.findall(name)}
    return bool(words & _READ_WORDS) and not words & _WRITE_WORDS


def _normalize(value: Any) -> Any:
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, dict):
        return {str(k): _normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    return value


def argument_shape(arguments: str) -> str:
    """The arguments normalized: parsed leniently, keys sorted, strings whitespace-collapsed;
    unreadable arguments as their whitespace-collapsed text. Two calls with the same shape are
    the same call."""
    parsed = parse_arguments(arguments)
    if parsed.value is None and not parsed.empty:
        return json.dumps(" ".join(arguments.split()), ensure_ascii=False)
    value = {} if parsed.empty else parsed.value
    try:
        return json.dumps(
            _normalize(value), ensure_ascii=False, sort_keys=True, separators=(",", ":")
        )
    except (ValueError, RecursionError):
        return json.dumps(" ".join(arguments.split()), ensure_ascii=False)


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()[:16]


def call_key(call: ToolCall) -> str:
    """The call's identity without its result: tool name + argument shape, as a digest."""
    return _digest(call.name, argument_shape(call.arguments))


def fingerprint(call: ToolCall, result: ToolResult) -> str | None:
    """``tool/error_class/digest`` of a failing call (tool, argument shape, error class: safe
    to log), ``None`` when its result is a success."""
    cls = classify(result)
    if cls is None:
        return None
    shape = argument_shape(call.arguments)
    if is_read_only(call.name):
        digest = _digest(call.name, shape, cls, " ".join(result_text(result).split()))
    else:
        digest = _digest(call.name, shape, cls)
    return f"{call.name}/{cls}/{digest}"


# --------------------------------------------------------------------------- the verdict


@dataclass(frozen=True, slots=True)
class LoopVerdict:
    tool: str
    count: int
    """Identical failing calls in the run that ends the history."""
    last_error: str
    """The text of the last failure's result, whitespace-collapsed and cut."""
    fingerprint: str
    error_class: ErrorClass
    call_id: str
    """The id of the last failing call."""
    key: str
    """``call_key`` of the repeated call (tool + argument shape)."""

    def matches(self, call: ToolCall) -> bool:
        """Is ``call`` (e.g. in the model's new answer) the repeated call again?"""
        return call.name == self.tool and call_key(call) == self.key

    @property
    def note(self) -> str:
        """A line for the flow comment."""
        return f"loop guard: {self.tool} failed {self.count} times in a row ({self.error_class})"

    @property
    def stop_note(self) -> str:
        """The answer's note when the model made the call once more and it was replaced."""
        return f"loop guard: {self.tool} called a {_ordinal(self.count + 1)} time: replaced"


@dataclass(slots=True)
class _Failure:
    fingerprint: str
    call: ToolCall
    result: ToolResult
    error_class: ErrorClass


type _Step = list[tuple[ToolCall, ToolResult]] | None
"""A step's answered calls (possibly none failed), or ``None`` for a break."""


def _timeline(messages: tuple[Message, ...]) -> list[_Step]:
    """The history's steps, unclassified: only the steps at its end are ever classified (a
    long history costs one pass, not one classification per tool result)."""
    results: dict[str, ToolResult] = {}
    for m in messages:
        for p in m.parts:
            if isinstance(p, ToolResult):
                results[p.tool_call_id] = p
    steps: list[_Step] = []
    for m in messages:
        if m.role == "assistant":
            calls = [p for p in m.parts if isinstance(p, ToolCall)]
            if not calls:
                if any(isinstance(p, Text) and p.text.strip() for p in m.parts):
                    steps.append(None)  # the model answered in words: a break
                continue  # only reasoning (or nothing): neutral
            answered = [(c, results[c.id]) for c in calls if c.id in results]
            if answered:  # no result for any call: not a step (and not a break)
                steps.append(answered)
        elif m.role == "user" and not any(isinstance(p, ToolResult) for p in m.parts):
            steps.append(None)
    return steps


def _failures(step: list[tuple[ToolCall, ToolResult]]) -> list[_Failure]:
    out: list[_Failure] = []
    for call, result in step:
        cls = classify(result)
        if cls is None:
            continue
        fp = fingerprint(call, result)
        assert fp is not None
        out.append(_Failure(fp, call, result, cls))
    return out


def check_loop(req: Request, max_repeat: int) -> LoopVerdict | None:
    """The verdict when the history ends with ``max_repeat`` (or more) identical failing calls
    in a row, else ``None``. ``max_repeat < 1`` disables the guard. The upstream is asked as
    usual: the verdict acts only on an answer that repeats the call. The rules (steps, breaks,
    runs): docs/tools.md#the-loop-guard."""
    if max_repeat < 1:
        return None
    steps = _timeline(req.messages)
    if not steps or steps[-1] is None:
        return None
    last = _failures(steps[-1])
    if not last:
        return None
    runs = _runs(steps, last)
    # The longest run; on a tie the fingerprint whose last failure comes later in the step.
    latest = {f.fingerprint: i for i, f in enumerate(last)}
    fp = max(runs, key=lambda k: (runs[k], latest[k]))
    run, failure = runs[fp], last[latest[fp]]
    if run < max_repeat:
        return None
    text = " ".join(result_text(failure.result).split())
    if len(text) > MAX_ERROR_TEXT:
        text = text[: MAX_ERROR_TEXT - 1] + "…"
    return LoopVerdict(
        tool=failure.call.name,
        count=run,
        last_error=text,
        fingerprint=failure.fingerprint,
        error_class=failure.error_class,
        call_id=failure.call.id,
        key=call_key(failure.call),
    )


def _runs(steps: list[_Step], last: list[_Failure]) -> Counter[str]:
    """How many failures of each of the last step's fingerprints end the history in a row;
    steps are classified from the end, and only as far back as a run goes."""
    classified: dict[int, list[_Failure]] = {len(steps) - 1: last}
    out: Counter[str] = Counter()
    for fp in dict.fromkeys(f.fingerprint for f in last):
        for i in range(len(steps) - 1, -1, -1):
            step = steps[i]
            if step is None:
                break
            if i not in classified:
                classified[i] = _failures(step)
            n = sum(1 for f in classified[i] if f.fingerprint == fp)
            if not n:  # a step without this failure
                break
            out[fp] += n
    return out


def failure_runs(req: Request) -> Counter[str]:
    """Every failing fingerprint of the history's last step with the length of its run (how
    close each is to a verdict); empty when the history ends with a break or a success."""
    steps = _timeline(req.messages)
    last = _failures(steps[-1]) if steps and steps[-1] else None
    return _runs(steps, last) if last else Counter()


# --------------------------------------------------------------------------- the answer


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def terminal_message(verdict: LoopVerdict) -> str:
    """The text that replaces the repeating call: the tool, the count and the last error."""
    times = "time" if verdict.count == 1 else "times"
    error = verdict.last_error or "(the tool gave no error text)"
    return (
        f"Stopped by cursor-bridge's loop guard: the model called the tool `{verdict.tool}` a "
        f"{_ordinal(verdict.count + 1)} time with the same arguments, after it failed "
        f"{verdict.count} {times} in a row the same way "
        f"({verdict.error_class.replace('_', ' ')}). Last error: {error}\n\n"
        "Calling it again the same way would fail again. Change the arguments or the "
        "approach, check the tool's input (paths, names, required fields), or ask for help."
    )


def stop_finish(reason: FinishReason | None) -> FinishReason:
    """The finish of an answer whose every call was replaced: a text finish, never
    ``tool_calls`` without calls (``stop``: OpenAI ``stop``, Anthropic ``end_turn``, a
    completed Responses message, Gemini ``STOP``); any other reason is kept."""
    return "stop" if reason is None or reason == "tool_calls" else reason


def guard_response(answer: Response, verdict: LoopVerdict) -> tuple[Response, int]:
    """A whole answer judged: each call that ``verdict.matches`` is replaced by the terminal
    message (once, where the first such call was; after a blank line when text came before);
    ``(answer, how many calls were replaced)``. An answer without such a call is returned as
    it is."""
    parts: list[Part] = []
    replaced = 0
    for part in answer.parts:
        if isinstance(part, ToolCall) and verdict.matches(part):
            if not replaced:
                text = any(isinstance(p, Text) and p.text for p in parts)
                parts.append(Text(("\n\n" if text else "") + terminal_message(verdict)))
            replaced += 1
        else:
            parts.append(part)
    if not replaced:
        return answer, 0
    calls = any(isinstance(p, ToolCall) for p in parts)
    finish, raw = answer.finish, answer.finish_raw
    if not calls:
        finish, raw = stop_finish(finish), None
    return dataclasses.replace(answer, parts=tuple(parts), finish=finish, finish_raw=raw), replaced
