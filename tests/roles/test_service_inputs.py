"""roles/kdtree_service through ansible-playbook on localhost: a verify mode written as an unquoted
on/off (a YAML boolean) is refused by the preflight before it reads anything, naming the variable and the
trap; the facts entry point (the rollback's, the report's) does not stop on it and gives no marker state."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import PLAYBOOK_BIN, run_play

pytestmark = pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")


def _run(tmp_path: Path, entry: str, mode_yaml: str, **more_yaml: str) -> tuple[int, str]:
    mode = yaml.safe_load(f"mode: {mode_yaml}")["mode"]  # as an inventory's YAML reads it
    more = {name: yaml.safe_load(f"v: {text}")["v"] for name, text in more_yaml.items()}
    play = {
        "name": "Service role inputs",
        "hosts": "localhost",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Run the entry point",
                "ansible.builtin.include_role": {"name": "kdtree.fleet.kdtree_service", "tasks_from": entry},
                "vars": {
                    "kdtree_service_verify_mode": mode,
                    "kdtree_service_name": "kdtree-no-such-unit",
                    # the preflight's required inputs (the build's and the patch's facts in a deploy)
                    "_kdtree_service_lib_path": "/opt/kdtree/builds/b1/libkdtree_verify.so",
                    "_kdtree_service_pythonpath": "/opt/kdtree/patches/v1",
                    **more,
                },
            },
            {
                "name": "Show the marker state",
                "ansible.builtin.debug": {"msg": "state=[{{ kdtree_service_marker_state }}]"},
            },
        ],
    }
    out = run_play(tmp_path / "service.yml", play)
    return out.returncode, re.sub(r"\s+", " ", out.stdout + out.stderr)


@pytest.mark.parametrize(("written", "value"), [("on", "True"), ("off", "False")])
def test_an_unquoted_mode_is_refused_before_the_preflight_reads_the_unit(tmp_path, written, value):
    rc, out = _run(tmp_path, "preflight", written)
    assert rc != 0
    assert f"kdtree_service_verify_mode is the YAML boolean {value}" in out, out[-2000:]
    assert f"write the mode in quotes ('{written}')" in out, out[-2000:]
    assert "Read the unit's state" not in out  # refused before anything is read


def test_the_facts_entry_point_gives_no_marker_state_for_a_mode_that_is_not_one(tmp_path):
    rc, out = _run(tmp_path, "facts", "on")
    assert rc == 0, out[-2000:]
    assert "state=[]" in out
    rc, out = _run(tmp_path, "facts", "'on'")
    assert rc == 0 and "state=[active]" in out, out[-2000:]


@pytest.mark.parametrize(
    ("name", "written", "trap"),
    [
        ("kdtree_service_name", "yes", "is the YAML boolean True"),
        ("kdtree_service_host", "~", "is null"),
        ("kdtree_service_dropin_name", "0755", "is the YAML integer 493"),
        ("kdtree_service_extra_args", "[--foo, on]", "kdtree_service_extra_args[1] is the YAML boolean True"),
    ],
)
def test_a_string_option_yaml_read_as_another_type_is_refused_before_the_unit_is_read(
    tmp_path, name, written, trap
):
    rc, out = _run(tmp_path, "preflight", "validate", **{name: written})
    assert rc != 0
    assert trap in out and "write the value in quotes" in out, out[-2000:]
    if "[" not in trap:
        assert f"{name} {trap}" in out
    assert "Read the unit's state" not in out


def test_the_preflight_checks_mains_options_it_does_not_list_again(tmp_path):
    """The preflight's own spec lists only the deploy's hand-over; main's spec still refuses a port that
    is not a number before the unit is read."""
    rc, out = _run(tmp_path, "preflight", "validate", kdtree_service_port="thirty")
    assert rc != 0
    assert "kdtree_service_port" in out and "int" in out, out[-2000:]
    assert "Read the unit's state" not in out
