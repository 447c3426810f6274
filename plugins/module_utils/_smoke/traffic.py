"""The traffic part of the kdtree smoke check: send a few generation requests to a healthy run and
prove from the patch's status files that its verify calls reached the kernel.

The module (plugins/modules/kdtree_smoke.py) calls run_traffic() once the run is healthy and every
scheduler reported its marker. Steps:

1. baseline: every scheduler's `<status_dir>/<pid>.json` written after the run became healthy;
2. send_requests(): N short POSTs to the server (the health URL's scheme, host and port) through the
   one HTTP client (module_utils/_http_client.py), each bounded by its own deadline and all of them by
   a total one; a non-2xx answer (a redirect too), a malformed answer or a timeout fails;
3. wait until every scheduler's file was written after the last answer (`updated`);
4. judge_scheduler() per scheduler (pure), judge_traffic() for all of them;
5. the decode figures of the run (module_utils/_decode.py defines them): the answers' completion
   tokens and seconds, and SGLang's /metrics read right before the first request and right after
   the last answer (read_metrics(); a server without --enable-metrics answers 404: not published).
   They are evidence for the report, never a reason to fail the check.

The status file's format has one owner, the patch's kdtree_verify/telemetry/statusdir.py (docs/CONTRACTS.md
section 3b); load_statusdir() loads the host's installed copy by path, as smoke_host.load_marker()
loads marker.py, and its read_dir() and summary() read the files and their counters.

Stdlib only. The API key is only ever put in the request header: every message is redacted by the
client (any encoding of the key), never in a message or a result.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ansible_collections.kdtree.fleet.plugins.module_utils import _decode as decode
from ansible_collections.kdtree.fleet.plugins.module_utils import _http_client as http_client
from ansible_collections.kdtree.fleet.plugins.module_utils._patch_files import STATUSDIR_FILE
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke import host as smoke_host
from ansible_collections.kdtree.fleet.plugins.module_utils._status_clock import judged_now

TOP_REASONS = 3
# Slugs of original calls that are not verify calls the kernel should have served: other forward
# passes (prefill, the draft model) and validate mode's own bookkeeping (docs/CONTRACTS.md 3b).
NOT_VERIFY_SLUGS = frozenset(("not_verify", "draft_runner", "validate", "validate_skipped_capture"))
CHECKED_MODES = ("on", "validate")
# Seconds one read of the server's /metrics may take (before and after the requests).
METRICS_TIMEOUT_S = 10.0


class TrafficError(Exception):
    """A request failed (non-2xx, timeout, refused) or the status files did not answer in time."""


class StatusDirError(Exception):
    """The host's statusdir.py is missing or cannot be used."""


def load_statusdir(patch_dir: str) -> Any:
    """<patch_dir>/<STATUSDIR_FILE>, loaded by path as a standalone module."""
    return smoke_host.load_patch_module(
        patch_dir,
        STATUSDIR_FILE,
        "kdtree_smoke_host_statusdir",
        ("scan", "summary", "check", "name_pid", "freshness_problem", "fresh_bound_s", "nonfinite_problem"),
        StatusDirError,
        "the status reader this check needs",
    )


# ---------------------------------------------------------------------------------------------
# status files


@dataclass(frozen=True)
class Counts:
    """One scheduler's status file as the judge reads it."""

    pid: int
    mode: str
    updated: float
    kernel_calls: int = 0
    original_calls: dict[str, int] = field(default_factory=dict)
    runtime_fallbacks: int = 0
    runtime_fallback_reason: str = ""
    compared: int = 0
    mismatches: int = 0
    max_diff: float = 0.0
    # counters.kernel_calls_device (ABI 4 libraries: runs counted on the device, CUDA graph replays
    # included); None when the status file has none (an older patch)
    kernel_calls_device: int | None = None
    # statusdir.nonfinite_problem of the validate statistics ("" when every value is finite)
    nonfinite: str = ""
    # why statusdir refused the file (a wrong type, a copy under another pid's name, not a regular
    # file, ...): the check fails at once, it does not wait for a rewrite
    refused: str = ""
    # statusdir.freshness_problem at the read ("" when fresh): a stale file is waited for
    stale: str = ""
    # the publisher's monotonic clock at the write (status schema 2); None from an older patch
    updated_mono: float | None = None


def counts_of(statusdir: Any, doc: dict[str, Any]) -> Counts | None:
    """The judge's view of one status document (None when it has no `updated` yet: the marker's
    first write, before the publisher's). statusdir.check() refuses any other odd document
    (ValueError, its Refused, naming the field); the numbers come from statusdir.summary() of this
    one document (the format's owner)."""
    statusdir.check(doc)
    if "updated" not in doc:
        return None
    pid = int(doc["pid"])
    updated = float(doc["updated"])
    total = statusdir.summary([doc])
    counters = doc.get("counters") if isinstance(doc.get("counters"), dict) else {}
    validate = total.get("validate") or {}
    device = counters.get("kernel_calls_device")
    return Counts(
        pid=pid,
        mode=str(doc.get("mode", "")),
        updated=updated,
        updated_mono=float(doc["updated_mono"]) if "updated_mono" in doc else None,
        kernel_calls=int(total.get("kernel_calls", 0)),
        kernel_calls_device=int(device) if isinstance(device, int) and not isinstance(device, bool) else None,
        original_calls={str(k): int(v) for k, v in (total.get("original_calls") or {}).items()},
        runtime_fallbacks=int(total.get("runtime_fallbacks", 0)),
        runtime_fallback_reason=str(counters.get("runtime_fallback_reason") or ""),
        compared=int(validate.get("compared", 0)),
        mismatches=int(validate.get("mismatches", 0)),
        max_diff=float(validate.get("max_diff", 0.0)),
        nonfinite=statusdir.nonfinite_problem(doc.get("validate")),
    )


def read_counts(
    statusdir: Any,
    status_dir: str,
    pids: list[int],
    interval_s: float = 5.0,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
) -> dict[int, Counts]:
    """The status files of these pids only (`<pid>.json` whose pid field is its name's: statusdir.scan
    reads no other file). A file statusdir refuses is a Counts with `refused` set; a file whose
    `updated` is not fresh (statusdir.freshness_problem: a dead publisher, or from the future) has
    `stale` set."""
    found: dict[int, Counts] = {}
    try:
        docs, refused = statusdir.scan(status_dir, pids)
    except OSError:
        return found
    now, now_mono = clock(), monotonic()
    for doc in docs:
        try:
            item = counts_of(statusdir, doc)
        except ValueError as exc:
            found[int(doc["pid"])] = Counts(pid=int(doc["pid"]), mode="", updated=0.0, refused=str(exc))
            continue
        if item is not None:
            # its age on the host's monotonic clock where the file says when it was written on it
            stale = statusdir.freshness_problem(doc, judged_now(doc, now, now_mono), interval_s)
            found[item.pid] = replace(item, stale=stale) if stale else item
    for name, why in refused.items():
        pid = statusdir.name_pid(name)
        found[pid] = Counts(pid=pid, mode="", updated=0.0, refused=why)
    return found


ReadCounts = Callable[[list[int]], dict[int, Counts]]


def _written_after(item: Counts, after: float, after_mono: float | None) -> bool:
    if item.stale:
        return False
    if after_mono is not None and item.updated_mono is not None:
        return item.updated_mono > after_mono
    return item.updated > after


def wait_written_after(
    read: ReadCounts,
    pids: list[int],
    after: float,
    bound_s: float,
    poll_s: float,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    after_mono: float | None = None,
) -> dict[int, Counts]:
    """Every pid's status file once it was written after `after` and is fresh: its `updated_mono`
    after `after_mono` on the host's monotonic clock when both are known (a step of the wall clock
    between the two neither hides a rewrite nor fakes one), else its wall-clock `updated` after `after`;
    TrafficError naming the late ones when that takes longer than bound_s (on the monotonic clock: a
    step of the host's wall clock neither stretches nor cuts the wait), and at once naming a file the
    status reader refused."""
    deadline = monotonic() + bound_s
    while True:
        found = read(pids)
        refused = [found[pid] for pid in pids if pid in found and found[pid].refused]
        if refused:
            raise TrafficError(
                "status file refused: " + ", ".join(f"pid {item.pid} ({item.refused})" for item in refused)
            )
        late = [pid for pid in pids if pid not in found or not _written_after(found[pid], after, after_mono)]
        if not late:
            return found
        if monotonic() >= deadline:
            named = ", ".join(
                f"pid {pid} (no status file)"
                if pid not in found
                else f"pid {pid} ({found[pid].stale})"
                if found[pid].stale
                else f"pid {pid} (last written {after - found[pid].updated:.1f} s before)"
                for pid in late
            )
            raise TrafficError(f"status file not rewritten within {bound_s:g} s: {named}")
        sleep(poll_s)


# ---------------------------------------------------------------------------------------------
# requests


@dataclass(frozen=True)
class Requests:
    """What to send: count, where (the health URL's scheme://host:port + route), what, bounds."""

    count: int
    health_url: str
    route: str = "/generate"
    prompt: str = "The capital of France is"
    max_new_tokens: int = 16
    timeout_s: float = 30.0
    total_timeout_s: float = 120.0
    api_key: str = ""
    # SGLang's "stream": the answer comes as server-sent events, one per output, which is what
    # makes SGLang observe its inter-token latency (module_utils/_decode.py, itl_mean_s).
    stream: bool = True

    def url(self) -> str:
        parts = urllib.parse.urlsplit(self.health_url)
        route = self.route if self.route.startswith("/") else "/" + self.route
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, route, "", ""))

    def metrics_url(self) -> str:
        return decode.metrics_url(self.health_url)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def body(self) -> bytes:
        sampling = {"max_new_tokens": self.max_new_tokens, "temperature": 0}
        doc = {"text": self.prompt, "sampling_params": sampling, "stream": self.stream}
        return json.dumps(doc).encode("utf-8")


def send_requests(
    req: Requests, clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic
) -> tuple[list[dict[str, Any]], float]:
    """Send req.count requests one after the other through module_utils/_http_client.py: ([{status,
    seconds, completion_tokens}, ...], epoch s of the last answer; completion_tokens None when the
    answer does not say, decode.completion_tokens). TrafficError (its message redacted) on a non-2xx
    answer (a redirect included), a malformed or oversized answer, a timeout (its own or the total,
    across slow reads too), or no answer."""
    url = req.url()
    headers = {"Content-Type": "application/json", **req.headers()}
    secrets = [req.api_key] if req.api_key else []
    deadline = monotonic() + req.total_timeout_s
    answers: list[dict[str, Any]] = []
    last = clock()
    for index in range(1, req.count + 1):
        left = deadline - monotonic()
        if left <= 0:
            raise TrafficError(
                f"request {index}/{req.count} to {url} not sent: the requests took more than "
                f"{req.total_timeout_s:g} s in total"
            )
        timeout = min(req.timeout_s, left)
        try:
            answer = http_client.request(
                "POST",
                url,
                timeout_s=timeout,
                body=req.body(),
                headers=headers,
                secrets=secrets,
                clock=monotonic,
            )
        except http_client.HttpFailure as exc:
            if exc.timed_out:
                why = f"no answer within {timeout:.3g} s (timeout"
                if timeout < req.timeout_s:
                    why += f": the requests may take {req.total_timeout_s:g} s in total"
                why += ")"
            else:
                why = exc.reason
            raise TrafficError(
                http_client.redact(f"request {index}/{req.count} to {url} {why}", secrets)
            ) from None
        last = clock()
        problem = stream_problem(answer.body) if req.stream else ""
        if problem:
            raise TrafficError(http_client.redact(f"request {index}/{req.count} to {url} {problem}", secrets))
        answers.append(
            {
                "status": answer.status,
                "seconds": answer.seconds,
                "completion_tokens": decode.completion_tokens(answer.body),
            }
        )
    return answers, last


def stream_problem(body: bytes) -> str:
    """Why a streamed request's 2xx answer is no answer ("" when it is one). SGLang answers a
    streamed request 200 before it generates, so a failure comes as an "error" event; a stream
    cut short lacks the final [DONE]. A plain JSON answer (a route that does not stream) is taken
    as it is."""
    if not decode.is_stream(body):
        return ""
    stream = decode.read_stream(body)
    if stream.malformed:
        return f"streamed a malformed answer ({stream.malformed})"
    for event in stream.events:
        if isinstance(event, dict) and "error" in event:
            error = event["error"]
            message = error.get("message") if isinstance(error, dict) else error
            return f"streamed an error: {str(message)[:200]}"
    if not stream.done:
        return "streamed an answer that ended without data: [DONE]"
    if not stream.events:
        return "streamed no output before data: [DONE]"
    return ""


def read_metrics(req: Requests) -> str:
    """The server's /metrics text (next to the health URL, with the API key), within
    METRICS_TIMEOUT_S; TrafficError with the client's redacted reason when it cannot be read (a
    server without --enable-metrics answers 404)."""
    secrets = [req.api_key] if req.api_key else []
    try:
        answer = http_client.request(
            "GET", req.metrics_url(), timeout_s=METRICS_TIMEOUT_S, headers=req.headers(), secrets=secrets
        )
    except http_client.HttpFailure as exc:
        reason = exc.reason.rstrip(": ")  # a 404's empty body
        raise TrafficError(http_client.redact(f"/metrics {reason}", secrets)) from None
    return answer.body.decode("utf-8", "replace")


# ---------------------------------------------------------------------------------------------
# the judge (pure)


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    out = {key: after.get(key, 0) - before.get(key, 0) for key in after}
    return {key: value for key, value in out.items() if value > 0}


def judge_scheduler(before: Counts, after: Counts) -> dict[str, Any]:
    """One scheduler's traffic verdict: {pid, mode, state (ok, failed, skipped), kernel_calls (+n),
    compared (+n), original_calls (+n by slug), note}. Pure.

    mode on: kernel calls increased -> ok; verify calls sent to the original instead -> failed
    naming the top reasons; nothing at all -> ok when the kernel served calls before (at CUDA graph
    capture: replays are not counted in Python), else failed. The kernel calls are
    counters.kernel_calls_device when both documents have it (the library's own count, replays
    included: then no growth at all fails), else the Python count kernel_calls. A runtime
    fallback fails. validate: the same with validate.compared, and any mismatch fails. Any other
    mode: skipped."""
    pid = after.pid
    mode = after.mode
    originals = _delta(after.original_calls, before.original_calls)
    sent_away = {k: v for k, v in originals.items() if k not in NOT_VERIFY_SLUGS}
    on_device = after.kernel_calls_device is not None and before.kernel_calls_device is not None
    if on_device:
        kernel = after.kernel_calls_device - before.kernel_calls_device
        kernel_total = after.kernel_calls_device
    else:
        kernel = after.kernel_calls - before.kernel_calls
        kernel_total = after.kernel_calls
    compared = after.compared - before.compared
    out: dict[str, Any] = {
        "pid": pid,
        "mode": mode,
        "state": "ok",
        "kernel_calls": kernel,
        "kernel_calls_source": "device" if on_device else "python",
        "compared": compared,
        "original_calls": originals,
        "note": "",
    }

    def failed(note: str) -> dict[str, Any]:
        return {**out, "state": "failed", "note": f"scheduler pid {pid}: {note}"}

    if mode not in CHECKED_MODES:
        return {
            **out,
            "state": "skipped",
            "note": f"scheduler pid {pid}: mode {mode or '?'}, traffic not checked",
        }
    if after.nonfinite:
        return failed(f"{after.nonfinite} (a NaN or inf is a mismatch)")
    if after.runtime_fallbacks > 0:
        reason = after.runtime_fallback_reason or "no reason recorded"
        return failed(f"{after.runtime_fallbacks} runtime fallback(s) to the original: {reason}")
    if mode == "validate" and after.mismatches > 0:
        return failed(
            f"validate found {after.mismatches} mismatch(es) between the kernel and the original "
            f"(max_diff {after.max_diff:g})"
        )
    grew, total, what = (kernel, kernel_total, "kernel calls")
    if mode == "validate":
        grew, total, what = (compared, after.compared, "compared calls")
    if grew > 0:
        return out
    if sent_away:
        top = sorted(sent_away.items(), key=lambda item: (-item[1], item[0]))[:TOP_REASONS]
        reasons = ", ".join(f"{slug} {count}" for slug, count in top)
        verb = "reached the kernel" if mode == "on" else "were compared with the kernel"
        return failed(f"0 of {sum(sent_away.values())} verify calls {verb}; sent to the original: {reasons}")
    if total > 0 and mode == "on" and on_device:
        return failed(
            f"no kernel launch counted on the device during the traffic ({total} before; the device "
            "count includes CUDA graph replays)"
        )
    if total > 0:
        return {
            **out,
            "note": (
                f"scheduler pid {pid}: no new {what} counted, {total} before: calls replayed from a CUDA "
                "graph are not counted in Python (docs/CONTRACTS.md 3b)"
            ),
        }
    return failed("no verify call reached the patch (is speculative decoding on?)")


def judge_traffic(
    requests: int, before: dict[int, Counts], after: dict[int, Counts]
) -> tuple[bool, str, list[dict[str, Any]]]:
    """(ok, one summary line, per-scheduler verdicts) for all schedulers in `after`. Pure."""
    verdicts = [judge_scheduler(before.get(pid, after[pid]), after[pid]) for pid in sorted(after)]
    checked = [v for v in verdicts if v["state"] != "skipped"]
    bad = [v for v in verdicts if v["state"] == "failed"]
    kernel = sum(v["kernel_calls"] for v in checked)
    compared = sum(v["compared"] for v in checked)
    grew = sum(1 for v in checked if v["kernel_calls"] > 0 or v["compared"] > 0)
    line = f"traffic: {requests} requests"
    if not checked:
        line += f", not checked (mode {', '.join(sorted({v['mode'] or '?' for v in verdicts})) or '?'})"
    elif any(v["mode"] == "validate" for v in checked):
        line += f", compared calls +{compared} in {grew}/{len(checked)} schedulers"
    else:
        line += f", kernel calls +{kernel} in {grew}/{len(checked)} schedulers"
    notes = [v["note"] for v in verdicts if v["note"]]
    if bad:
        line += f"; {len(bad)} failed"
    return not bad, line + ("; " + "; ".join(notes) if notes else ""), verdicts


# ---------------------------------------------------------------------------------------------
# the whole host part


@dataclass
class TrafficResult:
    """ok, the smoke message's line, why + detail when it failed, per-scheduler verdicts, the
    answers and the decode figures (None when no request was answered)."""

    ok: bool
    line: str
    why: str = ""
    detail: str = ""
    schedulers: list[dict[str, Any]] = field(default_factory=list)
    answers: list[dict[str, Any]] = field(default_factory=list)
    decode: dict[str, Any] | None = None

    def as_result(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "line": self.line,
            "schedulers": [dict(item) for item in self.schedulers],
            "answers": [dict(item) for item in self.answers],
            "decode": json.loads(json.dumps(self.decode)),
        }


def decode_text(record: dict[str, Any]) -> str:
    """The figures on the smoke's line: "decode 41.2 tokens/s, ITL 24.1 ms, accept length 1.02"
    ("-" for a figure not published or refused)."""
    tps, itl, accept = (record.get(name) for name in decode.FIGURES)
    return (
        f"decode {'-' if tps is None else f'{tps:.1f}'} tokens/s, "
        f"ITL {'-' if itl is None else f'{itl * 1000:.1f}'} ms, "
        f"accept length {'-' if accept is None else f'{accept:.2f}'}"
    )


Metrics = Callable[[Requests], str]


def run_traffic(
    req: Requests,
    pids: list[int],
    read: ReadCounts,
    bound_s: float,
    poll_s: float = 0.25,
    send: Callable[[Requests], tuple[list[dict[str, Any]], float]] = send_requests,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    metrics: Metrics = read_metrics,
    monotonic: Callable[[], float] = time.monotonic,
) -> TrafficResult:
    """Baseline (files written from now on), /metrics, requests, /metrics, files written after the
    last answer, judge, decode figures. `bound_s`: how long each wait for a rewrite may take
    (statusdir.fresh_bound_s of the interval)."""
    bound = bound_s
    poll = max(poll_s, 0.05)
    head = f"traffic: {req.count} requests"
    try:
        before = wait_written_after(
            read, pids, clock(), bound, poll, monotonic, sleep, after_mono=monotonic()
        )
    except TrafficError as exc:
        why = f"{head}: no fresh baseline ({exc}; does the unit set KDTREE_STATUS_DIR?)"
        return TrafficResult(ok=False, line=why, why=why)
    unread: list[str] = []

    def scrape() -> str | None:
        try:
            return metrics(req)
        except TrafficError as exc:
            unread.append(str(exc))
            return None

    metrics_before = scrape()
    try:
        answers, last = send(req)
        last_mono = monotonic()  # just after the last answer, on the clock the status files carry
    except TrafficError as exc:
        why = f"{head}: {exc}"
        return TrafficResult(ok=False, line=why, why=why)
    metrics_after = scrape() if metrics_before is not None else None
    figures = decode.figures(answers, metrics_before, metrics_after, "; ".join(unread))
    try:
        after = wait_written_after(read, pids, last, bound, poll, monotonic, sleep, after_mono=last_mono)
    except TrafficError as exc:
        why = f"{head} answered, but {exc}"
        return TrafficResult(ok=False, line=why, why=why, answers=answers, decode=figures)
    ok, line, verdicts = judge_traffic(req.count, before, after)
    failed = [v["note"] for v in verdicts if v["state"] == "failed"]
    return TrafficResult(
        ok=ok,
        line=f"{line}; {decode_text(figures)}",
        why="" if ok else f"{head}: " + "; ".join(failed),
        detail="" if ok else json.dumps(verdicts, sort_keys=True),
        schedulers=verdicts,
        answers=answers,
        decode=figures,
    )
