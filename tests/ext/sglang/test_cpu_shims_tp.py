"""The engine test hosts' TP shim (tests/engine/cpu_shims/kdtree_cpu_shims/tp.py) against the release this
venv holds: on the generic platform every model-parallel group is built without PyNccl, whatever its
caller asked; on a platform SGLang serves the call goes through unchanged. The original is a recorder
with the release's own signature of `init_model_parallel_group` (building real groups needs a process
group; the engine scenario's TP 2 step runs the real thing)."""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")  # the optional suites skip where torch is absent
parallel_state = pytest.importorskip("sglang.srt.distributed.parallel_state")

SHIMS = Path(__file__).resolve().parents[3] / "tests" / "engine" / "cpu_shims"


@pytest.fixture
def shims(monkeypatch):
    """The shims' package `kdtree_cpu_shims` and its `tp` module, imported from the test hosts' copy."""
    monkeypatch.syspath_prepend(str(SHIMS))
    for name in ("kdtree_cpu_shims", "kdtree_cpu_shims.tp"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module("kdtree_cpu_shims"), importlib.import_module("kdtree_cpu_shims.tp")


def _recorder():
    real = parallel_state.init_model_parallel_group
    seen: dict = {}

    def original(*args, **kwargs):
        seen.clear()
        seen.update(inspect.signature(real).bind(*args, **kwargs).arguments)
        return "group"

    original.__signature__ = inspect.signature(real)  # type: ignore[attr-defined]
    return original, seen


@pytest.mark.parametrize("asked", ["unset", None, True])
def test_on_the_generic_platform_every_group_is_built_without_pynccl(shims, monkeypatch, asked):
    package, tp = shims
    monkeypatch.setattr(package, "generic_platform", lambda: True)
    original, seen = _recorder()
    kwargs = {} if asked == "unset" else {"use_pynccl": asked}
    out = tp.init_model_parallel_group_around(original, [[0, 1]], 0, "gloo", group_name="tp", **kwargs)
    assert out == "group"
    assert seen["use_pynccl"] is False
    # the caller's other arguments reach SGLang's function as given
    assert seen["group_ranks"] == [[0, 1]] and seen["backend"] == "gloo" and seen["group_name"] == "tp"


def test_on_a_platform_sglang_serves_the_call_is_unchanged(shims, monkeypatch):
    package, tp = shims
    monkeypatch.setattr(package, "generic_platform", lambda: False)
    original, seen = _recorder()
    tp.init_model_parallel_group_around(original, [[0, 1]], 0, "nccl", use_pynccl=True)
    assert seen["use_pynccl"] is True
    tp.init_model_parallel_group_around(original, [[0, 1]], 0, "nccl")
    assert "use_pynccl" not in seen  # left to SGLang's own choice


def test_the_hook_is_registered_on_the_function_this_release_has(shims):
    package, tp = shims
    found, _missing = package.targets()
    assert found.get(tp.MODEL_PARALLEL_GROUP) is tp.init_model_parallel_group_around
