"""Which `forward_extend` calls the kdtree kernel serves, and how it serves them.

A mirror of `TritonAttnBackend.forward_extend` (triton_backend.py) of every SGLang release in
target.SGLANG_RELEASES (the supported window): every branch of the original that the kernel does
not implement sends the call back to the original method, unchanged. The branches are the same in
every release of the window; the KV write of mode on follows the running release's form
(target.SGLANG_RELEASES), and a release outside the window never gets the kernel's output (mode on
sends every call to the original; validate still compares). Two entry points bind the signature
(target.EXPECTED_PARAMS, the same in every release of the window) onto `dispatch()`: the wrapper
that the lifecycle puts on the class (`make_wrapper`) and the `HookType.AROUND` hook of plugin
mode (`around_hook`).

Modes (`KDTREE_VERIFY`): `validate` writes the KV cache as mode on does, runs the original's attention
(``save_kv_cache=False``), then the kernel into a scratch buffer, records the difference on the device,
times both (`kdtree_verify.telemetry.timing`) and returns Triton's output; `on` writes the
KV cache exactly as the original does, then runs the kernel only. A kernel that cannot load, a GPU
it does not support, or a kernel call that raises ends in one `kdtree-verify-fallback:` line and
the original method from then on.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from kdtree_verify.kernel.shapes import HEAD_DIM_QK, HEAD_DIM_V
from kdtree_verify.state import LOCK, STATE
from kdtree_verify.target import (
    EXPECTED_PARAMS,
    KV_WRITE_FOR_BATCH,
    KV_WRITE_FULL_LOC,
    SGLANG_RELEASES,
    TARGET_ATTR,
    TARGET_CLASS,
    TARGET_MODULE,
    release_of,
)
from kdtree_verify.telemetry import marker
from kdtree_verify.telemetry.counters import RUNTIME_FALLBACK

logger = logging.getLogger(__name__)

WRAPPER_FLAG = "_kdtree_verify_wrapper"
# STATE.counts keys (kdtree_verify.telemetry.counters turns them into the status file's counters):
# "kernel" (the kernel's output was returned), "original:<reason>" (the original's, and why),
# "validate" (validate mode: the original's output returned, the kernel's compared on the device),
# RUNTIME_FALLBACK.
_DEFAULTS = {"save_kv_cache": True, "sinks": None, "score_mod": None, "aux_tensors": None}


def is_wrapper(func: Any) -> bool:
    """Is `func` a wrapper made by `make_wrapper`?"""
    return bool(getattr(func, WRAPPER_FLAG, False))


def make_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """The class attribute of class-patch mode: the window's signature, routed through `dispatch`."""

    def forward_extend(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        sinks=None,
        score_mod=None,
        aux_tensors=None,
    ):
        return dispatch(
            original, self, q, k, v, layer, forward_batch, save_kv_cache, sinks, score_mod, aux_tensors
        )

    forward_extend.__wrapped__ = original  # type: ignore[attr-defined]
    forward_extend.__qualname__ = f"{TARGET_CLASS}.{TARGET_ATTR}"
    forward_extend.__doc__ = "kdtree-verify wrapper of " + (original.__qualname__ or TARGET_ATTR)
    setattr(forward_extend, WRAPPER_FLAG, True)
    return forward_extend


def around_hook(original_fn: Callable[..., Any], backend: Any, *args: Any, **kwargs: Any) -> Any:
    """`HookType.AROUND` hook for SGLang's HookRegistry (plugin mode): the same dispatch."""
    values = dict(zip(EXPECTED_PARAMS[1:], args, strict=False))
    values.update(kwargs)
    bound = tuple(values[n] if n in values else _DEFAULTS[n] for n in EXPECTED_PARAMS[1:])
    return dispatch(original_fn, backend, *bound)


def _dtype_name(tensor: Any) -> str:
    return str(getattr(tensor, "dtype", "")).replace("torch.", "")


def _batch_size(md: Any) -> int:
    """Like extend_attention_fwd: the batch is what qo_indptr spans (padded under CUDA graphs)."""
    return int(md.qo_indptr.shape[0]) - 1


def _draft_tokens_per_request(forward_batch: Any) -> int | None:
    """The draft tokens each request brings, where SGLang says it on the host (no sync): the spec
    input's `num_tokens_per_req` (newer releases; <= 0 means the capture width, i.e. max_extend_len)
    or `draft_token_num`. None when the batch does not say."""
    spec = getattr(forward_batch, "spec_info", None)
    for name in ("num_tokens_per_req", "draft_token_num"):
        value = getattr(spec, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value if value > 0 else None
    return None


def unsupported_reason(backend, q, k, v, layer, forward_batch, sinks, score_mod, aux_tensors) -> str | None:
    """None when the kdtree kernel can serve this call; else why the original must run.

    Mirrors the branches of the window's `forward_extend` (triton_backend.py):
    the dense-fp8 MHA path
    (`use_dense_fp8_chunked_prefill`), read-back (`k is None`), DCP (`dcp_size > 1`), deterministic
    (`enable_deterministic`), DLLM (`dllm_attention`), MHA one-shot (`forward_batch.mha_one_shot`),
    sliding window (`layer.sliding_window_size > -1`), non-causal (`is_cross_attention`, `attn_type`),
    logit cap (`layer.logit_cap > 0`), xai temperature (`layer.xai_temperature_len > 0`).
    Last, the dtypes of q/k/v and of the KV cache must be ones the loaded library serves (its
    `kdtree_verify_capabilities`, `kernel.serves`): the library is loaded here on the first call that
    passes every other check ("kernel unavailable" when it cannot be).
    """
    mode = forward_batch.forward_mode
    if not mode.is_target_verify():
        return "not target-verify"
    if getattr(backend, "is_draft_runner", False):  # set from model_runner.is_draft_worker in __init__
        return "draft runner"
    if k is None or v is None:
        return "no k/v (read-back path)"
    if sinks is not None or score_mod is not None or aux_tensors is not None:
        return "sinks/score_mod/aux_tensors"
    if not getattr(backend, "use_mla", False):
        return "not MLA"
    if getattr(backend, "use_dense_fp8_chunked_prefill", False):
        return "dense fp8 chunked MHA"
    if getattr(backend, "dcp_size", 1) != 1:
        return "decode context parallel"
    if getattr(backend, "enable_deterministic", False):
        return "deterministic inference"
    if getattr(backend, "dllm_attention", None) is not None:
        return "dllm"
    if getattr(backend, "page_size", 1) != 1:
        return "page_size != 1"
    if getattr(forward_batch, "mha_one_shot", False):
        return "mha one-shot"
    if layer.qk_head_dim != HEAD_DIM_QK or layer.v_head_dim != HEAD_DIM_V or layer.tp_k_head_num != 1:
        return f"not absorbed MLA {HEAD_DIM_QK}/{HEAD_DIM_V} with one KV head"
    if (layer.logit_cap or 0) > 0:
        return "logit cap"
    if layer.sliding_window_size is not None and layer.sliding_window_size > -1:
        return "sliding window"
    attn_type = getattr(getattr(layer, "attn_type", None), "value", "decoder")
    if layer.is_cross_attention or attn_type != "decoder":
        return "not causal decoder attention"
    if (getattr(layer, "xai_temperature_len", -1) or -1) > 0:
        return "xai temperature"
    md = backend.forward_metadata
    if md is None:
        return "no forward metadata"
    # md.custom_mask None is a causal draft block (DFlash, and any spec_info without a mask): the
    # original runs extend_attention_fwd with is_causal=True, which the kernel serves (mask_mode causal).
    # The kernel's grid covers batch x max_extend_len rows per head (as Triton's does); a token
    # beyond that would be left unwritten, so such a call goes to the original. Shapes only: no sync.
    if q.shape[0] > _batch_size(md) * int(md.max_extend_len):
        return "more tokens than batch x max_extend_len"
    per_request = _draft_tokens_per_request(forward_batch)
    if per_request is not None and per_request > int(md.max_extend_len):
        return "a request with more draft tokens than max_extend_len"
    kernel = _loaded_kernel()
    if kernel is None:
        return "kernel unavailable"
    serves = getattr(kernel, "serves", None)
    if serves is None:
        return "kernel has no capability query"
    kv_dtype = _dtype_name(backend.token_to_kv_pool.get_key_buffer(layer.layer_id))
    return serves.dtype_problem([_dtype_name(q), _dtype_name(k), _dtype_name(v)], kv_dtype)


def _runtime_fallback(reason: str) -> None:
    STATE.kernel_error = reason
    STATE.count(RUNTIME_FALLBACK)
    logger.info("kdtree-verify runtime fallback: %s", reason)
    marker.emit_runtime_fallback(reason)


def _loaded_kernel() -> Any:
    """The VerifyKernel, loaded on first use, or None (loud line once, then the original runs for good)."""
    with LOCK:
        if STATE.kernel_error:
            return None
        if STATE.kernel is None:
            try:
                STATE.kernel = STATE.binding.load(STATE.lib)
            except Exception as exc:
                _runtime_fallback(f"cannot load {STATE.lib}: {exc}")
                return None
        return STATE.kernel


def _kernel_for(device: Any) -> Any:
    """The loaded VerifyKernel if it serves `device`, or None (loud line once, then the original for good)."""
    with LOCK:
        if _loaded_kernel() is None:
            return None
        key = str(device)
        if key not in STATE.checked_devices:
            try:
                STATE.checked_devices[key] = STATE.kernel.unsupported_reason(device)
            except Exception as exc:
                STATE.checked_devices[key] = f"cannot check the GPU: {exc}"
        problem = STATE.checked_devices[key]
        if problem:
            _runtime_fallback(f"device {key}: {problem}")
            return None
        return STATE.kernel


# The reason mode on counts outside the window (the preflight refuses it; this holds if it ran anyway).
UNTESTED_SGLANG = "sglang outside the supported window"


def kv_write_form() -> str | None:
    """The running release's KV-write form (target.SGLANG_RELEASES), None outside the window."""
    return SGLANG_RELEASES.get(release_of(STATE.sglang))


def _write_kv_like_original(backend, layer, forward_batch, k, v) -> None:
    """The `save_kv_cache` branch of the running release's `forward_extend`, verbatim in behaviour:
    the KVWriteLoc built as that release builds it (kv_write_form: `KVWriteLoc.for_batch(forward_batch,
    swa_loc=md.swa_out_cache_loc)` from 0.5.22, `KVWriteLoc(forward_batch.out_cache_loc,
    md.swa_out_cache_loc, full_loc=md.out_cache_loc_full_physical)` before), then `_set_kv_buffer` when
    `layer.k_scale is None`, else for MLA `set_kv_buffer(layer, loc, k/k_scale, v)`.
    """
    kv_write_loc = sys.modules[TARGET_MODULE].KVWriteLoc  # the name the original resolves
    md = backend.forward_metadata
    form = kv_write_form()
    if form == KV_WRITE_FOR_BATCH:
        loc_info = kv_write_loc.for_batch(forward_batch, swa_loc=md.swa_out_cache_loc)
    elif form == KV_WRITE_FULL_LOC:
        loc_info = kv_write_loc(
            forward_batch.out_cache_loc, md.swa_out_cache_loc, full_loc=md.out_cache_loc_full_physical
        )
    else:  # unsupported_reason never lets mode on reach here outside the window
        raise RuntimeError(f"sglang {STATE.sglang!r} has no known KV-write form")
    if layer.k_scale is None:
        backend._set_kv_buffer(forward_batch, layer, loc_info, k, v)
    else:  # use_mla is guaranteed by unsupported_reason
        backend.token_to_kv_pool.set_kv_buffer(layer, loc_info, k.clone().div_(layer.k_scale), v)


def descales(layer: Any) -> tuple[float, float]:
    """(k_scale, v_scale) as every `forward_extend` of the window passes them to `extend_attention_fwd`:
    `layer.k_scale_float` / `layer.v_scale_float` when both scales are set, else (1.0, 1.0), even when
    only `k_scale` is set (the KV write still divides K by it). Matching this keeps validate mode
    comparing like with like; files/csrc/README.md ("Scales") records the decision."""
    if layer.k_scale is not None and layer.v_scale is not None:
        return float(layer.k_scale_float), float(layer.v_scale_float)
    return 1.0, 1.0


def _kernel_args(backend, q, k, v, layer, out) -> dict[str, Any]:
    md = backend.forward_metadata
    heads = layer.tp_q_head_num
    k_scale, v_scale = descales(layer)
    return {
        "q": q.view(-1, heads, HEAD_DIM_QK),
        "k_extend": k.view(-1, 1, HEAD_DIM_QK),
        "v_extend": v.view(-1, 1, HEAD_DIM_V),
        "kv_buffer": backend.token_to_kv_pool.get_key_buffer(layer.layer_id),
        "qo_indptr": md.qo_indptr,
        "kv_indptr": md.kv_indptr,
        "kv_indices": md.kv_indices,
        "custom_mask": md.custom_mask,
        "mask_indptr": md.mask_indptr,
        "batch_size": _batch_size(md),
        "max_extend_len": int(md.max_extend_len),
        "sm_scale": float(layer.scaling),
        "k_scale": k_scale,
        "v_scale": v_scale,
        "out": out.view(-1, heads, HEAD_DIM_V),
    }


def dispatch(original, backend, q, k, v, layer, forward_batch, save_kv_cache, sinks, score_mod, aux_tensors):
    """Route one forward_extend call: kdtree kernel for supported target-verify, else the original."""

    def run_original():
        return original(backend, q, k, v, layer, forward_batch, save_kv_cache, sinks, score_mod, aux_tensors)

    try:
        reason = unsupported_reason(backend, q, k, v, layer, forward_batch, sinks, score_mod, aux_tensors)
    except Exception as exc:  # counted by the exception's type only (a message may differ per call)
        logger.info("kdtree-verify: dispatch check failed: %s: %s", type(exc).__name__, exc)
        reason = f"dispatch check failed: {type(exc).__name__}"
    if reason is not None:
        STATE.count(f"original:{reason}")
        return run_original()
    kernel = _kernel_for(q.device)
    if kernel is None:
        STATE.count("original:kernel unavailable")
        return run_original()
    if STATE.mode == "validate":
        if kv_write_form() is None:
            # outside the window the KV write's form is unknown: the original writes the cache itself,
            # so its time would include the write; such calls are compared but never timed (promote
            # keeps a host on an untested release in validate anyway)
            return _validate(run_original, kernel, backend, q, k, v, layer, forward_batch, timeable=False)
        if save_kv_cache:
            _write_kv_like_original(backend, layer, forward_batch, k, v)

        def run_attention():  # the original without its KV write (done above, shared by both)
            return original(backend, q, k, v, layer, forward_batch, False, sinks, score_mod, aux_tensors)

        return _validate(run_attention, kernel, backend, q, k, v, layer, forward_batch)
    if kv_write_form() is None:  # mode on outside the window: no kernel output is ever served
        STATE.count(f"original:{UNTESTED_SGLANG}")
        return run_original()
    # mode "on": the KV write of the original, then the kernel only.
    if save_kv_cache:
        _write_kv_like_original(backend, layer, forward_batch, k, v)
    attn_out = getattr(forward_batch, "_attn_output", None)
    out = attn_out if attn_out is not None else q.new_empty((q.shape[0], layer.tp_q_head_num * HEAD_DIM_V))
    try:
        kernel.run(**_kernel_args(backend, q, k, v, layer, out))
    except Exception as exc:
        _runtime_fallback(f"kernel call failed: {type(exc).__name__}: {exc}")
        STATE.count("original:kernel call failed")
        return original(backend, q, k, v, layer, forward_batch, False, sinks, score_mod, aux_tensors)
    STATE.count("kernel")
    return out


def _timing_key(backend, q, layer, forward_batch) -> tuple[int, int, str, int]:
    """The call's shape bucket: batch, draft tokens per request, prefix bucket, heads (host values only)."""
    from kdtree_verify.telemetry import timing

    md = backend.forward_metadata
    batch = _batch_size(md)
    prefix = timing.prefix_bucket(getattr(forward_batch, "seq_lens_sum", None), batch)
    return timing.bucket_key(batch, int(md.max_extend_len), prefix, layer.tp_q_head_num)


def _timings(device: Any) -> Any:
    """This process's Timings (created on the first validate call), its clock by the device."""
    from kdtree_verify.telemetry import timing

    with LOCK:
        if STATE.timings is None:
            on_gpu = getattr(device, "type", str(device)) == "cuda"
            STATE.timings = timing.Timings(timing.CUDA_CLOCK if on_gpu else timing.HOST_CLOCK)
        return STATE.timings


def _validate(run_attention, kernel, backend, q, k, v, layer, forward_batch, timeable: bool = True):
    """The original's attention (its output is returned), then the kernel's into scratch, compared
    on the device; both timed past the bucket's warm-up (telemetry/timing.py: host clock on the
    CPU, CUDA events read later by the status publisher on a GPU, no timing under graph capture)."""
    from kdtree_verify.telemetry import timing
    from kdtree_verify.telemetry.validate import ValidateStats, is_capturing, rel_tol_for

    capturing = is_capturing(q.device)
    timings = _timings(q.device)
    key = _timing_key(backend, q, layer, forward_batch)
    if capturing:
        timings.captured()
        timed = False
    else:
        timed = timeable and timings.start(key)
    events = None
    if timed and timings.clock == timing.CUDA_CLOCK:
        events = (timings.event(), timings.event(), timings.event()) if timings.room() else None
        timed = events is not None
    if events is not None:
        events[0].record()
    started = timing.now_ns()
    triton_out = run_attention()
    original_ns = timing.now_ns() - started
    if events is not None:
        events[1].record()
    with LOCK:
        if STATE.validate_stats is None:
            if capturing:
                STATE.count("validate:skipped (first call under CUDA graph capture)")
                return triton_out
            STATE.validate_stats = ValidateStats(q.device, STATE.tol)
    stats = STATE.validate_stats
    out = stats.scratch(q.shape[0], layer.tp_q_head_num * HEAD_DIM_V, q.dtype)
    args = _kernel_args(backend, q, k, v, layer, out)
    started = timing.now_ns()
    try:
        kernel.run(**args)
    except Exception as exc:
        STATE.count("original:kernel call failed")
        _runtime_fallback(f"kernel call failed: {type(exc).__name__}: {exc}")
        return triton_out
    kernel_ns = timing.now_ns() - started
    if events is not None:
        events[2].record()
        timings.events(key, *events)
    elif timed:
        timings.host(key, original_ns, kernel_ns)
    kv_dtype = _dtype_name(backend.token_to_kv_pool.get_key_buffer(layer.layer_id))
    stats.record(out, triton_out.view(out.shape), rel_tol=rel_tol_for(kv_dtype))
    STATE.count("validate")
    return triton_out
