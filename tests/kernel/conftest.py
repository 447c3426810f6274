"""Fixtures of the kernel tests: built libraries per arch, import paths, the GPU's own library."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import gpu_check
import pytest

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "files" / "csrc"
BUILD_SH = CSRC / "build.sh"


def _ask_build_sh(*args: str) -> list[str]:
    """Lines build.sh prints for `args` (it is the one owner of the compute capability -> arch map)."""
    out = subprocess.run(["bash", str(BUILD_SH), *args], capture_output=True, text=True, check=True).stdout
    return out.splitlines()


# compute capability ("12.0") -> arch ("sm_120a"), and the arches in build.sh's order.
ARCH_MAP: dict[str, str] = dict(line.split() for line in _ask_build_sh("--list-map"))
ARCHS: tuple[str, ...] = tuple(_ask_build_sh("--list-arches"))
ANY_ARCH = ARCHS[-1]  # the arch of `any_library`
BUILD_DIR = Path(os.environ.get("KDTREE_KERNEL_BUILD_DIR", ROOT / "build" / "kernel"))
NVCC = os.environ.get("KDTREE_NVCC", "/usr/local/cuda-13.0/bin/nvcc")


def build_library(arch: str, out: Path) -> Path:
    """Build (unless up to date) `out/libkdtree_verify.so` for `arch`; the log goes to out/build.log."""
    lib = out / "libkdtree_verify.so"
    sources = [*CSRC.glob("*.cu"), *CSRC.glob("*.h"), BUILD_SH]
    if lib.exists() and (out / "build.log").exists():
        if lib.stat().st_mtime >= max(p.stat().st_mtime for p in sources):
            return lib
    out.mkdir(parents=True, exist_ok=True)
    cmd = ["bash", str(BUILD_SH), "--arch", arch, "--out", str(out)]
    if Path(NVCC).exists():
        cmd += ["--nvcc", NVCC]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    (out / "build.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        pytest.fail(f"build.sh --arch {arch} failed:\n{proc.stdout}\n{proc.stderr}")
    return lib


@pytest.fixture(scope="session", params=ARCHS)
def built_arch(request) -> tuple[str, Path]:
    """(arch, library path) for every arch build.sh supports, built into build/kernel/<arch>."""
    arch = request.param
    return arch, build_library(arch, BUILD_DIR / arch)


@pytest.fixture(scope="session")
def any_library() -> Path:
    """One built library (ANY_ARCH) for tests that only need a loadable file."""
    return build_library(ANY_ARCH, BUILD_DIR / ANY_ARCH)


HOSTLIB_BUILD_SH = ROOT / "tests" / "doubles" / "hostlib" / "build.sh"


def build_host_double(out: Path, *extra: str) -> Path:
    """g++-build the host-memory test double (tests/doubles/hostlib) into `out`; `extra`: build.sh flags."""
    proc = subprocess.run(
        ["bash", str(HOSTLIB_BUILD_SH), "--out", str(out), *extra],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"hostlib build.sh failed:\n{proc.stdout}\n{proc.stderr}")
    return out / "libkdtree_verify.so"


@pytest.fixture(scope="session")
def host_library(tmp_path_factory) -> Path:
    """The host test double, built with g++ into a temporary directory."""
    return build_host_double(tmp_path_factory.mktemp("hostlib"))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark the quick tier's tests (bench/gpu_check.py QUICK, the one selection) `tier_quick`, before
    `-m` deselects: `pytest -m tier_quick` is tier 2 of scripts/gpu-check.sh."""
    for item in items:
        rel = item.nodeid.rsplit("tests/kernel/", 1)[-1]
        if rel in gpu_check.QUICK:
            item.add_marker(pytest.mark.tier_quick)
