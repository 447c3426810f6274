"""The patch files that Ansible code loads by path (plugins/module_utils/_patch_files.py names them, the
one owner of their paths) import only the standard library, never the kdtree_verify package, and no
loader spells such a path itself."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _patch_files as patch_files
from extlib import EXT_DIR, ROOT

LOADER_DIRS = ("plugins", "scripts")


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, top-level module) of every import in `path`, inside functions too; '.' for relative ones."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, "." if node.level else (node.module or "").split(".")[0]))
    return found


def non_stdlib_imports(path: Path) -> list[str]:
    return [
        f"{path.name}:{line} imports {name}"
        for line, name in imported_modules(path)
        if name not in sys.stdlib_module_names or name == "__main__"
    ]


def test_the_by_path_files_exist_in_the_patch():
    assert patch_files.SOURCE_DIR == EXT_DIR.relative_to(ROOT).as_posix()
    for relpath in patch_files.BY_PATH_FILES:
        assert (EXT_DIR / relpath).is_file(), relpath


@pytest.mark.parametrize("relpath", patch_files.BY_PATH_FILES)
def test_a_by_path_file_imports_only_the_standard_library(relpath):
    assert non_stdlib_imports(EXT_DIR / relpath) == []


def test_the_import_check_names_a_package_import_inside_a_function(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import os\n\ndef later():\n    from kdtree_verify.telemetry import metrics\n    from . import x\n"
    )
    assert non_stdlib_imports(bad) == ["bad.py:4 imports kdtree_verify", "bad.py:5 imports ."]


def test_every_by_path_file_loads_standalone_without_the_package():
    """Loaded as the modules load them, in an isolated interpreter whose sys.path lacks the patch."""
    program = (
        "import sys\n"
        "loader = {}\n"  # _patch_files.py itself is stdlib only: run its source, not the collection
        "exec(compile(open(sys.argv[1]).read(), sys.argv[1], 'exec'), loader)\n"
        "for i, path in enumerate(sys.argv[2:]):\n"
        "    loader['load_file'](path, f'by_path_{i}')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'kdtree_verify')\n"
        "assert not bad, bad\n"
        "print('loaded', len(sys.argv) - 2)\n"
    )
    files = [str(EXT_DIR / relpath) for relpath in patch_files.BY_PATH_FILES]
    res = subprocess.run(
        [sys.executable, "-I", "-c", program, patch_files.__file__, *files],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["loaded", str(len(files))]


def _is_docstring_or_doc(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    parent = parents.get(node)
    if isinstance(parent, ast.Expr):
        return True  # a docstring or a bare string
    return isinstance(parent, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id in ("DOCUMENTATION", "EXAMPLES", "RETURN") for t in parent.targets
    )


def spelled_patch_paths(path: Path) -> list[str]:
    """String constants in code (not docs) that name a file or the directory of the patch package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    return [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and (node.value == "kdtree_verify" or "kdtree_verify/" in node.value)
        and not _is_docstring_or_doc(node, parents)
    ]


def test_no_loader_spells_a_patch_file_path_itself():
    owner = Path(patch_files.__file__).resolve()
    problems = [
        problem
        for top in LOADER_DIRS
        for path in sorted((ROOT / top).rglob("*.py"))
        if path.resolve() != owner
        for problem in spelled_patch_paths(path)
    ]
    assert problems == []


def test_every_directory_of_the_patch_holds_a_file_of_its_own():
    """roles/kdtree_patch/tasks/install.yml keeps a directory as the dirname of a file in it: a directory
    with only subdirectories would be removed on the host (with them)."""
    dirs = [EXT_DIR, *(p for p in EXT_DIR.rglob("*") if p.is_dir() and p.name != "__pycache__")]
    bare = [str(d) for d in dirs if not any(f.is_file() and f.suffix != ".pyc" for f in d.iterdir())]
    assert bare == []
