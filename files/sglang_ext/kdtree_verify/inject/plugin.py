"""SGLang plugin mode: entry point group `sglang.srt.plugins`, name `kdtree_verify`.

SGLang's `load_plugins()` (launch_server, Engine, every scheduler, DP controller, detokenizer)
calls `register()`. It registers `dispatch.around_hook` on `TritonAttnBackend.forward_extend` with
`HookRegistry` (`HookType.AROUND`); SGLang applies it right after all plugins ran
(`HookRegistry.apply_hooks()`, which imports the triton backend module in every process that loads
plugins). The marker is printed when the first `TritonAttnBackend` of the process is built (a
`HookType.BEFORE` hook on its `__init__`), because only then can the class attribute be checked.

Only HookRegistry's public API is used (`register`, `HookType`): it cannot be asked what is
registered, so this module keeps its own record of what it registered, and judges "applied" by
the class attribute being a wrapper (`__wrapped__`, set by HookRegistry's `functools.wraps`).

Not the default (see README): it needs an installed distribution carrying the entry point in the
SGLang venv, it imports torch+SGLang's backend in the parent and the detokenizer too, and it
reports later (after model load starts), so a scheduler that dies early never says anything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kdtree_verify import dispatch
from kdtree_verify.inject import importhook, lifecycle
from kdtree_verify.target import TARGET_ATTR, TARGET_CLASS, TARGET_MODULE

logger = logging.getLogger(__name__)

TARGET = f"{TARGET_MODULE}.{TARGET_CLASS}.{TARGET_ATTR}"
INIT_TARGET = f"{TARGET_MODULE}.{TARGET_CLASS}.__init__"

_register_called = False
_registered: dict[str, Callable[..., Any]] = {}  # target -> the hook this module registered on it


def hook_problem(cls: Any) -> str:
    """Why the kdtree AROUND hook is not in effect on `cls.forward_extend` ('' when it is)."""
    if _registered.get(TARGET) is not dispatch.around_hook:
        return "kdtree hook not registered with HookRegistry"
    if getattr(cls.__dict__.get(TARGET_ATTR), "__wrapped__", None) is None:
        return "HookRegistry did not apply the kdtree hook (forward_extend is not a wrapper)"
    return ""


def _report_on_first_backend(backend: Any, *args: Any, **kwargs: Any) -> None:
    """BEFORE hook on `TritonAttnBackend.__init__`; returns None so the arguments pass unchanged."""
    lifecycle.report_first_backend(type(backend))


def _register_hooks() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for target, hook, hook_type in (
        (TARGET, dispatch.around_hook, HookType.AROUND),
        (INIT_TARGET, _report_on_first_backend, HookType.BEFORE),
    ):
        HookRegistry.register(target, hook, hook_type)
        _registered[target] = hook
    logger.info("kdtree-verify: registered the AROUND hook on %s", TARGET)


def register() -> None:
    """Entry point called by SGLang's load_plugins()."""
    global _register_called
    if _register_called:
        return
    _register_called = True
    if importhook.is_installed(TARGET_MODULE):
        # sitecustomize mode is on in this process: it patches the class itself; a second,
        # HookRegistry wrapper around it would run the dispatch twice.
        logger.info("kdtree-verify: sitecustomize hook present, the plugin entry point does nothing")
        return
    lifecycle.start_plugin_mode(_register_hooks, hook_problem)
