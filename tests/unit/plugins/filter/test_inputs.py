"""The filters of plugins/filter/inputs.py hand a role's values and argument spec to
module_utils/_yaml_types (its rules: tests/unit/plugins/module_utils/test__yaml_types.py) and refuse
inputs that are not mappings."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.filter import inputs

SPEC = {"kdtree_x_name": {"type": "str"}, "kdtree_x_port": {"type": "int"}}


def test_the_filters_name_the_string_options_and_the_values_that_are_not_strings():
    assert inputs.kdtree_string_options(SPEC) == ["kdtree_x_name"]
    problems = inputs.kdtree_input_type_problems({"kdtree_x_name": True, "kdtree_x_port": 1}, SPEC)
    assert len(problems) == 1 and problems[0].startswith("kdtree_x_name is the YAML boolean True")


@pytest.mark.parametrize(("values", "spec"), [([], SPEC), ({}, "spec"), (None, SPEC)])
def test_inputs_that_are_not_mappings_are_refused(values, spec):
    with pytest.raises(AnsibleFilterError, match="must be a mapping"):
        inputs.kdtree_input_type_problems(values, spec)
