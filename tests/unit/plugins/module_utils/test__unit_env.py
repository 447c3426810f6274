"""The unit's environment read from its files the way systemd merges them (module_utils/_unit_env):
systemd quoting, drop-in order, specifiers, $-expansion of ExecStart words. The drop-in's use of it
(the patch directory prepended to the unit's PYTHONPATH) is tests/roles/test_unit_env.py."""

from __future__ import annotations

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _unit_env as unit_env

STOCK = """\
[Unit]
Description=x
[Service]
# Environment=IGNORED=1
Environment=HF_HUB_OFFLINE=1 "A=with space"
Environment=PYTHONPATH=/opt/cpu-shims
ExecStart=/bin/true
"""


def merged(*files: str) -> dict[str, str]:
    env = unit_env.UnitEnvironment()
    for index, text in enumerate(files):
        unit_env.apply_unit_file(env, text, f"file{index}")
    return env.environment


def test_environment_lines_of_the_service_section_are_read_with_systemd_quoting():
    assert merged(STOCK) == {"HF_HUB_OFFLINE": "1", "A": "with space", "PYTHONPATH": "/opt/cpu-shims"}


def test_a_later_drop_in_overrides_and_an_empty_assignment_clears():
    assert merged(STOCK, "[Service]\nEnvironment=PYTHONPATH=/x\n")["PYTHONPATH"] == "/x"
    assert merged(STOCK, "[Service]\nEnvironment=\nEnvironment=B=2\n") == {"B": "2"}


def test_unset_environment_and_other_sections_and_continuations():
    text = "[Install]\nEnvironment=NO=1\n[Service]\nEnvironment=C=1 \\\n  D=2\nUnsetEnvironment=C\n"
    assert merged(text) == {"D": "2"}


def test_specifiers_are_kept_as_written_and_resolved_as_systemd_does():
    """The drop-in copies the unit's PYTHONPATH back into unit syntax: %h must stay %h there (it was
    turned into a literal "%h" before); resolving gives what systemd gives the service."""
    env = merged('[Service]\nEnvironment="P=50%%" PYTHONPATH=%h/lib:%n\n')
    assert env == {"P": "50%%", "PYTHONPATH": "%h/lib:%n"}
    context = unit_env.specifier_context("sglang.service")
    assert unit_env.resolve_specifiers(env["P"], context) == "50%"
    assert unit_env.resolve_specifiers(env["PYTHONPATH"], context) == "/root/lib:sglang.service"
    with pytest.raises(unit_env.UnknownSpecifier):
        unit_env.resolve_specifiers("%m", context)


def test_environment_files_are_listed(tmp_path):
    unit = tmp_path / "u.service"
    unit.write_text("[Service]\nEnvironmentFile=-/etc/default/sglang\nEnvironment=X=1\n")
    ours = tmp_path / "50-kdtree.conf"
    ours.write_text("[Service]\nEnvironment=X=2\n")
    other = tmp_path / "90-op.conf"
    other.write_text("[Service]\nEnvironment=Y=3\n")
    env = unit_env.unit_environment(str(unit), [str(ours), str(other)], exclude=["50-kdtree.conf"])
    assert env.environment == {"X": "1", "Y": "3"}
    assert env.environment_files == ["-/etc/default/sglang"]
    assert env.sources == [str(unit), str(other)]


def test_exec_dollar_expansion_splits_a_lone_variable_and_keeps_braces_whole():
    words = ["$A", "${A}", "x${A}y", "$$A", "$UNSET", "${UNSET}"]
    assert unit_env.expand_exec_words(words, {"A": "p  q"}) == ["p", "q", "p  q", "xp  qy", "$A", ""]
