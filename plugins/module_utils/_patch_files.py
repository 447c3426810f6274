"""Load one stdlib-only file of the kdtree patch by its path (the one loader the modules share).

Stdlib only, no imports of other module_utils (scripts/testhosts/hostread.py inlines it).

The patch's own files own their facts (target.py the served backend and SGLang versions, config.py
DEFAULT_TOL, marker.py the marker format). A module or filter that needs one loads the file as a
standalone module instead of copying the fact: on a host from the installed patch directory, on the
controller from the collection's copy.
"""

from __future__ import annotations

import importlib.util
import os
from types import ModuleType

# Where the collection keeps the patch, relative to the collection's root (the controller's copy).
SOURCE_DIR = "files/sglang_ext"
# The patch's files that are loaded by path, relative to a patch directory (SOURCE_DIR on the controller,
# the installed patch directory on a host): every loader names its file with one of these. Each file is
# stdlib only and imports nothing of the kdtree_verify package (tests/ext/fast/test_by_path_files.py).
TARGET_FILE = "kdtree_verify/target.py"  # the served backend, the supported SGLang versions
CONFIG_FILE = "kdtree_verify/config.py"  # DEFAULT_TOL
MARKER_FILE = "kdtree_verify/telemetry/marker.py"  # the marker line's regexes
STATUSDIR_FILE = "kdtree_verify/telemetry/statusdir.py"  # the status directory's reader
METRICS_FILE = "kdtree_verify/telemetry/metrics.py"  # loaded by statusdir.py from next to itself
BY_PATH_FILES = (TARGET_FILE, CONFIG_FILE, MARKER_FILE, STATUSDIR_FILE, METRICS_FILE)


class PatchFileError(Exception):
    """The file is missing, cannot be loaded, or lacks what the caller needs (the message says which)."""


class PatchFileMissing(PatchFileError):
    """The file does not exist (for load_installed: the patch is not installed in that directory)."""


def load_file(
    path: str | os.PathLike[str], name: str, wanted: tuple[str, ...] = (), what: str = ""
) -> ModuleType:
    """`path` loaded as a module named `name` (not put in sys.modules). Raises PatchFileError when the
    file does not exist, cannot be loaded, or has no attribute of `wanted` (`what` names the file's role
    in that message)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise PatchFileMissing(f"{path} does not exist")
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError("no loader for this path")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as exc:
        raise PatchFileError(f"cannot load {path}: {type(exc).__name__}: {exc}") from exc
    missing = [item for item in wanted if not hasattr(module, item)]
    if missing:
        raise PatchFileError(f"{path} has no {' or '.join(missing)}: not {what or 'the file expected'}")
    return module


def load_installed(
    patch_dir: str, relpath: str, name: str, wanted: tuple[str, ...] = (), what: str = ""
) -> ModuleType:
    """<patch_dir>/<relpath>, a file of a patch installed in `patch_dir`, as load_file loads it; when
    it does not exist, PatchFileMissing asks whether the patch is installed there."""
    path = os.path.join(patch_dir, relpath)
    if not os.path.isfile(path):
        raise PatchFileMissing(f"{path} does not exist: is the kdtree patch installed in {patch_dir}?")
    return load_file(path, name, wanted, what)
