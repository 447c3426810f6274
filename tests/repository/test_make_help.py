"""`make help` (scripts/make_help.py): every target of Makefile and mk/*.mk on one short line under its
file's heading, each described by the first sentence of the comment above its rule."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("make_help", ROOT / "scripts" / "make_help.py")
make_help = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_help)

MAX_LINE = 110  # the repository's line length


def _help_lines() -> list[str]:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_help.py")], capture_output=True, text=True, check=True
    )
    return out.stdout.splitlines()


def test_every_target_has_a_described_line_that_fits():
    lines = [line for line in _help_lines() if line.startswith("  make ")]
    assert len(lines) > 50, lines  # every component's targets are there
    undescribed = [line.split()[1] for line in lines if line.endswith("(no description)")]
    assert not undescribed, f"write a comment above these rules: {undescribed}"
    long = [line for line in lines if len(line) > MAX_LINE]
    assert not long, long


def test_each_file_is_a_group_under_its_heading():
    headings = [line for line in _help_lines() if line and not line.startswith(" ")]
    files = ["Makefile", *(f"mk/{p.name}" for p in sorted((ROOT / "mk").glob("*.mk")))]
    assert [re.search(r"\(([^()]+)\)$", h).group(1) for h in headings] == files
    assert headings[0] == "Top level (Makefile)"
    assert "The kdtree.fleet collection (mk/collection.mk)" in headings


def test_every_rule_is_listed_once_in_its_files_group():
    listed: dict[str, str] = {}
    group = ""
    for line in _help_lines():
        if line and not line.startswith(" "):
            group = line
        elif line.startswith("  make "):
            name = line.split()[1]
            assert name not in listed, name
            listed[name] = group
    for name in ("test", "demo", "test-roles-fast", "mutation-check", "test-publish", "gpu-check"):
        assert name in listed, name
    assert listed["test-roles-fast"].endswith("(mk/collection.mk)")
    assert listed["test"] == "Top level (Makefile)"


def test_a_long_first_sentence_is_cut_at_a_clause_boundary_that_fits():
    text = "The real wheel: signature binding, the scheduler marker, the reference against Triton, modes."
    assert make_help.short(text, 40) == "The real wheel: signature binding…"
    assert make_help.short("Short enough.", 40) == "Short enough."
    assert len(make_help.short("word " * 30, 40)) <= 40
