"""Modes on the real TritonAttnBackend class: `on` routes to a kernel (the reference here, tests only),
`validate` returns the real Triton output and records the difference."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")  # the optional suites skip where torch is absent
from kdtree_verify.inject import lifecycle  # noqa: E402
from kdtree_verify.kernel import binding as kernel  # noqa: E402
from kdtree_verify.kernel.reference import ReferenceKernel  # noqa: E402
from verify_cases import QK, VD, make_case  # noqa: E402

tb = pytest.importorskip("sglang.srt.layers.attention.triton_backend")
from sglang.srt.layers.radix_attention import RadixAttention  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

LAYER_ID = 0


class MLAPool:
    """Same write as MLATokenToKVPool.set_kv_buffer (0.5.23): kv_buffer[layer][loc] = cache_k."""

    def __init__(self, buffer: torch.Tensor) -> None:
        self.kv_buffer = [buffer]

    def set_kv_buffer(self, layer, loc_info, cache_k, cache_v, *scales):
        self.kv_buffer[layer.layer_id][loc_info.loc] = cache_k.to(self.kv_buffer[0].dtype)

    def get_key_buffer(self, layer_id):
        return self.kv_buffer[layer_id]

    def get_value_buffer(self, layer_id):
        return self.kv_buffer[layer_id][..., :VD]


class Binding:
    KernelUnavailable = kernel.KernelUnavailable

    def probe_library(self, path):
        return kernel.probe_library(path)

    def load(self, path):
        return ReferenceKernel()


def triton_fp32(q, k, v, o, k_buf, v_buf, *args, **kwargs):
    """SGLang's real extend_attention_fwd, fed float32 (the Triton interpreter is wrong in bf16)."""
    from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd

    o32 = torch.empty(o.shape, dtype=torch.float32)
    kwargs.pop("page_size", None)
    kwargs.pop("score_mod", None)
    kwargs.pop("aux_tensors", None)
    kwargs.pop("extend_seq_lens_cpu", None)
    extend_attention_fwd(q.float(), k.float(), v.float(), o32, k_buf.float(), v_buf.float(), *args, **kwargs)
    o.copy_(o32)


def real_backend(case, pool_buffer):
    backend = object.__new__(tb.TritonAttnBackend)  # the real class, without a GPU model runner
    backend.__dict__.update(
        use_dense_fp8_chunked_prefill=False,
        token_to_kv_pool=MLAPool(pool_buffer),
        use_mla=True,
        dcp_size=1,
        enable_deterministic=False,
        use_verify_shared_kv=False,
        use_verify_splitkv=False,
        page_size=1,
        is_draft_runner=False,
        allow_bidirectional_attention_in_extend=False,
        extend_attention_fwd=triton_fp32,
    )
    backend.forward_metadata = tb.ForwardMetadata(
        attn_logits=None,
        attn_lse=None,
        max_extend_len=case.n,
        num_kv_splits=None,
        kv_indptr=case.kv_indptr,
        kv_indices=case.kv_indices,
        qo_indptr=case.qo_indptr,
        custom_mask=case.custom_mask,
        mask_indptr=case.mask_indptr,
        window_kv_indptr=None,
        window_kv_indices=None,
        window_num_kv_splits=None,
        window_kv_offsets=None,
    )
    return backend


def run(case, mode, out_slots):
    pool = case.kv_buffer.to(torch.bfloat16).clone()
    backend = real_backend(case, pool)
    heads = case.q.shape[1]
    layer = RadixAttention(heads, QK, case.sm_scale, num_kv_heads=1, layer_id=LAYER_ID, v_head_dim=VD)
    batch = SimpleNamespace(
        forward_mode=mode,
        out_cache_loc=out_slots,
        out_cache_loc_is_physical=True,
        mha_one_shot=False,
        attn_attend_prefix_cache=None,
        mha_return_lse=False,
        extend_seq_lens_cpu=None,
    )
    q = case.q.to(torch.bfloat16)
    k = case.k_extend.to(torch.bfloat16)
    v = case.v_extend.to(torch.bfloat16)
    out = backend.forward(q, k, v, layer, batch)
    return out, pool


@pytest.fixture
def case():
    return make_case([5, 0, 9], "binary", seed=11)


def _install(monkeypatch, libs, mode, tol=None):
    monkeypatch.setenv("KDTREE_VERIFY", mode)
    monkeypatch.setenv("KDTREE_LIB", str(libs["good"]))
    if tol is not None:
        monkeypatch.setenv("KDTREE_VERIFY_TOL", tol)
    st = lifecycle.install(tb, binding=Binding())
    assert st["state"] == "active", st


def test_on_mode_writes_the_kv_cache_like_the_original_and_returns_the_kernel_output(case, libs, monkeypatch):
    slots = torch.tensor([90, 91, 92, 93, 80, 81, 82, 83, 70, 71, 72, 73])
    expected, expected_pool = run(case, ForwardMode.TARGET_VERIFY, slots)  # unpatched: real Triton
    _install(monkeypatch, libs, "on")
    got, got_pool = run(case, ForwardMode.TARGET_VERIFY, slots)
    assert lifecycle.status()["counts"] == {"kernel": 1}
    assert torch.equal(got_pool, expected_pool)  # the same KV write
    assert (got.float() - expected.float()).abs().max().item() < 0.02


def test_validate_mode_returns_triton_output_and_records_the_difference(case, libs, monkeypatch):
    slots = torch.arange(84, 96)
    expected, _ = run(case, ForwardMode.TARGET_VERIFY, slots)
    _install(monkeypatch, libs, "validate")
    got, _ = run(case, ForwardMode.TARGET_VERIFY, slots)
    got2, _ = run(case, ForwardMode.TARGET_VERIFY, slots)
    assert torch.equal(got, expected) and torch.equal(got2, expected)
    stats = lifecycle.status()["validate"]
    assert stats["calls"] == 2 and stats["mismatches"] == 0
    assert 0 < stats["max_abs"] < 0.02 and stats["max_rel"] < 0.02
    assert len(stats["recent"]) == 2


def test_validate_counts_mismatches_over_the_tolerance(case, libs, monkeypatch):
    _install(monkeypatch, libs, "validate", tol="1e-9")
    run(case, ForwardMode.TARGET_VERIFY, torch.arange(84, 96))
    stats = lifecycle.status()["validate"]
    assert stats["calls"] == 1 and stats["mismatches"] == 1 and stats["tol"] == 1e-9


def test_the_status_file_carries_the_real_validate_statistics_and_counters(case, libs, monkeypatch, tmp_path):
    import json
    import os

    from kdtree_verify.telemetry import publish

    status_dir = tmp_path / "status"
    status_dir.mkdir(mode=0o755)
    status_dir.chmod(0o755)
    monkeypatch.setenv("KDTREE_STATUS_DIR", str(status_dir))
    monkeypatch.setenv("KDTREE_STATUS_INTERVAL", "60")  # the most: the test writes
    _install(monkeypatch, libs, "validate", tol="1e-9")
    run(case, ForwardMode.TARGET_VERIFY, torch.arange(84, 96))
    run(case, ForwardMode.EXTEND, torch.arange(84, 96))
    publish.current().write_once()
    doc = json.loads((status_dir / f"{os.getpid()}.json").read_text())
    stats = lifecycle.status()["validate"]
    assert doc["validate"] == {
        "compared": 1,
        "mismatches": 1,
        "max_diff": stats["max_abs"],
        "nonfinite_kernel": 0,
        "nonfinite_original": 0,
    }
    assert doc["counters"]["original_calls"] == {"not_verify": 1, "validate": 1}
    assert "kdtree_verify_validate_mismatches_total{pid=" in (status_dir / f"{os.getpid()}.prom").read_text()


def test_a_plain_extend_on_the_real_class_still_runs_the_original(case, libs, monkeypatch):
    _install(monkeypatch, libs, "on")
    run(case, ForwardMode.EXTEND, torch.arange(84, 96))
    assert lifecycle.status()["counts"] == {"original:not target-verify": 1}


@pytest.fixture
def dflash_case():
    """DFlash's target verify: no custom mask (causal draft block), as in eager and graph metadata."""
    c = make_case([5, 0, 9], "chain", seed=12)
    c.custom_mask = None
    return c


def test_a_dflash_shaped_call_reaches_the_kernel_and_matches_the_real_causal_triton(
    dflash_case, libs, monkeypatch
):
    slots = torch.arange(84, 96)
    expected, expected_pool = run(
        dflash_case, ForwardMode.TARGET_VERIFY, slots
    )  # unpatched: is_causal Triton
    _install(monkeypatch, libs, "on")
    got, got_pool = run(dflash_case, ForwardMode.TARGET_VERIFY, slots)
    assert lifecycle.status()["counts"] == {"kernel": 1}
    assert torch.equal(got_pool, expected_pool)
    assert (got.float() - expected.float()).abs().max().item() < 0.02


def test_a_dflash_shaped_call_validates_without_mismatches(dflash_case, libs, monkeypatch):
    _install(monkeypatch, libs, "validate")
    run(dflash_case, ForwardMode.TARGET_VERIFY, torch.arange(84, 96))
    stats = lifecycle.status()["validate"]
    assert lifecycle.status()["counts"] == {"validate": 1}
    assert stats["calls"] == 1 and stats["mismatches"] == 0 and stats["max_abs"] < 0.02


def test_the_causal_reference_differs_from_a_full_draft_block(dflash_case):
    """The no-mask path is really causal: an all-visible draft block gives another answer."""
    from kdtree_verify.kernel.reference import verify_attention_reference

    kwargs = dflash_case.ref_kwargs()
    causal = verify_attention_reference(**kwargs)
    full = make_case([5, 0, 9], "star", seed=12)
    full_mask = torch.cat(
        [torch.ones(4 * (p + 4), dtype=torch.bool) for p in (5, 0, 9)]
    )  # every draft token sees every other one
    everything = verify_attention_reference(
        **(kwargs | {"custom_mask": full_mask, "mask_indptr": full.mask_indptr})
    )
    assert (causal - everything).abs().max().item() > 0.1
