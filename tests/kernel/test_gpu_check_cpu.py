"""scripts/gpu-check.sh up to the point where it needs a GPU: the driver check, the exit codes, pytest from
the wheelhouse for a python without it. A fake nvidia-smi stands in for the GPU's answers."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import NVCC, ROOT

SCRIPT = ROOT / "scripts" / "gpu-check.sh"
HAVE_NVCC = Path(NVCC).exists()


def _run(*args: str, env: dict | None = None, tmp: Path) -> subprocess.CompletedProcess:
    full = {**os.environ, "OUT": str(tmp / "out"), **(env or {})}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=full, timeout=300, check=False
    )


def _fake_smi(tmp: Path, driver: str, cap: str = "9.0") -> str:
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    smi = bindir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f'  *compute_cap*) echo "{cap}" ;;\n'
        '  *name*) echo "FAKE GPU" ;;\n'
        f'  *driver_version*) echo "{driver}" ;;\n'
        '  *) echo "fake nvidia-smi" ;;\n'
        "esac\n"
    )
    smi.chmod(0o755)
    return f"{bindir}:{os.environ['PATH']}"


@pytest.mark.skipif(not HAVE_NVCC, reason="needs nvcc to know the toolkit release")
@pytest.mark.parametrize(("driver", "rc"), [("575.57.08", 4), ("570.1", 4), ("580.65.06", 0), ("590.10", 0)])
def test_the_driver_check_knows_what_nvcc_13_needs(tmp_path, driver, rc):
    proc = _run("--check-driver", driver, env={"KDTREE_NVCC": NVCC}, tmp=tmp_path)
    assert proc.returncode == rc, proc.stdout + proc.stderr
    if rc:
        assert ">= 580" in proc.stdout and "install an NVIDIA driver" in proc.stdout


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a GPU")
def test_without_a_gpu_it_says_so_and_exits_3(tmp_path):
    proc = _run(tmp=tmp_path)
    assert proc.returncode == 3 and "no NVIDIA GPU" in proc.stdout


@pytest.mark.skipif(not HAVE_NVCC, reason="needs nvcc")
def test_an_old_driver_stops_it_first_with_what_to_do(tmp_path):
    proc = _run(env={"PATH": _fake_smi(tmp_path, "560.35.03"), "KDTREE_NVCC": NVCC}, tmp=tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "driver 560.35.03 is older" in proc.stdout
    assert "driver 560.35.03 is older" in (tmp_path / "out" / "gpu-check" / "summary.txt").read_text()


@pytest.mark.skipif(not HAVE_NVCC, reason="needs nvcc")
def test_a_python_without_cuda_torch_is_exit_5_after_the_arch_is_known(tmp_path):
    env = {"PATH": _fake_smi(tmp_path, "580.65.06"), "KDTREE_NVCC": NVCC, "KDTREE_PYTHON": "/usr/bin/python3"}
    proc = _run(env=env, tmp=tmp_path)
    assert proc.returncode == 5, proc.stdout + proc.stderr
    assert "compute capability 9.0 -> sm_90a" in proc.stdout and "no torch with CUDA" in proc.stdout


def test_an_unknown_compute_capability_is_exit_3(tmp_path):
    if not HAVE_NVCC:
        pytest.skip("needs nvcc")
    env = {"PATH": _fake_smi(tmp_path, "580.65.06", cap="7.5"), "KDTREE_NVCC": NVCC}
    proc = _run(env=env, tmp=tmp_path)
    assert proc.returncode == 3 and "unsupported compute capability '7.5'" in proc.stdout


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="needs a system python3")
def test_the_wheelhouse_gives_a_bare_python_a_working_pytest(tmp_path):
    bare = "/usr/bin/python3"
    if subprocess.run([bare, "-c", "import pytest"], capture_output=True, check=False).returncode == 0:
        pytest.skip(f"{bare} already has pytest")
    site = tmp_path / "site"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "wheelhouse-site.sh"), bare, str(site)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "pytest 8.3.5" in proc.stdout + proc.stderr
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "import pytest\n\n@pytest.mark.parametrize('x', [1, 2])\ndef test_x(x):\n    assert x < 2\n"
    )
    run = subprocess.run(
        [bare, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(probe)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(site)},
        cwd=tmp_path,
        check=False,
    )
    assert run.returncode == 1 and "1 failed, 1 passed" in run.stdout, run.stdout  # it runs, and it can fail


BUILD_SH = ROOT / "files" / "csrc" / "build.sh"


@pytest.mark.parametrize(
    ("release", "driver"), [("13.0", "580"), ("13.1", "580"), ("12.9", "575"), ("12.8", "570")]
)
def test_build_sh_owns_the_toolkit_to_driver_rule(release, driver):
    """build.sh --min-driver-for is the rule's one owner: gpu-check.sh and the build role ask it."""
    out = subprocess.run(
        ["bash", str(BUILD_SH), "--min-driver-for", release], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == driver
    assert "min-driver-for" in SCRIPT.read_text() and not any(
        f"{driver} ;;" in line for line in SCRIPT.read_text().splitlines()
    )


class _ReferenceKernel:
    """Stands in for the library on the CPU: writes the reference into the valid rows (and, with
    `spill`, into the first row past them, as a kernel that ignores qo_indptr[-1] would)."""

    def __init__(self, spill: bool = False) -> None:
        self.spill = spill

    def run(self, *, out, block_m, max_extend_len, **case):
        from kdtree_verify.kernel.reference import verify_attention_reference

        tokens = int(case["qo_indptr"][-1])
        ref_case = {k: (v[:tokens] if k in ("q", "k_extend", "v_extend") else v) for k, v in case.items()}
        out[:tokens] = verify_attention_reference(**ref_case).to(out.dtype)
        if self.spill and out.shape[0] > tokens:
            out[tokens] = 0


def test_every_sanitizer_shape_is_a_valid_case_that_the_reference_passes():
    pytest.importorskip("torch")
    import gpu_sanitize

    for shape in gpu_sanitize.SHAPES:
        assert gpu_sanitize.run_shape(_ReferenceKernel(), shape, device="cpu") is None, shape.name


def test_the_sanitizer_workload_sees_a_write_past_the_last_draft_row():
    pytest.importorskip("torch")
    import gpu_sanitize

    graph = next(s for s in gpu_sanitize.SHAPES if s.extra_rows)
    assert gpu_sanitize.run_shape(_ReferenceKernel(spill=True), graph, device="cpu") == (
        "rows past qo_indptr[-1] were written"
    )
