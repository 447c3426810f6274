"""The controller's reads of the kernel and patch sources (kdtree_build's build_inputs.sh, kdtree_patch's
source_manifest.sh; pipe lookups in the check entry points, no module run). Their lines are what names a
build and a patch version, so they must stay byte for byte what the deploy has always hashed: the same
manifest as `find | sort -z | xargs -0 sha256sum`, build.sh's own arch, flags and driver map."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from conftest import PATCH_DIR, ROLES, ROOT

BUILD_INPUTS = ROLES / "kdtree_build" / "files" / "build_inputs.sh"
SOURCE_MANIFEST = ROLES / "kdtree_patch" / "files" / "source_manifest.sh"
CSRC = ROOT / "files" / "csrc"
BUILD_SH = CSRC / "build.sh"


def _run(*argv: object) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", *map(str, argv)], capture_output=True, text=True, timeout=120, check=False)


def _manifest(directory: Path) -> list[str]:
    """The manifest as the deploy has always made it: sha256sum lines of every file but *.pyc and
    __pycache__, in byte order of their ./paths."""
    files = sorted(
        (
            "./" + p.relative_to(directory).as_posix()
            for p in directory.rglob("*")
            if p.is_file() and not p.is_symlink() and p.suffix != ".pyc" and "__pycache__" not in p.parts
        ),
        key=lambda s: s.encode(),
    )
    return [f"{hashlib.sha256((directory / f).read_bytes()).hexdigest()}  {f}" for f in files]


def _build_sh(*args: str) -> str:
    return _run(BUILD_SH, *args).stdout.rstrip("\n")


def test_the_build_inputs_are_build_sh_s_arch_the_source_manifest_and_flags_then_end():
    out = _run(BUILD_INPUTS, CSRC, "12.0", BUILD_SH)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.rstrip("\n").split("\n")
    drivers = [line for line in lines if line.startswith("driver ")]
    assert [d.removeprefix("driver ") for d in drivers] == _build_sh("--list-driver-map").split("\n")
    inputs = lines[len(drivers) :]
    arch = _build_sh("--arch-for-cc", "12.0")
    assert inputs[0] == f"arch={arch}"
    assert inputs[1:-2] == _manifest(CSRC)
    assert inputs[-2] == "flags: " + _build_sh("--print-flags", "--arch", arch)
    assert inputs[-1] == "end"


def test_a_compute_capability_without_a_kernel_target_says_no_arch_with_build_sh_s_message():
    out = _run(BUILD_INPUTS, CSRC, "5.0", BUILD_SH)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.rstrip("\n").split("\n") if not line.startswith("driver ")]
    assert lines[0] == "no-arch"
    assert "unsupported compute capability '5.0'" in " ".join(lines[1:])


def test_any_other_failure_of_build_sh_fails_the_read_with_its_message(tmp_path):
    shutil.copytree(CSRC, tmp_path / "src")
    (tmp_path / "src" / "build.sh").write_text("echo 'build.sh broke' >&2\nexit 7\n")
    out = _run(BUILD_INPUTS, tmp_path / "src", "12.0", BUILD_SH)
    assert out.returncode == 7
    assert "build.sh broke" in out.stderr


def test_the_patch_manifest_is_the_source_s_sha256_lines_then_end(tmp_path):
    out = _run(SOURCE_MANIFEST, PATCH_DIR)
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip("\n").split("\n") == [*_manifest(PATCH_DIR), "end"]
    # a trailing blank in a name survives (the pipe lookup strips only after "end")
    (tmp_path / "a ").write_text("x")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "m.pyc").write_text("x")
    out = _run(SOURCE_MANIFEST, tmp_path)
    assert out.stdout.rstrip("\n").split("\n") == [*_manifest(tmp_path), "end"]
    assert out.stdout.split("\n")[0].endswith("  ./a ")
