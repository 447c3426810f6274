"""SGLang plugin mode: entry point group `sglang.srt.plugins`, name `kdtree_verify`.

SGLang's `load_plugins()` (launch_server, Engine, every scheduler, DP controller, detokenizer)
calls `register()`. It registers `patch.around_hook` on `TritonAttnBackend.forward_extend` with
`HookRegistry` (`HookType.AROUND`); SGLang applies it right after all plugins ran
(`HookRegistry.apply_hooks()`, which imports the triton backend module in every process that loads
plugins). The marker is printed when the first `TritonAttnBackend` of the process is built (a
`HookType.BEFORE` hook on its `__init__`), because only then can the class attribute be checked.

Not the default (see README): it needs an installed distribution carrying the entry point in the
SGLang venv, it imports torch+SGLang's backend in the parent and the detokenizer too, and it
reports later (after model load starts), so a scheduler that dies early never says anything.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from kdtree_verify import marker, patch

logger = logging.getLogger("kdtree_verify")

TARGET = f"{patch.TARGET_MODULE}.{patch.TARGET_CLASS}.{patch.TARGET_ATTR}"
INIT_TARGET = f"{patch.TARGET_MODULE}.{patch.TARGET_CLASS}.__init__"

_registered = False


def registry_state(cls: Any) -> tuple[str, str]:
    """(state, reason) from what HookRegistry really did to the class attribute."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    hooks = [hook for _type, hook, _src in HookRegistry._hooks.get(TARGET, [])]
    if patch.around_hook not in hooks:
        return "fallback", "kdtree hook not registered with HookRegistry"
    if TARGET not in HookRegistry._patched:
        return "fallback", "HookRegistry did not apply the kdtree hook"
    if getattr(cls.__dict__.get(patch.TARGET_ATTR), "__wrapped__", None) is None:
        return "fallback", "forward_extend is not a HookRegistry wrapper"
    return "active", ""


def _report_on_first_backend(backend: Any, *args: Any, **kwargs: Any) -> None:
    if marker.emitted() is not None:
        return
    try:
        state, reason = registry_state(type(backend))
    except Exception as exc:
        state, reason = "fallback", f"cannot inspect HookRegistry: {exc}"
    with patch._lock:
        patch._state.cls = type(backend)  # the attribute itself is HookRegistry's wrapper
    patch._finish(patch._state.mode, state, reason)


def register() -> None:
    """Entry point called by SGLang's load_plugins()."""
    global _registered
    if _registered:
        return
    _registered = True
    import sys

    from kdtree_verify.importhook import PostImportFinder

    if any(isinstance(f, PostImportFinder) for f in sys.meta_path):
        # sitecustomize mode is on in this process: it patches the class itself; a second,
        # HookRegistry wrapper around it would run the dispatch twice.
        logger.info("kdtree-verify: sitecustomize hook present, the plugin entry point does nothing")
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    env = os.environ
    mode, problem = patch.read_mode(env)
    with patch._lock:
        patch._state.via = "plugin"
        patch._state.mode = mode
        patch._state.tol = patch.read_tol(env)
        patch._state.lib = env.get("KDTREE_LIB", "")
        patch._state.sglang = patch._sglang_version()
        reason = problem or ("" if mode != "off" else "KDTREE_VERIFY=off")
        if not reason and not patch._state.lib:
            reason = "KDTREE_LIB is not set"
        if not reason:
            try:
                binding = patch._load_binding()
                info = binding.probe_library(patch._state.lib)
                patch._state.binding = binding
                patch._state.lib_sha256 = str(info.get("sha256", ""))
            except ImportError as exc:
                reason = f"kernel binding not importable: {exc}"
            except Exception as exc:
                reason = str(exc)
    if reason:
        patch._finish(mode, "off" if mode == "off" and not problem else "fallback", reason)
        return
    HookRegistry.register(TARGET, patch.around_hook, HookType.AROUND)
    HookRegistry.register(INIT_TARGET, _report_on_first_backend, HookType.BEFORE)
    patch._state.state = "active"
    logger.info("kdtree-verify: registered the AROUND hook on %s", TARGET)
