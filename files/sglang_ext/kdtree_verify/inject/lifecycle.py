"""Install, uninstall and report the kdtree patch: `install()`, `uninstall()`, `status()`.

Class-patch mode (the default, reached from sitecustomize's post-import hook): only the class
attribute `sglang.srt.layers.attention.triton_backend.TritonAttnBackend.forward_extend` is replaced
by `dispatch.make_wrapper(original)` (RadixAttention looks the method up at call time, so existing
instances see it too). Putting the wrapper on the class needs no torch, no GPU and no CUDA: the
library is checked with a plain dlopen + ABI check (`kernel.probe_library`); torch and the kernel
are loaded on the first verify call (by the dispatch). Any failure leaves or puts back the original
method and says why, never raises into SGLang.

Plugin mode (`kdtree_verify.inject.plugin`): SGLang's HookRegistry owns the class attribute; the plugin
hands its hook registration and its "is the hook in effect" check to `start_plugin_mode()` and
reports the first backend with `report_first_backend()`.

Every outcome prints the marker once per process (`kdtree_verify.telemetry.marker`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from kdtree_verify import config, dispatch
from kdtree_verify.state import LOCK, STATE
from kdtree_verify.target import (
    EXPECTED_PARAMS,
    NO_LIBRARY_REASON,
    TARGET_ATTR,
    TARGET_CLASS,
    TARGET_MODULE,
)
from kdtree_verify.telemetry import marker, publish

logger = logging.getLogger(__name__)


def load_binding() -> Any:
    """The real kernel binding, `kdtree_verify.kernel.binding` (imported on demand: it needs ctypes)."""
    from kdtree_verify.kernel import binding as kernel

    return kernel


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


def _read_env(env: Mapping[str, str]) -> tuple[str, str]:
    """Take mode, tolerance and library path from `env` and forget any loaded kernel: (mode, problem)."""
    mode, problem = config.read_mode(env)
    STATE.tol, tol_problem = config.read_tol(env)
    if mode != "off":  # off reads nothing else: a stray tolerance must not turn off into fallback
        problem = problem or tol_problem
    STATE.mode = mode
    STATE.lib = config.read_lib(env)
    STATE.lib_sha256 = ""
    STATE.kernel = None
    STATE.kernel_error = ""
    STATE.checked_devices = {}
    return mode, problem


def _probe_library(binding: Any) -> str:
    """dlopen + ABI check of STATE.lib; on success remember the binding and the sha256. The problem, or ''."""
    try:
        binding = binding if binding is not None else load_binding()
    except ImportError as exc:
        return f"kernel binding not importable: {exc}"
    try:
        info = binding.probe_library(STATE.lib)
    except binding.KernelUnavailable as exc:
        return str(exc)
    STATE.lib_sha256 = str(info.get("sha256", ""))
    STATE.binding = binding
    return ""


def _finish(mode: str, state: str, reason: str) -> dict[str, Any]:
    STATE.mode, STATE.state, STATE.reason = mode, state, reason
    # The marker below is the one loud line on stderr; the log record is for SGLang's own log.
    logger.info("kdtree-verify state=%s reason=%s", state, reason or "-")
    marker.emit(mode, state, reason, STATE.lib, STATE.lib_sha256, STATE.sglang)
    publish.start()  # the status files' publisher thread, in this process only (never raises)
    return status()


def install(
    module: ModuleType | None = None, *, binding: Any = None, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Put the wrapper on the class (idempotent, thread-safe). Returns status().

    `module` is the imported triton_backend module (imported here when None). `binding` is the
    kernel binding (default: `kdtree_verify.kernel.binding`); tests pass another object with the same
    interface. Never raises: every problem ends in state=fallback with a reason.
    """
    with LOCK:
        if (
            STATE.state == "active"
            and STATE.cls is not None
            and dispatch.is_wrapper(STATE.cls.__dict__.get(TARGET_ATTR))
        ):
            return status()
        mode, problem = _read_env(os.environ if env is None else env)
        try:
            if module is None:
                import importlib

                module = importlib.import_module(TARGET_MODULE)
            STATE.sglang = _sglang_version()
            if problem:
                return _finish(mode, "fallback", problem)
            if mode == "off":
                return _finish(mode, "off", "KDTREE_VERIFY=off")
            cls = getattr(module, TARGET_CLASS, None)
            if cls is None:
                return _finish(mode, "fallback", f"{TARGET_MODULE} has no {TARGET_CLASS}")
            sig_problem = _signature_problem(cls)
            if sig_problem:
                return _finish(mode, "fallback", f"SGLang {STATE.sglang or '?'}: {sig_problem}")
            if not STATE.lib:
                return _finish(mode, "fallback", NO_LIBRARY_REASON)
            lib_problem = _probe_library(binding)
            if lib_problem:
                return _finish(mode, "fallback", lib_problem)
            STATE.cls = cls
            STATE.original = cls.__dict__[TARGET_ATTR]
            setattr(cls, TARGET_ATTR, dispatch.make_wrapper(STATE.original))
            return _finish(mode, "active", "")
        except Exception as exc:  # never crash the server
            logger.exception("kdtree-verify: unexpected error while installing the patch")
            return _finish(mode, "fallback", f"unexpected error: {type(exc).__name__}: {exc}")


def uninstall() -> dict[str, Any]:
    """Put the original method back (idempotent)."""
    with LOCK:
        cls, original = STATE.cls, STATE.original
        if cls is not None and original is not None and dispatch.is_wrapper(cls.__dict__.get(TARGET_ATTR)):
            setattr(cls, TARGET_ATTR, original)
        STATE.cls = None
        STATE.original = None
        STATE.state = "not-installed"
        STATE.reason = ""
        return status()


def start_plugin_mode(
    register_hooks: Callable[[], None],
    hook_problem: Callable[[Any], str],
    *,
    binding: Any = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Plugin mode: read the environment and check the library as `install()` does, without touching
    the class; when all is well call `register_hooks()` (it registers with SGLang's HookRegistry)
    and say active, else print the marker with the reason. `hook_problem(cls)` tells `status()`
    later why the registered hook is not in effect on `cls` ("" when it is). Returns status().
    """
    with LOCK:
        STATE.via = "plugin"
        STATE.hook_problem = hook_problem
        mode, problem = _read_env(os.environ if env is None else env)
        STATE.sglang = _sglang_version()
        reason = problem or ("" if mode != "off" else "KDTREE_VERIFY=off")
        if not reason and not STATE.lib:
            reason = NO_LIBRARY_REASON
        if not reason:
            try:
                reason = _probe_library(binding)
            except Exception as exc:
                reason = str(exc)
        if reason:
            return _finish(mode, "off" if mode == "off" and not problem else "fallback", reason)
    register_hooks()
    with LOCK:
        STATE.state = "active"
        return status()


def _hook_problem(cls: Any) -> str:
    """Plugin mode: why the HookRegistry hook is not in effect on `cls` ('' when it is)."""
    if STATE.hook_problem is None:
        return "no plugin hook check was given"
    try:
        return STATE.hook_problem(cls)
    except Exception as exc:
        return f"cannot inspect HookRegistry: {exc}"


def report_first_backend(cls: Any) -> dict[str, Any]:
    """Plugin mode: the first backend of this process was built from `cls`: print the marker now
    (only then can the class attribute be checked). Later calls only return status()."""
    with LOCK:
        if marker.emitted() is not None:
            return status()
        STATE.cls = cls  # the attribute itself is HookRegistry's wrapper
        problem = _hook_problem(cls)
        return _finish(STATE.mode, "fallback" if problem else "active", problem)


def status() -> dict[str, Any]:
    """The truth of this process: the wrapper must really be the class attribute to say active."""
    with LOCK:
        state = STATE.state
        reason = STATE.reason
        if STATE.via == "plugin":
            if state == "active" and STATE.cls is not None:
                reason = _hook_problem(STATE.cls)
                state = "fallback" if reason else "active"
        elif state == "active" and (
            STATE.cls is None or not dispatch.is_wrapper(STATE.cls.__dict__.get(TARGET_ATTR))
        ):
            state, reason = "fallback", "the class attribute is no longer the kdtree wrapper"
        if state == "active" and STATE.kernel_error:
            state, reason = "fallback", STATE.kernel_error
        out: dict[str, Any] = {
            "pid": os.getpid(),
            "mode": STATE.mode,
            "state": state,
            "reason": reason,
            "lib": STATE.lib,
            "lib_sha256": STATE.lib_sha256,
            "sglang": STATE.sglang,
            "via": STATE.via,
            "kernel_loaded": STATE.kernel is not None,
            "counts": dict(STATE.counts),
            "tol": STATE.tol,
            **marker.delivery(),
        }
        if STATE.validate_stats is not None:
            out["validate"] = STATE.validate_stats.read()
        return out


def reset_for_tests() -> None:
    """Undo everything, the marker of this process included (tests only)."""
    publish.stop_for_tests()
    uninstall()
    with LOCK:
        STATE.reset()
    marker.reset_for_tests()
