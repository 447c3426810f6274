"""A post-import hook: run a callback right after one named module finished executing.

Installed by ``sitecustomize.py`` in every interpreter that has the hook directory on PYTHONPATH,
so it must cost next to nothing: only ``sys`` and the constants of ``kdtree_verify.target`` are
imported, and ``find_spec`` returns at once for
every module except the one watched. When that module is imported, the finder asks the rest of
``sys.meta_path`` for the real spec and wraps its loader; after ``exec_module`` the callback runs.
A failing callback prints a traceback on stderr and never breaks the import (nor does a broken
stderr).
"""

from __future__ import annotations

import sys

from kdtree_verify.target import TARGET_MODULE

# typing, types and collections.abc are needed for annotations only; importing them here would
# cost every Python start-up milliseconds (typing pulls re, enum, functools, contextlib ...).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any


class _CallbackLoader:
    """Delegates to the real loader; calls back after the module body ran."""

    def __init__(self, loader: Any, callback: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._callback = callback

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        run_callback(self._callback, module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, is_package ...
        return getattr(self._loader, name)


class PostImportFinder:
    """Meta path finder that watches exactly one module name."""

    def __init__(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.callback = callback

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _CallbackLoader(spec.loader, self.callback)
                return spec
        return None


def run_callback(callback: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        callback(module)
    except Exception:
        _report(
            f"kdtree-verify: error in the post-import hook for {module.__name__} "
            "(the import goes on, unpatched):"
        )


def _report(headline: str) -> None:
    """The headline and the current traceback on stderr; never raises (a broken stderr loses it)."""
    try:
        import traceback

        text = f"{headline}\n{traceback.format_exc()}"
    except Exception:
        return
    try:
        from kdtree_verify.telemetry.marker import say
    except Exception:  # the package itself may be what is broken
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except Exception:
            pass
        return
    say(text)


def install(name: str, callback: Callable[[ModuleType], None]) -> PostImportFinder:
    """Watch `name`; if it is already imported, call back now. Idempotent per (name, callback)."""
    for finder in sys.meta_path:
        if isinstance(finder, PostImportFinder) and finder.name == name and finder.callback == callback:
            return finder
    finder = PostImportFinder(name, callback)
    sys.meta_path.insert(0, finder)
    module = sys.modules.get(name)
    if module is not None:
        run_callback(callback, module)
    return finder


def is_installed(name: str | None = None) -> bool:
    """Is a post-import hook in ``sys.meta_path`` (for `name`, or for any module when None)?"""
    return any(
        isinstance(finder, PostImportFinder) and (name is None or finder.name == name)
        for finder in sys.meta_path
    )


def _apply_patch(module: ModuleType) -> None:
    from kdtree_verify.inject import lifecycle

    lifecycle.install(module)


def install_patch_hook() -> PostImportFinder:
    """What sitecustomize calls: apply the kdtree patch when SGLang's triton backend is imported."""
    return install(TARGET_MODULE, _apply_patch)
