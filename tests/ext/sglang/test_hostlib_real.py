"""The kdtree path for real on the CPU: the real TritonAttnBackend class, the real kernel binding and the
host-memory test double of the library (tests/doubles/hostlib, fp32 on host), against SGLang's real
Triton extend_attention_fwd under TRITON_INTERPRET=1, in float32 as the CPU test engine runs."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")  # the optional suites skip where torch is absent
from extlib import ROOT  # noqa: E402
from kdtree_verify.inject import lifecycle  # noqa: E402
from kdtree_verify.state import STATE  # noqa: E402
from verify_cases import QK, VD, make_case  # noqa: E402

tb = pytest.importorskip("sglang.srt.layers.attention.triton_backend")
from sglang.srt.layers.radix_attention import RadixAttention  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from test_dispatch_real import real_backend  # noqa: E402
from test_dispatch_real import run as run_bf16  # noqa: E402

TOL = 1e-4  # fp32 Triton (interpreted) against the fp32 host double: summation order only
SLOTS = torch.tensor([90, 91, 92, 93, 80, 81, 82, 83, 70, 71, 72, 73])


@pytest.fixture(scope="module")
def host_double(tmp_path_factory):
    out = tmp_path_factory.mktemp("hostlib")
    build = ROOT / "tests" / "doubles" / "hostlib" / "build.sh"
    subprocess.run(["bash", str(build), "--out", str(out)], check=True, capture_output=True)
    return out / "libkdtree_verify.so"


def no_triton(*args, **kwargs):
    raise AssertionError("the original Triton extend_attention_fwd ran")


def run_fp32(case, mode, slots=SLOTS, triton=None):
    """One forward (forward_extend via forward) on the real class, everything float32 on the CPU.
    `triton` replaces the backend's extend_attention_fwd (default: SGLang's real one, interpreted)."""
    pool = case.kv_buffer.float().clone()
    backend = real_backend(case, pool)
    if triton is not None:
        backend.extend_attention_fwd = triton
    heads = case.q.shape[1]
    layer = RadixAttention(heads, QK, case.sm_scale, num_kv_heads=1, layer_id=0, v_head_dim=VD)
    batch = SimpleNamespace(
        forward_mode=mode,
        out_cache_loc=slots,
        out_cache_loc_is_physical=True,
        mha_one_shot=False,
        attn_attend_prefix_cache=None,
        mha_return_lse=False,
        extend_seq_lens_cpu=None,
    )
    out = backend.forward(case.q.float(), case.k_extend.float(), case.v_extend.float(), layer, batch)
    return out, pool


def install(monkeypatch, lib, mode):
    monkeypatch.setenv("KDTREE_VERIFY", mode)
    monkeypatch.setenv("KDTREE_LIB", str(lib))
    st = lifecycle.install(tb)  # the real binding (kdtree_verify.kernel.binding) and the real .so
    assert st["state"] == "active", st


@pytest.fixture(params=["tree", "causal"])
def case(request):
    c = make_case([5, 0, 9], "binary" if request.param == "tree" else "chain", seed=21)
    if request.param == "causal":
        c.custom_mask = None  # DFlash: a causal draft block, no mask
    return c


def test_on_mode_serves_an_fp32_cpu_verify_through_the_kernel_path_equal_to_triton(
    case, host_double, monkeypatch
):
    expected, expected_pool = run_fp32(case, ForwardMode.TARGET_VERIFY)  # unpatched: real Triton
    install(monkeypatch, host_double, "on")
    got, got_pool = run_fp32(case, ForwardMode.TARGET_VERIFY, triton=no_triton)  # the kernel path only
    st = lifecycle.status()
    assert st["counts"] == {"kernel": 1}, st
    assert st["state"] == "active"
    assert STATE.kernel.device_calls() == 1  # the library's own count (ABI 4), no graph: the same
    assert got.dtype == torch.float32 and got.shape == expected.shape
    assert torch.equal(got_pool, expected_pool)  # the KV write of the original
    assert expected.abs().max().item() > 0.1
    assert (got - expected).abs().max().item() < TOL


def test_validate_mode_with_the_double_records_no_mismatch(case, host_double, monkeypatch):
    expected, _ = run_fp32(case, ForwardMode.TARGET_VERIFY)
    install(monkeypatch, host_double, "validate")
    got, _ = run_fp32(case, ForwardMode.TARGET_VERIFY)
    assert torch.equal(got, expected)
    st = lifecycle.status()
    assert st["counts"] == {"validate": 1}, st
    assert STATE.kernel.device_calls() == 1  # validate runs the kernel too, and it counts
    stats = st["validate"]
    assert stats["calls"] == 1 and stats["mismatches"] == 0 and 0 <= stats["max_abs"] < TOL


def test_a_bf16_call_goes_to_the_original_naming_what_the_double_serves(host_double, monkeypatch):
    c = make_case([5, 0, 9], "binary", seed=21)
    expected, _ = run_bf16(c, ForwardMode.TARGET_VERIFY, SLOTS)
    install(monkeypatch, host_double, "on")
    got, _ = run_bf16(c, ForwardMode.TARGET_VERIFY, SLOTS)
    assert torch.equal(got, expected)
    assert lifecycle.status()["counts"] == {
        "original:q/k/v bf16, not fp32 (library serves q/k/v fp32, kv cache fp32, on host)": 1
    }


def test_validate_times_both_paths_and_writes_the_kv_cache_as_the_original(case, host_double, monkeypatch):
    from kdtree_verify.telemetry import timing

    _out, expected_pool = run_fp32(case, ForwardMode.TARGET_VERIFY)  # unpatched: the original's KV write
    install(monkeypatch, host_double, "validate")
    for _ in range(timing.WARMUP_CALLS + 2):
        _, pool = run_fp32(case, ForwardMode.TARGET_VERIFY)
        assert torch.equal(pool, expected_pool)  # the patch's write, then the original without its own
    assert lifecycle.status()["validate"]["mismatches"] == 0
    doc = STATE.timings.snapshot()
    assert doc["clock"] == "host" and doc["untimed_warmup"] == timing.WARMUP_CALLS
    (bucket,) = doc["buckets"]
    assert (bucket["batch"], bucket["heads"], bucket["timed_calls"]) == (3, case.q.shape[1], 2)
    assert bucket["prefix"] == timing.UNKNOWN  # this batch has no seq_lens_sum
    assert bucket["original_s"] > 0 and bucket["kernel_s"] > 0
