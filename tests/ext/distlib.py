"""files/sglang_ext installed as a distribution by pip (what plugin mode needs in SGLang's venv)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from extlib import EXT_DIR


def pip_install_target(target: Path, work: Path, build_isolation: bool = True, timeout: int = 300) -> Path:
    """`pip install --no-deps --target <target>` of a copy of files/sglang_ext (a build writes build/ and
    *.egg-info next to its source: the copy keeps them out of the patch, whose digest covers every file).
    Without build isolation the running interpreter's setuptools builds it (no index needed)."""
    src = work / "sglang_ext"
    shutil.copytree(EXT_DIR, src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    argv = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--target", str(target)]
    if not build_isolation:
        argv.append("--no-build-isolation")
    res = subprocess.run(
        [*argv, str(src)], capture_output=True, text=True, timeout=timeout, check=False, cwd=work
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return target
