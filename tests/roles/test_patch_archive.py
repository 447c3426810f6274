"""roles/kdtree_patch installs the patch as ONE archive checked against its manifest on the host (no
per-file loop), through ansible-playbook on localhost: the installed tree is the source's, byte for byte,
root-owned, directories 0755 and files 0644; a second run changes nothing; a drifted copy (a mode, a stray
file) is replaced as a whole. The patch root is a scratch directory the role accepts from any clone,
/tmp/<clone> included (helpers/scratch_root.py; the role refuses a root under /tmp itself)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml
from ansible_collections.kdtree.fleet.tests.roles.helpers.scratch_root import scratch_root
from conftest import PATCH_DIR, PLAYBOOK_BIN, ROOT, one_line, role_play, run_play

pytestmark = pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")

TASKS = ROOT / "roles" / "kdtree_patch" / "tasks"


@pytest.fixture
def patch_root():
    with scratch_root("test-patch-") as base:
        yield base / "patches"


def _install(tmp_path: Path, root: Path, source: Path = PATCH_DIR) -> tuple[int, str]:
    play = role_play(
        "kdtree_patch",
        {"kdtree_patch_root": str(root), "kdtree_patch_source_dir": str(source)},
        module_defaults={"kdtree.fleet.kdtree_history": {"path": str(tmp_path / "state.json")}},
    )
    return one_line(run_play(tmp_path / "patch.yml", play))


def _tree(path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def test_no_task_loops_over_the_patch_files():
    for path in TASKS.glob("*.yml"):
        for task in yaml.safe_load(path.read_text()) or []:
            for inner in [task, *task.get("block", []), *task.get("always", []), *task.get("rescue", [])]:
                loop = str(inner.get("loop", ""))
                assert "_kdtree_patch_manifest" not in loop, (
                    f"{path.name}: {inner['name']} loops over the files"
                )


def test_the_patch_is_installed_whole_checked_and_replaced_when_it_drifted(tmp_path, patch_root):
    rc, out = _install(tmp_path, patch_root)
    assert rc == 0, out[-3000:]
    (installed,) = [p for p in patch_root.iterdir() if not p.name.startswith(".")]
    assert _tree(installed) == {
        **_tree(PATCH_DIR),
        ".kdtree-manifest": (installed / ".kdtree-manifest").read_bytes(),
    }
    for p in [installed, *installed.rglob("*")]:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert p.stat().st_uid == 0 and mode == (0o755 if p.is_dir() else 0o644), (p, oct(mode))
    assert not list(patch_root.glob(".*")), "no partial directory or archive is left"

    rc, out = _install(tmp_path, patch_root)
    assert rc == 0 and "changed=0" in out, out[-2000:]

    some_file = next(p for p in installed.rglob("*.py"))
    some_file.chmod(0o666)
    (installed / "stray.py").write_text("import os\n")
    rc, out = _install(tmp_path, patch_root)
    assert rc == 0, out[-3000:]
    assert stat.S_IMODE(some_file.stat().st_mode) == 0o644
    assert not (installed / "stray.py").exists()


def test_a_pycache_others_can_write_in_the_installed_patch_is_drift_and_the_tree_is_replaced(
    tmp_path, patch_root
):
    """A .pyc in a writable __pycache__ would run at the next import as root: the check counts it as
    drift (it used to skip every __pycache__), so the tree is installed again without it."""
    rc, out = _install(tmp_path, patch_root)
    assert rc == 0, out[-3000:]
    (installed,) = [p for p in patch_root.iterdir() if not p.name.startswith(".")]
    cache = installed / "kdtree_verify" / "__pycache__"
    cache.mkdir(exist_ok=True)
    cache.chmod(0o777)
    (cache / "config.cpython-311.pyc").write_bytes(b"planted")
    rc, out = _install(tmp_path, patch_root)
    assert rc == 0 and "changed=0" not in out, out[-3000:]
    assert not (cache / "config.cpython-311.pyc").exists()


def test_a_relative_patch_source_is_refused_before_anything_is_installed(tmp_path, patch_root):
    rc, out = _install(tmp_path, patch_root, source=PATCH_DIR.relative_to(ROOT))
    assert rc != 0, out[-2000:]
    assert "kdtree_patch_source_dir must be an absolute path on the controller" in out, out[-2000:]
    assert not patch_root.exists(), "nothing is installed for a refused source"
