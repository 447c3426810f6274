"""install/uninstall/status and dispatch rules against the torch-free SGLang double (0.5.23 signatures)."""

from __future__ import annotations

import sys
import threading
from types import SimpleNamespace

import pytest
from extlib import FakeTensor, RecordingPool
from kdtree_verify import dispatch
from kdtree_verify.inject import lifecycle
from kdtree_verify.kernel import binding as kernel
from kdtree_verify.kernel.shapes import HEAD_DIM_QK, HEAD_DIM_V

tb = pytest.importorskip("sglang.srt.layers.attention.triton_backend")
from sglang.srt.layers.radix_attention import AttentionType, RadixAttention  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode  # noqa: E402

ORIGINAL = tb.TritonAttnBackend.__dict__["forward_extend"]
T, H = 8, 16


class RecordingKernel:
    serves = kernel.CUDA_LIBRARY_SERVES  # what the real library's capability query says

    def __init__(self, unsupported: str | None = None) -> None:
        self.calls: list[dict] = []
        self.unsupported = unsupported

    def unsupported_reason(self, device):
        return self.unsupported

    def run(self, **kwargs):
        self.calls.append(kwargs)


class Binding:
    """The real kernel.probe_library (real .so files) with a recording kernel behind load()."""

    KernelUnavailable = kernel.KernelUnavailable

    def __init__(self, kern: RecordingKernel | None = None, load_error: str = "") -> None:
        self.kernel = kern or RecordingKernel()
        self.load_error = load_error

    def probe_library(self, path):
        return kernel.probe_library(path)

    def load(self, path):
        if self.load_error:
            raise kernel.KernelUnavailable(self.load_error)
        return self.kernel


def make_backend(is_draft: bool = False, kv_dtype: str = "torch.bfloat16", **attrs):
    runner = SimpleNamespace(
        token_to_kv_pool=RecordingPool(kv_dtype),
        is_draft_worker=is_draft,
        page_size=1,
        model_config=SimpleNamespace(attention_arch="MLA"),
    )
    backend = tb.TritonAttnBackend(runner)
    backend.forward_metadata = tb.ForwardMetadata(
        max_extend_len=4,
        qo_indptr=FakeTensor((3,), "torch.int64"),
        kv_indptr=FakeTensor((3,), "torch.int32"),
        kv_indices=FakeTensor((20,), "torch.int64"),
        custom_mask=FakeTensor((100,), "torch.bool"),
        mask_indptr=FakeTensor((3,), "torch.int64"),
    )
    for name, value in attrs.items():
        setattr(backend, name, value)
    return backend


def mla_layer(**overrides):
    layer = RadixAttention(H, HEAD_DIM_QK, 0.1, num_kv_heads=1, layer_id=3, v_head_dim=HEAD_DIM_V)
    for name, value in overrides.items():
        setattr(layer, name, value)
    return layer


def call(backend, mode=ForwardMode.TARGET_VERIFY, layer=None, save_kv_cache=True, **kwargs):
    q = kwargs.pop("q", FakeTensor((T, H, HEAD_DIM_QK)))
    k = kwargs.pop("k", FakeTensor((T, 1, HEAD_DIM_QK)))
    v = kwargs.pop("v", FakeTensor((T, 1, HEAD_DIM_V)))
    batch = ForwardBatch(forward_mode=mode, batch_size=2, out_cache_loc="slots", **kwargs.pop("batch", {}))
    return backend.forward(q, k, v, layer or mla_layer(), batch, save_kv_cache=save_kv_cache, **kwargs)


@pytest.fixture
def active(libs, monkeypatch):
    binding = Binding()
    monkeypatch.setenv("KDTREE_VERIFY", "on")
    monkeypatch.setenv("KDTREE_LIB", str(libs["good"]))
    st = lifecycle.install(tb, binding=binding)
    assert st["state"] == "active", st
    return binding


def test_install_puts_a_wrapper_on_the_class_and_uninstall_restores_the_original(active):
    wrapper = tb.TritonAttnBackend.__dict__["forward_extend"]
    assert dispatch.is_wrapper(wrapper) and wrapper.__wrapped__ is ORIGINAL
    assert lifecycle.status()["lib_sha256"] and lifecycle.status()["kernel_loaded"] is False
    assert lifecycle.uninstall()["state"] == "not-installed"
    assert tb.TritonAttnBackend.__dict__["forward_extend"] is ORIGINAL
    assert lifecycle.uninstall()["state"] == "not-installed"  # idempotent


def test_install_twice_and_from_many_threads_wraps_exactly_once(active, libs):
    first = tb.TritonAttnBackend.__dict__["forward_extend"]
    threads = [
        threading.Thread(target=lifecycle.install, args=(tb,), kwargs={"binding": active}) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert tb.TritonAttnBackend.__dict__["forward_extend"] is first
    assert first.__wrapped__ is ORIGINAL


def test_status_reports_fallback_when_someone_replaced_the_wrapper(active):
    tb.TritonAttnBackend.forward_extend = ORIGINAL
    st = lifecycle.status()
    assert st["state"] == "fallback" and "no longer the kdtree wrapper" in st["reason"]


def test_off_is_the_default_and_never_patches(libs, monkeypatch):
    monkeypatch.delenv("KDTREE_VERIFY", raising=False)
    monkeypatch.setenv("KDTREE_LIB", str(libs["good"]))
    st = lifecycle.install(tb, binding=Binding())
    assert (st["mode"], st["state"]) == ("off", "off")
    assert tb.TritonAttnBackend.__dict__["forward_extend"] is ORIGINAL


@pytest.mark.parametrize(
    ("lib_key", "reason_part"),
    [
        ("missing", "library not found"),
        ("not_elf", "not an ELF file"),
        ("no_symbol", "missing symbol"),
        ("wrong_abi", "ABI mismatch"),
    ],
)
def test_every_library_failure_falls_back_and_leaves_the_original(libs, monkeypatch, lib_key, reason_part):
    monkeypatch.setenv("KDTREE_VERIFY", "on")
    monkeypatch.setenv("KDTREE_LIB", str(libs[lib_key]))
    st = lifecycle.install(tb)  # the real binding, kdtree_verify.kernel.binding
    assert st["state"] == "fallback" and reason_part in st["reason"], st
    assert tb.TritonAttnBackend.__dict__["forward_extend"] is ORIGINAL


def test_unset_library_and_unknown_mode_fall_back(monkeypatch):
    monkeypatch.setenv("KDTREE_VERIFY", "validate")
    monkeypatch.delenv("KDTREE_LIB", raising=False)
    assert lifecycle.install(tb)["reason"] == "KDTREE_LIB is not set"
    lifecycle.reset_for_tests()
    monkeypatch.setenv("KDTREE_VERIFY", "yes")
    st = lifecycle.install(tb)
    assert st["state"] == "fallback" and "unknown KDTREE_VERIFY" in st["reason"]
    assert tb.TritonAttnBackend.__dict__["forward_extend"] is ORIGINAL


def test_a_different_sglang_signature_falls_back_without_patching(libs, monkeypatch):
    class Newer:
        def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, sinks=None, extra=None):
            return "newer"

    module = SimpleNamespace(TritonAttnBackend=Newer)
    monkeypatch.setenv("KDTREE_VERIFY", "on")
    monkeypatch.setenv("KDTREE_LIB", str(libs["good"]))
    st = lifecycle.install(module, binding=Binding())
    assert st["state"] == "fallback" and "signature" in st["reason"]
    assert Newer.__dict__["forward_extend"](None, *range(5)) == "newer"


def test_a_module_without_the_class_falls_back(libs, monkeypatch):
    monkeypatch.setenv("KDTREE_VERIFY", "on")
    monkeypatch.setenv("KDTREE_LIB", str(libs["good"]))
    st = lifecycle.install(SimpleNamespace(), binding=Binding())
    assert st["state"] == "fallback" and "has no TritonAttnBackend" in st["reason"]


def test_a_missing_kernel_binding_is_a_fallback_reason(libs, monkeypatch):
    monkeypatch.setenv("KDTREE_VERIFY", "on")
    monkeypatch.setenv("KDTREE_LIB", str(libs["good"]))

    def no_binding():
        raise ImportError("No module named 'kdtree_verify.kernel.binding'")

    monkeypatch.setattr(lifecycle, "load_binding", no_binding)
    st = lifecycle.install(tb)
    assert st["state"] == "fallback" and "kernel binding not importable" in st["reason"]


def test_target_verify_on_the_target_model_runs_the_kernel_after_the_original_kv_write(active):
    backend = make_backend()
    out = call(backend)
    assert backend.calls == []  # the original never ran
    (args,) = active.kernel.calls
    assert args["out"].shape == (T, H * HEAD_DIM_V) and out is args["out"]
    assert args["kv_buffer"] is backend.token_to_kv_pool.buffer
    assert args["batch_size"] == 2 and args["max_extend_len"] == 4
    assert args["sm_scale"] == 0.1 and args["k_scale"] == 1.0 and args["v_scale"] == 1.0
    ((layer_id, loc, k, v, scales),) = backend.token_to_kv_pool.writes
    assert (
        layer_id == 3
        and loc.loc == "slots"
        and k.shape == (T, 1, HEAD_DIM_QK)
        and v.shape == (T, 1, HEAD_DIM_V)
    )
    assert scales == ()
    assert lifecycle.status()["counts"] == {"kernel": 1}


def test_save_kv_cache_false_writes_nothing(active):
    backend = make_backend()
    call(backend, save_kv_cache=False)
    assert backend.token_to_kv_pool.writes == [] and len(active.kernel.calls) == 1


def test_fp8_kv_cache_divides_k_by_the_scale_like_the_original_and_passes_both_scales(active):
    backend = make_backend(kv_dtype="torch.float8_e4m3fn")
    layer = mla_layer(k_scale="K_SCALE", v_scale="V_SCALE", k_scale_float=0.5, v_scale_float=0.25)
    call(backend, layer=layer)
    ((_, _, k, _, scales),) = backend.token_to_kv_pool.writes
    assert k.divided_by == "K_SCALE" and scales == ()
    assert active.kernel.calls[0]["k_scale"] == 0.5 and active.kernel.calls[0]["v_scale"] == 0.25


def test_a_k_scale_without_a_v_scale_reads_the_cache_unscaled_as_the_original(active):
    # 0.5.23 forward_extend: k_descale = v_descale = 1.0 unless both layer scales are set.
    backend = make_backend(kv_dtype="torch.float8_e4m3fn")
    layer = mla_layer(k_scale="K_SCALE", v_scale=None, k_scale_float=0.5, v_scale_float=None)
    call(backend, layer=layer)
    ((_, _, k, _, _),) = backend.token_to_kv_pool.writes
    assert k.divided_by == "K_SCALE"
    assert active.kernel.calls[0]["k_scale"] == 1.0 and active.kernel.calls[0]["v_scale"] == 1.0


def test_a_causal_draft_block_without_a_mask_reaches_the_kernel_like_dflash(active):
    # DFlash's target verify (and its CUDA-graph metadata) passes custom_mask=None: causal drafts.
    backend = make_backend()
    backend.forward_metadata.custom_mask = None
    out = call(backend)
    assert backend.calls == []
    (args,) = active.kernel.calls
    assert args["custom_mask"] is None and out is args["out"]
    assert lifecycle.status()["counts"] == {"kernel": 1}


@pytest.mark.parametrize(
    "mode",
    [m for m in ForwardMode if m not in (ForwardMode.TARGET_VERIFY, ForwardMode.IDLE, ForwardMode.DECODE)],
)
def test_every_other_extend_mode_goes_to_the_original(active, mode):
    backend = make_backend()
    assert call(backend, mode=mode) == tb.DOUBLE_OUTPUT
    assert backend.calls == ["forward_extend"] and active.kernel.calls == []


def test_decode_is_untouched(active):
    backend = make_backend()
    call(backend, mode=ForwardMode.DECODE)
    assert backend.calls == ["forward_decode"] and active.kernel.calls == []


UNSUPPORTED = {
    "draft runner": ({"is_draft_runner": True}, {}, {}),
    "page size": ({"page_size": 16}, {}, {}),
    "not mla": ({"use_mla": False}, {}, {}),
    "dcp": ({"dcp_size": 2}, {}, {}),
    "deterministic": ({"enable_deterministic": True}, {}, {}),
    "dense fp8": ({"use_dense_fp8_chunked_prefill": True}, {}, {}),
    "dllm": ({"dllm_attention": object()}, {}, {}),
    "logit cap": ({}, {"logit_cap": 30.0}, {}),
    "sliding window": ({}, {"sliding_window_size": 128}, {}),
    # SGLang takes its sliding-window path for any size > -1: a window of 0 is a window too.
    "sliding window of size 0": ({}, {"sliding_window_size": 0}, {}),
    "mha one-shot": ({}, {}, {"batch": {"mha_one_shot": True}}),
    "cross attention": ({}, {"is_cross_attention": True}, {}),
    "encoder only": ({}, {"attn_type": AttentionType.ENCODER_ONLY}, {}),
    "bidirectional": ({}, {"attn_type": AttentionType.DECODER_BIDIRECTIONAL}, {}),
    "xai temperature": ({}, {"xai_temperature_len": 8}, {}),
    "two kv heads": ({}, {"tp_k_head_num": 2}, {}),
    "head dim 128": ({}, {"qk_head_dim": 192, "v_head_dim": 128}, {}),
    "sinks": ({}, {}, {"sinks": "s"}),
    "score_mod": ({}, {}, {"score_mod": "m"}),
    "aux_tensors": ({}, {}, {"aux_tensors": "a"}),
    "fp16 q": ({}, {}, {"q": FakeTensor((T, H, HEAD_DIM_QK), "torch.float16")}),
    "fp8 e5m2 kv": ({"_kv": "torch.float8_e5m2"}, {}, {}),
    "tokens beyond batch x max_extend_len": ({}, {}, {"q": FakeTensor((T + 1, H, HEAD_DIM_QK))}),
    # the kernel's grid has max_extend_len rows per request: a longer request's last rows would stay
    # unwritten (the total can still fit when other requests are shorter)
    "a request beyond max_extend_len": (
        {},
        {},
        {"batch": {"spec_info": SimpleNamespace(num_tokens_per_req=9)}},
    ),
    "a request beyond max_extend_len (draft_token_num)": (
        {},
        {},
        {"batch": {"spec_info": SimpleNamespace(draft_token_num=9)}},
    ),
}


@pytest.mark.parametrize("case", sorted(UNSUPPORTED))
def test_unsupported_shapes_and_options_go_to_the_original_unchanged(active, case):
    backend_attrs, layer_attrs, call_kwargs = UNSUPPORTED[case]
    backend_attrs = dict(backend_attrs)
    kv = backend_attrs.pop("_kv", "torch.bfloat16")
    backend = make_backend(kv_dtype=kv, **backend_attrs)
    assert call(backend, layer=mla_layer(**layer_attrs), **call_kwargs) == tb.DOUBLE_OUTPUT
    assert backend.calls == ["forward_extend"] and active.kernel.calls == []
    (key,) = lifecycle.status()["counts"]
    assert key.startswith("original:")


def test_a_library_that_fails_to_load_on_the_first_verify_call_falls_back_for_good(libs, monkeypatch, capsys):
    monkeypatch.setenv("KDTREE_VERIFY", "on")
    monkeypatch.setenv("KDTREE_LIB", str(libs["good"]))
    binding = Binding(load_error="torch is not importable")
    assert lifecycle.install(tb, binding=binding)["state"] == "active"
    backend = make_backend()
    assert call(backend) == tb.DOUBLE_OUTPUT and call(backend) == tb.DOUBLE_OUTPUT
    assert backend.calls == ["forward_extend", "forward_extend"]
    st = lifecycle.status()
    assert st["state"] == "fallback" and "torch is not importable" in st["reason"]
    assert capsys.readouterr().err.count("kdtree-verify-fallback:") == 1


def test_an_unsupported_gpu_falls_back_to_the_original(libs, monkeypatch):
    monkeypatch.setenv("KDTREE_VERIFY", "on")
    monkeypatch.setenv("KDTREE_LIB", str(libs["good"]))
    binding = Binding(RecordingKernel(unsupported="sm_90 is not in the library (sm_120a)"))
    lifecycle.install(tb, binding=binding)
    backend = make_backend()
    assert call(backend) == tb.DOUBLE_OUTPUT and binding.kernel.calls == []
    assert "sm_90" in lifecycle.status()["reason"]


def test_a_kernel_that_raises_falls_back_without_writing_the_kv_twice(active):
    def boom(**kwargs):
        raise RuntimeError("launch failed")

    active.kernel.run = boom
    backend = make_backend()
    assert call(backend) == tb.DOUBLE_OUTPUT
    assert len(backend.token_to_kv_pool.writes) == 1  # ours; the original ran with save_kv_cache=False
    assert lifecycle.status()["state"] == "fallback"


def test_around_hook_binds_positional_and_keyword_arguments_like_the_real_signature(active):
    backend = make_backend()
    q, k, v = FakeTensor((T, H, HEAD_DIM_QK)), FakeTensor((T, 1, HEAD_DIM_QK)), FakeTensor((T, 1, HEAD_DIM_V))
    batch = ForwardBatch(forward_mode=ForwardMode.EXTEND, out_cache_loc="slots")
    seen = []

    def original(self, *args):
        seen.append(args)
        return "orig"

    assert dispatch.around_hook(original, backend, q, k, v, mla_layer(), batch, save_kv_cache=False) == "orig"
    assert seen[0][5:] == (False, None, None, None)


def test_no_sliding_window_is_minus_one_and_the_kernel_serves_it(active):
    backend = make_backend()
    call(backend, layer=mla_layer(sliding_window_size=-1))
    assert backend.calls == [] and len(active.kernel.calls) == 1


class _Exploding:
    """A layer attribute the dispatch check reads raises (a newer SGLang, a half-built layer)."""

    def __get__(self, obj, owner):
        raise RuntimeError("attribute exploded")

    def __set__(self, obj, value):  # a data descriptor: RadixAttention.__init__ cannot shadow it
        pass


def test_an_exception_while_checking_a_call_sends_it_to_the_original_not_the_kernel(active):
    class ExplodingLayer(RadixAttention):
        logit_cap = _Exploding()

    layer = ExplodingLayer(H, HEAD_DIM_QK, 0.1, num_kv_heads=1, layer_id=3, v_head_dim=HEAD_DIM_V)
    backend = make_backend()
    assert call(backend, layer=layer) == tb.DOUBLE_OUTPUT
    assert backend.calls == ["forward_extend"] and active.kernel.calls == []
    (key,) = lifecycle.status()["counts"]
    # counted by the exception's type: a message that differs per call must not grow the counts
    assert key == "original:dispatch check failed: RuntimeError"


class _FakeValidateStats:
    """kdtree_verify.telemetry.validate without torch: records what the dispatch hands it."""

    def __init__(self, device, tol):
        self.records = []

    def scratch(self, tokens, width, dtype):
        return FakeTensor((tokens, width))

    def record(self, kernel_out, triton_out, rel_tol=0.0):
        self.records.append((kernel_out, triton_out))

    def read(self):
        return {"calls": len(self.records)}

    def snapshot(self):  # the status publisher's read
        return {"compared": len(self.records), "mismatches": 0, "max_diff": 0.0}


@pytest.fixture
def validating(libs, monkeypatch):
    fake = SimpleNamespace(
        ValidateStats=_FakeValidateStats, is_capturing=lambda device: False, rel_tol_for=lambda kv_dtype: 0.0
    )
    monkeypatch.setitem(sys.modules, "kdtree_verify.telemetry.validate", fake)
    monkeypatch.setenv("KDTREE_VERIFY", "validate")
    monkeypatch.setenv("KDTREE_LIB", str(libs["good"]))
    binding = Binding()
    assert lifecycle.install(tb, binding=binding)["state"] == "active"
    return binding


def test_a_kernel_exception_in_validate_mode_returns_tritons_output_and_falls_back(validating, capsys):
    def boom(**kwargs):
        raise RuntimeError("launch failed")

    validating.kernel.run = boom
    backend = make_backend()
    assert call(backend) == tb.DOUBLE_OUTPUT  # never the kernel's exception
    assert call(backend) == tb.DOUBLE_OUTPUT  # and from then on the original only
    assert backend.calls == ["forward_extend", "forward_extend"]
    st = lifecycle.status()
    assert st["state"] == "fallback" and "kernel call failed: RuntimeError: launch failed" in st["reason"]
    assert capsys.readouterr().err.count("kdtree-verify-fallback:") == 1


# --- what ran, as the status publisher counts it ----------------------------------------------------


def _published(status_dir) -> dict:
    from kdtree_verify.telemetry import publish

    pub = publish.current()
    assert pub is not None  # started by the install, KDTREE_STATUS_DIR being set
    pub.write_once()
    import json
    import os

    return json.loads((status_dir / f"{os.getpid()}.json").read_text())


@pytest.fixture
def status_dir(tmp_path, monkeypatch):
    path = tmp_path / "status"
    path.mkdir(mode=0o755)
    path.chmod(0o755)
    monkeypatch.setenv("KDTREE_STATUS_DIR", str(path))
    monkeypatch.setenv("KDTREE_STATUS_INTERVAL", "60")  # the test writes; the thread only starts
    return path


def test_the_counters_count_each_path_and_reason(status_dir, active):
    backend = make_backend()
    call(backend)
    call(backend)
    call(backend, mode=ForwardMode.EXTEND)
    call(backend, q=FakeTensor((T, H, HEAD_DIM_QK), "torch.float16"))
    call(backend, layer=mla_layer(logit_cap=30.0))
    call(make_backend(kv_dtype="torch.float16"))
    counters = _published(status_dir)["counters"]
    assert counters == {
        "kernel_calls": 2,
        "kernel_calls_device": 0,  # the fake binding has no device counter
        "original_calls": {"dtype": 1, "kv_dtype": 1, "logit_cap": 1, "not_verify": 1},
        "runtime_fallbacks": 0,
        "runtime_fallback_reason": "",
    }


def test_a_runtime_fallback_is_counted_and_later_calls_name_it(status_dir, active):
    def boom(**kwargs):
        raise RuntimeError("launch failed")

    active.kernel.run = boom
    backend = make_backend()
    call(backend)
    call(backend)
    doc = _published(status_dir)
    assert doc["state"] == "fallback"
    assert doc["counters"]["runtime_fallbacks"] == 1
    assert doc["counters"]["runtime_fallback_reason"] == "kernel call failed: RuntimeError: launch failed"
    assert doc["counters"]["original_calls"] == {"kernel_error": 1, "kernel_unavailable": 1}
    assert doc["counters"]["kernel_calls"] == 0


def test_validate_mode_counts_compared_calls_and_publishes_the_device_statistics(status_dir, validating):
    backend = make_backend()
    backend.extend_attention_fwd = lambda *a, **k: FakeTensor((T, H * HEAD_DIM_V))  # Triton's output
    call(backend)
    call(backend)
    call(backend, mode=ForwardMode.EXTEND)
    doc = _published(status_dir)
    assert doc["counters"]["original_calls"] == {"not_verify": 1, "validate": 2}
    assert doc["counters"]["kernel_calls"] == 0  # Triton's output was returned
    assert doc["validate"] == {"compared": 2, "mismatches": 0, "max_diff": 0.0}


def test_mode_on_writes_the_kv_cache_as_the_running_release_of_the_window_does(active, monkeypatch):
    """0.5.21 and older build the KVWriteLoc with full_loc (target.SGLANG_RELEASES), 0.5.22 on with
    for_batch (the batch's physical mark): the same slots either way, the form of that release."""
    from kdtree_verify.state import STATE

    monkeypatch.setattr(STATE, "sglang", "0.5.21")
    backend = make_backend()
    backend.forward_metadata.out_cache_loc_full_physical = "full-slots"  # 0.5.21's ForwardMetadata field
    call(backend)
    ((_layer, loc, _k, _v, _scales),) = backend.token_to_kv_pool.writes
    assert loc.loc == "slots" and loc.full_loc == "full-slots" and loc.physical is False
    monkeypatch.setattr(STATE, "sglang", "0.5.23+local")
    backend = make_backend()
    call(backend, batch={"out_cache_loc_is_physical": True})
    ((_layer, loc, _k, _v, _scales),) = backend.token_to_kv_pool.writes
    assert loc.loc == "slots" and loc.full_loc is None and loc.physical is True


@pytest.mark.parametrize("version", ["0.5.24", "0.5.17", ""])
def test_mode_on_outside_the_window_serves_only_the_original(active, monkeypatch, version):
    from kdtree_verify.state import STATE

    monkeypatch.setattr(STATE, "sglang", version)
    backend = make_backend()
    call(backend)
    assert backend.calls == ["forward_extend"] and active.kernel.calls == []
    assert lifecycle.status()["counts"] == {f"original:{dispatch.UNTESTED_SGLANG}": 1}


def test_validate_writes_the_kv_once_times_both_paths_past_the_warm_up_and_publishes_it(
    status_dir, validating
):
    from kdtree_verify.telemetry import timing

    backend = make_backend()
    backend.extend_attention_fwd = lambda *a, **k: FakeTensor((T, H * HEAD_DIM_V))  # Triton's output
    calls = timing.WARMUP_CALLS + 2
    for _ in range(calls):
        call(backend, batch={"seq_lens_sum": 2 * 300})
    # the KV cache is written once per call (as mode on writes it), outside both timed paths
    assert len(backend.token_to_kv_pool.writes) == calls
    assert len(validating.kernel.calls) == calls
    doc = _published(status_dir)
    timed = doc["timing"]
    assert timed["clock"] == "host" and timed["untimed_warmup"] == timing.WARMUP_CALLS
    (bucket,) = timed["buckets"]
    # batch 2 (qo_indptr spans 2), draft n = max_extend_len 4, mean prefix 300 -> le1024, 16 heads
    assert {k: bucket[k] for k in ("batch", "draft", "prefix", "heads", "timed_calls")} == {
        "batch": 2,
        "draft": 4,
        "prefix": "le1024",
        "heads": H,
        "timed_calls": 2,
    }
    assert bucket["kernel_s"] > 0 and bucket["original_s"] > 0
    assert "kdtree_verify_timed_calls_total{" in (status_dir / f"{doc['pid']}.prom").read_text()


def test_validate_outside_the_window_lets_the_original_write_the_kv_and_times_nothing(
    status_dir, validating, monkeypatch
):
    """An untested release (the opt-in allows validate only): its KV-write form is unknown, so the
    original writes the cache itself and the call is compared but never timed."""
    from kdtree_verify.state import STATE

    monkeypatch.setattr(STATE, "sglang", "0.5.24")
    backend = make_backend()
    backend.extend_attention_fwd = lambda *a, **k: FakeTensor((T, H * HEAD_DIM_V))
    call(backend)
    assert backend.calls == ["forward_extend"]  # the original ran whole, its own KV write included
    assert len(backend.token_to_kv_pool.writes) == 1  # once, by the original; kdtree wrote nothing
    assert len(validating.kernel.calls) == 1
    timed = _published(status_dir)["timing"]
    assert timed["buckets"] == [] and timed["untimed_warmup"] == 0
