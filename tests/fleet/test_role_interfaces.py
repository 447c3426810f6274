"""Every role's public interface is declared once and consistently."""

from __future__ import annotations

import re

import pytest
from conftest import ROLE_NAMES, ROLES, ROOT, load_yaml


def test_every_role_is_found():
    assert ROLE_NAMES == ["kdtree_build", "kdtree_patch", "kdtree_rollback", "kdtree_service", "kdtree_smoke"]


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_argument_specs_list_exactly_the_defaults(role):
    defaults = load_yaml(ROLES / role / "defaults" / "main.yml")
    options = load_yaml(ROLES / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(options)


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_argument_spec_defaults_equal_the_defaults(role):
    defaults = load_yaml(ROLES / role / "defaults" / "main.yml")
    options = load_yaml(ROLES / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    for name, value in defaults.items():
        assert options[name].get("default") == value, name


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_argument_specs_describe_every_option(role):
    options = load_yaml(ROLES / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    for name, spec in options.items():
        assert spec.get("description"), name
        assert spec.get("type"), name


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_role_variables_carry_the_role_prefix(role):
    defaults = load_yaml(ROLES / role / "defaults" / "main.yml")
    assert all(name.startswith(f"{role}_") for name in defaults), sorted(defaults)


def _all_role_variables() -> set[str]:
    names: set[str] = set()
    for role in ROLE_NAMES:
        names |= set(load_yaml(ROLES / role / "defaults" / "main.yml"))
    return names


@pytest.mark.parametrize("inventory", ["local", "production"])
def test_inventory_sets_only_variables_a_role_knows(inventory):
    known = _all_role_variables()
    group_vars = load_yaml(ROOT / "inventory" / inventory / "group_vars" / "gpu-hosts.yml")
    unknown = [k for k in group_vars if k.startswith("kdtree_") and k not in known]
    assert unknown == []


def test_playbook_wiring_sets_only_variables_a_role_knows():
    known = _all_role_variables()
    wiring = load_yaml(ROOT / "playbooks" / "vars" / "wiring.yml")
    unknown = [k for k in wiring if not k.startswith("_") and k not in known]
    assert unknown == []


def test_production_nccl_defaults_are_the_documented_pcie_blackwell_set():
    group_vars = load_yaml(ROOT / "inventory" / "production" / "group_vars" / "gpu-hosts.yml")
    assert group_vars["kdtree_service_tp_size"] == 8
    assert group_vars["kdtree_service_nccl_env"]["NCCL_P2P_LEVEL"] == "SYS"
    assert group_vars["kdtree_service_nccl_env"]["NCCL_ALGO"] == "Ring"
    doc = (ROOT / "docs" / "fleet.md").read_text(encoding="utf-8")
    for key in group_vars["kdtree_service_nccl_env"]:
        assert key in doc, f"{key} is not explained in docs/fleet.md"


def _unsafe_regex(path: str) -> re.Pattern[str]:
    text = (ROOT / path).read_text(encoding="utf-8")
    match = re.search(r"select\('match', '(\^\(.*?\) )'\)", text)
    assert match, path
    return re.compile(match.group(1))


@pytest.mark.parametrize("path", ["roles/kdtree_build/tasks/main.yml", "roles/kdtree_patch/tasks/main.yml"])
@pytest.mark.parametrize(
    ("line", "unsafe"),
    [
        ("755 0 /opt", False),
        ("750 0 /opt/kdtree", False),
        ("700 0 /var/lib/kdtree", False),
        ("775 0 /opt", True),
        ("757 0 /opt", True),
        ("1777 0 /tmp", True),
        ("722 0 /opt", True),
        ("755 1000 /opt", True),
    ],
)
def test_directory_safety_check_flags_group_or_world_writable_or_foreign_owned(path, line, unsafe):
    assert bool(_unsafe_regex(path).match(line)) is unsafe
