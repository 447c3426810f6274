"""The fleet report's rows and table on the controller (plugin_utils/_report_table, filters
kdtree_report_rows/kdtree_report_table): a column per field, aligned lines, a line per scheduler under
its host, every host a row in the inventory's order; and rows gathered by the host side from a fixture
host (tests/unit/helpers/report_host.py, its fixtures through tests/unit/plugins/conftest.py) as the table
shows them. The host side alone: tests/unit/plugins/module_utils/test__report.py.
"""

from __future__ import annotations

import json
import re

import pytest
from ansible_collections.kdtree.fleet.plugins.filter import report as report_filter
from ansible_collections.kdtree.fleet.plugins.module_utils import _report as report
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _report_table as report_table
from ansible_collections.kdtree.fleet.tests.unit.helpers.report_host import (
    DOUBLE_CMDLINE,
    ENGINE_CMDLINE,
    METRICS_TEXT,
    FixtureReader,
    Host,
    counters,
    gather,
    status,
    status_bucket,
    status_timing,
)

# ---------------------------------------------------------------------------------------------
# the table and the rows (controller side)


def _row(host: str, **over) -> dict:
    row = {
        "host": host,
        "unit": "sglang.service",
        "unit_state": "active/running",
        "health": "ok",
        "node_rank": 0,
        "arch": "sm_120a",
        "compute_capability": "12.0",
        "deployed": True,
        "build_id": "0123456789abcdef",
        "patch_digest": "fedcba987654",
        "mode": "validate",
        "speculative_algorithm": "DFLASH",
        "spec_accept_length": 2.5,
        "marker_state": "active",
        "schedulers_patched": 8,
        "schedulers_expected": 8,
        "kernel_calls": 1234,
        "fallbacks": 12,
        "fallback_top_reason": "shape",
        "runtime_fallbacks": 0,
        "validate_compared": 1234,
        "validate_mismatches": 0,
        "validate_max_diff": 0.00049,
        "nccl_env_ok": True,
        "last_deploy": {
            "result": "healthy",
            "when": "2026-11-30T12:00:00Z",
            "why": "ok",
            "rolled_back_to": "",
        },
        "problems": [],
    }
    row.update(over)
    return row


def test_the_table_has_a_column_per_field_and_one_aligned_line_per_host():
    rows = [
        _row("gpu-node-01.example.internal"),
        _row(
            "gpu-2",
            schedulers_patched=7,
            fallbacks=None,
            fallback_top_reason="",
            kernel_calls=None,
            nccl_env_ok=False,
            last_deploy={
                "result": "rolled_back",
                "rolled_back_to": "previous 2026",
                "when": "2026-11-30T13:00:00Z",
                "why": "kdtree_smoke: a traceback",
            },
            problems=["7/8 schedulers active"],
        ),
    ]
    table = report_filter.kdtree_report_table(rows)
    header, first, second = table.splitlines()
    heads = [head for _key, head in report_table.COLUMNS]
    assert re.split(r"\s{2,}", header) == heads
    starts = [header.index(head) for head in heads]
    for line in (first, second):
        for start in starts[1:]:
            assert line[start - 2 : start] == "  " and line[start] != " ", (line, start)
    cells1 = re.split(r"\s{2,}", first)
    assert cells1[:13] == [
        "gpu-node-01.example.internal",
        "ok",
        "sm_120a/12.0",
        "0123456789abcdef",
        "fedcba987654",
        "validate",
        "-",  # SGLANG: the row names no release (test_sglang_window has the column's cases)
        "DFLASH",
        "2.50",
        "active/running",
        "ok",
        "8/8",
        "1234",
    ]
    assert (
        "12 (shape)" in cells1 and "0/1234 max 0.00049" in cells1 and "healthy 2026-11-30T12:00:00Z" in first
    )
    assert first.endswith("  -")  # no notes
    assert " CHECK " in second and " 7/8 " in second and " DIFF " in second
    assert "rolled_back->previous 2026-11-30T13:00:00Z kdtree_smoke: a traceback" in second
    assert second.endswith("7/8 schedulers active")


def test_under_each_host_every_scheduler_has_a_line_with_its_own_kernel_calls():
    files = [
        {
            "pid": 4242,
            "title": "sglang::scheduler_TP0",
            "mode": "on",
            "state": "active",
            "counters": {"kernel_calls": 2, "kernel_calls_device": 21, "original_calls": {"shape": 3}},
        },
        {
            "pid": 4243,
            "title": "sglang::scheduler_TP1",
            "mode": "on",
            "state": "active",
            "counters": {
                "kernel_calls": 0,
                "original_calls": {"dtype": 9, "shape": 1},
                "runtime_fallbacks": 1,
            },
        },
    ]

    class Reader:
        def process_start(self, pid):
            return 1.0

    schedulers = report.scheduler_details(Reader(), files)
    assert [(s["pid"], s["kernel_calls"], s["fallbacks"], s["fallback_top_reason"]) for s in schedulers] == [
        (4242, 21, 3, "shape"),
        (4243, 0, 10, "dtype"),
    ]
    rows = [
        _row("gpu-1", mode="on", kernel_calls=21, schedulers=schedulers),
        _row("gpu-2", schedulers=[]),
    ]
    lines = report_table.format_table(rows).splitlines()
    assert len(lines) == 1 + 3 + 1, lines
    header, host, tp0, tp1, other = lines
    assert host.startswith("gpu-1 ") and other.startswith("gpu-2 ")
    kernel_at = header.index("KERNEL")
    tp1_calls = "0 (all to original)"  # its 10 calls went to the original code
    for line, pid, calls, fallbacks in ((tp0, 4242, "21", "3 (shape)"), (tp1, 4243, tp1_calls, "10 (dtype)")):
        assert line.startswith(f"  scheduler_TP{pid - 4242} pid {pid}"), line
        assert line[kernel_at:].split("  ")[0] == calls, line
        assert f"  {fallbacks}  " in line and "  active  " in line and "  on  " in line
    rt_fb, coverage = header.index("RT_FB"), header.index("COVERAGE")
    assert tp1[rt_fb:].split("  ")[0] == "1"  # its runtime fallback; no validate cell on a scheduler line
    assert tp1[coverage:] == "0% (dtype 9, shape 1)" and tp0[coverage:] == "40% (shape 3)"


def test_rows_keep_the_hosts_order_and_give_every_host_a_row():
    results = [
        {"changed": False, "row": _row("ignored")},
        {"unreachable": True, "msg": "ssh: connect to host port 22: Connection refused"},
        {},
        {"failed": True, "msg": "boom"},
    ]
    rows = report_filter.kdtree_report_rows(results, ["a", "b", "c", "d"])
    assert [r["host"] for r in rows] == ["a", "b", "c", "d"]
    assert rows[1]["problems"][0].startswith("unreachable: ssh")
    assert "failed or was skipped" in rows[2]["problems"][0] and rows[3]["problems"] == [
        "report failed: boom"
    ]
    lines = report_table.format_table(rows).splitlines()
    assert len(lines) == 5 and lines[2].startswith("b ") and "unreachable: ssh" in lines[2]
    json.dumps(rows)
    with pytest.raises(Exception, match="2 results for 1 hosts"):
        report_filter.kdtree_report_rows([{}, {}], ["a"])


_FAILED = {
    "play": "deploy",
    "result": "failed",
    "msg": "kdtree deploy FAILED on b; the host was rolled back to STOCK.\nWHY: smoke: crashed\nROLLBACK: ok",
}
_STOPPED = {
    "play": "deploy",
    "result": "stopped",
    "msg": "kdtree deploy: not deploying to c: the rollout stopped because b failed in an earlier batch.",
}


def test_a_run_that_failed_or_stopped_on_a_host_is_the_first_problem_of_its_row():
    results = [{"row": _row("x")} for _n in range(4)]
    outcomes = [{}, _FAILED, _STOPPED, {"play": "deploy", "result": "ok"}]
    refused = {
        "play": "deploy",
        "result": "failed",
        "msg": 'kdtree deploy did not complete on e: "Build" failed: no nvcc',
    }
    assert report_table.outcome_problem(refused, "e") == 'this deploy FAILED: "Build" failed: no nvcc'
    rows = report_filter.kdtree_report_rows(results, ["a", "b", "c", "d"], outcomes=outcomes)
    assert [r["problems"] for r in rows] == [
        [],
        ["this deploy FAILED: the host was rolled back to STOCK."],
        [
            "this deploy STOPPED: not deploying to c: the rollout stopped because b failed"
            " in an earlier batch."
        ],
        [],
    ]
    with pytest.raises(Exception, match="1 outcomes for 4 hosts"):
        report_filter.kdtree_report_rows(results, ["a", "b", "c", "d"], outcomes=[{}])


def test_the_compact_view_has_one_line_per_host_with_problems_first_and_the_main_columns():
    with_schedulers = {"schedulers": [{"pid": 7, "title": "sglang::scheduler_TP0", "state": "active"}]}
    rows = report_filter.kdtree_report_rows(
        [{"row": _row("x", **with_schedulers)} for _n in range(3)],
        ["a", "b", "c"],
        outcomes=[{}, _FAILED, {}],
    )
    compact = report_filter.kdtree_report_table(rows, "compact").splitlines()
    full = report_filter.kdtree_report_table(rows, "full").splitlines()
    assert [line.split()[0] for line in compact] == ["HOST", "b", "a", "c"]  # b has a problem: first
    assert compact[0].split() == " ".join(title for _key, title in report_table.COMPACT_COLUMNS).split()
    assert compact[1].split()[1] == "CHECK" and compact[1].endswith(
        "this deploy FAILED: the host was rolled back to STOCK."
    )
    assert len(full) == 1 + 3 * 2  # a line per host and per scheduler, in the rows' order
    assert [line.split()[0] for line in full[1::2]] == ["a", "b", "c"]
    assert max(map(len, compact)) < max(map(len, full))
    assert report_filter.kdtree_report_table(rows) == "\n".join(full)  # full stays the filter's default
    with pytest.raises(Exception, match="view 'wide' is not one of compact, full"):
        report_filter.kdtree_report_table(rows, "wide")


def test_the_compact_view_keeps_the_last_deploys_result_and_time_not_its_why():
    row = _row(
        "a",
        last_deploy={
            "result": "rolled_back",
            "when": "2026-11-30T12:00:00Z",
            "why": "smoke: crashed",
            "rolled_back_to": "stock",
        },
    )
    line = report_table.format_table([row], "compact").splitlines()[1]
    assert "rolled_back->stock 2026-11-30T12:00:00Z" in line and "smoke: crashed" not in line
    assert "smoke: crashed" in report_table.format_table([row], "full")


# ---------------------------------------------------------------------------------------------
# a row gathered on a fixture host, as the table shows it


def _zero_counters(fixture: Host) -> None:
    for proc in (fixture.tp0, fixture.tp1):
        fixture.write_status(
            proc.pid,
            status(proc.pid, title=f"sglang::scheduler_TP{proc is fixture.tp1:d}", counters=counters(0, {})),
        )


@pytest.mark.parametrize(
    ("cmdline", "why"),
    [(DOUBLE_CMDLINE, "no spec decoding"), (ENGINE_CMDLINE, "no traffic yet")],
    ids=["no-speculative-decoding", "no-traffic"],
)
def test_a_host_without_verify_calls_says_why_in_its_row_its_schedulers_and_the_table(
    host, monkeypatch, cmdline, why
):
    host.deploy(nccl_env={"NCCL_P2P_LEVEL": "SYS"})  # as the main process runs it
    _zero_counters(host)
    monkeypatch.setattr(FixtureReader, "cmdline", lambda self, pid: list(cmdline))
    row = gather(host)
    assert row["kernel_calls"] == 0 and row["speculative_algorithm"] == (
        "" if cmdline is DOUBLE_CMDLINE else "NGRAM"
    )
    assert row["kernel_calls_why"] == why and row["kernel_calls_note"]
    assert [s["kernel_calls_why"] for s in row["schedulers"]] == [why, why]
    assert json.loads(json.dumps(row))["kernel_calls_note"] == row["kernel_calls_note"]
    assert row["problems"] == []  # a reason, not something to look at: the host stays ok
    lines = report_filter.kdtree_report_table(report_filter.kdtree_report_rows([{"row": row}], ["gpu-1"]))
    header, host_line, *scheduler_lines = lines.splitlines()
    kernel_at = header.index("KERNEL")
    assert len(scheduler_lines) == 2
    for line in (host_line, *scheduler_lines):
        assert line[kernel_at:].split("  ")[0] == f"0 ({why})", line
    assert re.split(r"\s{2,}", host_line)[1] == "ok"


@pytest.mark.parametrize(
    ("cmdline", "algo", "accept"),
    [(ENGINE_CMDLINE, "NGRAM", "3.00"), (DOUBLE_CMDLINE, "none", "-"), (["/bin/sh", "-c", "x"], "-", "-")],
    ids=["speculative", "no-speculative-decoding", "cannot-say"],
)
def test_the_table_shows_the_units_algorithm_and_sglangs_accept_length(
    host, monkeypatch, cmdline, algo, accept
):
    host.deploy()
    host.write_status(host.tp0.pid, status(host.tp0.pid, counters=counters(5, {})))
    monkeypatch.setattr(FixtureReader, "cmdline", lambda self, pid: list(cmdline))
    asked = []
    monkeypatch.setattr(
        FixtureReader, "metrics", lambda self, url: asked.append(url) or METRICS_TEXT, raising=False
    )
    row = gather(host, "http://127.0.0.1:30000/health")
    assert row["spec_accept_length"] == (3.0 if accept != "-" else None)
    assert asked == (
        ["http://127.0.0.1:30000/metrics"] if algo not in ("none", "-") else []
    )  # only when speculative
    table = report_filter.kdtree_report_table(report_filter.kdtree_report_rows([{"row": row}], ["gpu-1"]))
    header, host_line, *_rest = table.splitlines()
    cells = dict(zip(re.split(r"\s{2,}", header), re.split(r"\s{2,}", host_line), strict=False))
    assert (cells["ALGO"], cells["ACCEPT"]) == (algo, accept)


def test_the_report_shows_speedup_with_the_worst_bucket_and_coverage_and_the_json_carries_the_buckets(
    host, health_server
):
    host.deploy()
    # TP0: b1 60 calls 3 s vs 1 s, b8 30 calls 1.8 s vs 2 s (slow); TP1: b1 40 calls 2 s vs 1 s
    tp0 = status(
        host.tp0.pid,
        counters=counters(0, {"validate": 90, "not_verify": 50, "dtype": 10}),
        validate={"compared": 90, "mismatches": 0, "max_diff": 0.001},
        timing=status_timing(status_bucket(1, 60, 3.0, 1.0), status_bucket(8, 30, 1.8, 2.0)),
    )
    tp1 = status(
        host.tp1.pid,
        counters=counters(0, {"validate": 40}),
        validate={"compared": 40, "mismatches": 0, "max_diff": 0.001},
        timing=status_timing(status_bucket(1, 40, 2.0, 1.0), status_bucket(2, 5, 0.1, 1.0)),
    )
    host.write_status(host.tp0.pid, tp0)
    host.write_status(host.tp1.pid, tp1)
    row = gather(host, health_server)
    speed = row["speed"]
    # a ratio of sums over every timed call: (3 + 1.8 + 2 + 0.1) / (1 + 2 + 1 + 1)
    assert speed["timed_calls"] == 135 and speed["speedup"] == pytest.approx(6.9 / 5.0)
    by_label = {b["label"]: b for b in speed["buckets"]}
    assert by_label["b1/n4/le256/h16"]["timed_calls"] == 100  # the two schedulers' bucket summed
    assert by_label["b1/n4/le256/h16"]["speedup"] == pytest.approx(2.5)
    assert by_label["b2/n4/le256/h16"]["speedup"] is None  # 5 samples: below MIN_BUCKET_CALLS, not shown
    assert speed["worst_bucket"] == {"label": "b8/n4/le256/h16", "speedup": pytest.approx(0.9)}
    # coverage: 130 served (validate) of 140 target-verify calls (not_verify is another forward mode)
    assert row["coverage"]["share"] == pytest.approx(130 / 140) and row["coverage"]["not_served"] == {
        "dtype": 10
    }
    json.dumps(row)  # the JSON file carries the buckets as they are
    table = report_filter.kdtree_report_table(report_filter.kdtree_report_rows([{"row": row}], ["gpu-1"]))
    header, host_line, *_rest = table.splitlines()
    cells = dict(zip(re.split(r"\s{2,}", header), re.split(r"\s{2,}", host_line), strict=False))
    assert cells["SPEEDUP"] == "1.38 (worst b8/n4/le256/h16 0.90)"
    assert cells["COVERAGE"] == "93% (dtype 10)"


def test_control_characters_from_status_fields_are_shown_escaped_never_sent_to_the_terminal():
    table = report_table
    hostile = "sglang::scheduler\x1b[2J\x1b[31m\rOK\nhost9  on\x07\x9b"
    text = table.render((("host", "HOST"), ("title", "TITLE")), [{"host": "gpu-1", "title": hostile}])
    assert not any(ch in text for ch in "\x1b\r\x07\x9b") and text.count("\n") == 1, repr(text)
    assert "\\x1b[2J\\x1b[31m\\x0dOK\\x0ahost9  on\\x07\\x9b" in text
    assert table.printable("0.5.23 plain text") == "0.5.23 plain text"


def test_the_full_view_shows_each_nodes_gpu_health_and_the_compact_view_its_problems():
    bad = {
        "checked": True,
        "ok": False,
        "count": 8,
        "gpus": [{"index": i, "problems": ["persistence mode off"] if i == 3 else []} for i in range(8)],
        "problems": ["GPU 3 (GPU-3): persistence mode off"],
    }
    rows = [
        _row("good", gpu_health={"checked": True, "ok": True, "count": 8, "gpus": [], "problems": []}),
        _row("bad", gpu_health=bad, problems=["gpu: GPU 3 (GPU-3): persistence mode off"]),
        _row("cpu", gpu_health={"checked": False, "ok": None, "why": "off", "gpus": [], "problems": []}),
        _row("old"),  # a row of a report module without the field
    ]
    header, *lines = report_table.format_table(rows, "full").splitlines()
    at = header.index("GPUS")
    assert [line[at:].split("  ")[0] for line in lines] == ["ok 8", "BAD 1 of 8", "off", "-"]
    compact = report_table.format_table(rows, "compact").splitlines()
    assert "GPUS" not in compact[0]
    assert compact[1].startswith("bad ") and compact[1].endswith("gpu: GPU 3 (GPU-3): persistence mode off")
    assert " CHECK " in compact[1]
