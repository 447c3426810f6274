"""The report's decode column (the kdtree_report_rows filter, plugin_utils/_report_table.py,
module_utils/_report.py): the newest measured deploy beside the one before it, the flag, a bad
threshold refused."""

from __future__ import annotations

import json
import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.filter import report as report_filter
from ansible_collections.kdtree.fleet.plugins.module_utils import _report as report
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _report_table as report_table
from ansible_collections.kdtree.fleet.tests.unit.helpers.histories import (
    measured_entries,
    record,
    report_row,
)


def table_cells(rows: list[dict]) -> list[dict[str, str]]:
    header, *lines = report_table.format_table(rows).splitlines()
    return [dict(zip(re.split(r"\s{2,}", header), re.split(r"\s{2,}", line), strict=False)) for line in lines]


def test_the_report_row_names_the_newest_measured_deploy_and_the_one_before_it():
    entries = measured_entries(record(tokens_per_s=10.0), None, record(tokens_per_s=12.0))
    info = report.decode_deploys(entries)
    assert (info["deploy"], info["previous_deploy"]) == (entries[2]["id"], entries[0]["id"])
    assert (info["figures"]["tokens_per_s"], info["previous"]["tokens_per_s"]) == (12.0, 10.0)
    assert report.decode_deploys(measured_entries(None)) is None  # old entries: no figures, no column value


def test_no_previous_deploy_means_no_change_and_no_flag():
    [row] = report_filter.kdtree_report_rows([{"row": report_row(measured_entries(record()))}], ["gpu-1"], 10)
    assert row["decode"]["previous"] is None
    assert row["decode_change"] == {
        "change_pct": {},
        "flagged": [],
        "worse": [],
        "threshold_pct": 10.0,
        "worse_text": "",
    }
    assert table_cells([row])[0]["DECODE(vs prev)"] == "40.0t/s itl 25.0ms acc 1.50"


def test_a_change_under_the_threshold_is_shown_not_flagged():
    entries = measured_entries(
        record(tokens_per_s=40.0, itl=0.025), record(tokens_per_s=42.0, itl=0.025, accept=None)
    )
    [row] = report_filter.kdtree_report_rows([{"row": report_row(entries)}], ["gpu-1"], 10)
    assert row["decode_change"]["change_pct"] == {"tokens_per_s": 5.0, "itl_mean_s": 0.0}
    assert row["decode_change"]["flagged"] == [] and row["decode_change"]["worse"] == []
    assert table_cells([row])[0]["DECODE(vs prev)"] == "42.0t/s(+5%) itl 25.0ms(+0%) acc -"


def test_a_change_over_the_threshold_is_flagged_either_way_and_worse_only_when_decode_got_worse():
    entries = measured_entries(record(40.0, 0.025, 1.5), record(30.0, 0.020, 1.5))
    results = [{"row": report_row(entries)}, {"unreachable": True, "msg": "gone"}]
    rows = report_filter.kdtree_report_rows(results, ["gpu-1", "gpu-2"], "10")
    change = rows[0]["decode_change"]
    assert change["change_pct"] == {"tokens_per_s": -25.0, "itl_mean_s": -20.0, "accept_length": 0.0}
    assert change["flagged"] == ["tokens_per_s", "itl_mean_s"]  # a shorter ITL is flagged too ...
    assert (
        change["worse"] == ["tokens_per_s"] and change["worse_text"] == "tokens_per_s -25.0%"
    )  # ... not worse
    assert rows[1]["decode_change"]["worse"] == []  # a host without a row has no change
    cells = table_cells(rows)
    assert cells[0]["DECODE(vs prev)"] == "30.0t/s(-25%!) itl 20.0ms(-20%!) acc 1.50(+0%)"
    assert "decode" not in " ".join(rows[0].get("problems") or [])  # a flag, not a problem
    json.dumps(rows)  # the JSON carries the numbers
    # without a threshold nothing is flagged
    [row] = report_filter.kdtree_report_rows(results[:1], ["gpu-1"])
    assert (
        row["decode_change"]["flagged"] == [] and row["decode_change"]["change_pct"]["tokens_per_s"] == -25.0
    )


@pytest.mark.parametrize("bad", [-1, "lots", float("nan")])
def test_a_bad_threshold_is_a_clear_error(bad):
    with pytest.raises(AnsibleFilterError, match="decode"):
        report_filter.kdtree_report_rows([{"row": report_row(measured_entries(record()))}], ["gpu-1"], bad)
