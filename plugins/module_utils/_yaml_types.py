"""Which role options YAML must hand over as strings, and why a value that is not one was refused
(one owner; the filter kdtree.fleet.kdtree_input_type_problems hands a role's options to it).

An argument spec's ``type: str`` does not protect a role: Ansible's role argument validation accepts
a boolean, a number or null for it (a choice list even matches the boolean an unquoted on became) and
leaves the variable as YAML read it. YAML 1.1 (inventories, vars files, -e) reads on/off/yes/no/
true/false as booleans, 0755 as the octal 493, 1.10 as the float 1.1 and an empty value or ~ as null.
Stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# What YAML 1.1 reads as a boolean when written without quotes (the first four are the usual traps).
YAML_BOOLEANS = ("on", "off", "yes", "no", "true", "false", "y", "n")
# The argument spec types whose value is a string as the role reads it.
STRING_TYPES = ("str", "path")


def string_options(spec_options: Mapping[str, Any]) -> list[str]:
    """The options of an argument spec entry point whose value (or each list element) must be a string."""
    names = []
    for name, spec in spec_options.items():
        kind = (spec or {}).get("type", "str")
        if kind in STRING_TYPES or (kind == "list" and (spec or {}).get("elements") in STRING_TYPES):
            names.append(name)
    return sorted(names)


def value_problem(name: str, value: Any) -> str:
    """Empty when `value` is a string; else why YAML made it something else and how to write it."""
    if isinstance(value, str):
        return ""
    if value is None:
        return (
            f"{name} is null, not a string: YAML reads an empty value, ~ or null as null; write the "
            "value in quotes ('' for an empty string)"
        )
    if isinstance(value, bool):
        return (
            f"{name} is the YAML boolean {value}, not a string: YAML reads "
            f"{'/'.join(YAML_BOOLEANS[:4])} without quotes as booleans; write the value in quotes"
        )
    if isinstance(value, int):
        return (
            f"{name} is the YAML integer {value}, not a string: YAML reads unquoted digits as a number "
            "(0755 as the octal 493); write the value in quotes"
        )
    if isinstance(value, float):
        return (
            f"{name} is the YAML float {value!r}, not a string: YAML reads an unquoted 1.10 as 1.1 and "
            "12.0 as a number; write the value in quotes ('1.10')"
        )
    return f"{name} is a {type(value).__name__}, not a string"


def type_problems(values: Mapping[str, Any], spec_options: Mapping[str, Any]) -> list[str]:
    """Why each string option (or list element) of `values` is not a string, in the spec's order of
    names; options `values` lacks are the argument validation's to report."""
    problems = []
    for name in string_options(spec_options):
        if name not in values:
            continue
        value = values[name]
        if (spec_options[name] or {}).get("type") == "list":
            if isinstance(value, list):
                problems += [value_problem(f"{name}[{i}]", item) for i, item in enumerate(value)]
            continue  # not a list at all: the argument validation's to report
        problems.append(value_problem(name, value))
    return [problem for problem in problems if problem]
