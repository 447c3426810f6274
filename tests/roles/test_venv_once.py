"""scripts/venv-once.sh, the build-once steps of the venv scripts (router-venv.sh, gpu-rehearsal-venv.sh,
publish/venv.sh): a venv stamped with the same inputs is reused and ends the script; another stamp,
none, or a venv whose python no longer runs is made afresh."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import ROOT

LIB = ROOT / "scripts" / "venv-once.sh"
# A stand-in for the base python: `-m venv DIR` makes DIR/bin/python, a python that runs.
FAKE_PYTHON = """#!/bin/sh
[ "$1 $2" = "-m venv" ] || exit 9
mkdir -p "$3/bin" && printf '#!/bin/sh\\nexit 0\\n' >"$3/bin/python" && chmod +x "$3/bin/python"
"""


def build(tmp_path: Path, want: str) -> subprocess.CompletedProcess:
    """A venv script in miniature: reuse-or-remake, an install step (a file), then the stamp."""
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    script = (
        f'set -euo pipefail; source "{LIB}"\n'
        f'venv_reuse_or_remake "test venv" "$1" "$2" "{python}" "fake 3.0"\n'
        'touch "$1/installed"; venv_stamp "$1" "$2"; echo "installed and stamped"\n'
    )
    return subprocess.run(
        ["bash", "-c", script, "build", str(tmp_path / "venv"), want],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )


def test_a_venv_is_made_once_and_reused_while_its_inputs_stay_the_same(tmp_path):
    first = build(tmp_path, "hash-a fake 3.0")
    assert "test venv: building" in first.stdout and "installed and stamped" in first.stdout
    assert (tmp_path / "venv" / ".kdtree-stamp").read_text() == "hash-a fake 3.0\n"
    (tmp_path / "venv" / "kept").touch()
    again = build(tmp_path, "hash-a fake 3.0")
    assert again.stdout == f"test venv: reusing {tmp_path / 'venv'} (fake 3.0)\n"  # the script ended there
    assert (tmp_path / "venv" / "kept").exists()


def test_other_inputs_or_a_dead_python_make_it_afresh(tmp_path):
    build(tmp_path, "hash-a fake 3.0")
    (tmp_path / "venv" / "kept").touch()
    changed = build(tmp_path, "hash-b fake 3.0")
    assert "building" in changed.stdout and not (tmp_path / "venv" / "kept").exists()
    assert (tmp_path / "venv" / ".kdtree-stamp").read_text() == "hash-b fake 3.0\n"
    (tmp_path / "venv" / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")
    dead = build(tmp_path, "hash-b fake 3.0")
    assert "building" in dead.stdout and "installed and stamped" in dead.stdout


def test_a_build_that_died_before_its_stamp_is_redone(tmp_path):
    build(tmp_path, "hash-a fake 3.0")
    (tmp_path / "venv" / ".kdtree-stamp").unlink()
    assert "building" in build(tmp_path, "hash-a fake 3.0").stdout
