"""The verify modes and the mode -> marker-state rule have one owner (module_utils/_modes), equal to
the patch's own list of modes; what is not a mode is named, YAML's boolean trap included. The filter
kdtree_marker_state that hands the role's variable to them: tests/unit/plugins/filter/test_service.py."""

from __future__ import annotations

import importlib.util

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _modes as modes
from ansible_collections.kdtree.fleet.tests.unit.helpers.collection_tree import PATCH_DIR


def test_the_modes_are_the_patchs_own():
    spec = importlib.util.spec_from_file_location(
        "kdtree_patch_config", PATCH_DIR / "kdtree_verify" / "config.py"
    )
    config = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(config)
    assert modes.MODES == tuple(config.MODES)


@pytest.mark.parametrize(("mode", "state"), [("off", "off"), ("validate", "active"), ("on", "active")])
def test_mode_off_reports_off_and_the_others_active(mode, state):
    assert modes.marker_state(mode) == state
    assert modes.mode_problem(mode) == ""


@pytest.mark.parametrize(("value", "written"), [(True, "'on'"), (False, "'off'")])
def test_an_unquoted_on_or_off_is_named_as_the_yaml_boolean(value, written):
    problem = modes.mode_problem(value)
    assert problem.startswith(f"is the YAML boolean {value}") and written in problem


@pytest.mark.parametrize("value", ["ON", "enabled", "", None, 1, ["on"]])
def test_anything_else_that_is_not_a_mode_is_named(value):
    assert "not one of off, validate, on" in modes.mode_problem(value)
