"""Plugin mode through SGLang's real entry-point loader (`sglang.srt.plugins`) and HookRegistry."""

from __future__ import annotations

import re
import sys

import pytest
from distlib import pip_install_target
from extlib import clean_env, run_python

MARKER = re.compile(r"^kdtree-verify: pid=(\d+) .* state=(\w+) ", re.M)
CHECK = """
from sglang.srt.plugins import load_plugins
load_plugins()
import sglang.srt.layers.attention.triton_backend as tb
fe = tb.TritonAttnBackend.__dict__["forward_extend"]
print("wrapped:", getattr(fe, "__wrapped__", None) is not None)
try:
    tb.TritonAttnBackend(None)  # the BEFORE hook reports, then the real __init__ fails without a runner
except Exception as exc:
    print("init failed as expected:", type(exc).__name__)
import kdtree_verify
print("status:", kdtree_verify.status()["state"], kdtree_verify.status()["via"])
"""


def _plugin_dir(tmp_path):
    """files/sglang_ext pip-installed into a directory (the distribution with its entry point, no
    sitecustomize), built by this venv's setuptools."""
    return pip_install_target(tmp_path / "site", tmp_path, build_isolation=False)


@pytest.mark.launcher
def test_plugin_entry_point_wraps_forward_extend_and_reports_active(libs, tmp_path):
    env = clean_env(PYTHONPATH=str(_plugin_dir(tmp_path)), KDTREE_VERIFY="on", KDTREE_LIB=str(libs["good"]))
    res = run_python(sys.executable, ["-c", CHECK], env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "wrapped: True" in res.stdout and "status: active plugin" in res.stdout
    assert MARKER.findall(res.stderr)[0][1] == "active"


@pytest.mark.launcher
def test_plugin_entry_point_with_a_bad_library_reports_fallback_and_does_not_wrap(libs, tmp_path):
    env = clean_env(
        PYTHONPATH=str(_plugin_dir(tmp_path)), KDTREE_VERIFY="on", KDTREE_LIB=str(libs["wrong_abi"])
    )
    res = run_python(sys.executable, ["-c", CHECK], env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "wrapped: False" in res.stdout
    assert [s for _, s in MARKER.findall(res.stderr)] == ["fallback"]
