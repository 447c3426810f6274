"""make collection and make release (scripts/publish/build.sh, release.sh, repository.sh) in a copy of
this clone (its tracked and untracked files, a git repository of its own, the tools venv linked): the
tarball names the repository URL Galaxy's importer requires, taken from the origin remote or
COLLECTION_REPOSITORY; with neither, make collection refuses before anything is built; make release
tags v<galaxy.yml version> once and refuses what would make a wrong release."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = (ROOT / ".venv").resolve()
VERSION = re.search(r"^version: *(\S+)", (ROOT / "galaxy.yml").read_text(), re.M).group(1)
ORIGIN = "https://git.example.com/kdtree-fleet.git"
TIMEOUT_S = 300

pytestmark = pytest.mark.skipif(not (VENV / "bin" / "ansible-galaxy").exists(), reason="needs the tools venv")


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    out = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _make(repo: Path, target: str, *args: str) -> subprocess.CompletedProcess[str]:
    # the copy's venv stamp is not remade (-o): its files are as old as this clone's, not older than the venv
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"COLLECTION_REPOSITORY", "MAKEFLAGS", "MAKELEVEL", "MFLAGS"}
    }
    cmd = ["make", "--no-print-directory", "-C", str(repo), "-o", f"{repo}/.venv/.stamp", target, *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def _manifest(tarball: Path) -> dict:
    with tarfile.open(tarball) as tar:
        return json.load(tar.extractfile("MANIFEST.json"))["collection_info"]


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A copy of this clone's files, committed in a repository with no remote."""
    repo = tmp_path / "kdtree-fleet"
    repo.mkdir()
    files = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    archive = subprocess.run(
        ["tar", "-c", "--null", "-T", "-", "-f", "-"],
        cwd=ROOT,
        input=files,
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout
    subprocess.run(["tar", "-x", "-f", "-", "-C", str(repo)], input=archive, check=True, timeout=120)
    (repo / ".venv").symlink_to(VENV)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "copy")
    return repo


def test_make_collection_refuses_without_an_origin_or_a_url(clone):
    out = _make(clone, "collection")
    assert out.returncode != 0
    assert "no repository URL" in out.stderr and "COLLECTION_REPOSITORY" in out.stderr, out.stderr
    assert not list((clone / "build").glob("*.tar.gz"))


def test_make_collection_names_the_origin_in_the_tarball(clone):
    _git(clone, "remote", "add", "origin", ORIGIN)
    out = _make(clone, "collection")
    assert out.returncode == 0, out.stderr
    info = _manifest(clone / "build" / f"kdtree-fleet-{VERSION}.tar.gz")
    assert info["repository"] == ORIGIN and info["version"] == VERSION
    assert _git(clone, "status", "--porcelain") == ""  # galaxy.yml itself is left as it is


def test_collection_repository_names_the_url_over_the_origin(clone):
    _git(clone, "remote", "add", "origin", ORIGIN)
    out = _make(clone, "collection", "COLLECTION_REPOSITORY=https://mirror.example.org/kdtree-fleet.git")
    assert out.returncode == 0, out.stderr
    info = _manifest(clone / "build" / f"kdtree-fleet-{VERSION}.tar.gz")
    assert info["repository"] == "https://mirror.example.org/kdtree-fleet.git"


def _released(clone: Path) -> None:
    """The state a release commit has: its changelog released, no fragments left."""
    for fragment in (clone / "changelogs" / "fragments").glob("*.y*ml"):
        fragment.unlink()
    _git(clone, "commit", "-q", "-a", "-m", "release")


def test_make_release_tags_the_version_once_with_its_tarball(clone):
    _git(clone, "remote", "add", "origin", ORIGIN)
    _released(clone)
    out = _make(clone, "release")
    assert out.returncode == 0, out.stderr
    assert _git(clone, "tag", "--points-at", "HEAD") == f"v{VERSION}"
    assert _git(clone, "cat-file", "-t", f"v{VERSION}") == "tag"  # annotated
    assert _manifest(clone / "build" / f"kdtree-fleet-{VERSION}.tar.gz")["repository"] == ORIGIN
    again = _make(clone, "release")
    assert again.returncode != 0 and f"tag v{VERSION} exists already" in again.stderr, again.stderr


@pytest.mark.parametrize(
    ("state", "why"),
    [
        ("fragments", "unreleased changelog fragments"),
        ("dirty", "the work tree has changes"),
        ("unreleased-version", "the changelog does not release 99.0.0"),
        ("no-origin", "no repository URL"),
    ],
)
def test_make_release_refuses_a_wrong_release_before_tagging(clone, state, why):
    if state != "no-origin":
        _git(clone, "remote", "add", "origin", ORIGIN)
    if state != "fragments":
        _released(clone)
    if state == "dirty":
        (clone / "galaxy.yml").write_text((clone / "galaxy.yml").read_text() + "# edit\n")
    if state == "unreleased-version":
        galaxy = clone / "galaxy.yml"
        galaxy.write_text(re.sub(r"^version: .*$", "version: 99.0.0", galaxy.read_text(), flags=re.M))
        _git(clone, "commit", "-q", "-a", "-m", "bump")
    out = _make(clone, "release")
    assert out.returncode != 0 and why in out.stderr, out.stderr
    assert _git(clone, "tag") == ""
