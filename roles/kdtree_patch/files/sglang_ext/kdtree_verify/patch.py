"""Patch `TritonAttnBackend.forward_extend` so SGLang's target-verify runs the kdtree kernel.

Only the class attribute `sglang.srt.layers.attention.triton_backend.TritonAttnBackend.forward_extend`
is replaced (RadixAttention looks the method up at call time, so existing instances see it too).
Putting the wrapper on the class needs no torch, no GPU and no CUDA: the library is checked with a
plain dlopen + ABI check (`kernel.probe_library`); torch and the kernel are loaded on the first
verify call. Any failure leaves or puts back the original method and says why, never raises into
SGLang.

Modes (env `KDTREE_VERIFY`, default `off`):
- `off`: never patch (the marker still says state=off).
- `validate`: run SGLang's original method (it writes the KV cache and computes Triton's output),
  run the kernel on the same inputs into a scratch buffer, record the difference on the device
  (no host sync, CUDA-graph-capture safe), return Triton's output.
- `on`: write the KV cache exactly as the original does, then run the kernel only.

`KDTREE_VERIFY_TOL` (default 0.02): a validate call counts as a mismatch when the max abs
difference exceeds it (bf16 outputs of magnitude ~1 differ by up to ~1e-2 between two correct
kernels that accumulate in a different order).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kdtree_verify import marker

logger = logging.getLogger("kdtree_verify")

TARGET_MODULE = "sglang.srt.layers.attention.triton_backend"
TARGET_CLASS = "TritonAttnBackend"
TARGET_ATTR = "forward_extend"
# The signature the patch was written for (sglang==0.5.23, triton_backend.py `forward_extend`).
EXPECTED_PARAMS = (
    "self",
    "q",
    "k",
    "v",
    "layer",
    "forward_batch",
    "save_kv_cache",
    "sinks",
    "score_mod",
    "aux_tensors",
)
# Attributes the dispatch reads; all set by the 0.5.23 `TritonAttnBackend.__init__` (or class body).
EXPECTED_BACKEND_ATTRS = ("forward_metadata", "token_to_kv_pool", "is_draft_runner", "page_size", "use_mla")
MODES = ("off", "validate", "on")
DEFAULT_TOL = 0.02
HEAD_DIM_QK = 576
HEAD_DIM_V = 512
WRAPPER_FLAG = "_kdtree_verify_wrapper"

_lock = threading.RLock()


class _State:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.mode = "off"
        self.state = "not-installed"
        self.reason = ""
        self.lib = ""
        self.lib_sha256 = ""
        self.sglang = ""
        self.cls: Any = None
        self.original: Callable[..., Any] | None = None
        self.binding: Any = None
        self.kernel: Any = None  # VerifyKernel once loaded
        self.kernel_error = ""  # set once loading failed: fall back for good
        self.checked_devices: dict[str, str | None] = {}
        self.counts: dict[str, int] = {}
        self.validate_stats: Any = None  # ValidateStats, created on the first validate call
        self.tol = DEFAULT_TOL
        self.via = "class-patch"  # or "plugin" (HookRegistry owns the class attribute)


_state = _State()


def read_mode(env: dict[str, str] | None = None) -> tuple[str, str]:
    """(mode, problem). An unknown value gives mode 'off' and a problem text."""
    env = os.environ if env is None else env
    raw = env.get("KDTREE_VERIFY", "off").strip().lower() or "off"
    if raw in MODES:
        return raw, ""
    return "off", f"unknown KDTREE_VERIFY={raw!r} (use off, validate or on)"


def read_tol(env: dict[str, str] | None = None) -> float:
    env = os.environ if env is None else env
    raw = env.get("KDTREE_VERIFY_TOL", "")
    try:
        return float(raw) if raw else DEFAULT_TOL
    except ValueError:
        logger.error("kdtree-verify: ignoring KDTREE_VERIFY_TOL=%r (not a number)", raw)
        return DEFAULT_TOL


def _sglang_version() -> str:
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:
        return ""


def _signature_problem(cls: Any) -> str:
    import inspect

    func = cls.__dict__.get(TARGET_ATTR)
    if func is None or not callable(func):
        return f"{TARGET_CLASS} has no {TARGET_ATTR} of its own"
    try:
        params = tuple(inspect.signature(func).parameters)
    except (TypeError, ValueError) as exc:
        return f"cannot read the signature of {TARGET_CLASS}.{TARGET_ATTR}: {exc}"
    if params != EXPECTED_PARAMS:
        return f"{TARGET_CLASS}.{TARGET_ATTR} signature {params} != expected {EXPECTED_PARAMS}"
    return ""


def _load_binding() -> Any:
    from kdtree_verify import kernel

    return kernel


def is_wrapper(func: Any) -> bool:
    return bool(getattr(func, WRAPPER_FLAG, False))


def _finish(mode: str, state: str, reason: str) -> dict[str, Any]:
    _state.mode, _state.state, _state.reason = mode, state, reason
    # The marker below is the one loud line on stderr; the log record is for SGLang's own log.
    logger.info("kdtree-verify state=%s reason=%s", state, reason or "-")
    marker.emit(mode, state, reason, _state.lib, _state.lib_sha256, _state.sglang)
    return status()


def install(
    module: ModuleType | None = None, *, binding: Any = None, env: dict[str, str] | None = None
) -> dict:
    """Put the wrapper on the class (idempotent, thread-safe). Returns status().

    `module` is the imported triton_backend module (imported here when None). `binding` is the
    kernel binding (default: `kdtree_verify.kernel`); tests pass another object with the same
    interface. Never raises: every problem ends in state=fallback with a reason.
    """
    with _lock:
        if (
            _state.state == "active"
            and _state.cls is not None
            and is_wrapper(_state.cls.__dict__.get(TARGET_ATTR))
        ):
            return status()
        env = os.environ if env is None else env
        mode, problem = read_mode(env)
        _state.tol = read_tol(env)
        _state.lib = env.get("KDTREE_LIB", "")
        _state.lib_sha256 = ""
        _state.kernel = None
        _state.kernel_error = ""
        _state.checked_devices = {}
        try:
            if module is None:
                import importlib

                module = importlib.import_module(TARGET_MODULE)
            _state.sglang = _sglang_version()
            if problem:
                return _finish(mode, "fallback", problem)
            if mode == "off":
                return _finish(mode, "off", "KDTREE_VERIFY=off")
            cls = getattr(module, TARGET_CLASS, None)
            if cls is None:
                return _finish(mode, "fallback", f"{TARGET_MODULE} has no {TARGET_CLASS}")
            sig_problem = _signature_problem(cls)
            if sig_problem:
                return _finish(mode, "fallback", f"SGLang {_state.sglang or '?'}: {sig_problem}")
            if not _state.lib:
                return _finish(mode, "fallback", "KDTREE_LIB is not set")
            try:
                binding = binding if binding is not None else _load_binding()
            except ImportError as exc:
                return _finish(mode, "fallback", f"kernel binding not importable: {exc}")
            try:
                info = binding.probe_library(_state.lib)
            except binding.KernelUnavailable as exc:
                return _finish(mode, "fallback", str(exc))
            _state.lib_sha256 = str(info.get("sha256", ""))
            _state.binding = binding
            _state.cls = cls
            _state.original = cls.__dict__[TARGET_ATTR]
            setattr(cls, TARGET_ATTR, _make_wrapper(_state.original))
            return _finish(mode, "active", "")
        except Exception as exc:  # never crash the server
            logger.exception("kdtree-verify: unexpected error while installing the patch")
            return _finish(mode, "fallback", f"unexpected error: {type(exc).__name__}: {exc}")


def uninstall() -> dict:
    """Put the original method back (idempotent)."""
    with _lock:
        cls, original = _state.cls, _state.original
        if cls is not None and original is not None and is_wrapper(cls.__dict__.get(TARGET_ATTR)):
            setattr(cls, TARGET_ATTR, original)
        _state.cls = None
        _state.original = None
        _state.state = "not-installed"
        _state.reason = ""
        return status()


def status() -> dict:
    """The truth of this process: the wrapper must really be the class attribute to say active."""
    with _lock:
        state = _state.state
        reason = _state.reason
        if _state.via == "plugin":
            if state == "active" and _state.cls is not None:
                from kdtree_verify.plugin import registry_state

                state, reason = registry_state(_state.cls)
        elif state == "active" and (
            _state.cls is None or not is_wrapper(_state.cls.__dict__.get(TARGET_ATTR))
        ):
            state, reason = "fallback", "the class attribute is no longer the kdtree wrapper"
        if state == "active" and _state.kernel_error:
            state, reason = "fallback", _state.kernel_error
        out: dict[str, Any] = {
            "pid": os.getpid(),
            "mode": _state.mode,
            "state": state,
            "reason": reason,
            "lib": _state.lib,
            "lib_sha256": _state.lib_sha256,
            "sglang": _state.sglang,
            "via": _state.via,
            "kernel_loaded": _state.kernel is not None,
            "counts": dict(_state.counts),
            "tol": _state.tol,
        }
        if _state.validate_stats is not None:
            out["validate"] = _state.validate_stats.read()
        return out


def _count(key: str) -> None:
    _state.counts[key] = _state.counts.get(key, 0) + 1


def _make_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
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


def _dtype_name(tensor: Any) -> str:
    return str(getattr(tensor, "dtype", "")).replace("torch.", "")


def unsupported_reason(backend, q, k, v, layer, forward_batch, sinks, score_mod, aux_tensors) -> str | None:
    """None when the kdtree kernel can serve this call; else why the original must run.

    Mirrors the branches of the 0.5.23 `forward_extend` (triton_backend.py): the dense-fp8 MHA path
    (`use_dense_fp8_chunked_prefill`), read-back (`k is None`), DCP (`dcp_size > 1`), deterministic
    (`enable_deterministic`), DLLM (`dllm_attention`), MHA one-shot (`forward_batch.mha_one_shot`),
    sliding window (`layer.sliding_window_size > -1`), non-causal (`is_cross_attention`, `attn_type`),
    logit cap (`layer.logit_cap > 0`), xai temperature (`layer.xai_temperature_len > 0`).
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
        return "not absorbed MLA 576/512 with one KV head"
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
    if md is None or md.custom_mask is None:
        return "no tree mask"
    # The kernel's grid covers batch x max_extend_len rows per head (as Triton's does); a token
    # beyond that would be left unwritten, so such a call goes to the original. Shapes only: no sync.
    if q.shape[0] > _batch_size(md) * int(md.max_extend_len):
        return "more tokens than batch x max_extend_len"
    if _dtype_name(q) != "bfloat16" or _dtype_name(k) != "bfloat16" or _dtype_name(v) != "bfloat16":
        return "q/k/v not bf16"
    kv_dtype = _dtype_name(backend.token_to_kv_pool.get_key_buffer(layer.layer_id))
    if kv_dtype not in ("bfloat16", "float8_e4m3fn"):
        return f"kv cache dtype {kv_dtype}"
    return None


def _kernel_for(device: Any) -> Any:
    """The loaded VerifyKernel, or None (loud line once, then the original runs for good)."""
    with _lock:
        if _state.kernel_error:
            return None
        if _state.kernel is None:
            try:
                _state.kernel = _state.binding.load(_state.lib)
            except Exception as exc:
                _runtime_fallback(f"cannot load {_state.lib}: {exc}")
                return None
        key = str(device)
        if key not in _state.checked_devices:
            try:
                _state.checked_devices[key] = _state.kernel.unsupported_reason(device)
            except Exception as exc:
                _state.checked_devices[key] = f"cannot check the GPU: {exc}"
        problem = _state.checked_devices[key]
        if problem:
            _runtime_fallback(f"device {key}: {problem}")
            return None
        return _state.kernel


def _runtime_fallback(reason: str) -> None:
    _state.kernel_error = reason
    logger.info("kdtree-verify runtime fallback: %s", reason)
    marker.emit_runtime_fallback(reason)


def _write_kv_like_original(backend, layer, forward_batch, k, v) -> None:
    """The `save_kv_cache` branch of the 0.5.23 `forward_extend`, verbatim in behaviour:
    `KVWriteLoc.for_batch(forward_batch, swa_loc=forward_metadata.swa_out_cache_loc)`, then
    `_set_kv_buffer` when `layer.k_scale is None`, else for MLA `set_kv_buffer(layer, loc, k/k_scale, v)`.
    """
    kv_write_loc = sys.modules[TARGET_MODULE].KVWriteLoc  # the name the original resolves
    loc_info = kv_write_loc.for_batch(forward_batch, swa_loc=backend.forward_metadata.swa_out_cache_loc)
    if layer.k_scale is None:
        backend._set_kv_buffer(forward_batch, layer, loc_info, k, v)
    else:  # use_mla is guaranteed by unsupported_reason
        backend.token_to_kv_pool.set_kv_buffer(layer, loc_info, k.clone().div_(layer.k_scale), v)


def _batch_size(md) -> int:
    """Like extend_attention_fwd: the batch is what qo_indptr spans (padded under CUDA graphs)."""
    return int(md.qo_indptr.shape[0]) - 1


def _kernel_args(backend, q, k, v, layer, out) -> dict:
    md = backend.forward_metadata
    heads = layer.tp_q_head_num
    kv_scale = float(layer.k_scale_float) if layer.k_scale is not None else 1.0
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
        "kv_scale": kv_scale,
        "out": out.view(-1, heads, HEAD_DIM_V),
    }


def dispatch(original, backend, q, k, v, layer, forward_batch, save_kv_cache, sinks, score_mod, aux_tensors):
    """Route one forward_extend call: kdtree kernel for supported target-verify, else the original."""

    def run_original():
        return original(backend, q, k, v, layer, forward_batch, save_kv_cache, sinks, score_mod, aux_tensors)

    try:
        reason = unsupported_reason(backend, q, k, v, layer, forward_batch, sinks, score_mod, aux_tensors)
    except Exception as exc:
        reason = f"dispatch check failed: {type(exc).__name__}: {exc}"
    if reason is not None:
        _count(f"original:{reason}")
        return run_original()
    kernel = _kernel_for(q.device)
    if kernel is None:
        _count("original:kernel unavailable")
        return run_original()
    if _state.mode == "validate":
        return _validate(run_original, kernel, backend, q, k, v, layer)
    # mode "on": the KV write of the original, then the kernel only.
    if save_kv_cache:
        _write_kv_like_original(backend, layer, forward_batch, k, v)
    attn_out = getattr(forward_batch, "_attn_output", None)
    out = attn_out if attn_out is not None else q.new_empty((q.shape[0], layer.tp_q_head_num * HEAD_DIM_V))
    try:
        kernel.run(**_kernel_args(backend, q, k, v, layer, out))
    except Exception as exc:
        _runtime_fallback(f"kernel call failed: {type(exc).__name__}: {exc}")
        _count("original:kernel call failed")
        return original(backend, q, k, v, layer, forward_batch, False, sinks, score_mod, aux_tensors)
    _count("kernel")
    return out


def _validate(run_original, kernel, backend, q, k, v, layer):
    from kdtree_verify.validate import ValidateStats, is_capturing

    triton_out = run_original()  # writes the KV cache, as always
    with _lock:
        if _state.validate_stats is None:
            if is_capturing(q.device):
                _count("validate:skipped (first call under CUDA graph capture)")
                return triton_out
            _state.validate_stats = ValidateStats(q.device, _state.tol)
    stats = _state.validate_stats
    out = stats.scratch(q.shape[0], layer.tp_q_head_num * HEAD_DIM_V, q.dtype)
    try:
        kernel.run(**_kernel_args(backend, q, k, v, layer, out))
    except Exception as exc:
        _runtime_fallback(f"kernel call failed: {type(exc).__name__}: {exc}")
        return triton_out
    stats.record(out, triton_out.view(out.shape))
    _count("validate")
    return triton_out


def around_hook(original_fn, backend, *args, **kwargs):
    """`HookType.AROUND` hook for SGLang's HookRegistry (plugin mode): same dispatch."""
    bound = _bind(original_fn, backend, *args, **kwargs)
    return dispatch(original_fn, backend, *bound)


def _bind(original_fn, backend, *args, **kwargs) -> tuple:
    names = EXPECTED_PARAMS[1:]
    defaults = {"save_kv_cache": True, "sinks": None, "score_mod": None, "aux_tensors": None}
    values = dict(zip(names, args, strict=False))
    values.update(kwargs)
    return tuple(values[n] if n in values else defaults[n] for n in names)


def reset_for_tests() -> None:
    """Undo everything (tests only)."""
    uninstall()
    with _lock:
        _state.reset()
