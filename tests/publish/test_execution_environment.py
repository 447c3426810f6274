"""The execution environment (meta/execution-environment.yml + scripts/publish/ee.py): ansible-builder
create on the definition for a local tarball and for a git ref gives a build context that installs that
source, and nothing else of kdtree.fleet; bad sources are refused before anything is written. Runs
ee.py with the Python of the publish venv that has ansible-builder (KDTREE_PUBLISH_VENV, make
test-publish-ee sets it; no image is built)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
EE = ROOT / "scripts" / "publish" / "ee.py"
BASE = ROOT / "meta" / "execution-environment.yml"
VENV = Path(os.environ.get("KDTREE_PUBLISH_VENV", ROOT / ".cache" / "publish" / "core-2.21"))
PYTHON = VENV / "bin" / "python"
REPOSITORY = "https://git.example.com/kdtree-fleet.git"


@pytest.fixture(scope="module", autouse=True)
def _builder():
    if not (VENV / "bin" / "ansible-builder").exists():
        why = f"no ansible-builder in {VENV} (make publish-venv-core-2.21)"
        if os.environ.get("KDTREE_PUBLISH_VENV"):  # make test-publish-ee: it must run, never skip
            pytest.fail(why)
        pytest.skip(why)


def _ee(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(PYTHON), str(EE), "--out", str(out), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)


def _requirements(out: Path) -> list[dict]:
    return yaml.safe_load((out / "context" / "_build" / "requirements.yml").read_text())["collections"]


def _head() -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()


def test_a_local_tarball_is_copied_into_the_context_and_installed_from_there(tmp_path):
    tarball = tmp_path / "kdtree-fleet-1.2.3.tar.gz"
    tarball.write_bytes(b"a tarball's bytes")
    out = _ee(tmp_path / "ee", "--tarball", str(tarball))
    assert out.returncode == 0, out.stderr
    assert _requirements(tmp_path / "ee") == [
        {"name": "collections/kdtree-fleet-1.2.3.tar.gz", "type": "file"}
    ]
    # the galaxy stage copies _build to /build and installs from there (its working directory)
    assert (
        tmp_path / "ee/context/_build/collections/kdtree-fleet-1.2.3.tar.gz"
    ).read_bytes() == tarball.read_bytes()
    containerfile = (tmp_path / "ee/context/Containerfile").read_text()
    assert "COPY _build /build\nWORKDIR /build" in containerfile
    assert "ansible-galaxy collection install" in containerfile and "install -y git" not in containerfile


def test_a_git_ref_is_installed_from_the_repository_at_that_ref_with_git_in_the_image(tmp_path):
    ref = _head()
    out = _ee(tmp_path / "ee", "--git-ref", ref, "--repository", REPOSITORY)
    assert out.returncode == 0, out.stderr
    assert _requirements(tmp_path / "ee") == [{"name": REPOSITORY, "type": "git", "version": ref}]
    assert not (tmp_path / "ee/context/_build/collections").exists()
    containerfile = (tmp_path / "ee/context/Containerfile").read_text()
    galaxy_stage = containerfile.split("FROM base AS galaxy", 1)[1].split("FROM base AS builder", 1)[0]
    assert galaxy_stage.index("install -y git") < galaxy_stage.index("ansible-galaxy collection install")


def test_the_definition_is_the_base_with_the_source_added(tmp_path):
    tarball = tmp_path / "kdtree-fleet-1.2.3.tar.gz"
    tarball.write_bytes(b"x")
    assert _ee(tmp_path / "ee", "--tarball", str(tarball)).returncode == 0
    written = yaml.safe_load((tmp_path / "ee" / "execution-environment.yml").read_text())
    base = yaml.safe_load(BASE.read_text())
    assert "galaxy" not in base["dependencies"]  # the base names no source: Galaxy has no kdtree.fleet
    galaxy = written["dependencies"].pop("galaxy")
    assert galaxy == {"collections": [{"name": "collections/kdtree-fleet-1.2.3.tar.gz", "type": "file"}]}
    assert written.pop("additional_build_files") == [{"src": tarball.name, "dest": "collections"}]
    assert written == base


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--tarball", "/nonexistent/kdtree-fleet-1.1.0.tar.gz"], "no collection tarball"),
        (["--git-ref", "v0.0.0-not-a-tag", "--repository", REPOSITORY], "is not in this clone"),
        (["--git-ref", "HEAD", "--repository", ""], "no repository URL"),
        (["--git-ref", "HEAD"], "no repository URL"),
    ],
)
def test_a_source_that_cannot_be_installed_is_refused_before_anything_is_written(tmp_path, args, why):
    out = _ee(tmp_path / "ee", *args)
    assert out.returncode == 2 and why in out.stderr, out.stderr
    assert not (tmp_path / "ee").exists()
