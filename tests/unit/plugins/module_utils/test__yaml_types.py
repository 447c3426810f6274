"""module_utils/_yaml_types: a role's string options (str, path, lists of them) are found from the
argument spec, and each value YAML turned into another type is named with its trap; strings pass."""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.kdtree.fleet.plugins.module_utils import _yaml_types as yaml_types

SPEC = {
    "a_str": {"type": "str", "default": ""},
    "a_path": {"type": "path", "default": "/x"},
    "an_int": {"type": "int", "default": 1},
    "a_bool": {"type": "bool", "default": False},
    "a_dict": {"type": "dict", "default": {}},
    "an_argv": {"type": "list", "elements": "str", "default": []},
    "a_list_of_dicts": {"type": "list", "elements": "dict", "default": []},
    "a_choice": {"type": "str", "choices": ["off", "validate", "on"], "default": "validate"},
}


def _read(text: str):
    return yaml.safe_load(f"v: {text}")["v"]  # as an inventory's YAML reads it


def test_the_string_options_are_str_path_and_lists_of_them():
    assert yaml_types.string_options(SPEC) == ["a_choice", "a_path", "a_str", "an_argv"]


@pytest.mark.parametrize(
    ("written", "trap"),
    [
        ("on", "is the YAML boolean True"),
        ("off", "is the YAML boolean False"),
        ("yes", "is the YAML boolean True"),
        ("no", "is the YAML boolean False"),
        ("0755", "is the YAML integer 493"),
        ("1.10", "is the YAML float 1.1,"),
        ("12.0", "is the YAML float 12.0,"),
        ("", "is null"),
        ("~", "is null"),
    ],
)
def test_each_yaml_spelling_that_is_not_a_string_is_named_with_its_trap(written, trap):
    problems = yaml_types.type_problems({"a_str": _read(written)}, SPEC)
    assert len(problems) == 1
    assert problems[0].startswith(f"a_str {trap}"), problems
    assert "in quotes" in problems[0]


@pytest.mark.parametrize("written", ["'on'", "'0755'", "'1.10'", "''", "0.5.20", "sglang", "/opt/kdtree"])
def test_a_string_passes(written):
    assert yaml_types.type_problems({"a_str": _read(written), "a_path": _read(written)}, SPEC) == []


def test_a_choice_the_argument_validation_lets_through_as_a_boolean_is_named():
    assert yaml_types.type_problems({"a_choice": _read("on")}, SPEC) == [
        yaml_types.value_problem("a_choice", True)
    ]


def test_each_list_element_that_is_not_a_string_is_named_by_its_index():
    problems = yaml_types.type_problems({"an_argv": _read("[curl, -X, on, 0755]")}, SPEC)
    assert [p.split(" ")[0] for p in problems] == ["an_argv[2]", "an_argv[3]"]


def test_options_of_other_types_and_options_not_given_are_not_its_to_judge():
    values = {"an_int": "3", "a_bool": "yes", "a_dict": None, "a_list_of_dicts": [1], "an_argv": "x"}
    assert yaml_types.type_problems(values, SPEC) == []
