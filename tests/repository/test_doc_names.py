"""Docs and role specs name only variables that exist: every kdtree_<role>_... word in docs/, the
READMEs, the roles' argument specs and the filters' docs is a role option (any entry point), a fact or
registered result a role publishes, a tag, a playbook variable or a filter. A renamed or invented
variable (the drain docs once named a `kdtree_deploy_batches` that never existed) fails here."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from conftest import ROLES, ROOT

# the variables of the roles (options and published facts); other kdtree_ words (modules, the patch's
# package, the kernel's C symbols) are not variables
ROLE_WORD = re.compile(
    r"\bkdtree_(?:build|patch|service|smoke|drain|rollback|report|promote|deploy|common)_[a-z0-9_]*[a-z0-9]\b"
)
# YAML anchors and aliases (&kdtree_build_options), and the docs site's labels (R(..., ansible_collections.
# kdtree.fleet.kdtree_report_role)) are names of the docs' own, not variables
NOT_VARIABLES = re.compile(r"[&*]kdtree_[a-z0-9_]+|ansible_collections\.kdtree\.[a-z0-9_.]+")


def _tasks(task: dict) -> list[dict]:
    found = [task]
    for key in ("block", "rescue", "always"):
        for inner in task.get(key) or []:
            found += _tasks(inner)
    return found


def known_names() -> set[str]:
    names: set[str] = set()
    for spec in ROLES.glob("*/meta/argument_specs.yml"):
        for entry in yaml.safe_load(spec.read_text(encoding="utf-8"))["argument_specs"].values():
            names |= set(entry.get("options") or {})
    for tasks_file in ROLES.glob("*/tasks/*.yml"):
        for top in yaml.safe_load(tasks_file.read_text(encoding="utf-8")) or []:
            for task in _tasks(top):
                facts = task.get("ansible.builtin.set_fact")
                names |= set(facts) if isinstance(facts, dict) else set()
                names |= {task["register"]} if "register" in task else set()
                tags = task.get("tags") or []
                names |= set([tags] if isinstance(tags, str) else tags)
                names |= set(((task.get("apply") or {}).get("tags")) or [])
    for playbook in (ROOT / "playbooks").glob("*.yml"):
        names |= set(ROLE_WORD.findall(playbook.read_text(encoding="utf-8")))
    for doc in (ROOT / "plugins" / "filter").glob("*.yml"):
        names.add(yaml.safe_load(doc.read_text(encoding="utf-8"))["DOCUMENTATION"]["name"])
    return names


def documented_files() -> list[Path]:
    return sorted(
        [
            *ROOT.glob("docs/*.md"),
            ROOT / "README.md",
            *ROLES.glob("*/README.md"),
            *ROLES.glob("*/meta/argument_specs.yml"),
            *(ROOT / "plugins" / "filter").glob("*.yml"),
        ]
    )


def unknown_names(text: str, known: set[str]) -> set[str]:
    return set(ROLE_WORD.findall(NOT_VARIABLES.sub("", text))) - known


def test_docs_and_specs_name_only_variables_that_exist():
    known = known_names()
    unknown = {
        str(path.relative_to(ROOT)): sorted(unknown_names(path.read_text(encoding="utf-8"), known))
        for path in documented_files()
    }
    assert {path: names for path, names in unknown.items() if names} == {}


def test_the_check_finds_an_invented_variable():
    known = known_names()
    assert "kdtree_deploy_serial" in known and "kdtree_smoke_wanted" in known
    text = "set kdtree_deploy_batches (and kdtree_deploy_serial) with *kdtree_build_options; kdtree_verify_x"
    assert unknown_names(text, known) == {"kdtree_deploy_batches"}
