"""The fleet report's host side (module_utils/_report, module kdtree_report) on a fixture host
(report_host.py beside this file, its fixtures through tests/unit/plugins/conftest.py: live titled
processes, a status directory, a fake `systemctl show`, a cgroup.procs file, a history, a /health server
in this process). Module-side code only (ansible-test units runs this directory without the controller's
modules): the table, and a gathered row in it, are tests/unit/plugins/plugin_utils/test__report_table.py;
the role and playbook: tests/roles/test_report.py. Nothing here needs systemd or a container.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _history as history
from ansible_collections.kdtree.fleet.plugins.module_utils import _report as report
from ansible_collections.kdtree.fleet.plugins.module_utils import _speed as speed_module
from ansible_collections.kdtree.fleet.plugins.modules import kdtree_report
from ansible_collections.kdtree.fleet.tests.unit.helpers.report_host import (
    DOUBLE_CMDLINE,
    ENGINE_CMDLINE,
    METRICS_TEXT,
    FixtureReader,
    counters,
    dead_pid,
    gather,
    status,
    status_bucket,
    status_timing,
)

# ---------------------------------------------------------------------------------------------
# the host side


def test_gather_reads_live_status_files_and_counts_the_stale_ones(host, health_server):
    host.deploy()
    for pid, calls, original, max_diff in (
        (host.tp0.pid, 100, {"shape": 7, "dtype": 1}, 0.001),
        (host.tp1.pid, 50, {"shape": 2}, 0.004),
    ):
        validate = {"compared": calls, "mismatches": 0, "max_diff": max_diff}
        build = "0123456789abcdef"
        host.write_status(
            pid, status(pid, schema=1, build_id=build, counters=counters(calls, original), validate=validate)
        )
    gone = dead_pid()
    host.write_status(gone, status(gone, counters=counters(999, {"dead": 999})))
    host.write_status(1, status(1), name="1.json")  # a pid that is not the unit's
    host.write_status(host.tp0.pid, "{half", name=f"{host.tp0.pid}.json.tmp")  # a write in progress
    host.write_status(0, "not json", name="77777.json")
    row = gather(host, health_server)
    assert row["host"] == "gpu-1" and row["unit_state"] == "active/running"
    assert row["main_pid"] == host.main.pid and row["started"].startswith("Mon 2026-11-30")
    assert row["health"] == "ok"
    assert row["status_dir"] == str(host.status_dir)  # from the history's entry
    assert (row["schedulers_running"], row["schedulers_patched"], row["schedulers_expected"]) == (2, 2, 2)
    assert (row["status_files"], row["status_files_stale"]) == (2, 3)
    assert row["kernel_calls"] == 150
    assert row["fallbacks"] == 10 and row["fallback_top_reason"] == "shape"
    assert row["fallbacks_by_reason"] == {"shape": 9, "dtype": 1}
    assert row["runtime_fallbacks"] == 0
    assert (row["validate_compared"], row["validate_mismatches"], row["validate_max_diff"]) == (150, 0, 0.004)
    assert (row["arch"], row["compute_capability"]) == ("sm_120a", "12.0")  # the build's BUILD_INFO
    assert row["build_id"] == "0123456789abcdef" and row["patch_digest"] == "fedcba987654"
    assert row["mode"] == "validate" and row["running_build_ids"] == ["0123456789abcdef"]
    # the main process runs NCCL_ALGO=Tree, the history templated Ring
    assert row["nccl_env_ok"] is False and row["nccl_env_diff"] == {"NCCL_ALGO": "Tree"}
    assert row["last_deploy"]["result"] == "healthy" and row["last_good"]["build_id"] == "0123456789abcdef"
    assert row["errors"] == []
    assert row["problems"] == ['NCCL differs: {"NCCL_ALGO": "Tree"}', "3 stale status files ignored"]
    json.dumps(row)  # plain data


def test_a_file_older_than_its_process_is_stale_and_a_scheduler_without_one_is_unpatched(host):
    host.deploy(nccl_env={"NCCL_P2P_LEVEL": "SYS"})
    host.write_status(host.tp0.pid, status(host.tp0.pid))
    old = host.write_status(host.tp1.pid, status(host.tp1.pid))
    os.utime(old, (time.time() - 86400, time.time() - 86400))  # an earlier process with this pid
    row = gather(host)
    assert (row["schedulers_patched"], row["schedulers_expected"], row["status_files_stale"]) == (1, 2, 1)
    assert row["nccl_env_ok"] is True
    assert "1/2 schedulers active" in row["problems"]
    # files of a patch without counters: the sums are unknown, not zero
    assert row["kernel_calls"] is None and row["fallbacks"] is None and row["validate_compared"] is None


def test_runtime_fallbacks_mismatches_and_an_old_file_fallback(host):
    host.deploy()
    host.write_status(
        host.tp0.pid,
        status(
            host.tp0.pid,
            counters=counters(3, {}, runtime=2, reason="kernel error"),
            validate={"compared": 10, "mismatches": 4, "max_diff": 0.5},
        ),
    )
    host.write_status(
        host.tp1.pid, status(host.tp1.pid, state="fallback", runtime_fallback=True, reason="dlopen")
    )
    row = gather(host)
    assert row["runtime_fallbacks"] == 3  # 2 counted + 1 from the old file's flag
    assert row["runtime_fallback_reason"] == "kernel error"
    assert (row["validate_mismatches"], row["validate_compared"]) == (4, 10)
    assert row["schedulers_patched"] == 1
    assert "3 runtime fallbacks (kernel error)" in row["problems"]
    assert "4 validate mismatches" in row["problems"]


def test_an_inactive_unit_has_no_live_files_and_says_so(host):
    host.deploy()
    host.write_status(host.tp0.pid, status(host.tp0.pid))
    host.show.update(ActiveState="failed", SubState="failed", MainPID="0", ControlGroup="")
    row = gather(host)
    assert row["unit_state"] == "failed/failed" and row["main_pid"] == 0
    assert (row["status_files"], row["status_files_stale"], row["schedulers_patched"]) == (0, 1, 0)
    assert row["nccl_env_ok"] is None
    assert "unit failed/failed" in row["problems"] and "0/2 schedulers active" in row["problems"]


def test_a_health_answer_from_outside_the_unit_is_named(host, health_server):
    host.deploy()
    host.set_cgroup([host.main.pid, host.tp0.pid, host.tp1.pid])  # this process is not the unit's
    row = gather(host, health_server)
    assert row["health"].startswith("200 from pid") and "not sglang-test.service" in row["health"]
    assert any(p.startswith("health 200 from pid") for p in row["problems"])


def test_a_non_zero_node_rank_is_judged_by_its_schedulers_not_its_health(host, monkeypatch):
    host.deploy()
    for proc in (host.tp0, host.tp1):
        host.write_status(proc.pid, status(proc.pid))
    monkeypatch.setattr(
        FixtureReader,
        "cmdline",
        lambda self, pid: ["python3", "-m", "sglang.launch_server", "--node-rank", "1"],
    )
    row = gather(host, "http://127.0.0.1:1/health")
    assert row["node_rank"] == 1 and row["health"] == "refused"
    assert not any(p.startswith("health") for p in row["problems"])
    assert report.node_rank(["x", "--node-rank=2"]) == 2 and report.node_rank(["x"]) == 0


def test_without_systemd_history_or_build_info_the_row_says_what_it_could_not_read(host, monkeypatch):
    def broken(self, unit):
        raise subprocess.CalledProcessError(
            1, ["systemctl"], stderr="System has not been booted with systemd"
        )

    monkeypatch.setattr(FixtureReader, "show", broken)
    host.history.write_text("[]")
    row = gather(host)
    assert row["unit_state"] == "unknown" and row["deployed"] is False
    assert row["errors"][0].startswith("systemctl show sglang-test.service: rc=1 System has not been booted")
    assert "is not a kdtree deploy history" in row["errors"][1]
    assert (row["arch"], row["compute_capability"]) == ("", "")


def test_the_compute_capability_comes_from_nvidia_smi_when_the_build_does_not_say(host):
    host.deploy(lib_path=str(host.tmp / "gone" / "libkdtree_verify.so"))
    row = kdtree_report.run(
        {
            "unit": "sglang-test",
            "host": "h",
            "health_url": "",
            "status_dir": "",
            "history_path": str(host.history),
            "scheduler_prefix": "sglang::scheduler",
            "nvidia_smi": "nvidia-smi",
        },
        FixtureReader(host, smi="9.0"),
    )["row"]
    assert (row["arch"], row["compute_capability"]) == ("", "9.0")


def test_the_real_reader_asks_nvidia_smi_only_when_installed_and_with_a_timeout(tmp_path, monkeypatch):
    assert report.HostReader().nvidia_smi(str(tmp_path / "no-such-smi")) == ""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 12.0\necho 12.0\n")
    smi.chmod(0o755)
    seen = {}
    real = subprocess.run

    def spy(args, *a, **kw):
        seen["timeout"] = kw.get("timeout")
        return real(args, *a, **kw)  # pylint: disable=subprocess-run-check

    monkeypatch.setattr(report.subprocess, "run", spy)
    assert report.HostReader().nvidia_smi(str(smi)) == "12.0"
    assert seen["timeout"] == report.NVIDIA_SMI_TIMEOUT_S


def test_every_command_the_report_runs_has_a_timeout():
    import ast

    tree = ast.parse(Path(report.__file__).read_text(encoding="utf-8"))
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run"
    ]
    assert calls and all(any(k.arg == "timeout" for k in call.keywords) for call in calls)


# ---------------------------------------------------------------------------------------------
# which history entry runs now, and the last deploy


def _entries(*steps) -> list[dict]:
    entries: list[dict] = []
    for record, result, extra in steps:
        entry = history.begin(entries, record)
        history.finish(entries, entry["id"], result, "boom" if result == "rolled_back" else "", **extra)
    return entries


def test_current_entry_follows_deploys_restores_and_removals():
    a = ({"build_id": "a", "dropin": "A"}, "healthy", {})
    entries = _entries(a)
    assert report.current_entry(entries)["build_id"] == "a"
    # the deploy's rescue: the failed entry ends after the restore entry the rollback began
    entries = _entries(a, ({"build_id": "b", "dropin": "B"}, "rolled_back", {"rolled_back_to": "previous"}))
    assert report.current_entry(entries)["build_id"] == "a"
    assert report.last_deploy(entries)["build_id"] == "b"
    entries = _entries(a, ({"build_id": "b", "dropin": "B"}, "rolled_back", {"rolled_back_to": "stock"}))
    assert report.current_entry(entries) is None
    entries = _entries(a, ({"restored_from": "stock"}, "removed", {}))
    assert report.current_entry(entries) is None and report.last_deploy(entries)["build_id"] == "a"
    entries = _entries(a, ({"build_id": "a", "dropin": "A", "restored_from": "x"}, "healthy", {}))
    assert report.current_entry(entries)["restored_from"] == "x"
    assert report.current_entry([]) is None and report.last_deploy([]) is None


def test_summaries_tolerate_every_missing_or_odd_field():
    files = [
        {"pid": 1},
        {"pid": 2, "counters": "x", "validate": None},
        {"pid": 3, "counters": {"kernel_calls": True, "original_calls": {"a": "x", "b": 2}}},
    ]
    out = report.summarize_status(files)
    assert out["kernel_calls"] is None and out["fallbacks"] == 2 and out["fallback_top_reason"] == "b"
    assert out["runtime_fallbacks"] is None and out["validate_max_diff"] is None


def test_kernel_calls_prefer_each_files_device_count():
    files = [
        {"pid": 1, "counters": {"kernel_calls": 3, "kernel_calls_device": 40}},
        {"pid": 2, "counters": {"kernel_calls": 5}},  # an older patch: Python's count
        {"pid": 3, "counters": {"kernel_calls": 1, "kernel_calls_device": True}},  # not a count
    ]
    assert report.summarize_status(files)["kernel_calls"] == 40 + 5 + 1


# ---------------------------------------------------------------------------------------------
# why a kernel count is 0


@pytest.mark.parametrize(
    ("args", "algorithm"),
    [
        pytest.param(DOUBLE_CMDLINE, "", id="sglang-launch-without-the-flag"),
        pytest.param(ENGINE_CMDLINE, "NGRAM", id="flag-and-value"),
        pytest.param([*DOUBLE_CMDLINE, "--speculative-algorithm=EAGLE3"], "EAGLE3", id="flag=value"),
        pytest.param([*DOUBLE_CMDLINE, "--speculative-al", "EAGLE"], "EAGLE", id="abbreviated"),
        pytest.param([*DOUBLE_CMDLINE, "--speculative-a", "x"], "", id="ambiguous-abbreviation-is-not-it"),
        pytest.param([*DOUBLE_CMDLINE, "--speculative-algorithm"], "?", id="flag-without-value"),
        pytest.param(["/usr/bin/sglang", "serve", "--model-path", "m"], "", id="sglang-serve"),
        pytest.param([*DOUBLE_CMDLINE, "--config", "/etc/sglang.yaml"], None, id="config-file-may-set-it"),
        pytest.param(["bash", "-c", " ".join(DOUBLE_CMDLINE)], None, id="shell-wrapper"),
        pytest.param([], None, id="unreadable"),
    ],
)
def test_the_speculative_algorithm_is_read_from_the_launch_command_line(args, algorithm):
    assert report.speculative_algorithm(args) == algorithm


@pytest.mark.parametrize(
    ("facts", "why"),
    [
        pytest.param((0, 0, None, "off", ""), "mode off", id="mode-off-first"),
        pytest.param((0, 0, None, "validate", ""), "no spec decoding", id="no-speculative-algorithm"),
        pytest.param((0, 0, None, "on", "EAGLE"), "no traffic yet", id="no-call-reached-the-patch"),
        pytest.param((0, 0, 0, "validate", None), "no traffic yet", id="no-traffic-command-line-unknown"),
        pytest.param((0, 7, None, "on", "EAGLE"), "all to original", id="every-call-to-the-original"),
        pytest.param((0, None, None, "on", "EAGLE"), "", id="older-patch-without-original-calls"),
        pytest.param((0, 0, 5, "validate", None), "", id="compared-calls-but-no-kernel-count"),
        pytest.param((12, 0, None, "on", ""), "", id="kernel-calls-need-no-why"),
        pytest.param((None, None, None, "on", ""), "", id="unknown-count-stays-unknown"),
    ],
)
def test_a_zero_kernel_count_says_why_first_reason_that_holds(facts, why):
    short, note = report.kernel_note(*facts)
    assert short == why
    assert bool(note) == bool(why)
    if why == "no spec decoding":
        assert note == (
            "no speculative decoding (the unit's command line has no --speculative-algorithm): "
            "no verify calls expected"
        )


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param(METRICS_TEXT, 3.0, id="mean-over-ranks"),
        pytest.param(
            METRICS_TEXT.replace("3.5", "0.0").replace("2.5", "0.0"), None, id="zero-is-not-published-yet"
        ),
        pytest.param("sglang:spec_accept_rate 0.5\n", None, id="absent"),
        pytest.param('sglang:spec_accept_length{x="1"} nan-ish\n', None, id="unreadable-value"),
    ],
)
def test_the_accept_length_is_sglangs_own_gauge(text, value):
    assert report.accept_length(text) == value


def test_the_metrics_url_is_next_to_the_health_url():
    assert report.metrics_url("http://127.0.0.1:30000/health") == "http://127.0.0.1:30000/metrics"


def test_a_server_without_metrics_gives_no_accept_length_and_no_problem(host, monkeypatch, health_server):
    host.deploy()
    monkeypatch.setattr(FixtureReader, "cmdline", lambda self, pid: list(ENGINE_CMDLINE))
    row = gather(host, health_server)  # answers every GET with an empty body
    assert row["spec_accept_length"] is None and not any("metrics" in p for p in row["problems"])
    monkeypatch.setattr(
        FixtureReader, "metrics", lambda self, url: (item for item in ()).throw(OSError("404")), raising=False
    )
    row = gather(host, health_server)
    assert row["spec_accept_length"] is None and not any("metrics" in p for p in row["problems"])


def test_kernel_calls_above_zero_carry_no_why(host, monkeypatch):
    host.deploy()
    host.write_status(host.tp0.pid, status(host.tp0.pid, counters=counters(5, {})))
    monkeypatch.setattr(FixtureReader, "cmdline", lambda self, pid: list(DOUBLE_CMDLINE))
    row = gather(host)
    assert row["kernel_calls"] == 5 and row["kernel_calls_why"] == "" and row["kernel_calls_note"] == ""


# ---------------------------------------------------------------------------------------------
# evidence that cannot be fooled (issue 19)


def _two_good(host) -> None:
    for proc, compared in ((host.tp0, 100), (host.tp1, 50)):
        host.write_status(
            proc.pid,
            status(
                proc.pid,
                counters=counters(compared, {}),
                validate={"compared": compared, "mismatches": 0, "max_diff": 0.001},
            ),
        )


def test_a_copy_under_another_schedulers_name_is_refused_not_counted_twice(host):
    host.deploy()
    _two_good(host)
    copy = json.loads((host.status_dir / f"{host.tp0.pid}.json").read_text())
    host.write_status(host.tp1.pid, copy)  # tp0's file, under tp1's name
    row = gather(host)
    assert row["validate_compared"] == 100 and row["status_files"] == 1
    assert any(f"pid {host.tp0.pid} in the file named for pid {host.tp1.pid}" in e for e in row["errors"])


def test_a_fifo_or_odd_types_in_a_live_schedulers_file_are_errors_not_zeros(host):
    host.deploy()
    _two_good(host)
    (host.status_dir / f"{host.tp0.pid}.json").unlink()
    os.mkfifo(host.status_dir / f"{host.tp0.pid}.json")  # before, the report blocked here
    host.write_status(
        host.tp1.pid,
        status(host.tp1.pid, validate={"compared": 50, "mismatches": "0", "max_diff": 0.001}),
    )
    done: dict = {}
    worker = threading.Thread(target=lambda: done.update(gather(host)), daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), "the report blocked on a FIFO"
    assert done["status_files"] == 0 and done["validate_mismatches"] is None
    text = "; ".join(done["errors"])
    assert "not a regular file" in text and "validate.mismatches is str" in text


def test_nan_in_any_schedulers_validate_stays_nan_and_is_named(host):
    host.deploy()
    for proc, diff in ((host.tp0, float("nan")), (host.tp1, 0.004)):
        host.write_status(
            proc.pid,
            status(
                proc.pid, validate={"compared": 9, "mismatches": 0, "max_diff": diff, "nonfinite_kernel": 0}
            ),
        )
    row = gather(host)
    assert row["validate_max_diff"] != row["validate_max_diff"]  # NaN, whichever file came first
    assert row["validate_nonfinite"] == "non-finite values in validate: largest difference nan"


def test_a_file_whose_publisher_stopped_writing_is_not_fresh(host):
    host.deploy()
    _two_good(host)
    host.write_status(host.tp1.pid, status(host.tp1.pid, updated=time.time() - 3600))
    row = gather(host)
    fresh = {s["pid"]: s["fresh"] for s in row["schedulers"]}
    assert fresh[host.tp0.pid] == "" and "last updated 3600 s ago" in fresh[host.tp1.pid]
    assert row["status_interval_s"] == 5.0  # the unit sets no KDTREE_STATUS_INTERVAL: the patch's default


def test_freshness_is_judged_on_the_hosts_monotonic_clock_when_the_file_carries_it(host):
    """A wall-clock step neither makes a live publisher's file stale nor a dead one's fresh (schema 2)."""
    host.deploy()
    _two_good(host)
    mono = time.monotonic()
    stepped = time.time() - 3600  # `updated` an hour behind the wall clock: the clock stepped forward
    host.write_status(host.tp0.pid, status(host.tp0.pid, schema=2, updated=stepped, updated_mono=mono))
    # wall-clock fresh, but its publisher wrote it an hour ago on the monotonic clock
    host.write_status(
        host.tp1.pid, status(host.tp1.pid, schema=2, updated=time.time(), updated_mono=mono - 3600)
    )
    row = gather(host)
    fresh = {s["pid"]: s["fresh"] for s in row["schedulers"]}
    assert fresh[host.tp0.pid] == "", fresh
    assert "last updated 3600 s ago" in fresh[host.tp1.pid], fresh


def test_odd_timing_is_refused_by_the_reader_and_never_shown_as_a_speedup(host, health_server):
    host.deploy()
    bad = status_bucket(1, 60, 3.0, 0.0)  # timed calls with no kernel time
    host.write_status(
        host.tp0.pid,
        status(host.tp0.pid, counters=counters(0, {"validate": 60}), timing=status_timing(bad)),
    )
    row = gather(host, health_server)
    assert row["speed"] is None
    assert any("kernel_s is 0 with 60 timed calls" in problem for problem in row["problems"])
    # the same evidence handed to the speed module directly (a row's JSON) refuses too
    figure = speed_module.speed([bad])
    assert figure["speedup"] is None and "kernel_s is 0 with 60 timed calls" in figure["problem"]
    assert speed_module.speed_text(figure) == "REFUSED"


NVIDIA_SMI_DOUBLE = (
    Path(history.__file__).resolve().parents[2] / "tests" / "doubles" / "nvidia_smi" / "nvidia-smi"
)


def test_the_gpu_health_is_judged_as_the_preflight_judges_it_and_its_problems_are_the_rows(
    host, tmp_path, monkeypatch
):
    """With gpu_check: nvidia-smi (the test double) read with the unit's own processes' memory counted
    as free, the history's expected schedulers as the count needed, each problem one of the row's."""
    host.deploy()
    state = tmp_path / "nvidia-smi.json"
    monkeypatch.setenv("NVIDIA_SMI_DOUBLE_STATE", str(state))
    state.write_text(
        json.dumps(
            {
                "count": 2,
                "gpus": {"0": {"memory.free": 500}, "1": {"remapped_rows.pending": "Yes"}},
                "apps": [{"gpu": 0, "pid": host.tp0.pid, "used_memory": 80000}],
            }
        )
    )
    row = gather(host, gpu_check=True, gpu_min_free_mib=8192, nvidia_smi=str(NVIDIA_SMI_DOUBLE))
    health = row["gpu_health"]
    assert (health["checked"], health["ok"], health["expected"], health["count"]) == (True, False, 2, 2)
    assert health["gpus"][0]["memory_unit_mib"] == 80000 and health["gpus"][0]["problems"] == []
    assert (
        "gpu: GPU 1 (GPU-00000000-0000-4000-8000-000000000001): row remapping pending (reset the GPU)"
        in (row["problems"])
    )
    state.unlink()  # no driver: a problem, never a healthy node
    row = gather(host, gpu_check=True, gpu_min_free_mib=8192, nvidia_smi=str(NVIDIA_SMI_DOUBLE))
    assert any(p.startswith("gpu: cannot read the GPUs:") for p in row["problems"])


def test_without_gpu_check_the_gpus_are_not_read(host, monkeypatch):
    def unread(self, argv, timeout_s):
        raise AssertionError("nvidia-smi read without gpu_check")

    monkeypatch.setattr(FixtureReader, "gpu_query", unread)
    host.deploy()
    row = gather(host)
    assert row["gpu_health"]["checked"] is False
    assert not any(p.startswith("gpu:") for p in row["problems"])
