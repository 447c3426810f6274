"""scripts/testtime.py: make test's per-target table (wall, own CPU, the machine's CPU meanwhile)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "testtime.py"
spec = importlib.util.spec_from_file_location("testtime", SCRIPT)
testtime = importlib.util.module_from_spec(spec)
sys.modules["testtime"] = testtime
spec.loader.exec_module(testtime)

STAT = "cpu  100 5 50 800 45 0 0 0 7 0\ncpu0 50 2 25 400 22 0 0 0 0 0\n"


def test_read_sample_counts_idle_and_iowait_as_idle_and_guest_time_once():
    s = testtime.read_sample(STAT, "1.50 1.00 0.50 2/300 999", 10.0)
    assert (s.busy, s.total, s.load1) == (155, 1000, 1.5)


def test_read_sample_refuses_a_stat_without_the_aggregate_line():
    with pytest.raises(ValueError, match="no aggregate cpu line"):
        testtime.read_sample("cpu0 1 2 3 4\n", "0 0 0 1/1 1", 0.0)


def test_machine_between_is_the_busy_share_of_the_samples_around_the_interval():
    S = testtime.Sample
    samples = [S(0.0, 0, 0, 1.0), S(1.0, 50, 200, 2.0), S(2.0, 250, 400, 3.0), S(3.0, 260, 600, 4.0)]
    busy, load = testtime.machine_between(samples, 1.0, 2.0)
    assert busy == pytest.approx(1.0)  # 200 busy of 200 jiffies between t=1 and t=2
    assert load == pytest.approx(2.5)
    busy, _ = testtime.machine_between(samples, 0.5, 2.5)  # widened to the samples outside: t=0 .. t=3
    assert busy == pytest.approx(260 / 600)


def test_machine_between_says_nothing_without_two_samples():
    assert testtime.machine_between([], 0.0, 1.0) is None
    assert testtime.machine_between([testtime.Sample(0.5, 1, 2, 0.0)], 0.0, 1.0) is None


def test_run_records_the_exit_status_and_the_cpu_of_the_whole_process_tree(tmp_path):
    burn = (
        "import subprocess, sys; subprocess.run([sys.executable, '-c', 'sum(range(3 * 10**7))']); sys.exit(3)"
    )
    argv = ["run", "--log", str(tmp_path), "--lane", "main", "burn", "--", sys.executable, "-c", burn]
    rc = testtime.main(argv)
    assert rc == 3
    (record,) = [json.loads(line) for line in (tmp_path / testtime.RECORDS).read_text().splitlines()]
    assert record["target"] == "burn" and record["lane"] == "main" and record["rc"] == 3
    assert record["cpu_s"] > 0.1  # the grandchild's CPU is counted
    assert record["end"] >= record["start"]


def test_table_has_a_row_per_target_a_row_per_lane_and_the_whole_run(tmp_path):
    records = [
        {"target": "lint", "lane": "gate", "start": 100.0, "end": 120.0, "cpu_s": 30.0, "rc": 0},
        {"target": "mol", "lane": "main", "start": 120.0, "end": 220.0, "cpu_s": 40.0, "rc": 0},
        {"target": "pub", "lane": "cpu", "start": 125.0, "end": 200.0, "cpu_s": 70.0, "rc": 2},
    ]
    (tmp_path / testtime.RECORDS).write_text("".join(json.dumps(r) + "\n" for r in records))
    # 2 CPUs, 75 % busy; the CPU lane's group from t=120 on uses half a CPU (25 % of the machine)
    samples = [
        {"t": 90.0 + 10 * i, "busy": 15 * i, "total": 20 * i, "load1": 2.0, "ncpu": 2}
        | ({"low_s": 5.0 * (i - 3)} if 90 + 10 * i >= 120 else {})
        for i in range(15)
    ]
    (tmp_path / testtime.SAMPLES).write_text("".join(json.dumps(s) + "\n" for s in samples) + "torn li\n")
    text = testtime.table(tmp_path)
    lines = text.splitlines()
    assert lines[2].startswith("| lint | gate | 20 (at +0) | 30 | 75 | n/a | 2.0 | ok |")
    assert "| pub | cpu | 75 (at +25) | 70 | 75 | 25 | 2.0 | FAILED (rc 2) |" in text
    assert "| lane main: 1 targets | main | 100 (at +20) | 40 |" in text
    assert lines[-1] == "| make test | all | 120 | 140 | 75 | 25 | 2.0 | |"


def test_sample_writes_until_its_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(testtime, "SAMPLE_EVERY_S", 0.05)
    assert testtime.main(["sample", "--log", str(tmp_path), "--max-s", "0.3"]) == 0
    samples = (tmp_path / testtime.SAMPLES).read_text().splitlines()
    assert 2 <= len(samples) <= 8
    assert (tmp_path / testtime.SAMPLER_PID).read_text().isdigit()


def test_read_low_s_reads_the_cpu_lanes_group_in_either_cgroup_version(tmp_path, monkeypatch):
    v1, v2 = tmp_path / "cpuacct.usage", tmp_path / "cpu.stat"
    monkeypatch.setattr(testtime, "LOW_USAGE", ((v1, 1e-9), (v2, 1e-6)))
    assert testtime.read_low_s() is None  # no group (yet): nothing, never zero
    v2.write_text("usage_usec 2500000\nuser_usec 2000000\n")
    assert testtime.read_low_s() == pytest.approx(2.5)
    v1.write_text("3000000000\n")
    assert testtime.read_low_s() == pytest.approx(3.0)
