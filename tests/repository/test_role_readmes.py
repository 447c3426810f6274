"""Every role directory has a README (Galaxy's importer refuses a collection without one): it names the
role, each of its entry points and `ansible-doc -t role kdtree.fleet.<role>`, the one place its variables
are documented, and restates none of them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if p.is_dir())


def test_there_are_roles():
    assert len(ROLES) >= 6


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_role_readme(role: Path):
    readme = role / "README.md"
    assert readme.is_file(), f"{role.name} has no README.md"
    text = readme.read_text(encoding="utf-8")
    assert f"ansible-doc -t role kdtree.fleet.{role.name}" in text
    spec_file = role / "meta" / "argument_specs.yml"
    specs = yaml.safe_load(spec_file.read_text(encoding="utf-8"))["argument_specs"]
    for entry_point, spec in specs.items():
        assert f"`{entry_point}`" in text, f"{role.name}: README does not name entry point {entry_point}"
        for option in spec.get("options") or {}:
            assert option not in text, f"{role.name}: README restates variable {option} (argument spec only)"
