"""Every module's documentation as ansible-doc renders it: doc fragments merged, semantic markup that
points at something that exists, and the attributes every kdtree module declares.

A reference such as O(kdtree_smoke_timeout_s) in a module's documentation names an option of that
module; a role variable is named with its role, O(kdtree.fleet.kdtree_smoke#role:main:<variable>).
"""

from __future__ import annotations

import re

import pytest
from conftest import MODULE_NAMES, ansible_doc, needs_ansible, rendered_docs

# O(name), O(name=value), O(a.b), RV(...); a reference with a '#' names another plugin or role.
MARKUP = re.compile(r"\b(O|RV)\(([^)]*)\)")


def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            if key not in ("default", "sample", "choices"):
                yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)


def _names(tree: dict, child: str) -> set[str]:
    """Dotted names of every entry of an options (child=suboptions) or return (contains) tree."""
    names: set[str] = set()
    for name, entry in (tree or {}).items():
        names.add(name)
        names |= {f"{name}.{sub}" for sub in _names(entry.get(child) or {}, child)}
    return names


def bad_references(doc: dict, returned: dict) -> list[str]:
    known = {"O": _names(doc.get("options") or {}, "suboptions"), "RV": _names(returned or {}, "contains")}
    bad = []
    for text in [*_strings(doc), *_strings(returned)]:
        for kind, ref in MARKUP.findall(text):
            name = ref.split("=", 1)[0].strip()
            if "#" in name:  # another plugin's or a role's option: namespace.collection.name#type:...
                if not re.fullmatch(r"[a-z_]+\.[a-z_]+\.[a-z_]+#(role:[a-z_]+:|module:)?[\w.]+", name):
                    bad.append(f"{kind}({ref})")
                continue
            if re.sub(r"\[[^\]]*\]", "", name) not in known[kind]:
                bad.append(f"{kind}({ref})")
    return sorted(set(bad))


@needs_ansible
def test_ansible_doc_renders_every_module_without_a_warning():
    out = ansible_doc("-t", "module", *MODULE_NAMES)
    assert out.returncode == 0, out.stderr
    assert "WARNING" not in out.stderr and "ERROR" not in out.stderr, out.stderr
    for name in MODULE_NAMES:
        assert f"MODULE {name} " in out.stdout, name
    assert out.stdout.count("RETURN VALUES") == len(MODULE_NAMES)


@needs_ansible
@pytest.mark.parametrize("name", MODULE_NAMES)
def test_every_semantic_reference_names_an_option_or_return_value_of_the_module(name):
    plugin = rendered_docs()[name]
    assert bad_references(plugin["doc"], plugin["return"]) == []


@needs_ansible
@pytest.mark.parametrize("name", MODULE_NAMES)
def test_every_module_declares_check_mode_diff_mode_and_platform(name):
    attributes = rendered_docs()[name]["doc"]["attributes"]
    for attribute in ("check_mode", "diff_mode", "platform"):
        assert attributes[attribute].get("description"), (name, attribute)
        assert attributes[attribute].get("support") in ("full", "partial", "none", "N/A"), (name, attribute)
    assert attributes["platform"]["platforms"] == "posix"


@needs_ansible
@pytest.mark.parametrize("name", MODULE_NAMES)
def test_every_documented_option_has_a_type_and_a_description(name):
    options = rendered_docs()[name]["doc"]["options"]
    for option, entry in options.items():
        assert entry.get("description") and entry.get("type"), (name, option)
        assert not option.startswith("_"), f"{name}: internal option {option} is documented"


def test_the_reference_check_catches_a_role_variable_named_as_a_module_option():
    doc = {"options": {"timeout_s": {"description": ["O(kdtree_smoke_timeout_s) is the default."]}}}
    assert bad_references(doc, {}) == ["O(kdtree_smoke_timeout_s)"]
    doc["options"]["timeout_s"]["description"] = [
        "O(kdtree.fleet.kdtree_smoke#role:main:kdtree_smoke_timeout_s), O(timeout_s=3), RV(state=ok)"
    ]
    assert bad_references(doc, {"state": {"description": "x"}}) == []
