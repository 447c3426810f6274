"""The built library: exported C ABI, clean ptxas report, build.sh behaviour, probe_library (no torch)."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import pytest
from conftest import ARCHS, BUILD_SH, NVCC
from kdtree_verify.kernel import binding as kernel

EXPORTED = {
    "kdtree_verify_abi_version",
    "kdtree_verify_build_info",
    "kdtree_verify_capabilities",
    "kdtree_verify_prepare",
    "kdtree_verify_num_splits",
    "kdtree_verify_min_split_tiles",
    "kdtree_verify_block_m",
    "kdtree_verify_block_n",
    "kdtree_verify_workspace_bytes",
    "kdtree_verify_max_workspace_bytes",
    "kdtree_verify_partition",
    "kdtree_verify_run",
}


def _dynamic_symbols(lib: Path) -> dict[str, str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
    symbols = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3:
            symbols[parts[2]] = parts[1]
    return symbols


def test_library_exports_exactly_the_c_abi(built_arch):
    _arch, lib = built_arch
    symbols = _dynamic_symbols(lib)
    assert {name for name, kind in symbols.items() if kind == "T"} == EXPORTED
    # No C++ (mangled) or CUDA runtime symbols leak out of the library.
    assert not [name for name in symbols if name.startswith(("_Z", "cuda"))]


def test_library_needs_no_cuda_runtime_or_torch_at_load_time(built_arch):
    _arch, lib = built_arch
    needed = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True).stdout
    libs = re.findall(r"Shared library: \[([^\]]+)\]", needed)
    assert libs, needed
    assert not [name for name in libs if "cudart" in name or "torch" in name or "c10" in name]


def test_ptxas_reports_no_spills_and_no_warnings(built_arch):
    arch, lib = built_arch
    log = (lib.parent / "build.log").read_text()
    functions = re.findall(r"Compiling entry function '(\w+)' for '(\w+)'", log)
    assert {target for _, target in functions} == {arch}
    assert len(functions) == 6, log  # bf16 and fp8 kernels and a combine, for 64- and 32-row layouts
    spills = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert len(spills) == 6
    assert all(s == ("0", "0", "0") for s in spills), log
    assert "warning" not in log.lower(), log
    registers = [int(n) for n in re.findall(r"Used (\d+) registers", log)]
    assert registers and max(registers) <= 255


def test_probe_library_reports_arch_abi_and_hash(built_arch):
    arch, lib = built_arch
    info = kernel.probe_library(str(lib))
    assert info["archs"] == [arch]
    assert info["abi"] == kernel.ABI_VERSION
    assert info["path"] == str(lib)
    assert info["sha256"] == hashlib.sha256(lib.read_bytes()).hexdigest()


def test_build_info_names_the_arch_and_nvcc_13(built_arch):
    arch, lib = built_arch
    _lib, meta = kernel._open(str(lib))
    assert f"archs={arch}" in meta["build_info"]
    assert "nvcc=13.0" in meta["build_info"]


@pytest.mark.parametrize("arch", ARCHS)
def test_print_flags_embed_sass_and_ptx_of_the_arch(arch):
    out = subprocess.run(
        ["bash", str(BUILD_SH), "--print-flags", "--arch", arch], capture_output=True, text=True, check=True
    ).stdout
    num = arch.removeprefix("sm_")
    assert f"-gencode=arch=compute_{num},code=[sm_{num},compute_{num}]" in out
    assert "-cudart=static" in out
    assert f'-DKDTREE_ARCHS="{arch}"' in out


def test_build_rejects_an_unknown_arch(tmp_path):
    assert "sm_80" not in ARCHS
    proc = subprocess.run(
        ["bash", str(BUILD_SH), "--arch", "sm_80", "--out", str(tmp_path)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "unsupported arch" in proc.stderr
    assert not list(tmp_path.iterdir())


def test_build_fails_loudly_with_the_compiler_message(tmp_path):
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho 'fatal: broken compiler' >&2\nexit 1\n")
    fake.chmod(0o755)
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", str(BUILD_SH), "--arch", ARCHS[0], "--out", str(out), "--nvcc", str(fake)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "fatal: broken compiler" in proc.stderr
    assert not (out / "libkdtree_verify.so").exists()
    assert not list(out.glob(".libkdtree_verify.so.tmp*"))


def test_probe_rejects_a_missing_library(tmp_path):
    with pytest.raises(kernel.KernelUnavailable, match="not found"):
        kernel.probe_library(str(tmp_path / "libkdtree_verify.so"))


def test_probe_rejects_a_relative_path_and_an_empty_one():
    with pytest.raises(kernel.KernelUnavailable, match="not absolute"):
        kernel.probe_library("build/libkdtree_verify.so")
    with pytest.raises(kernel.KernelUnavailable, match="KDTREE_LIB is not set"):
        kernel.probe_library("")


def test_probe_rejects_a_file_that_is_not_a_shared_library(tmp_path):
    bogus = tmp_path / "libkdtree_verify.so"
    bogus.write_text("not an ELF file\n")
    with pytest.raises(kernel.KernelUnavailable, match="not an ELF file"):
        kernel.probe_library(str(bogus))


def _compile_c(tmp_path: Path, source: str) -> Path:
    src = tmp_path / "fake.c"
    src.write_text(source)
    lib = tmp_path / "libfake.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def test_probe_rejects_a_library_without_the_abi_symbols(tmp_path):
    lib = _compile_c(tmp_path, "int something_else(void) { return 1; }\n")
    with pytest.raises(kernel.KernelUnavailable, match="missing symbol"):
        kernel.probe_library(str(lib))


def test_probe_rejects_an_abi_mismatch(tmp_path):
    lib = _compile_c(
        tmp_path,
        "int kdtree_verify_abi_version(void) { return 999; }\n"
        f'const char* kdtree_verify_build_info(void) {{ return "archs={ARCHS[0]}"; }}\n',
    )
    with pytest.raises(kernel.KernelUnavailable, match="ABI mismatch: library has 999"):
        kernel.probe_library(str(lib))


def test_nvcc_used_by_the_tests_is_13_0():
    if not Path(NVCC).exists():
        pytest.skip(f"{NVCC} not present")
    out = subprocess.run([NVCC, "--version"], capture_output=True, text=True, check=True).stdout
    assert "release 13.0" in out


def _build_sh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(BUILD_SH), *args], capture_output=True, text=True, check=False)


def test_build_sh_owns_the_fault_codes_and_the_emulator_build_asks_it():
    import gpu_check

    codes = {name: _build_sh("--fault-code", name) for name in gpu_check.FAULTS}
    assert {n: (p.returncode, p.stdout.strip()) for n, p in codes.items()} == {
        "last-tile": (0, "1"),
        "one-split": (0, "2"),
    }
    bad = _build_sh("--fault-code", "no-such-fault")
    assert bad.returncode == 2 and "last-tile | one-split" in bad.stderr
    emu = (BUILD_SH.parents[2] / "tests" / "kernel" / "cpu_emu" / "build.sh").read_text()
    assert "--fault-code" in emu and "fault=1" not in emu and "fault=2" not in emu


@pytest.mark.skipif(not Path(NVCC).exists(), reason="needs the CUDA toolkit")
def test_build_sh_names_the_toolkit_headers_as_its_nvcc_reports_them():
    proc = _build_sh("--nvcc", NVCC, "--cuda-include")
    assert proc.returncode == 0, proc.stderr
    assert (Path(proc.stdout.strip()) / "cuda_bf16.h").is_file()
    missing = _build_sh("--nvcc", "/nonexistent/nvcc", "--cuda-include")
    assert missing.returncode == 1 and "nvcc not executable" in missing.stderr
