"""Shared helpers for the sglang_ext tests: paths, real interpreters, tiny real shared libraries."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXT_DIR = ROOT / "files" / "sglang_ext"
DOUBLE_DIR = ROOT / "tests" / "doubles" / "sglang_double"
DEBIAN_PYTHON = Path("/usr/bin/python3")
DEBIAN_SITECUSTOMIZE = Path("/usr/lib/python3.11/sitecustomize.py")


@pytest.fixture(autouse=True)
def _fresh_patch_state(monkeypatch):
    """Every test starts and ends with the class unpatched and no marker emitted."""
    from kdtree_verify.inject import lifecycle

    monkeypatch.delenv("KDTREE_STATUS_DIR", raising=False)
    lifecycle.reset_for_tests()
    yield
    lifecycle.reset_for_tests()


def _compile(tmp: Path, name: str, source: str) -> Path:
    src = tmp / f"{name}.c"
    src.write_text(source)
    out = tmp / f"lib{name}.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return out


@pytest.fixture(scope="session")
def libs(tmp_path_factory) -> dict[str, Path]:
    """Real files for every library case: a good ABI, a wrong ABI, a non-ELF file, a missing path."""
    from kdtree_verify.kernel import binding as kernel

    tmp = tmp_path_factory.mktemp("libs")
    info = 'const char* kdtree_verify_build_info(void) { return "archs=sm_120a nvcc=test"; }\n'
    good = _compile(
        tmp, "good", f"int kdtree_verify_abi_version(void) {{ return {kernel.ABI_VERSION}; }}\n{info}"
    )
    wrong = _compile(
        tmp,
        "wrongabi",
        f"int kdtree_verify_abi_version(void) {{ return {kernel.ABI_VERSION + 41}; }}\n{info}",
    )
    nosym = _compile(tmp, "nosym", "int unrelated(void) { return 0; }\n")
    not_elf = tmp / "libnotelf.so"
    not_elf.write_text("this is not an ELF file\n")
    return {
        "good": good,
        "wrong_abi": wrong,
        "no_symbol": nosym,
        "not_elf": not_elf,
        "missing": tmp / "libnope.so",
    }
