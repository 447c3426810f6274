"""The verify modes and the mode -> marker-state rule have one owner (module_utils/_modes), equal to
the patch's own list of modes; the filter kdtree_marker_state refuses what is not a mode, naming YAML's
boolean trap, or (not strict) gives no state."""

from __future__ import annotations

import importlib.util

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.filter import service as service_filter
from ansible_collections.kdtree.fleet.plugins.module_utils import _modes as modes
from ansible_collections.kdtree.fleet.tests.unit.plugins.module_utils.collection_tree import PATCH_DIR


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
    assert service_filter.kdtree_marker_state(mode) == state
    assert modes.mode_problem(mode) == ""


@pytest.mark.parametrize(("value", "written"), [(True, "'on'"), (False, "'off'")])
def test_an_unquoted_on_or_off_is_refused_naming_the_yaml_boolean(value, written):
    with pytest.raises(AnsibleFilterError) as raised:
        service_filter.kdtree_marker_state(value, "kdtree_service_verify_mode")
    text = str(raised.value)
    assert text.startswith(f"kdtree_service_verify_mode is the YAML boolean {value}")
    assert written in text and "Nothing was changed" in text


@pytest.mark.parametrize("value", ["ON", "enabled", "", None, 1, ["on"]])
def test_anything_else_that_is_not_a_mode_is_refused(value):
    assert "not one of off, validate, on" in modes.mode_problem(value)
    with pytest.raises(AnsibleFilterError, match="not one of off, validate, on"):
        service_filter.kdtree_marker_state(value)


@pytest.mark.parametrize("value", [True, "ON", None])
def test_not_strict_a_value_that_is_not_a_mode_has_no_marker_state(value):
    assert service_filter.kdtree_marker_state(value, "x", strict=False) == ""
