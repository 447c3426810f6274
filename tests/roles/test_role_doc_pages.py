"""Each role's ansible-doc page stays short enough to read (an operator's first look at what to set):
every option is documented once, under main, and an entry point the collection's own roles call
(tasks_from) lists only its underscored hand-over, which never appears under main. The quick start the
deploy role's page points to exists."""

from __future__ import annotations

import functools
import re

import pytest
from conftest import ROLES, ROOT, load_yaml, needs_ansible, run_ansible

ROLE_NAMES = sorted(p.name for p in ROLES.iterdir() if (p / "meta" / "argument_specs.yml").exists())

# lines of `ansible-doc -t role kdtree.fleet.<role>` at 80 columns (docs/quickstart.md has the rest)
MAX_PAGE_LINES = 250


@functools.cache
def page(role: str) -> str:
    args = ("-t", "role", f"kdtree.fleet.{role}")
    result = run_ansible("ansible-doc", *args, env={"COLUMNS": "80"}, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def entry_points(text: str) -> dict[str, str]:
    """The page's sections by entry point name (without colours ansible-doc stars the name: *main*)."""
    parts = re.split(r"^ENTRY POINT: \*?([^\s*]+)\*? .*$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


@needs_ansible
@pytest.mark.parametrize("role", ROLE_NAMES)
def test_the_role_page_is_at_most_a_few_screens(role):
    lines = page(role).splitlines()
    assert len(lines) <= MAX_PAGE_LINES, f"{role}: {len(lines)} lines > {MAX_PAGE_LINES}"


@needs_ansible
@pytest.mark.parametrize("role", ROLE_NAMES)
def test_no_underscored_option_is_shown_under_main(role):
    sections = entry_points(page(role))
    assert "main" in sections, sorted(sections)
    # neither an option (listed as "= name" or "- name" without colours) nor a mention in a description
    assert re.findall(r"(?<!\w)_kdtree_\w+", sections["main"]) == []


def test_the_page_splits_into_its_entry_points():
    text = "> ROLE: r\n\nENTRY POINT: *main* - x\n   a\nENTRY POINT: lock - y\n   _b  z\n"
    assert entry_points(text) == {"main": "\n   a\n", "lock": "\n   _b  z\n"}


def test_the_deploy_page_points_to_the_quick_start_which_names_the_four_playbooks():
    spec = load_yaml(ROLES / "kdtree_deploy" / "meta" / "argument_specs.yml")["argument_specs"]["main"]
    assert any("docs/quickstart.md" in line for line in spec["description"])
    text = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    for playbook in ("deploy", "rollback", "report", "promote"):
        assert f"kdtree.fleet.{playbook}" in text, playbook
