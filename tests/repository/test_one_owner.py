"""Each fact the collection relies on is written in one place; everything else receives it.

Code only: comments, docstrings and a module's DOCUMENTATION/EXAMPLES/RETURN are prose, and
meta/argument_specs.yml repeats a default on purpose (test_role_interfaces pins it to defaults/main.yml).
Test expectations (molecule/, tests/) read hosts independently and are not searched.
"""

from __future__ import annotations

import re

import pytest
from ansible_collections.kdtree.fleet.tests.helpers.code_text import other_code, python_code
from conftest import ROOT

SEARCHED = ("roles", "plugins", "playbooks", "inventory", "meta", "scripts/testhosts", "bench", "mk")


def _code_files() -> dict[str, str]:
    files: dict[str, str] = {}
    for top in SEARCHED:
        for path in sorted((ROOT / top).rglob("*")):
            rel = path.relative_to(ROOT)
            # roles/*/files (the patch and the kernel) have their own owner tests
            in_role_files = rel.parts[0] == "roles" and "files" in rel.parts[:-1]
            if (
                not path.is_file()
                or in_role_files
                or "__pycache__" in rel.parts
                or path.suffix in (".md", ".pyc")
                or path.name == "argument_specs.yml"
            ):
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            files[str(rel)] = python_code(text) if path.suffix == ".py" else other_code(text)
    for name in ("Makefile", "galaxy.yml", "ansible.cfg"):
        files[name] = other_code((ROOT / name).read_text(encoding="utf-8"))
    return files


CODE = _code_files()

# fact -> (pattern in code, the one file allowed to write it)
FACTS = {
    "stock unit backup directory": (r"/var/lib/kdtree/stock", "roles/kdtree_service/defaults/main.yml"),
    "drop-in file name": (r"50-kdtree\.conf", "roles/kdtree_service/defaults/main.yml"),
    "health URL": (r"/health\b", "roles/kdtree_service/tasks/facts.yml"),
    "smoke-check timeout": (r"\b900\b", "roles/kdtree_smoke/defaults/main.yml"),
    "server port": (r"\b30000\b", "roles/kdtree_service/defaults/main.yml"),
    "scheduler process title": (r"sglang::scheduler", "plugins/module_utils/_unit_procs.py"),
    "patch install root": (r"/opt/kdtree/patches", "roles/kdtree_patch/defaults/main.yml"),
    "deploy history file": (r"/var/lib/kdtree/state\.json", "plugins/module_utils/_history.py"),
    # SGLang's series the decode figures read (module_utils/_decode.py defines the figures)
    "accept length gauge": (r"sglang:spec_accept_length", "plugins/module_utils/_decode.py"),
    "inter-token latency": (r"sglang:inter_token_latency_seconds", "plugins/module_utils/_decode.py"),
    # /etc/kdtree itself, not a neighbour such as the unit corpus recorder's /etc/kdtree-corpus
    "secret environment directory": (r"/etc/kdtree(?![\w-])", "roles/kdtree_service/defaults/main.yml"),
    # the drop-in's own variables and their order (the history's allowlist imports them)
    "drop-in variable list": (
        r"""KDTREE_STATUS_DIR['"],\s*['"]KDTREE_STATUS_INTERVAL""",
        "plugins/module_utils/_dropin_env.py",
    ),
    # mode -> marker state: "off" in mode off, else "active"
    "mode to marker-state rule": (r"""['"]off['"] if\b""", "plugins/module_utils/_modes.py"),
}
# Test-host tooling allowed to spell a fact out: the test double's own stock unit and its installer
# (the operator's side of a test host, not kdtree), and the demo's host reader, which builds the
# health URL of a test host from the service role's host and port defaults; the batch test's reader of a
# crashed test host; the drain tests' edit of the stock unit, which also names its worker URL.
DOUBLE_SIDE = {
    "scripts/testhosts/fleet.sh",
    "scripts/testhosts/install-double.sh",
    "scripts/testhosts/hostread.py",
    "scripts/testhosts/crash_times.py",
    "scripts/testhosts/serve-on-network.sh",
}


@pytest.mark.parametrize("fact", sorted(FACTS))
def test_each_fact_is_written_only_by_its_owner(fact):
    pattern, owner = FACTS[fact]
    where = sorted(name for name, code in CODE.items() if re.search(pattern, code))
    assert owner in where, f"{fact}: the owner {owner} no longer writes it"
    assert [name for name in where if name != owner and name not in DOUBLE_SIDE] == [], fact


def test_no_playbook_vars_file_restates_role_defaults():
    assert not (ROOT / "playbooks" / "vars").exists()


def test_the_marker_format_is_written_only_by_marker_py():
    where = sorted(name for name, code in CODE.items() if re.search(r"kdtree-verify(-fallback)?:", code))
    assert where == [], where


def test_the_code_filter_drops_prose_but_keeps_code():
    code = python_code('"""doc 900"""\nX = 1  # 900\nEXAMPLES = "900"\ny = "900"\n')
    assert "900" in code and code.count("900") == 1
