"""The smoke check's traffic step (plugins/module_utils/_smoke/traffic.py and the module's use of it).

judge_scheduler() is pure and gets every case of issue 11; send_requests() talks to a local
http.server (2xx, 500, a timeout, the API key header); run_traffic() and the module's execute() read a
temporary status directory that a writer thread keeps rewriting the way the patch's publisher does,
through the collection's kdtree_verify/telemetry/statusdir.py loaded by path as on a host.
"""

from __future__ import annotations

import http.server
import importlib
import json
import math
import os
import re
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke import check as sc
from ansible_collections.kdtree.fleet.tests.unit.helpers.collection_tree import PATCH_DIR
from ansible_collections.kdtree.fleet.tests.unit.helpers.http_servers import reply
from ansible_collections.kdtree.fleet.tests.unit.helpers.smoke_fakes import Host, execute, params

SECRET = "sk-test-8c1f0e2d-do-not-print"


@pytest.fixture(scope="module")
def tr():
    return importlib.import_module("ansible_collections.kdtree.fleet.plugins.module_utils._smoke.traffic")


@pytest.fixture(scope="module")
def statusdir(tr):
    return tr.load_statusdir(str(PATCH_DIR))


def counts(
    tr,
    pid=123,
    mode="on",
    kernel=0,
    original=None,
    fallbacks=0,
    reason="",
    compared=0,
    mismatches=0,
    max_diff=0.0,
    device=None,
):
    return tr.Counts(
        pid=pid,
        mode=mode,
        updated=1.0,
        kernel_calls=kernel,
        original_calls=dict(original or {}),
        runtime_fallbacks=fallbacks,
        runtime_fallback_reason=reason,
        compared=compared,
        mismatches=mismatches,
        max_diff=max_diff,
        kernel_calls_device=device,
    )


# --- the judge ---------------------------------------------------------------------------------


def test_mode_on_more_kernel_calls_is_ok(tr):
    got = tr.judge_scheduler(counts(tr, kernel=5), counts(tr, kernel=45, original={"not_verify": 4}))
    assert got["state"] == "ok" and got["kernel_calls"] == 40 and got["note"] == ""


def test_mode_on_verify_calls_sent_to_the_original_fail_naming_the_top_reasons(tr):
    before = counts(tr, original={"dtype": 2, "not_verify": 10})
    after = counts(tr, original={"dtype": 40, "shape": 2, "not_verify": 14})
    got = tr.judge_scheduler(before, after)
    assert got["state"] == "failed"
    assert got["note"] == (
        "scheduler pid 123: 0 of 40 verify calls reached the kernel; sent to the original: dtype 38, shape 2"
    )


def test_prefill_and_draft_calls_are_not_verify_calls_sent_away(tr):
    after = counts(tr, original={"not_verify": 8, "draft_runner": 8})
    got = tr.judge_scheduler(counts(tr), after)
    assert got["state"] == "failed"
    assert got["note"] == "scheduler pid 123: no verify call reached the patch (is speculative decoding on?)"


def test_mode_on_no_new_call_is_ok_when_the_kernel_served_calls_at_graph_capture(tr):
    got = tr.judge_scheduler(counts(tr, kernel=12), counts(tr, kernel=12))
    assert got["state"] == "ok"
    assert "no new kernel calls counted, 12 before" in got["note"] and "CUDA graph" in got["note"]


def test_mode_on_no_call_at_all_fails(tr):
    got = tr.judge_scheduler(counts(tr), counts(tr))
    assert got["state"] == "failed"
    assert got["note"].endswith("no verify call reached the patch (is speculative decoding on?)")


@pytest.mark.parametrize("before_fallbacks", [0, 1])
def test_a_runtime_fallback_fails_with_its_reason_even_with_kernel_calls(tr, before_fallbacks):
    before = counts(
        tr, kernel=3, fallbacks=before_fallbacks, reason="CUDA error: invalid argument" * before_fallbacks
    )
    after = counts(tr, kernel=30, fallbacks=1, reason="CUDA error: invalid argument")
    got = tr.judge_scheduler(before, after)
    assert got["state"] == "failed"
    assert (
        got["note"]
        == "scheduler pid 123: 1 runtime fallback(s) to the original: CUDA error: invalid argument"
    )


def test_validate_more_compared_calls_is_ok(tr):
    before = counts(tr, mode="validate", compared=10, original={"validate": 10})
    after = counts(tr, mode="validate", compared=50, original={"validate": 12}, max_diff=0.001)
    got = tr.judge_scheduler(before, after)
    assert got["state"] == "ok" and got["compared"] == 40


def test_validate_a_mismatch_fails_with_the_count_and_max_diff(tr):
    after = counts(tr, mode="validate", compared=50, mismatches=3, max_diff=0.25)
    got = tr.judge_scheduler(counts(tr, mode="validate", compared=10), after)
    assert got["state"] == "failed"
    assert "3 mismatch(es)" in got["note"] and "max_diff 0.25" in got["note"]


def test_validate_calls_sent_to_the_original_fail_naming_the_reasons(tr):
    after = counts(tr, mode="validate", original={"kv_dtype": 9, "validate": 3})
    got = tr.judge_scheduler(counts(tr, mode="validate"), after)
    assert got["state"] == "failed"
    assert got["note"].endswith(
        "0 of 9 verify calls were compared with the kernel; sent to the original: kv_dtype 9"
    )


def test_validate_nothing_new_is_ok_after_earlier_comparisons_and_fails_without(tr):
    seen = counts(tr, mode="validate", compared=7)
    assert tr.judge_scheduler(seen, seen)["state"] == "ok"
    assert "no new compared calls counted, 7 before" in tr.judge_scheduler(seen, seen)["note"]
    none = counts(tr, mode="validate")
    assert tr.judge_scheduler(none, none)["state"] == "failed"


def test_mode_off_is_skipped_with_a_note(tr):
    got = tr.judge_scheduler(counts(tr, mode="off"), counts(tr, mode="off"))
    assert got["state"] == "skipped" and "mode off, traffic not checked" in got["note"]


def test_the_summary_line_counts_the_kernel_calls_over_the_schedulers(tr):
    before = {101: counts(tr, pid=101), 102: counts(tr, pid=102)}
    after = {101: counts(tr, pid=101, kernel=25), 102: counts(tr, pid=102, kernel=15)}
    ok, line, verdicts = tr.judge_traffic(4, before, after)
    assert ok and line == "traffic: 4 requests, kernel calls +40 in 2/2 schedulers"
    assert [v["pid"] for v in verdicts] == [101, 102]
    after[102] = counts(tr, pid=102)
    ok, line, _verdicts = tr.judge_traffic(4, before, after)
    assert not ok and "kernel calls +25 in 1/2 schedulers; 1 failed" in line and "pid 102" in line


def test_counts_come_from_a_status_document_through_statusdir(tr, statusdir):
    doc = {
        "schema": 1,
        "pid": 77,
        "mode": "validate",
        "state": "active",
        "updated": 12.5,
        "counters": {
            "kernel_calls": 0,
            "original_calls": {"validate": 4, "dtype": 1},
            "runtime_fallbacks": 1,
            "runtime_fallback_reason": "boom",
        },
        "validate": {"compared": 9, "mismatches": 2, "max_diff": 0.5},
    }
    got = tr.counts_of(statusdir, doc)
    assert got == tr.Counts(77, "validate", 12.5, 0, {"dtype": 1, "validate": 4}, 1, "boom", 9, 2, 0.5)
    assert tr.counts_of(statusdir, {"pid": 77}) is None  # never written by the publisher


def test_mode_on_prefers_the_device_count_when_both_documents_have_it(tr):
    # CUDA graphs: Python saw the capture only, the library counted every replay
    got = tr.judge_scheduler(counts(tr, kernel=3, device=10), counts(tr, kernel=3, device=50))
    assert got["state"] == "ok" and got["kernel_calls"] == 40 and got["kernel_calls_source"] == "device"
    assert got["note"] == ""
    # only one of the two documents has it (the patch was upgraded in between): the Python count
    got = tr.judge_scheduler(counts(tr, kernel=3), counts(tr, kernel=8, device=50))
    assert got["kernel_calls"] == 5 and got["kernel_calls_source"] == "python"
    ok, line, _verdicts = tr.judge_traffic(
        4, {1: counts(tr, pid=1, kernel=3, device=10)}, {1: counts(tr, pid=1, kernel=3, device=50)}
    )
    assert ok and line == "traffic: 4 requests, kernel calls +40 in 1/1 schedulers"


def test_mode_on_no_new_device_count_fails_as_replays_are_counted_there(tr):
    got = tr.judge_scheduler(counts(tr, kernel=12, device=12), counts(tr, kernel=12, device=12))
    assert got["state"] == "failed"
    assert "no kernel launch counted on the device during the traffic (12 before" in got["note"]


def test_the_device_count_comes_from_the_status_documents_counters(tr, statusdir):
    doc = {
        "pid": 78,
        "mode": "on",
        "updated": 3.0,
        "counters": {"kernel_calls": 2, "kernel_calls_device": 40, "original_calls": {}},
    }
    got = tr.counts_of(statusdir, doc)
    assert got.kernel_calls == 2 and got.kernel_calls_device == 40
    del doc["counters"]["kernel_calls_device"]
    assert tr.counts_of(statusdir, doc).kernel_calls_device is None


def test_a_missing_statusdir_module_is_named(tr, tmp_path):
    with pytest.raises(tr.StatusDirError, match=r"statusdir\.py does not exist"):
        tr.load_statusdir(str(tmp_path))


# --- the requests -------------------------------------------------------------------------------


ITL_S = 0.025  # each generated token's inter-token latency in the Server's /metrics


class Server:
    """A local /generate: answers `status` (after `delay` s) with its max_new_tokens as completion
    tokens, records each request. With `metrics`, GET /metrics answers SGLang's inter-token latency
    histogram (max_new_tokens - 1 samples of ITL_S per answered request) and accept length gauge;
    without, 404 (a server without --enable-metrics)."""

    def __init__(
        self,
        status: int = 200,
        delay: float = 0.0,
        echo_auth: bool = False,
        metrics: bool = False,
        stream_tail: str = "done",
    ) -> None:
        self.status = status
        self.stream_tail = stream_tail  # how a streamed answer ends: done, error, cut
        self.delay = delay
        self.echo_auth = echo_auth
        self.metrics = metrics
        self.seen: list[dict] = []
        self.gets: list[dict] = []
        self.itl_samples = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.gets.append({"path": self.path, "auth": self.headers.get("Authorization")})
                if self.path != "/metrics" or not outer.metrics:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                n = outer.itl_samples
                raw = (
                    "# TYPE sglang:inter_token_latency_seconds histogram\n"
                    f'sglang:inter_token_latency_seconds_bucket{{model_name="m",le="+Inf"}} {n}\n'
                    f'sglang:inter_token_latency_seconds_sum{{model_name="m"}} {n * ITL_S}\n'
                    f'sglang:inter_token_latency_seconds_count{{model_name="m"}} {n}\n'
                    f'sglang:spec_accept_length{{model_name="m",tp_rank="0"}} {2.5 if n else 0.0}\n'
                ).encode()
                reply(self, 200, raw, "text/plain")

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length))
                outer.seen.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                time.sleep(outer.delay)
                tokens = int(body["sampling_params"]["max_new_tokens"])
                outer.itl_samples += tokens - 1
                text = {"text": " Paris.", "meta_info": {"completion_tokens": tokens}}
                if outer.status >= 300:
                    text = {
                        "error": "boom in the kernel",
                        "auth": self.headers.get("Authorization") if outer.echo_auth else "",
                    }
                raw = json.dumps(text).encode()
                kind = "application/json"
                if body.get("stream") and outer.status < 300:
                    # SGLang's streamed /generate: one event per output (cumulative), then [DONE]
                    events = [
                        {"text": " Paris." * (i + 1), "meta_info": {"completion_tokens": i + 1}}
                        for i in range(tokens)
                    ]
                    if outer.stream_tail == "error":
                        events.append({"error": {"message": "boom in the kernel", "code": 400}})
                    lines = [f"data: {json.dumps(event)}\n\n" for event in events]
                    if outer.stream_tail != "cut":
                        lines.append("data: [DONE]\n\n")
                    raw = "".join(lines).encode()
                    kind = "text/event-stream"
                try:
                    reply(self, outer.status, raw, kind)
                except OSError:
                    pass

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/health"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_requests_go_to_the_route_on_the_health_url_s_host_with_the_wanted_body(tr):
    with Server() as server:
        req = tr.Requests(count=3, health_url=server.health_url, prompt="Hi", max_new_tokens=8)
        answers, last = tr.send_requests(req)
    assert [a["status"] for a in answers] == [200, 200, 200]
    assert last <= time.time()
    assert [s["path"] for s in server.seen] == ["/generate"] * 3
    assert server.seen[0]["body"] == {
        "text": "Hi",
        "sampling_params": {"max_new_tokens": 8, "temperature": 0},
        "stream": True,
    }
    assert server.seen[0]["auth"] is None
    assert [a["completion_tokens"] for a in answers] == [8, 8, 8]  # the last event's meta_info


def test_with_streaming_off_the_request_says_so_and_the_json_answer_counts(tr):
    with Server() as server:
        req = tr.Requests(count=1, health_url=server.health_url, max_new_tokens=5, stream=False)
        answers, _last_answer_at = tr.send_requests(req)
    assert server.seen[0]["body"]["stream"] is False
    assert answers[0]["completion_tokens"] == 5


@pytest.mark.parametrize(
    ("tail", "why"),
    [
        ("error", "request 1/2 to http://127.0.0.1:{port}/generate streamed an error: boom in the kernel"),
        ("cut", "request 1/2 to http://127.0.0.1:{port}/generate streamed an answer that ended without"),
    ],
    ids=["error-event", "no-done"],
)
def test_a_streamed_200_with_an_error_event_or_cut_short_is_no_answer(tr, tail, why):
    with Server(stream_tail=tail) as server, pytest.raises(tr.TrafficError) as info:
        tr.send_requests(tr.Requests(count=2, health_url=server.health_url))
    assert why.format(port=server.port) in str(info.value)
    assert len(server.seen) == 1  # the first bad answer stops the traffic


def test_a_500_fails_naming_the_status_and_the_body_head(tr):
    with Server(status=500) as server, pytest.raises(tr.TrafficError) as info:
        tr.send_requests(tr.Requests(count=4, health_url=server.health_url))
    assert "request 1/4" in str(info.value) and "answered 500" in str(info.value)
    assert "boom in the kernel" in str(info.value)
    assert len(server.seen) == 1


def test_a_request_that_takes_too_long_fails_as_a_timeout(tr):
    with (
        Server(delay=2.0) as server,
        pytest.raises(tr.TrafficError, match=r"no answer within 0.3 s \(timeout\)"),
    ):
        tr.send_requests(tr.Requests(count=2, health_url=server.health_url, timeout_s=0.3))


def test_the_total_bound_cuts_a_slow_request_short(tr):
    started = time.monotonic()
    with Server(delay=3.0) as server, pytest.raises(tr.TrafficError, match=r"0.5 s in total"):
        tr.send_requests(
            tr.Requests(count=1, health_url=server.health_url, timeout_s=10, total_timeout_s=0.5)
        )
    assert time.monotonic() - started < 2.5


def test_the_total_bound_stops_further_requests(tr):
    with Server(delay=0.3) as server, pytest.raises(tr.TrafficError, match=r"0.5 s in total"):
        tr.send_requests(
            tr.Requests(count=10, health_url=server.health_url, timeout_s=5, total_timeout_s=0.5)
        )
    assert len(server.seen) <= 3


def test_the_api_key_is_sent_as_a_bearer_header_and_never_in_an_error(tr):
    with Server() as server:
        tr.send_requests(tr.Requests(count=1, health_url=server.health_url, api_key=SECRET))
    assert server.seen[0]["auth"] == f"Bearer {SECRET}"
    with Server(status=401, echo_auth=True) as server, pytest.raises(tr.TrafficError) as info:
        tr.send_requests(tr.Requests(count=1, health_url=server.health_url, api_key=SECRET))
    assert server.seen[0]["auth"] == f"Bearer {SECRET}"
    assert "answered 401" in str(info.value) and SECRET not in str(info.value)


# --- the host part end to end: a status directory a writer thread keeps current ----------------


class Publisher:
    """Writes <dir>/<pid>.json every `interval` s like the patch: kernel (or original) calls grow by
    `per_request` for every request the server answered."""

    def __init__(
        self, status_dir: Path, pids, server: Server, interval=0.1, mode="on", path="kernel", per_request=10
    ):
        self.dir = status_dir
        self.pids = pids
        self.server = server
        self.interval = interval
        self.mode = mode
        self.path = path
        self.per_request = per_request
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def doc(self, pid: int) -> dict:
        n = len(self.server.seen) * self.per_request
        counters = {
            "kernel_calls": 0,
            "original_calls": {"not_verify": len(self.server.seen)},
            "runtime_fallbacks": 0,
        }
        if self.path == "kernel":
            counters["kernel_calls"] = n
        else:
            counters["original_calls"][self.path] = n
        doc = {
            "schema": 1,
            "pid": pid,
            "mode": self.mode,
            "state": "active",
            "since": 1.0,
            "updated": time.time(),
            "counters": counters,
        }
        if self.mode == "validate":
            doc["validate"] = {
                "compared": n if self.path == "kernel" else 0,
                "mismatches": 0,
                "max_diff": 0.0,
            }
        return doc

    def run(self) -> None:
        while not self.stop.is_set():
            for pid in self.pids:
                tmp = self.dir / f"{pid}.json.tmp"
                tmp.write_text(json.dumps(self.doc(pid)))
                os.replace(tmp, self.dir / f"{pid}.json")
            self.stop.wait(self.interval)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=5)


def _run_on_statusdir(tr, statusdir, tmp_path, req, pids):
    """run_traffic over the schedulers `pids`, their counts read from the status files under tmp_path
    (fresh within 0.1 s, polled every 0.05 s)."""
    return tr.run_traffic(
        req, pids, lambda p: tr.read_counts(statusdir, str(tmp_path), p), statusdir.fresh_bound_s(0.1), 0.05
    )


def test_run_traffic_end_to_end_counts_the_kernel_calls_of_every_scheduler(tr, statusdir, tmp_path):
    with Server(delay=0.02) as server, Publisher(tmp_path, [101, 102], server):
        server.itl_samples = 1000  # before the smoke run: not its own
        req = tr.Requests(count=4, health_url=server.health_url)
        result = _run_on_statusdir(tr, statusdir, tmp_path, req, [101, 102])
    assert result.ok, result.why
    assert result.line.startswith("traffic: 4 requests, kernel calls +80 in 2/2 schedulers; decode ")
    assert [s["kernel_calls"] for s in result.schedulers] == [40, 40]
    # the decode figures: tokens/s of the requests' own answers; no /metrics (404): not published
    figures = result.as_result()["decode"]
    seconds = sum(a["seconds"] for a in result.answers)
    assert [a["completion_tokens"] for a in result.answers] == [16] * 4
    assert figures["completion_tokens"] == 64 and figures["tokens_per_s"] == round(64 / seconds, 3)
    assert figures["itl_mean_s"] is None and figures["accept_length"] is None
    assert figures["why"]["itl_mean_s"].startswith("not published (/metrics not read before the requests")
    assert "404" in figures["why"]["itl_mean_s"]


def test_run_traffic_reads_sglangs_metrics_before_and_after_the_requests(tr, statusdir, tmp_path):
    with Server(metrics=True) as server, Publisher(tmp_path, [101], server):
        server.itl_samples = 1000  # samples of earlier requests: the delta leaves them out
        req = tr.Requests(count=3, health_url=server.health_url, max_new_tokens=5, api_key=SECRET)
        result = _run_on_statusdir(tr, statusdir, tmp_path, req, [101])
    assert result.ok, result.why
    figures = result.decode
    assert figures["itl_samples"] == 3 * 4 and figures["itl_mean_s"] == pytest.approx(ITL_S)
    assert figures["accept_length"] == 2.5 and figures["why"] == {}
    assert "ITL 25.0 ms, accept length 2.50" in result.line
    gets = [seen for seen in server.gets if seen["path"] == "/metrics"]
    assert len(gets) == 2 and all(seen["auth"] == f"Bearer {SECRET}" for seen in gets)


def test_run_traffic_end_to_end_fails_when_the_calls_went_to_the_original(tr, statusdir, tmp_path):
    with Server() as server, Publisher(tmp_path, [101], server, path="dtype"):
        req = tr.Requests(count=2, health_url=server.health_url)
        result = _run_on_statusdir(tr, statusdir, tmp_path, req, [101])
    assert not result.ok
    assert (
        "scheduler pid 101: 0 of 20 verify calls reached the kernel; sent to the original: dtype 20"
        in result.why
    )


def test_a_status_file_that_is_not_rewritten_fails_within_the_bound(tr, statusdir):
    now = [100.0]
    stale = {7: counts(tr, pid=7)}  # updated=1.0, never rewritten
    with pytest.raises(tr.TrafficError, match=r"not rewritten within 25 s: pid 7 \(last written"):
        tr.wait_written_after(
            lambda p: stale,
            [7, 8][:1],
            50.0,
            statusdir.fresh_bound_s(5),
            1.0,
            lambda: now[0],
            lambda s: now.__setitem__(0, now[0] + s),
        )
    assert now[0] >= 125.0
    with pytest.raises(tr.TrafficError, match=r"pid 8 \(no status file\)"):
        tr.wait_written_after(
            lambda p: stale, [8], 50.0, 1.0, 1.0, lambda: now[0], lambda s: now.__setitem__(0, now[0] + s)
        )


def test_a_rewrite_counts_by_the_monotonic_clock_whatever_the_wall_clock_did(tr):
    """The wall clock stepped back an hour between the baseline and the publisher's write: its
    `updated` is before `after`, its `updated_mono` after `after_mono`: the file is new (status schema
    2); a file whose monotonic time is before the baseline is not, whatever its wall time says."""
    new = replace(counts(tr, pid=7), updated=10.0, updated_mono=205.0)
    found = tr.wait_written_after(lambda p: {7: new}, [7], 3610.0, 5.0, 1.0, after_mono=200.0)
    assert found[7] is new
    old = replace(counts(tr, pid=7), updated=99999.0, updated_mono=150.0)
    mono, sleeps = [0.0], []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        mono[0] += seconds

    with pytest.raises(tr.TrafficError, match="not rewritten within 5 s"):
        tr.wait_written_after(
            lambda p: {7: old}, [7], 3610.0, 5.0, 1.0, lambda: mono[0], sleep, after_mono=200.0
        )


def test_a_wall_clock_step_back_does_not_stretch_the_wait_for_a_rewrite(tr):
    """The host's wall clock jumps back an hour at every look: the wait for the baseline still ends
    after its bound on the monotonic clock (it used to count its deadline on the wall clock)."""
    wall, mono, polls = [10_000.0], [0.0], [0]

    def wall_clock() -> float:
        wall[0] -= 3600.0
        return wall[0]

    def sleep(seconds: float) -> None:
        polls[0] += 1
        mono[0] += seconds
        assert polls[0] < 1000, "still waiting after 1000 polls"

    stale = {7: counts(tr, pid=7)}  # never rewritten
    result = tr.run_traffic(
        tr.Requests(count=1, health_url="http://127.0.0.1:1/health"),
        [7],
        lambda p: stale,
        25.0,
        1.0,
        clock=wall_clock,
        sleep=sleep,
        monotonic=lambda: mono[0],
    )
    assert not result.ok and "not rewritten within 25 s" in result.why
    assert 25.0 <= mono[0] <= 27.0


# --- the module ---------------------------------------------------------------------------------


def module_execute(hu, host_over=None, **over):
    return execute(Host(hu, **(host_over or {})), **over)


def module_traffic(hu, server, status_dir, **over):
    """module_execute sending its traffic to `server`, its status files in `status_dir`."""
    return module_execute(
        hu, status_dir=str(status_dir), health_url=server.health_url, status_interval_s=0.05, **over
    )


def test_the_module_sends_traffic_once_healthy_and_reports_it(hu, tmp_path):
    with Server() as server, Publisher(tmp_path, [101], server, interval=0.05):
        result = module_traffic(hu, server, tmp_path, requests=3, api_key=SECRET)
    assert result["state"] == "ok", result["msg"]
    assert "; traffic: 3 requests, kernel calls +30 in 1/1 schedulers; decode " in result["msg"]
    assert result["traffic"]["decode"]["completion_tokens"] == 3 * 16
    assert result["traffic"]["schedulers"][0]["kernel_calls"] == 30
    assert server.seen[0]["auth"] == f"Bearer {SECRET}"
    assert SECRET not in json.dumps(result)


def test_a_failed_request_fails_the_module_without_printing_the_key(hu, tmp_path):
    with Server(status=500, echo_auth=True) as server, Publisher(tmp_path, [101], server, interval=0.05):
        result = module_traffic(hu, server, tmp_path, requests=2, api_key=SECRET)
    assert result["state"] == "failed"
    assert "answered 500" in result["why"] and "boom in the kernel" in result["msg"]
    assert result["run"]["healthy_since"] is None
    assert SECRET not in json.dumps(result)


def test_validate_mode_end_to_end_in_the_module(hu, tmp_path):
    with Server() as server, Publisher(tmp_path, [101], server, interval=0.05, mode="validate"):
        result = module_traffic(
            hu,
            server,
            tmp_path,
            requests=2,
        )
    assert result["state"] == "ok", result["msg"]
    assert "traffic: 2 requests, compared calls +20 in 1/1 schedulers" in result["msg"]


def test_a_failed_traffic_check_still_reports_what_its_requests_measured(hu, tmp_path):
    # the deploy's rescue records these figures with the rolled-back deploy (roles/kdtree_deploy rescue.yml)
    with Server() as server, Publisher(tmp_path, [101], server, interval=0.05, path="dtype"):
        result = module_traffic(hu, server, tmp_path, requests=2)
    assert result["state"] == "failed", result["msg"]
    assert "sent to the original: dtype" in result["msg"]
    assert result["traffic"]["decode"]["completion_tokens"] == 2 * 16
    assert result["traffic"]["decode"]["tokens_per_s"] > 0


def test_traffic_needs_a_status_dir_and_fails_before_the_restart(hu):
    host = Host(hu)
    with pytest.raises(sc.SmokeError, match="needs status_dir"):
        sc.execute(params(restart=True, requests=4), read=host.read, restart=host.restart)
    assert host.restarts == []


def test_no_traffic_without_requests_or_for_a_run_without_the_patch(hu):
    result = module_execute(hu)
    assert result["state"] == "ok" and result["traffic"]["line"] == "traffic: none sent"
    result = module_execute(hu, requests=4, marker_state="", patch_dir="")
    assert result["state"] == "ok"
    assert "traffic: none sent (marker state unchecked" in result["msg"]


def test_the_api_key_option_is_no_log(smoke_module):
    assert smoke_module.ARGUMENT_SPEC["api_key"].get("no_log") is True


# --- evidence that cannot be fooled (issue 19) ------------------------------------------------


def _doc(pid: int, **fields) -> dict:
    doc = {
        "schema": 1,
        "pid": pid,
        "mode": "validate",
        "state": "active",
        "since": 1.0,
        "updated": time.time(),
        "counters": {"kernel_calls": 0, "original_calls": {}, "runtime_fallbacks": 0},
        "validate": {"compared": 5, "mismatches": 0, "max_diff": 0.001},
    }
    doc.update(fields)
    return doc


def _write(path: Path, doc) -> None:
    # json.dumps writes NaN and Infinity, as the publisher's json.dumps does
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))


@pytest.mark.parametrize(
    ("validate", "said"),
    [
        ({"compared": 5, "mismatches": 0, "max_diff": math.nan}, "largest difference nan"),
        ({"compared": 5, "mismatches": 0, "max_diff": math.inf}, "largest difference inf"),
        (
            {"compared": 5, "mismatches": 1, "max_diff": 0.0, "nonfinite_kernel": 1},
            "kernel output NaN/inf in 1 calls",
        ),
    ],
)
def test_a_non_finite_validate_value_fails_the_scheduler_with_its_own_reason(
    tr, statusdir, tmp_path, validate, said
):
    """Before, a NaN max_diff with 0 mismatches passed: NaN > tol is false."""
    before = tr.counts_of(statusdir, _doc(7, validate={"compared": 1, "mismatches": 0, "max_diff": 0.0}))
    _write(tmp_path / "7.json", _doc(7, validate=validate))
    after = tr.read_counts(statusdir, str(tmp_path), [7])[7]
    got = tr.judge_scheduler(before, after)
    assert got["state"] == "failed", got
    assert "non-finite values in validate" in got["note"] and said in got["note"]


def test_a_copy_under_another_pids_name_is_refused_and_other_pids_files_are_not_read(tr, statusdir, tmp_path):
    _write(tmp_path / "101.json", _doc(101))
    _write(tmp_path / "102.json", _doc(101))  # a copy of 101's file: would count as scheduler 102
    _write(tmp_path / "999.json", "{not even json")  # not a scheduler of this run: never read
    found = tr.read_counts(statusdir, str(tmp_path), [101, 102])
    assert found[101].refused == "" and found[101].compared == 5
    assert "pid 101 in the file named for pid 102" in found[102].refused
    assert 999 not in found
    with pytest.raises(tr.TrafficError, match=r"status file refused: pid 102 \(pid 101 in the file named"):
        tr.wait_written_after(
            lambda p: tr.read_counts(statusdir, str(tmp_path), p), [101, 102], 0.0, 30.0, 0.01
        )


@pytest.mark.parametrize(
    ("counters", "field"),
    [
        ({"kernel_calls": "5"}, "counters.kernel_calls is str"),
        ({"kernel_calls": True}, "counters.kernel_calls is bool"),
        ({"runtime_fallbacks": -1}, "counters.runtime_fallbacks is -1, a negative count"),
        ({"runtime_fallbacks": [1]}, "counters.runtime_fallbacks is list"),
        ({"original_calls": {"dtype": None}}, "counters.original_calls.dtype is NoneType"),
    ],
)
def test_a_count_of_the_wrong_type_is_refused_at_once_not_read_as_zero(
    tr, statusdir, tmp_path, counters, field
):
    _write(tmp_path / "7.json", _doc(7, counters=counters))
    started = time.monotonic()
    with pytest.raises(tr.TrafficError, match=re.escape(field)):
        tr.wait_written_after(lambda p: tr.read_counts(statusdir, str(tmp_path), p), [7], 0.0, 30.0, 0.01)
    assert time.monotonic() - started < 5  # refused at once: no wait for a rewrite


def test_an_update_time_from_the_future_is_not_fresh(tr, statusdir, tmp_path):
    """`updated` an hour ahead passed "written after the requests" without any rewrite."""
    _write(tmp_path / "7.json", _doc(7, updated=time.time() + 3600))
    found = tr.read_counts(statusdir, str(tmp_path), [7])
    assert "in the future" in found[7].stale
    with pytest.raises(tr.TrafficError, match=r"pid 7 \(updated \d+ s in the future\)"):
        tr.wait_written_after(lambda p: tr.read_counts(statusdir, str(tmp_path), p), [7], 0.0, 0.2, 0.05)


def test_freshness_counts_on_the_monotonic_clock_when_the_file_says_when_it_was_written_on_it(
    tr, statusdir, tmp_path
):
    """A wall clock stepped an hour forward after a live publisher's write made its file stale (and one
    stepped back made a dead publisher's file fresh); schema 2's updated_mono decides the age instead."""
    wall, mono = 1_000_000.0, 5_000.0
    # written 2 s ago on the monotonic clock; the wall clock has since jumped an hour ahead
    _write(tmp_path / "7.json", _doc(7, schema=2, updated=wall, updated_mono=mono - 2))
    # written an hour ago on the monotonic clock (a dead publisher); the wall clock was stepped back
    _write(tmp_path / "8.json", _doc(8, schema=2, updated=wall, updated_mono=mono - 3600))
    found = tr.read_counts(
        statusdir, str(tmp_path), [7, 8], clock=lambda: wall + 3600, monotonic=lambda: mono
    )
    assert found[7].stale == ""
    assert "s ago" in found[8].stale and "dead publisher" in found[8].stale
    # an older patch's file (no updated_mono) is judged on the wall clock as before
    _write(tmp_path / "9.json", _doc(9, updated=wall))
    found = tr.read_counts(statusdir, str(tmp_path), [9], clock=lambda: wall + 3600, monotonic=lambda: mono)
    assert "3600 s ago" in found[9].stale


def test_a_fifo_named_like_a_status_file_is_refused_without_blocking(tr, statusdir, tmp_path):
    os.mkfifo(tmp_path / "7.json")
    os.symlink(tmp_path / "elsewhere.json", tmp_path / "8.json")
    result: dict = {}
    reader = threading.Thread(
        target=lambda: result.update(tr.read_counts(statusdir, str(tmp_path), [7, 8])), daemon=True
    )
    reader.start()
    reader.join(5)
    assert not reader.is_alive(), "the reader blocked on a FIFO"
    assert result[7].refused == "not a regular file" and result[8].refused == "not a regular file"


@pytest.mark.parametrize("interval", [1e300, math.inf, 0.0, 61.0])
def test_a_status_interval_out_of_bounds_fails_the_traffic_before_any_request(interval, statusdir):
    req = sc.Requests(count=1, health_url="http://127.0.0.1:9/health")
    result = sc.host_traffic(
        req, [7], statusdir, {"status_interval_s": interval, "status_dir": "/nonexistent", "poll_s": 0.05}
    )
    assert not result.ok and "status interval" in result.why and not result.answers
