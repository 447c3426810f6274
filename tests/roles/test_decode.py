"""The kdtree_report role's decode step (tasks/decode.yml) run by ansible-playbook: it fails on
decode that got worse only when the operator asks. The figures, their record and the report's
comparison are unit tests: tests/unit/plugins/module_utils/test__decode.py and
tests/unit/plugins/filter/test_report_decode.py."""

from __future__ import annotations

import pytest

pytest.importorskip("ansible")  # the tools venv has it; the torch venv, which collects these too, does not
from ansible_collections.kdtree.fleet.plugins.filter import report as report_filter
from ansible_collections.kdtree.fleet.tests.unit.helpers.histories import (
    measured_entries,
    record,
    report_row,
)
from conftest import PLAYBOOK_BIN, run_play


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")
def test_the_role_fails_on_decode_that_got_worse_only_when_the_operator_asks(tmp_path):
    worse = measured_entries(record(40.0, 0.025, 1.5), record(30.0, 0.025, 1.5))
    better = measured_entries(record(40.0, 0.025, 1.5), record(50.0, 0.025, 1.5))
    results = [{"row": report_row(worse)}, {"row": report_row(better)}]
    rows = report_filter.kdtree_report_rows(results, ["gpu-1", "gpu-2"], 10)

    def step(fail: bool) -> dict:
        return {
            "name": f"fail {fail}",
            "ansible.builtin.include_role": {"name": "kdtree.fleet.kdtree_report", "tasks_from": "decode"},
            "vars": {"kdtree_report_fail_on_decode_change": fail},
        }

    play = {
        "hosts": "localhost",
        "gather_facts": False,
        "vars": {"kdtree_report_rows": rows},
        "tasks": [
            step(False),
            {
                "name": "improved only",
                "ansible.builtin.include_role": {
                    "name": "kdtree.fleet.kdtree_report",
                    "tasks_from": "decode",
                },
                "vars": {"kdtree_report_fail_on_decode_change": True, "kdtree_report_rows": rows[1:]},
            },
            step(True),
        ],
    }
    out = run_play(tmp_path / "play.yml", play)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stdout.count("skipping:") == 1 and out.stdout.count("ok: [localhost]") == 1, out.stdout
    assert (
        "decode got worse by more than 10% against the previous measured deploy: gpu-1 (tokens_per_s -25.0%)"
        in (" ".join(out.stdout.split()))
    )
