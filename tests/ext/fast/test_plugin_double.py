"""Plugin mode against the SGLang double and a stand-in HookRegistry that offers only the public API.

The stand-in has `register()` and `apply_hooks()` (wrapping like SGLang's: `functools.wraps` plus
`__wrapped__`) and nothing to ask what is registered, so the plugin passes only if it keeps its own
record. The real HookRegistry is exercised by tests/ext/sglang/test_plugin_real.py.
"""

from __future__ import annotations

import enum
import functools
import importlib
import sys
import types
from types import SimpleNamespace

import pytest
from extlib import RecordingPool
from kdtree_verify.inject import importhook, lifecycle
from kdtree_verify.telemetry import marker

tb = pytest.importorskip("sglang.srt.layers.attention.triton_backend")
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend  # noqa: E402

CLS = tb.TritonAttnBackend


class HookType(enum.Enum):
    BEFORE = "before"
    AROUND = "around"


class PublicOnlyHookRegistry:
    """register() and apply_hooks(), as SGLang's; what it holds is not reachable from outside."""

    def __init__(self) -> None:
        self.__hooks: list[tuple[str, object, HookType]] = []

    def register(self, target: str, hook, hook_type: HookType) -> None:
        self.__hooks.append((target, hook, hook_type))

    def apply_hooks(self) -> None:
        for target, hook, hook_type in self.__hooks:
            owner_path, attr = target.rsplit(".", 1)
            module_name, cls_name = owner_path.rsplit(".", 1)
            owner = getattr(importlib.import_module(module_name), cls_name)
            setattr(owner, attr, _wrap(getattr(owner, attr), hook, hook_type))

    def count(self) -> int:
        return len(self.__hooks)


def _wrap(original, hook, hook_type: HookType):
    if hook_type is HookType.AROUND:

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            return hook(original, *args, **kwargs)

    else:

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            result = hook(*args, **kwargs)
            if result is not None:
                args, kwargs = result
            return original(*args, **kwargs)

    wrapper.__wrapped__ = original
    return wrapper


@pytest.fixture
def registry(monkeypatch) -> PublicOnlyHookRegistry:
    """The stand-in as `sglang.srt.plugins.hook_registry`; the class attributes are restored afterwards."""
    reg = PublicOnlyHookRegistry()
    module = types.ModuleType("sglang.srt.plugins.hook_registry")
    module.HookRegistry = reg
    module.HookType = HookType
    monkeypatch.setitem(sys.modules, "sglang.srt.plugins", types.ModuleType("sglang.srt.plugins"))
    monkeypatch.setitem(sys.modules, "sglang.srt.plugins.hook_registry", module)
    monkeypatch.setattr(CLS, "forward_extend", CLS.__dict__["forward_extend"])
    monkeypatch.setattr(CLS, "__init__", CLS.__dict__["__init__"])
    return reg


@pytest.fixture
def plugin():
    """A fresh plugin module: register() acts once per process, so each test gets its own process state."""
    from kdtree_verify.inject import plugin as module

    return importlib.reload(module)


def build_backend() -> AttentionBackend:
    runner = SimpleNamespace(
        token_to_kv_pool=RecordingPool(),
        is_draft_worker=False,
        page_size=1,
        model_config=SimpleNamespace(attention_arch="MLA"),
    )
    return CLS(runner)


def test_register_hooks_forward_extend_and_the_first_backend_prints_the_active_marker(
    registry, plugin, libs, monkeypatch, capsys
):
    monkeypatch.setenv("KDTREE_VERIFY", "on")
    monkeypatch.setenv("KDTREE_LIB", str(libs["good"]))
    plugin.register()
    assert registry.count() == 2 and marker.emitted() is None  # no marker before a backend exists
    assert lifecycle.status()["state"] == "active" and lifecycle.status()["via"] == "plugin"
    registry.apply_hooks()
    build_backend()
    build_backend()
    lines = [line for line in capsys.readouterr().err.splitlines() if marker.match_marker(line)]
    assert [marker.match_marker(line)[1] for line in lines] == ["active"]
    assert lifecycle.status()["state"] == "active"


def test_hooks_registered_but_never_applied_report_fallback(registry, plugin, libs, monkeypatch):
    monkeypatch.setenv("KDTREE_VERIFY", "on")
    monkeypatch.setenv("KDTREE_LIB", str(libs["good"]))
    plugin.register()
    st = lifecycle.report_first_backend(CLS)
    assert st["state"] == "fallback" and "did not apply the kdtree hook" in st["reason"]


def test_a_bad_library_reports_fallback_at_once_and_registers_nothing(registry, plugin, libs, monkeypatch):
    monkeypatch.setenv("KDTREE_VERIFY", "on")
    monkeypatch.setenv("KDTREE_LIB", str(libs["wrong_abi"]))
    plugin.register()
    assert registry.count() == 0
    assert marker.emitted()["state"] == "fallback" and "ABI mismatch" in marker.emitted()["reason"]


def test_off_reports_off_and_registers_nothing(registry, plugin, monkeypatch):
    monkeypatch.setenv("KDTREE_VERIFY", "off")
    plugin.register()
    assert registry.count() == 0 and marker.emitted()["state"] == "off"


def test_register_twice_registers_once(registry, plugin, libs, monkeypatch):
    monkeypatch.setenv("KDTREE_VERIFY", "on")
    monkeypatch.setenv("KDTREE_LIB", str(libs["good"]))
    plugin.register()
    plugin.register()
    assert registry.count() == 2


def test_register_does_nothing_when_the_sitecustomize_hook_is_installed(registry, plugin, libs, monkeypatch):
    monkeypatch.setenv("KDTREE_VERIFY", "on")
    monkeypatch.setenv("KDTREE_LIB", str(libs["good"]))
    finder = importhook.install(tb.__name__, lambda module: None)  # what sitecustomize installs
    try:
        plugin.register()
    finally:
        sys.meta_path.remove(finder)
    assert registry.count() == 0 and marker.emitted() is None
