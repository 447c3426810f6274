"""Every path of this repository's own top-level folders that the docs and comments name exists.

Searched: the text of every *.md, *.py, *.sh, *.yml, *.yaml, *.mk file and the Makefile that git tracks
or would track (not CHANGELOG.md and changelogs/: a history names what was there then). A reference is a
word that starts with one of OURS and a slash, not inside a longer path: `python/sglang/...` (SGLang's),
`.cache/...`, `/usr/...`, `{{ role_path }}/files/...` and URLs are not ours. The rules:

- a placeholder (`<arch>`, `{name}`, `$(VAR)`, `${VAR}`, `$VAR`, `%`, an upper-case word such as NAME)
  stands for any name, and a glob (`*`, `?`, `[...]`) must match at least one path;
- `...` ends the path (`tests/...`), trailing punctuation is not part of it;
- a module named without its `.py`, or with an attribute after it (`bench/kernel_checks.row_rel_l2`),
  names that module's file;
- a path is looked up from the repository root and from each directory above the file that names it
  (roles/kdtree_build/README.md naming files/build_inputs.sh means roles/kdtree_build/files/...); named
  elsewhere, files/x is also a role's own files/x when a role has it (roles/*/files/x);
- GENERATED paths are made by the tools at run time and are not in a clone.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

OURS = ("files", "plugins", "roles", "tests", "docs", "scripts", "bench", "playbooks", "molecule")
SUFFIXES = (".md", ".py", ".sh", ".yml", ".yaml", ".mk")
HISTORY = ("CHANGELOG.md", "changelogs/")
SELF = str(Path(__file__).resolve().relative_to(ROOT))
GENERATED = ("tests/output",)  # ansible-test's results (scripts/publish/ansible-test.sh)
REFERENCE = re.compile(
    r"(?<![\w./$~-])((?:"
    + "|".join(OURS)
    + r")/(?:\$\([^)\s]*\)|\$?\{[^}\s/]*\}|\[[^\]\s/]*\](?!\()|[\w./<>*?{}$%+-])*)"
)
PLACEHOLDER = re.compile(r"<[^>/]*>|\{[^}/]*\}|\$\([^)]*\)|\$\{[^}]*\}|\$\w+|%|\b[A-Z][A-Z0-9_]{2,}\b")


def _searched_files() -> list[str]:
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    return [
        name
        for name in listed
        if (name.endswith(SUFFIXES) or Path(name).name == "Makefile")
        and not name.startswith(HISTORY)
        and (ROOT / name).is_file()
        and name != SELF  # its examples of missing paths are missing on purpose
    ]


def references(text: str) -> list[tuple[int, str]]:
    """(line number, path) of each reference to one of OURS in `text`."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in REFERENCE.finditer(line):
            found.append((number, match.group(1).split("...")[0].rstrip(".,;:'\"`")))
    return found


def _exists(base: Path, path: str) -> bool:
    pattern = PLACEHOLDER.sub("*", path).rstrip("/")
    if any(c in pattern for c in "*?["):
        return next(base.glob(pattern), None) is not None
    if (base / pattern).exists():
        return True
    head, _, last = pattern.rpartition("/")
    module = last.split(".")[0]
    return bool(module) and (base / head / f"{module}.py").is_file()


def exists(path: str, named_in: str, root: Path = ROOT) -> bool:
    """Whether `path`, named in the file `named_in` (relative to `root`), is there by the rules above."""
    if path.startswith(GENERATED):
        return True
    bases = [root, *(root / parent for parent in Path(named_in).parents if str(parent) != ".")]
    if path.startswith("files/"):
        bases += sorted(p for p in (root / "roles").iterdir() if (p / "files").is_dir())
    return any(_exists(base, path) for base in bases)


def test_every_path_of_our_folders_named_in_docs_and_comments_exists():
    missing = []
    checked = 0
    for name in _searched_files():
        text = (ROOT / name).read_text(encoding="utf-8", errors="replace")
        for number, path in references(text):
            checked += 1
            if not exists(path, name):
                missing.append(f"{name}:{number}: {path}")
    assert checked > 500, checked  # the search found the references it is meant to check
    assert not missing, "paths named but not in the repository:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("see docs/operations.md.", ["docs/operations.md"]),
        ("(tests/repository/test_one_owner.py:12)", ["tests/repository/test_one_owner.py"]),
        ("`scripts/make_help.py`, bench/, molecule/...", ["scripts/make_help.py", "bench/", "molecule/"]),
        ("python/sglang/srt/x.py .cache/sglang-venv /usr/files/x https://x.org/docs/y", []),
        ("{{ role_path }}/files/x.sh", []),
        (
            "tests/unit/plugins/{modules,module_utils}/x.py",
            ["tests/unit/plugins/{modules,module_utils}/x.py"],
        ),
    ],
    ids=["prose", "with-line-number", "code-and-folders", "not-ours", "role-path", "braces"],
)
def test_references_are_the_words_that_start_with_our_folders(text, found):
    assert [path for _, path in references(text)] == found


@pytest.mark.parametrize(
    ("path", "named_in", "there"),
    [
        ("docs/operations.md", "README.md", True),
        ("docs/operation.md", "README.md", False),
        ("roles/<role>/meta/argument_specs.yml", "README.md", True),
        ("roles/kdtree_nope/meta/argument_specs.yml", "README.md", False),
        ("roles/*/defaults/main.yml", "README.md", True),
        ("roles/*/defaults/none.yml", "README.md", False),
        ("tests/engine/spec/NAME.conf", "scripts/x.sh", True),
        ("bench/kernel_checks.row_rel_l2", "README.md", True),
        ("bench/gone_module.attr", "README.md", False),
        ("files/build_inputs.sh", "roles/kdtree_build/README.md", True),
        ("files/build_inputs.sh", "README.md", True),
        ("files/no_such_script.sh", "README.md", False),
        ("tests/unit/plugins/{modules,module_utils}/", "README.md", True),
        ("tests/output/junit", "scripts/publish/ansible-test.sh", True),
    ],
)
def test_a_named_path_exists_by_the_rules(path, named_in, there):
    assert exists(path, named_in) is there
