"""The sitecustomize injection with real interpreters: spawn children, chaining, error reports, probe."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from extlib import DOUBLE_DIR, EXT_DIR, clean_env, run_python

DEBIAN_PYTHON = Path("/usr/bin/python3")
DEBIAN_SITECUSTOMIZE = Path("/usr/lib/python3.11/sitecustomize.py")
MARKER = re.compile(r"^kdtree-verify: pid=(\d+) .* state=(\w+) ", re.M)

SPAWN_CHILD = """
import multiprocessing as mp, os, sys

def child(q):
    import sglang.srt.layers.attention.triton_backend as tb
    import kdtree_verify
    q.put((os.getpid(), kdtree_verify.status()["state"], tb.TritonAttnBackend.forward_extend.__qualname__,
           getattr(tb.TritonAttnBackend.forward_extend, "_kdtree_verify_wrapper", False)))

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    print(repr(q.get(timeout=60)))
    p.join()
    print("parent imported backend:", "sglang.srt.layers.attention.triton_backend" in sys.modules)
"""


def hook_env(libs, *extra_paths: Path, **extra: str) -> dict[str, str]:
    path = ":".join(str(p) for p in (EXT_DIR, *extra_paths, DOUBLE_DIR))
    return clean_env(PYTHONPATH=path, KDTREE_VERIFY="on", KDTREE_LIB=str(libs["good"]), **extra)


@pytest.fixture(scope="module")
def debian_venv(tmp_path_factory) -> Path:
    """A venv made from Debian's python3 (its /usr/lib/python3.11/sitecustomize.py shadows the venv's)."""
    if not DEBIAN_SITECUSTOMIZE.is_file():
        pytest.fail(f"{DEBIAN_SITECUSTOMIZE} missing: this machine is not the Debian this test is about")
    venv = tmp_path_factory.mktemp("debvenv") / "venv"
    subprocess.run([str(DEBIAN_PYTHON), "-m", "venv", "--without-pip", str(venv)], check=True)
    return venv


@pytest.fixture
def fake_apport(tmp_path) -> Path:
    """Debian's sitecustomize does `import apport_python_hook; apport_python_hook.install()`: record that."""
    d = tmp_path / "apport"
    d.mkdir()
    (d / "apport_python_hook.py").write_text(
        "import os, sys\n"
        "def install():\n"
        "    print('APPORT-INSTALLED pid=%d' % os.getpid(), file=sys.stderr)\n"
    )
    return d


def test_a_spawn_child_sees_the_patch_and_the_parent_pays_nothing(libs, tmp_path):
    script = tmp_path / "spawn_check.py"
    script.write_text(SPAWN_CHILD)
    res = run_python(sys.executable, [str(script)], hook_env(libs))
    assert res.returncode == 0, res.stderr
    assert "'active', 'TritonAttnBackend.forward_extend', True)" in res.stdout
    assert "parent imported backend: False" in res.stdout
    child_pid = int(re.search(r"\((\d+), ", res.stdout).group(1))
    assert [(int(p), s) for p, s in MARKER.findall(res.stderr)] == [(child_pid, "active")]


def test_the_shadowed_sitecustomize_behind_ours_still_runs(libs, tmp_path):
    distro = tmp_path / "distro"
    distro.mkdir()
    (distro / "sitecustomize.py").write_text(
        "import builtins\nbuiltins.DISTRO_SITECUSTOMIZE_RAN = __file__\n"
    )
    code = (
        "import builtins, sitecustomize; print(builtins.DISTRO_SITECUSTOMIZE_RAN); "
        "print(sitecustomize.KDTREE_RAN)"
    )
    res = run_python(sys.executable, ["-c", code], hook_env(libs, distro))
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == str(distro / "sitecustomize.py")
    assert str(distro / "sitecustomize.py") in res.stdout.splitlines()[1]


def test_debians_own_sitecustomize_still_runs_through_the_chain(libs, debian_venv, fake_apport):
    res = run_python(
        debian_venv / "bin" / "python",
        ["-c", "import sitecustomize as s; print(s.KDTREE_RAN)"],
        hook_env(libs, fake_apport),
    )
    assert res.returncode == 0, res.stderr
    assert "APPORT-INSTALLED pid=" in res.stderr
    assert str(DEBIAN_SITECUSTOMIZE) in res.stdout


def test_a_broken_package_is_reported_with_a_traceback_and_python_carries_on(tmp_path):
    broken = tmp_path / "ext"
    shutil.copytree(EXT_DIR, broken)
    (broken / "kdtree_verify" / "inject" / "importhook.py").write_text(
        "raise RuntimeError('broken on purpose')\n"
    )
    res = run_python(sys.executable, ["-c", "print('still alive')"], clean_env(PYTHONPATH=str(broken)))
    assert res.returncode == 0 and res.stdout.strip() == "still alive"
    assert "kdtree-verify: error in sitecustomize (installing the kdtree post-import hook)" in res.stderr
    assert "Traceback (most recent call last)" in res.stderr and "broken on purpose" in res.stderr


def test_an_error_in_the_chained_sitecustomize_is_reported_and_python_carries_on(libs, tmp_path):
    distro = tmp_path / "distro"
    distro.mkdir()
    (distro / "sitecustomize.py").write_text("raise ValueError('distro hook exploded')\n")
    res = run_python(sys.executable, ["-c", "print('still alive')"], hook_env(libs, distro))
    assert res.returncode == 0 and res.stdout.strip() == "still alive"
    assert "error in sitecustomize (running the shadowed sitecustomize)" in res.stderr
    assert "distro hook exploded" in res.stderr


def test_a_failing_patch_callback_never_breaks_the_sglang_import(libs, tmp_path):
    broken = tmp_path / "ext"
    shutil.copytree(EXT_DIR, broken)
    (broken / "kdtree_verify" / "inject" / "lifecycle.py").write_text(
        "raise ImportError('lifecycle module broken')\n"
    )
    env = clean_env(PYTHONPATH=f"{broken}:{DOUBLE_DIR}", KDTREE_VERIFY="on", KDTREE_LIB=str(libs["good"]))
    code = "import sglang.srt.layers.attention.triton_backend as tb; print(tb.TritonAttnBackend.__name__)"
    res = run_python(sys.executable, ["-c", code], env)
    assert res.returncode == 0 and res.stdout.strip() == "TritonAttnBackend"
    assert "error in the post-import hook for sglang.srt.layers.attention.triton_backend" in res.stderr
    assert "lifecycle module broken" in res.stderr


def test_plain_start_up_imports_nothing_heavy(libs):
    code = (
        "import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'sglang', 'logging', 'inspect', 'ctypes') "
        "or m in ('kdtree_verify.inject.lifecycle', 'kdtree_verify.dispatch',"
        " 'kdtree_verify.kernel.binding')))"
    )
    res = run_python(sys.executable, ["-c", code], hook_env(libs))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"
    assert MARKER.search(res.stderr) is None


def _probe(python: Path | str, env: dict[str, str]) -> tuple[int, dict]:
    res = run_python(python, ["-m", "kdtree_verify.probe", "--json"], env)
    return res.returncode, json.loads(res.stdout) if res.stdout.strip() else {"stderr": res.stderr}


def test_probe_says_active_on_a_python_without_a_distro_sitecustomize(libs):
    rc, report = _probe(sys.executable, hook_env(libs, NCCL_PROTO="LL", NCCL_ALGO="Ring"))
    assert rc == 0, report
    assert report["active"] is True and report["patch"]["state"] == "active"
    assert report["sitecustomize"]["ran"] == [str(EXT_DIR / "sitecustomize.py")]
    assert report["nccl_env"] == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}
    assert report["library"]["path"] == str(libs["good"]) and len(report["library"]["sha256"]) == 64


def test_probe_on_debians_python_reports_both_sitecustomize_files_and_active(libs, debian_venv, fake_apport):
    rc, report = _probe(debian_venv / "bin" / "python", hook_env(libs, fake_apport))
    assert rc == 0, report
    assert report["sitecustomize"]["ran"] == [str(EXT_DIR / "sitecustomize.py"), str(DEBIAN_SITECUSTOMIZE)]


def test_probe_tells_the_truth_when_the_hook_sits_in_a_shadowed_venv_site_packages(libs, debian_venv):
    (site,) = (debian_venv / "lib").glob("python3*/site-packages")
    shutil.copy(EXT_DIR / "sitecustomize.py", site / "sitecustomize.py")
    shutil.copytree(EXT_DIR / "kdtree_verify", site / "kdtree_verify", dirs_exist_ok=True)
    try:
        env = clean_env(PYTHONPATH=str(DOUBLE_DIR), KDTREE_VERIFY="on", KDTREE_LIB=str(libs["good"]))
        rc, report = _probe(debian_venv / "bin" / "python", env)
    finally:
        (site / "sitecustomize.py").unlink()
        shutil.rmtree(site / "kdtree_verify")
    assert rc == 1, report
    assert report["active"] is False and report["patch"]["state"] == "absent"
    assert report["sitecustomize"]["module"] == str(DEBIAN_SITECUSTOMIZE)
    assert report["hook_installed"] is False


@pytest.mark.parametrize(
    ("mode", "lib_key", "state"), [("off", "good", "off"), ("on", "wrong_abi", "fallback")]
)
def test_probe_exits_non_zero_when_the_patch_would_not_be_active(libs, mode, lib_key, state):
    env = hook_env(libs)
    env.update(KDTREE_VERIFY=mode, KDTREE_LIB=str(libs[lib_key]))
    rc, report = _probe(sys.executable, env)
    assert rc == 1 and report["patch"]["state"] == state


def test_probe_human_table_says_yes_or_no(libs):
    res = run_python(sys.executable, ["-m", "kdtree_verify.probe"], hook_env(libs))
    assert res.returncode == 0
    assert re.search(r"^patch active in spawn child\s+YES$", res.stdout, re.M)
