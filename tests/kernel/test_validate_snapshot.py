"""ValidateStats.snapshot(): the status publisher's read of the validate statistics. On the CPU a plain
read; on CUDA a copy on a side stream that does not wait for the forward stream's pending work."""

from __future__ import annotations

import math
import threading
import time

import pytest

torch = pytest.importorskip("torch")

from kdtree_verify.telemetry.validate import ValidateStats  # noqa: E402


def _record(stats: ValidateStats, device: str, diff: float) -> None:
    ref = torch.zeros(4, 8, dtype=torch.bfloat16, device=device)
    stats.record(ref + diff, ref)


def test_snapshot_equals_read_on_the_cpu():
    stats = ValidateStats("cpu", tol=0.02)
    zero = {"compared": 0, "mismatches": 0, "max_diff": 0.0, "nonfinite_kernel": 0, "nonfinite_original": 0}
    assert stats.snapshot() == zero
    _record(stats, "cpu", 0.5)
    _record(stats, "cpu", 0.0078125)
    got = stats.snapshot()
    full = stats.read()
    assert got == {
        "compared": full["calls"],
        "mismatches": full["mismatches"],
        "max_diff": full["max_abs"],
        "nonfinite_kernel": 0,
        "nonfinite_original": 0,
    }
    assert got == {**zero, "compared": 2, "mismatches": 1, "max_diff": 0.5}


@pytest.mark.parametrize(
    ("kernel", "original", "kernel_bad", "original_bad"),
    [
        (math.nan, 0.0, 1, 0),  # the kernel wrote a NaN
        (0.0, math.nan, 0, 1),  # Triton's output holds a NaN
        (math.inf, 0.0, 1, 0),  # an infinity: the difference is inf
        (math.inf, math.inf, 1, 1),  # inf - inf = NaN
    ],
)
def test_a_non_finite_output_is_a_mismatch_and_stays_non_finite(kernel, original, kernel_bad, original_bad):
    """NaN > tol is False: before, a NaN output counted as compared with 0 mismatches."""
    stats = ValidateStats("cpu", tol=0.02)
    _record(stats, "cpu", 0.0)  # a good call first, then the bad one, then another good one
    ref = torch.zeros(4, 8, dtype=torch.bfloat16)
    out = ref.clone()
    out[1, 2], ref[1, 2] = kernel, original
    stats.record(out, ref)
    _record(stats, "cpu", 0.0)
    got = stats.snapshot()
    assert got["compared"] == 3 and got["mismatches"] == 1
    assert got["nonfinite_kernel"] == kernel_bad and got["nonfinite_original"] == original_bad
    assert not math.isfinite(got["max_diff"]), got  # never dropped by a later, finite call


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_snapshot_on_cuda_does_not_wait_for_the_forward_stream():
    stats = ValidateStats("cuda", tol=0.02)
    _record(stats, "cuda", 0.5)
    torch.cuda.synchronize()
    forward = torch.cuda.Stream()
    with torch.cuda.stream(forward):
        torch.cuda._sleep(2_000_000_000)  # ~1 s of GPU clock cycles, busy on the forward stream
        _record(stats, "cuda", 1.0)  # queued behind the sleep
    start = time.perf_counter()
    got = stats.snapshot()
    waited = time.perf_counter() - start
    busy = not forward.query()
    forward.synchronize()
    assert busy, "the sleep was too short to tell"
    assert waited < 0.2, f"snapshot waited {waited:.3f} s: it synchronised with the forward stream"
    assert got == {"compared": 1, "mismatches": 1, "max_diff": 0.5}  # the state before the queued call
    assert stats.snapshot() == {"compared": 2, "mismatches": 2, "max_diff": 1.0}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_snapshots_from_another_thread_do_not_break_a_graph_capture():
    """The status publisher's thread reads while the forward thread captures a CUDA graph in torch's
    default capture_error_mode ("global", as SGLang's runners). publish.py also skips the read while
    SGLang says it captures; this checks the read itself."""
    stats = ValidateStats("cuda", tol=0.02)
    ref = torch.zeros(4, 8, dtype=torch.bfloat16, device="cuda")
    stats.record(ref + 0.25, ref)
    torch.cuda.synchronize()
    stats.snapshot()  # the side stream and the pinned buffer exist, as after the publisher's first read
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def publisher() -> None:
        while not stop.is_set():
            try:
                stats.snapshot()
                reads[0] += 1
            except BaseException as exc:
                errors.append(exc)
                return

    thread = threading.Thread(target=publisher)
    thread.start()
    try:
        for _ in range(20):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                stats.record(ref + 0.25, ref)
            graph.replay()
    finally:
        stop.set()
        thread.join()
    torch.cuda.synchronize()
    assert not errors and reads[0] > 0
    assert stats.snapshot()["compared"] == 1 + 20  # one eager call, 20 replays (captures do not run)
