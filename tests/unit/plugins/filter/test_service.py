"""The service role's filters (plugins/filter/service.py): kdtree_marker_state refuses what is not a
mode, naming the variable and YAML's boolean trap, or (not strict) gives no state; kdtree_dropin_env
refuses inputs it does not know. The rules: tests/unit/plugins/module_utils/test__modes.py and
test__dropin_env.py."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.filter import service as service_filter
from ansible_collections.kdtree.fleet.tests.unit.helpers.dropin_inputs import INPUTS


@pytest.mark.parametrize(("mode", "state"), [("off", "off"), ("validate", "active"), ("on", "active")])
def test_the_marker_state_of_each_mode(mode, state):
    assert service_filter.kdtree_marker_state(mode) == state


@pytest.mark.parametrize(("value", "written"), [(True, "'on'"), (False, "'off'")])
def test_an_unquoted_on_or_off_is_refused_naming_the_variable_and_the_yaml_boolean(value, written):
    with pytest.raises(AnsibleFilterError) as raised:
        service_filter.kdtree_marker_state(value, "kdtree_service_verify_mode")
    text = str(raised.value)
    assert text.startswith(f"kdtree_service_verify_mode is the YAML boolean {value}")
    assert written in text and "Nothing was changed" in text


@pytest.mark.parametrize("value", ["ON", None, 1])
def test_anything_else_that_is_not_a_mode_is_refused(value):
    with pytest.raises(AnsibleFilterError, match="not one of off, validate, on"):
        service_filter.kdtree_marker_state(value)


@pytest.mark.parametrize("value", [True, "ON", None])
def test_not_strict_a_value_that_is_not_a_mode_has_no_marker_state(value):
    assert service_filter.kdtree_marker_state(value, "x", strict=False) == ""


def test_the_drop_in_environment_filter_answers_the_rules_pairs():
    pairs = service_filter.kdtree_dropin_env(INPUTS)
    assert pairs[0] == ["PYTHONPATH", "/opt/kdtree/patches/v1"] and len(pairs) == 7


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({**INPUTS, "nccl_env": ["NCCL_ALGO"]}, "kdtree_service_nccl_env must be a mapping"),
        ({**INPUTS, "surprise": 1}, "unknown inputs \\['surprise'\\]"),
        ({k: v for k, v in INPUTS.items() if k != "lib"}, "missing inputs \\['lib'\\]"),
    ],
)
def test_the_drop_in_environment_filter_refuses_inputs_it_does_not_know(inputs, message):
    with pytest.raises(AnsibleFilterError, match="kdtree_dropin_env: .*" + message):
        service_filter.kdtree_dropin_env(inputs)
