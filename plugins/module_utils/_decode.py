"""What a deploy did to decode: the figures of its smoke traffic, each defined here once.

The smoke traffic (module_utils/_smoke/traffic.py) measures them, the deploy history
(module_utils/_history.py, the owner of the entry format) stores them under an entry's `decode`,
the report (module_utils/_report.py, plugin_utils/_report_table.py) shows them beside the previous
deploy's. The figures (FIGURES):

tokens_per_s   the smoke requests' own throughput: the sum of their completion tokens (each
               answer's `meta_info.completion_tokens`, of a streamed answer its last event's,
               SGLang's /generate, or `usage.completion_tokens` of an OpenAI route) divided by the
               sum of their wall-clock seconds (each from its send to the last byte of its answer,
               as module_utils/_http_client measures it). The requests run one after the other, so
               that is their wall time without the gaps between them. None when an answer does not
               say its completion tokens.
itl_mean_s     SGLang's mean inter-token latency over the smoke run: the delta of its histogram
               `sglang:inter_token_latency_seconds` between a /metrics read right before the first
               request and one right after the last answer, sum delta / count delta, each summed over
               the histogram's series. None when either read has no such histogram (the unit runs
               without --enable-metrics, or /metrics does not answer) or no sample was added.
               SGLang 0.5.23 observes it from a request's second output on, which only a streamed
               request has: the smoke requests are streamed unless the operator turns that off.
accept_length  SGLang's gauge `sglang:spec_accept_length` (accepted drafts + the bonus token per
               verify step, its most recent value) read after the last answer: the mean over its
               series above 0. None when it is absent or still 0 (nothing published yet).

A missing figure is None with why in `why` ("not published ...", or "refused: ..."), never 0. Odd
evidence refuses the figure: a NaN, an infinite or negative value, a counter that fell between the
two reads (a reset: the server restarted in between) or a series that vanished.

compare() is the one rule of the report's flag: a figure whose change against the previous deploy's
is more than the threshold percentage either way.

Stdlib only (runs on the hosts and on the controller).
"""

from __future__ import annotations

import json
import math
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

ACCEPT_LENGTH_METRIC = "sglang:spec_accept_length"
ITL_METRIC = "sglang:inter_token_latency_seconds"
METRICS_PATH = "/metrics"
# The figures compared between deploys, in table order, with the direction that is better.
FIGURES = ("tokens_per_s", "itl_mean_s", "accept_length")
HIGHER_IS_BETTER = {"tokens_per_s": True, "itl_mean_s": False, "accept_length": True}
# Every key of a record (figures(), checked()): the figures, what they were computed from, and why
# a figure is None.
RECORD_KEYS = (*FIGURES, "completion_tokens", "request_s", "itl_samples", "why")
NOT_PUBLISHED = "not published"


@dataclass(frozen=True)
class Figure:
    """One figure: its value, or None and why."""

    value: float | None
    why: str = ""


def metrics_url(health_url: str) -> str:
    """The server's /metrics URL next to its health URL (same scheme, host and port)."""
    parts = urllib.parse.urlsplit(health_url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, METRICS_PATH, "", ""))


# ---------------------------------------------------------------------------------------------
# Prometheus text


def _closing_brace(line: str, start: int) -> int:
    """The index of the `}` that closes the label set opened at `start` (-1 when none)."""
    quoted = escaped = False
    for index in range(start + 1, len(line)):
        char = line[index]
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "}" and not quoted:
            return index
    return -1


def _split_sample(line: str) -> tuple[str, str, str] | None:
    """(name, labels text, value text) of one sample line; None for a comment or a blank line."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    brace, space = line.find("{"), line.find(" ")
    if brace != -1 and (space == -1 or brace < space):
        end = _closing_brace(line, brace)
        if end < 0:
            return line[:brace], line[brace:], ""
        name, labels, rest = line[:brace], line[brace : end + 1], line[end + 1 :]
    else:
        name, _space, rest = line.partition(" ")
        labels = ""
    words = rest.split()
    return name, labels, words[0] if words else ""


def samples(text: str, names: Iterable[str]) -> dict[str, dict[str, float]]:
    """{name: {labels: value}} of the sample lines of these names (a value that is not a number is
    NaN, which the figures refuse)."""
    wanted = set(names)
    out: dict[str, dict[str, float]] = {name: {} for name in wanted}
    for line in text.splitlines():
        parts = _split_sample(line)
        if parts is None or parts[0] not in wanted:
            continue
        name, labels, value = parts
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        out[name][labels] = number
    return out


def _because(why: str) -> str:
    return f": {why}" if why else ""


def _odd(value: float) -> str:
    """Why a published value is refused ("" when it is a finite number >= 0)."""
    if not math.isfinite(value):
        return f"{value} is not a finite number"
    return f"{value:g} is negative" if value < 0 else ""


# ---------------------------------------------------------------------------------------------
# the figures


def accept_length(text: str) -> Figure:
    """ACCEPT_LENGTH_METRIC from one /metrics text (see the module's docstring)."""
    series = samples(text, [ACCEPT_LENGTH_METRIC])[ACCEPT_LENGTH_METRIC]
    for labels, value in sorted(series.items()):
        why = _odd(value)
        if why:
            return Figure(None, f"refused: {ACCEPT_LENGTH_METRIC}{labels} {why}")
    values = [value for value in series.values() if value > 0]
    if not values:
        why = "still 0" if series else "absent"
        return Figure(None, f"{NOT_PUBLISHED} ({ACCEPT_LENGTH_METRIC} {why})")
    return Figure(round(sum(values) / len(values), 3))


def _histogram(text: str) -> tuple[dict[str, float], dict[str, float]]:
    sums, counts = f"{ITL_METRIC}_sum", f"{ITL_METRIC}_count"
    found = samples(text, [sums, counts])
    return found[sums], found[counts]


def itl_mean(before: str | None, after: str | None, unread: str = "") -> tuple[Figure, int | None]:
    """(the mean inter-token latency of the smoke run, its samples) from the /metrics texts read
    before the first request and after the last answer (None: that read failed, `unread` says why)."""
    if before is None or after is None:
        when = "before" if before is None else "after"
        return Figure(
            None, f"{NOT_PUBLISHED} (/metrics not read {when} the requests{_because(unread)})"
        ), None
    (sum0, count0), (sum1, count1) = _histogram(before), _histogram(after)
    if not count1:
        return Figure(None, f"{NOT_PUBLISHED} ({ITL_METRIC} absent)"), None
    total_s = 0.0
    total_n = 0.0
    for kind, old, new in (("_sum", sum0, sum1), ("_count", count0, count1)):
        for labels, value in sorted({**old, **new}.items()):
            why = _odd(value) or (_odd(old[labels]) if labels in old else "")
            if why:
                return Figure(None, f"refused: {ITL_METRIC}{kind}{labels} {why}"), None
            if labels not in new:
                return Figure(None, f"refused: {ITL_METRIC}{kind}{labels} vanished (a restart?)"), None
            delta = new[labels] - old.get(labels, 0.0)
            if delta < 0:
                return (
                    Figure(
                        None,
                        f"refused: {ITL_METRIC}{kind}{labels} fell {old[labels]:g} -> {value:g} (a reset)",
                    ),
                    None,
                )
            if kind == "_sum":
                total_s += delta
            else:
                total_n += delta
    if total_n <= 0:
        return Figure(None, f"{NOT_PUBLISHED} (no {ITL_METRIC} sample during the requests)"), 0
    return Figure(round(total_s / total_n, 6)), int(total_n)


@dataclass(frozen=True)
class Stream:
    """A streamed answer (SGLang's server-sent events: "data: {...}" lines, the last "data:
    [DONE]"): each event's JSON in order, whether [DONE] came, and why it is malformed ("" when
    it is not)."""

    events: list[Any]
    done: bool
    malformed: str = ""


def is_stream(body: bytes) -> bool:
    """Whether an answer is a stream of server-sent events rather than one JSON document."""
    return body.lstrip().startswith(b"data:")


def read_stream(body: bytes) -> Stream:
    """The events of a streamed answer (is_stream); an event that is not JSON, or anything after
    [DONE], makes it malformed."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return Stream([], False, "not UTF-8")
    events: list[Any] = []
    done = False
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue  # the blank line that ends each event
        if done:
            return Stream(events, done, f"line {number} after [DONE]")
        if not line.startswith("data:"):
            return Stream(events, done, f"line {number} is not a data line")
        event = line[len("data:") :].strip()
        if event == "[DONE]":
            done = True
            continue
        try:
            events.append(json.loads(event))
        except (ValueError, RecursionError):
            return Stream(events, done, f"event {len(events) + 1} is not JSON")
    return Stream(events, done)


def answer_doc(body: bytes) -> Any:
    """The JSON document an answer carries: the whole body, or, of a streamed answer, its last
    event (which carries the request's final meta_info). None when there is none that parses."""
    if is_stream(body):
        stream = read_stream(body)
        return stream.events[-1] if stream.events and not stream.malformed else None
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def completion_tokens(body: bytes) -> int | None:
    """The completion tokens an answer says it generated (SGLang's meta_info, an OpenAI usage; of
    a streamed answer, its last event's); None when it does not say, or says something that is
    not a count."""
    doc = answer_doc(body)
    if not isinstance(doc, dict):
        return None
    for key in ("meta_info", "usage"):
        value = doc.get(key, {}).get("completion_tokens") if isinstance(doc.get(key), dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def tokens_per_s(answers: list[dict[str, Any]]) -> tuple[Figure, int | None, float | None]:
    """(tokens/s, completion tokens, request seconds) of the smoke's answers ({seconds,
    completion_tokens} each; see the module's docstring)."""
    if not answers:
        return Figure(None, f"{NOT_PUBLISHED} (no request)"), None, None
    tokens = 0
    seconds = 0.0
    for index, answer in enumerate(answers, 1):
        count, spent = answer.get("completion_tokens"), answer.get("seconds")
        if count is None:
            return (
                Figure(None, f"{NOT_PUBLISHED} (answer {index} does not say its completion tokens)"),
                None,
                None,
            )
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            return Figure(None, f"refused: answer {index} completion tokens {count!r}"), None, None
        if (
            not isinstance(spent, (int, float))
            or isinstance(spent, bool)
            or not math.isfinite(spent)
            or spent < 0
        ):
            return Figure(None, f"refused: answer {index} took {spent!r} s"), None, None
        tokens += count
        seconds += float(spent)
    if seconds <= 0:
        return Figure(None, f"refused: {len(answers)} answers in {seconds:g} s"), tokens, seconds
    return Figure(round(tokens / seconds, 3)), tokens, round(seconds, 3)


def figures(
    answers: list[dict[str, Any]], before: str | None, after: str | None, unread: str = ""
) -> dict[str, Any]:
    """The record of one smoke run (RECORD_KEYS): its answers and the /metrics texts read before
    the first request and after the last answer (None: not read, `unread` says why)."""
    speed, tokens, seconds = tokens_per_s(answers)
    itl, itl_samples = itl_mean(before, after, unread)
    accept = (
        accept_length(after)
        if after is not None
        else Figure(None, f"{NOT_PUBLISHED} (/metrics not read after the requests{_because(unread)})")
    )
    found = {"tokens_per_s": speed, "itl_mean_s": itl, "accept_length": accept}
    return {
        **{name: figure.value for name, figure in found.items()},
        "completion_tokens": tokens,
        "request_s": seconds,
        "itl_samples": itl_samples,
        "why": {name: figure.why for name, figure in found.items() if figure.value is None},
    }


def checked(record: Any) -> dict[str, Any]:
    """A record as the history stores it: RECORD_KEYS only, each figure a finite number >= 0 or
    None, why text. ValueError naming the field otherwise."""
    if not isinstance(record, dict):
        raise ValueError(f"decode figures must be a dict, not {type(record).__name__}")
    out: dict[str, Any] = {}
    for key in (*FIGURES, "request_s"):
        value = record.get(key)
        if value is not None and (
            not isinstance(value, (int, float)) or isinstance(value, bool) or _odd(float(value))
        ):
            raise ValueError(f"decode figure {key} {value!r} is not a finite number >= 0")
        out[key] = None if value is None else float(value)
    for key in ("completion_tokens", "itl_samples"):
        value = record.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ValueError(f"decode field {key} {value!r} is not a count")
        out[key] = value
    why = record.get("why") or {}
    if not isinstance(why, dict) or not all(isinstance(v, str) for v in why.values()):
        raise ValueError("decode field why must map a figure to text")
    out["why"] = {str(k): v for k, v in why.items() if k in FIGURES}
    return out


# ---------------------------------------------------------------------------------------------
# the report's comparison


def compare(
    current: dict[str, Any] | None, previous: dict[str, Any] | None, threshold_pct: float | None
) -> dict[str, Any]:
    """{change_pct: {figure: % change of current against previous}, flagged: [figures whose change
    is more than threshold_pct either way], worse: [those of them that got worse], threshold_pct}.
    A figure either deploy lacks (or the previous one's 0) has no change; no previous deploy, no
    flag; threshold_pct None flags nothing. ValueError for a threshold that is not a number >= 0."""
    if threshold_pct is not None and (
        not isinstance(threshold_pct, (int, float))
        or isinstance(threshold_pct, bool)
        or _odd(float(threshold_pct))
    ):
        raise ValueError(f"the decode change threshold {threshold_pct!r} is not a percentage >= 0")
    change: dict[str, float] = {}
    flagged: list[str] = []
    worse: list[str] = []
    for name in FIGURES:
        now = (current or {}).get(name)
        before = (previous or {}).get(name)
        if now is None or before is None or before <= 0:
            continue
        pct = round((now - before) / before * 100.0, 1)
        change[name] = pct
        if threshold_pct is not None and abs(pct) > threshold_pct:
            flagged.append(name)
            if (pct < 0) == HIGHER_IS_BETTER[name]:
                worse.append(name)
    return {"change_pct": change, "flagged": flagged, "worse": worse, "threshold_pct": threshold_pct}
