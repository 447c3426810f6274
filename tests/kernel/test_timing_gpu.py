"""Validate mode's CUDA clock (kdtree_verify/telemetry/timing.py) on a real GPU: events recorded around
work on the forward's stream are read later, by another thread, without waiting for the stream; the
figures are the device's; a call under CUDA-graph capture is not timed (the sampling rule) and the
capture still replays. Needs a GPU (the budgeted `make gpu-check`, quick tier: bench/gpu_check.py QUICK)."""

from __future__ import annotations

import threading
import time

import pytest

torch = pytest.importorskip("torch")

from kdtree_verify.telemetry import timing  # noqa: E402
from kdtree_verify.telemetry.validate import is_capturing  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
KEY = timing.bucket_key(1, 4, "le1024", 8)
SLEEP_CYCLES = 200_000_000  # torch.cuda._sleep: ~0.1 s of GPU time on any current part


def _timed_call(timings: timing.Timings, original, kernel) -> bool:
    """What dispatch._validate does around the two paths on a GPU: both always run; under capture
    neither is timed."""
    if is_capturing("cuda"):
        timings.captured()
        original()
        kernel()
        return False
    if not timings.start(KEY) or not timings.room():
        return False
    events = (timings.event(), timings.event(), timings.event())
    events[0].record()
    original()
    events[1].record()
    kernel()
    events[2].record()
    timings.events(KEY, *events)
    return True


def test_events_are_read_later_without_waiting_for_the_forward_stream():
    timings = timing.Timings(timing.CUDA_CLOCK)
    a = torch.randn(2048, 2048, device="cuda")
    for _ in range(timing.WARMUP_CALLS):
        assert not _timed_call(timings, lambda: a @ a, lambda: a @ a)
    torch.cuda.synchronize()
    assert _timed_call(timings, lambda: torch.cuda._sleep(SLEEP_CYCLES), lambda: a @ a)
    read: list[float] = []

    def publisher() -> None:  # the status thread's drain: never waits on the stream
        started = time.perf_counter()
        timings.drain()
        read.append(time.perf_counter() - started)

    thread = threading.Thread(target=publisher)
    thread.start()
    thread.join()
    assert read[0] < 0.05 and timings.snapshot()["pending"] == 1  # the sleep is still running
    torch.cuda.synchronize()
    assert timings.drain() == 1
    (bucket,) = timings.snapshot()["buckets"]
    assert bucket["timed_calls"] == 1
    # the device's time: the original (the sleep) took far longer than the kernel (one matmul)
    assert bucket["original_s"] > 10 * bucket["kernel_s"] > 0


def test_a_call_under_graph_capture_is_not_timed_and_the_graph_still_replays():
    timings = timing.Timings(timing.CUDA_CLOCK)
    x = torch.ones(1024, device="cuda")
    out = torch.zeros(1024, device="cuda")
    for _ in range(timing.WARMUP_CALLS + 1):  # past the warm-up: an eager call would be timed
        _timed_call(timings, lambda: out.copy_(x * 2), lambda: out.add_(1))
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            assert not _timed_call(timings, lambda: out.copy_(x * 3), lambda: out.add_(1))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, torch.full_like(out, 4.0))
    timings.drain()
    doc = timings.snapshot()
    assert doc["untimed_captured"] == 1
    assert doc["buckets"][0]["timed_calls"] == 1  # the one eager call past the warm-up
