"""The smoke check's decisions: snapshots of a host fed into judge() and the polling loop watch().

No host is read: each test builds a Snapshot (plain data, as read_host returns it), round-trips it
through JSON and asks the module's judge() for ok / pending / failed. Marker lines are written with
the repository's marker.py (format_line) and parsed with its match functions, as on a host.
One test per rule; each fails when its rule is removed from judge().
"""

from __future__ import annotations

import importlib
import json
from dataclasses import replace

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke import judge as sj
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke import watch as sw
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.run import RunState

journal = importlib.import_module("ansible_collections.kdtree.fleet.plugins.module_utils._journal")

INVOCATION = "0123456789abcdef0123456789abcdef"
NCCL = {"NCCL_P2P_LEVEL": "SYS", "NCCL_ALGO": "Ring"}
T0 = 1_764_490_000.0  # epoch seconds of the restart
TRACEBACK = [
    "[2026-11-29 09:14:52 TP1] Load weight begin.",
    "[2026-11-29 09:14:55 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "scheduler.py", line 84, in run_scheduler_process',
    "RuntimeError: boom",
    "[2026-11-29 09:14:55] Received sigquit from a child process. It usually means the child failed.",
]


def marker_line(marker, pid: int, state: str = "active") -> str:
    return marker.format_line(
        {
            "pid": pid,
            "ppid": 100,
            "title": f"sglang::scheduler_TP{pid - 101}",
            "mode": "validate",
            "state": state,
            "reason": "" if state == "active" else "sm_89 is not supported",
            "lib": "/opt/kdtree/current/libkdtree_verify.so",
            "lib_sha256": "ab" * 32,
            "sglang": "0.5.23",
        }
    )


def runtime_fallback_line(pid: int) -> str:
    return f"kdtree-verify-fallback: pid={pid} state=fallback reason=device\\x20cuda:0:\\x20sm_89"


class Host:
    """One picture of a host: what read_host would have read at `at` seconds after the restart."""

    def __init__(self, hu, marker) -> None:
        self.hu = hu
        self.marker = marker
        self.at = 30.0
        self.props = {
            "ActiveState": "active",
            "SubState": "running",
            "Result": "success",
            "NRestarts": "0",
            "InvocationID": INVOCATION,
            "ExecMainStatus": "0",
            "MainPID": "100",
            "ControlGroup": "/system.slice/sglang.service",
        }
        self.journal: list[str] = []
        self.health = "200"
        self.schedulers = {
            101: ("sglang::scheduler_TP0 ", dict(NCCL)),
            102: ("sglang::scheduler_TP1 ", dict(NCCL)),
        }
        self.benign = journal.DEFAULT_BENIGN_TRACEBACKS
        self.suppressed = 0
        self.statuses: list = []
        self.seen_lines = 0  # lines an earlier snapshot already read (new_lines counts the rest)

    def mark(self, *pids: int, state: str = "active") -> Host:
        self.journal += [marker_line(self.marker, pid, state) for pid in pids]
        return self

    def snapshot(self):
        state = journal.JournalState()
        benign = journal.compile_benign(self.benign)
        for line in self.journal:
            state.feed_line(line, self.marker, benign)
        state.suppressed = self.suppressed
        state.suppressed_line = (
            f"Suppressed {self.suppressed} messages from sglang.service" if self.suppressed else ""
        )
        snap = self.hu.Snapshot(
            read_at=T0 + self.at,
            invocation_id=INVOCATION,
            props=dict(self.props),
            health=self.health,
            schedulers=[
                self.hu.Process(pid=pid, title=title, environ=env)
                for pid, (title, env) in sorted(self.schedulers.items())
            ],
            new_lines=len(self.journal) - self.seen_lines,
            statuses=list(self.statuses),
        )
        self.hu.apply_journal(snap, state)
        self.seen_lines = len(self.journal)
        # plain data: what crosses JSON is all judge() needs
        return self.hu.Snapshot.from_dict(json.loads(json.dumps(snap.to_dict())))


@pytest.fixture
def host(hu, marker):
    return Host(hu, marker)


def wanted(**over):
    run = RunState(invocation_id=INVOCATION, baseline_nrestarts=0, started_at=T0)
    base = {
        "unit": "sglang",
        "run": run,
        "expected_schedulers": 2,
        "marker_state": "active",
        "nccl_env": dict(NCCL),
        "settle_s": 0.0,
        "timeout_s": 900.0,
    }
    base.update(over)
    return sj.Wanted(**base)


def judge(host, **over):
    return sj.judge(host.snapshot(), wanted(**over))


# --- success ---------------------------------------------------------------------------------


def test_healthy_when_health_200_and_every_scheduler_marked_active_with_nccl(host):
    verdict = judge(host.mark(101, 102))
    assert verdict.state == "ok"
    assert [s["pid"] for s in verdict.schedulers] == [101, 102]
    assert {s["marker"] for s in verdict.schedulers} == {"active"}
    assert verdict.msg.startswith("healthy after 30.0 s")


def test_a_marker_written_by_marker_py_is_recognised_through_the_journal_parsing_path(hu, marker):
    """format_line() output -> parse_journal (the host's marker.py) -> Snapshot -> judge()."""
    line = marker_line(marker, 4242)
    assert marker.match_marker(line) == (4242, "active")
    markers, fallbacks = hu.parse_journal(["noise", line, "kdtree-verify: something else"], marker)
    assert [(m.pid, m.state, m.line) for m in markers] == [(4242, "active", line)]
    assert fallbacks == []
    snap = hu.Snapshot(
        read_at=T0 + 5,
        props={"InvocationID": INVOCATION, "ActiveState": "active", "NRestarts": "0"},
        journal=["noise", line],
        markers=markers,
        health="200",
        schedulers=[hu.Process(pid=4242, title="sglang::scheduler_TP0", environ={})],
    )
    verdict = sj.judge(snap, wanted(expected_schedulers=1, nccl_env={}))
    assert verdict.state == "ok"
    assert verdict.schedulers == [
        {"pid": 4242, "title": "sglang::scheduler_TP0", "marker": "active", "nccl_env_ok": True}
    ]


def test_the_last_marker_of_a_process_counts(host):
    host.mark(101, state="off").mark(101, 102)
    assert judge(host).state == "ok"


def test_rollback_mode_skips_markers_and_environment(host):
    host.schedulers = {101: ("sglang::scheduler_TP0", {})}
    verdict = judge(host, marker_state="", nccl_env={}, expected_schedulers=0)
    assert verdict.state == "ok"
    assert "markers(unchecked)" in verdict.progress


def test_marker_state_off_is_accepted_when_off_is_wanted(host):
    host.mark(101, 102, state="off")
    assert judge(host, marker_state="off").state == "ok"


def test_a_runtime_fallback_does_not_matter_when_the_patch_is_meant_to_be_off(host):
    host.mark(101, 102, state="off").journal.append(runtime_fallback_line(102))
    assert judge(host, marker_state="off").state == "ok"


def test_activating_counts_as_alive(host):
    host.props.update(ActiveState="activating", SubState="start")
    assert judge(host.mark(101, 102)).state == "ok"


# --- keep waiting ----------------------------------------------------------------------------


def test_keeps_waiting_while_one_scheduler_has_no_marker(host):
    verdict = judge(host.mark(101))
    assert verdict.state == "pending"
    assert "markers(active)=1/2" in verdict.progress


def test_keeps_waiting_while_health_is_503(host):
    host.health = "503"
    assert judge(host.mark(101, 102)).state == "pending"


def test_keeps_waiting_until_every_tp_rank_has_a_scheduler(host):
    del host.schedulers[102]
    assert judge(host.mark(101)).state == "pending"


def test_more_schedulers_than_tp_ranks_is_not_healthy(host):
    host.schedulers[103] = ("sglang::scheduler_TP2", dict(NCCL))
    assert judge(host.mark(101, 102, 103)).state == "pending"


def test_no_expected_count_still_needs_one_scheduler(host):
    host.schedulers = {}
    verdict = judge(host, expected_schedulers=0)
    assert verdict.state == "pending"
    assert "schedulers=0/>=1" in verdict.progress


def test_a_scheduler_that_exited_while_read_keeps_waiting(host):
    host.schedulers[102] = ("sglang::scheduler_TP1", None)
    assert judge(host.mark(101, 102)).state == "pending"


def test_a_marker_of_another_process_does_not_count(host):
    assert judge(host.mark(100, 101)).state == "pending"


def test_settle_time_delays_success_and_remembers_since_when(host):
    verdict = judge(host.mark(101, 102), settle_s=3.0)
    assert verdict.state == "pending"
    assert verdict.run.healthy_since == T0 + 30.0
    host.at = 33.0
    settled = sj.judge(host.snapshot(), wanted(settle_s=3.0, run=verdict.run))
    assert settled.state == "ok"


def test_an_unhealthy_look_restarts_the_settle_time(host):
    run = RunState(INVOCATION, 0, T0, healthy_since=T0 + 1.0)
    host.health = "503"
    verdict = judge(host.mark(101, 102), settle_s=3.0, run=run)
    assert verdict.state == "pending"
    assert verdict.run.healthy_since is None


# --- fail at once ----------------------------------------------------------------------------


def test_traceback_fails_at_once_and_carries_the_traceback(host):
    host.mark(101).journal += TRACEBACK
    verdict = judge(host)
    assert verdict.state == "failed"
    assert verdict.why == "the current run logged a fatal error"
    assert "Traceback (most recent call last)" in verdict.msg
    assert "RuntimeError: boom" in verdict.msg
    assert "(30.0 s after the restart)" in verdict.msg


@pytest.mark.parametrize(
    "line",
    [
        "Traceback (most recent call last):",
        "[2026-11-29 09:14:55 TP0] Scheduler hit an exception: CUDA error",
        "Error in sitecustomize; set PYTHONVERBOSE for traceback:",
    ],
)
def test_each_fatal_line_fails_at_once(host, line):
    host.mark(101, 102).journal.append(line)
    verdict = judge(host)
    assert verdict.state == "failed"
    assert line in verdict.detail


def test_a_failed_unit_fails_even_without_a_traceback(host):
    host.props.update(ActiveState="failed", SubState="failed", Result="signal", ExecMainStatus="9")
    verdict = judge(host)
    assert verdict.state == "failed"
    assert "ExecMainStatus=9" in verdict.msg


def test_a_new_invocation_counts_as_a_restart(host):
    host.props["InvocationID"] = "f" * 32
    verdict = judge(host.mark(101, 102))
    assert verdict.state == "failed"
    assert "restarted" in verdict.msg


def test_an_automatic_restart_counts_as_a_restart(host):
    host.props["NRestarts"] = "1"
    verdict = judge(host.mark(101, 102))
    assert verdict.state == "failed"
    assert "NRestarts=1" in verdict.msg


def test_nrestarts_up_to_the_baseline_is_not_a_restart(host):
    host.props["NRestarts"] = "2"
    run = RunState(INVOCATION, 2, T0)
    assert judge(host.mark(101, 102), run=run).state == "ok"


def test_the_traceback_is_reported_before_the_dead_unit(host):
    host.props.update(ActiveState="failed", SubState="failed")
    host.journal += TRACEBACK
    assert judge(host).why == "the current run logged a fatal error"


def test_a_fallback_marker_fails_with_the_marker_line(host):
    host.mark(101).mark(102, state="fallback")
    verdict = judge(host)
    assert verdict.state == "failed"
    assert "(pid 102) reports the patch fallback, wanted active" in verdict.msg
    assert verdict.detail == marker_line(host.marker, 102, "fallback")


def test_a_runtime_fallback_after_an_active_marker_fails_with_its_reason(host):
    host.mark(101, 102).journal.append(runtime_fallback_line(102))
    verdict = judge(host)
    assert verdict.state == "failed"
    assert "pid 102" in verdict.msg
    assert "fell back to Triton at run time" in verdict.msg
    assert runtime_fallback_line(102) in verdict.msg


def test_a_runtime_fallback_of_another_process_does_not_count(host):
    host.mark(101, 102).journal.append(runtime_fallback_line(100))
    assert judge(host).state == "ok"


def test_a_wrong_nccl_value_in_a_scheduler_fails(host):
    host.schedulers[102] = ("sglang::scheduler_TP1", {"NCCL_P2P_LEVEL": "SYS", "NCCL_ALGO": "Tree"})
    verdict = judge(host.mark(101, 102))
    assert verdict.state == "failed"
    assert "NCCL" in verdict.msg
    assert '"NCCL_ALGO": "Tree"' in verdict.msg
    assert [s["nccl_env_ok"] for s in verdict.schedulers] == [True, False]


def test_a_missing_nccl_value_in_a_scheduler_fails(host):
    host.schedulers[101] = ("sglang::scheduler_TP0", {"NCCL_P2P_LEVEL": "SYS", "PATH": "/usr/bin"})
    verdict = judge(host.mark(101, 102))
    assert verdict.state == "failed"
    assert '"NCCL_ALGO": null' in verdict.msg


def test_nccl_values_compare_as_strings(host):
    host.schedulers = {101: ("sglang::scheduler_TP0", {"NCCL_MIN_NCHANNELS": "4"})}
    verdict = judge(host.mark(101), expected_schedulers=1, nccl_env={"NCCL_MIN_NCHANNELS": 4})
    assert verdict.state == "ok"


def test_a_clobbered_environ_is_reported_with_the_spt_noenv_hint(host):
    host.schedulers[101] = ("sglang::scheduler_TP0", {})
    verdict = judge(host.mark(101, 102))
    assert verdict.state == "failed"
    assert "SPT_NOENV" in verdict.msg


def test_timeout_fails_with_progress_and_what_it_waited_for(host):
    host.health = "503"
    host.at = 901.0
    host.mark(101).journal.append("last line of the run")
    verdict = judge(host)
    assert verdict.state == "failed"
    assert "not healthy within 900 s" in verdict.msg
    assert "sglang::scheduler_TP1 no marker yet" in verdict.detail
    assert "last line of the run" in verdict.detail


def test_no_timeout_before_timeout_s(host):
    host.health = "503"
    host.at = 899.0
    assert judge(host).state == "pending"


def test_the_load_timeout_counts_on_the_monotonic_clock_when_the_wall_clock_steps(host):
    """The wall clock steps back an hour after the restart: the 900 s timeout still fires 901 s after
    it on the host's monotonic clock; a step forward of an hour does not fire it at 10 s."""
    host.health = "503"
    mono_run = RunState(invocation_id=INVOCATION, baseline_nrestarts=0, started_at=T0, started_mono=500.0)
    host.at = -3600.0  # read_at an hour before the restart
    late = replace(host.snapshot(), mono_at=500.0 + 901.0)
    verdict = sj.judge(late, wanted(run=mono_run))
    assert verdict.state == "failed" and "not healthy within 900 s" in verdict.msg
    host.at = 3600.0  # an hour after it on the wall clock, 10 s on the monotonic one
    early = replace(host.snapshot(), mono_at=510.0)
    assert sj.judge(early, wanted(run=mono_run)).state == "pending"


def test_judge_does_not_touch_the_host(host, monkeypatch):
    """judge() gets everything from the snapshot: no subprocess, no /proc, no clock."""
    snap = host.mark(101, 102).snapshot()

    def forbidden(*args, **kwargs):
        raise AssertionError("judge read the host")

    for name in (
        "subprocess.run",
        "urllib.request.urlopen",
        "http.client.HTTPConnection.request",
        "time.time",
        "os.listdir",
        "builtins.open",
    ):
        monkeypatch.setattr(name, forbidden)
    assert sj.judge(snap, wanted()).state == "ok"


# --- the polling loop ------------------------------------------------------------------------


class Script:
    """A host over time for watch(): full reads return the pictures in turn, the clock is fake."""

    def __init__(self, hu, host: Host, pictures, journals=()) -> None:
        self.hu = hu
        self.host = host
        self.pictures = list(pictures)  # callables that change `host` before each full read
        self.journals = list(journals)  # journal-only re-reads
        self.now = T0 + 10.0
        self.reads: list[str] = []
        self.sleeps: list[float] = []
        self.states: list = []  # the journal state each read was handed

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def read(self, query, marker=None, parts=None, journal=None):
        assert query.invocation_id == INVOCATION
        self.states.append(journal)
        if parts == frozenset(("journal",)):
            self.reads.append("journal")
            state = globals()["journal"].JournalState()
            for line in self.journals.pop(0):
                state.feed_line(line)
            return self.hu.apply_journal(self.hu.Snapshot(read_at=self.now, invocation_id=INVOCATION), state)
        self.reads.append("all")
        if self.pictures:
            self.pictures.pop(0)(self.host)
        self.host.at = self.now - T0
        return self.host.snapshot()


def watch(script, chunk_s=1.0, poll_s=0.25, **over):
    query = script.hu.Query(unit="sglang", invocation_id=INVOCATION, health_url="http://x/health")
    return sw.watch(
        query, wanted(**over), chunk_s, poll_s, None, script.read, script.sleep, script.clock, script.clock
    )


def test_a_chunk_ends_on_the_monotonic_clock_whatever_the_wall_clock_does(hu, host):
    """A wall clock that steps back an hour at every look neither stretches nor cuts a chunk."""
    script = Script(hu, host, [lambda h: None] * 50)
    mono = [0.0]

    def sleep(seconds: float) -> None:
        script.sleep(seconds)
        mono[0] += seconds
        assert len(script.sleeps) < 40, "the chunk did not end"

    def wall() -> float:
        script.now -= 3600.0
        return script.now

    query = script.hu.Query(unit="sglang", invocation_id=INVOCATION, health_url="http://x/health")
    verdict = sw.watch(query, wanted(), 1.0, 0.25, None, script.read, sleep, wall, lambda: mono[0])
    assert verdict.state == "pending" and 1.0 <= mono[0] <= 1.25


def test_watch_returns_pending_with_the_progress_when_the_chunk_ends(hu, host):
    host.health = "refused"
    script = Script(hu, host, [])
    verdict = watch(script, chunk_s=1.0, poll_s=0.25)
    assert verdict.state == "pending"
    assert script.reads == ["all"] * 5
    assert script.sleeps == [0.25] * 4
    assert "health=refused" in verdict.progress


def test_watch_holds_the_healthy_state_for_settle_s_across_polls(hu, host):
    host.mark(101, 102)
    script = Script(hu, host, [])
    verdict = watch(script, chunk_s=10.0, poll_s=0.5, settle_s=2.0)
    assert verdict.state == "ok"
    assert len(script.reads) == 5  # healthy at +0, ok at +2.0


def test_the_settle_time_carries_over_to_the_next_chunk(hu, host):
    host.mark(101, 102)
    script = Script(hu, host, [])
    first = watch(script, chunk_s=1.0, poll_s=0.5, settle_s=2.0)
    assert first.state == "pending"
    assert first.run.healthy_since == T0 + 10.0
    second = watch(script, chunk_s=1.0, poll_s=0.5, settle_s=2.0, run=first.run)
    assert second.state == "ok"


def test_a_crash_while_settling_fails(hu, host):
    host.mark(101, 102)
    script = Script(hu, host, [lambda h: None, lambda h: h.journal.extend(TRACEBACK)], [list(TRACEBACK)])
    verdict = watch(script, chunk_s=10.0, settle_s=5.0)
    assert verdict.state == "failed"
    assert "RuntimeError: boom" in verdict.msg


def test_a_traceback_is_quoted_after_the_rest_of_it_arrived(hu, host):
    first_line = [TRACEBACK[1]]
    script = Script(hu, host, [lambda h: h.journal.extend(first_line)], [list(TRACEBACK)])
    verdict = watch(script)
    assert verdict.state == "failed"
    assert script.reads == ["all", "journal"]
    assert script.sleeps == [sw.FATAL_GRACE_S]
    assert "RuntimeError: boom" in verdict.detail
    assert "RuntimeError: boom" in verdict.msg


def test_a_dead_unit_waits_for_its_traceback_to_reach_the_journal(hu, host):
    def die(h):
        h.props.update(ActiveState="failed", SubState="failed")

    script = Script(hu, host, [die], [[TRACEBACK[0]], list(TRACEBACK)])
    verdict = watch(script)
    assert verdict.state == "failed"
    assert script.reads == ["all", "journal", "journal"]
    assert script.sleeps == [sw.JOURNAL_RETRY_S]
    assert "Traceback (most recent call last)" in verdict.msg


def test_a_dead_unit_without_a_traceback_fails_after_a_bounded_wait(hu, host):
    def die(h):
        h.props.update(ActiveState="failed", SubState="failed", ExecMainStatus="9")

    script = Script(hu, host, [die], [["killed"]] * sw.JOURNAL_RETRIES)
    verdict = watch(script)
    assert verdict.state == "failed"
    assert script.reads == ["all"] + ["journal"] * sw.JOURNAL_RETRIES
    assert verdict.detail == "killed"


def test_a_host_that_cannot_be_read_fails_the_run(hu, host):
    def read(query, marker=None, parts=None, journal=None):
        raise hu.HostError("`journalctl ...` did not finish within 15 s")

    query = hu.Query(unit="sglang", invocation_id=INVOCATION)
    verdict = sw.watch(query, wanted(), 1.0, 0.25, None, read, lambda s: None, lambda: T0 + 4.0)
    assert verdict.state == "failed"
    assert "cannot read the host" in verdict.msg
    assert "did not finish within 15 s" in verdict.msg


# --- benign tracebacks, journald suppression, the health port's owner, no progress ------------

# SGLang 0.5.23 http_server.py: the optional /v1/responses endpoint failed to initialise.
BENIGN_TRACEBACK = [
    "[2026-11-30 10:00:01] OpenAIServingResponses init traceback:",
    "Traceback (most recent call last):",
    '  File "http_server.py", line 400, in lifespan',
    "OSError: harmony vocab download failed",
]


def test_a_benign_traceback_from_the_allow_list_passes_the_run(host):
    host.journal += BENIGN_TRACEBACK
    verdict = judge(host.mark(101, 102))
    assert verdict.state == "ok"
    assert verdict.benign == ["Traceback (most recent call last):"]


def test_the_same_traceback_not_in_the_allow_list_fails(host):
    host.benign = ("post-warmup freeze_gc failed",)
    host.journal += BENIGN_TRACEBACK
    verdict = judge(host.mark(101, 102))
    assert verdict.state == "failed"
    assert "OSError: harmony vocab download failed" in verdict.detail


def test_the_words_in_a_logged_request_do_not_fail_the_run(host):
    host.journal.append(
        "[2026-11-30 10:00:05] Receive: obj=GenerateReqInput("
        "text='Traceback (most recent call last):\\n', rid='x')"
    )
    assert judge(host.mark(101, 102)).state == "ok"


def status_files(hu, state: str) -> list:
    """Both schedulers' (101, 102) status files in `state` (fallback: a runtime fallback)."""
    return [
        hu.StatusFile(
            pid=pid,
            state=state,
            runtime_fallback=state == "fallback",
            line=f"/run/kdtree/{pid}.json: state={state}",
        )
        for pid in (101, 102)
    ]


def test_suppressed_markers_are_read_from_the_status_files(hu, host):
    """A flood tripped journald's rate limiting before the markers; the status files hold them."""
    host.journal += [f"flood {n}" for n in range(40)]
    host.suppressed = 5000
    host.statuses = status_files(hu, "active")
    verdict = judge(host, status_dir="/run/kdtree")
    assert verdict.state == "ok"
    assert verdict.suppressed == 5000
    assert "suppressed=5000" in verdict.progress


def test_a_runtime_fallback_in_a_status_file_fails(hu, host):
    host.suppressed = 10
    host.statuses = status_files(hu, "fallback")
    verdict = judge(host, status_dir="/run/kdtree")
    assert verdict.state == "failed"
    assert "reports the patch fallback" in verdict.why


def test_a_marker_lost_to_suppression_fails_at_once_instead_of_at_the_timeout(host):
    host.journal += [f"flood {n}" for n in range(40)]
    host.suppressed = 5000
    host.mark(101)  # 102's marker was dropped
    verdict = judge(host)
    assert verdict.state == "failed"
    assert verdict.why == (
        "journald suppressed 5000 messages of the run and sglang::scheduler_TP1 has no marker "
        "although the health URL answers 200"
    )
    assert "Suppressed 5000 messages from sglang.service" in verdict.detail
    assert "kdtree_smoke_wanted.status_dir" in verdict.detail


def test_a_suppression_while_loading_keeps_waiting(host):
    host.suppressed = 5000
    host.health = "refused"
    assert judge(host).state == "pending"


FOREIGN = "200 from pid 4242 (python3), not sglang.service"


def test_another_process_answering_health_while_the_unit_loads_is_not_healthy(host):
    host.health = FOREIGN
    verdict = judge(host.mark(101, 102))
    assert verdict.state == "pending"
    assert f"health={FOREIGN}" in verdict.progress
    host.at = 901.0
    timed_out = judge(host)
    assert timed_out.state == "failed"
    assert "pid 4242 (python3), not sglang.service" in timed_out.why


def test_no_progress_fails_a_hung_run_with_its_own_message(hu, host):
    """An NCCL P2P hang: the run logs nothing more and /health keeps refusing."""
    host.health = "refused"
    host.journal.append("[2026-11-30 10:00:03 TP0] Init torch distributed begin.")
    script = Script(hu, host, [])
    first = watch(script, chunk_s=10.0, poll_s=1.0, stall_timeout_s=30.0)
    assert first.state == "pending"
    assert first.run.progress_at == T0 + 10.0
    second = watch(script, chunk_s=60.0, poll_s=1.0, stall_timeout_s=30.0, run=first.run)
    assert second.state == "failed"
    assert second.why.startswith("no progress for 31 s (stall_timeout_s=30)")
    assert script.now - T0 == 41.0  # 10 s + 31 s: far before timeout_s (900 s)
    assert "Init torch distributed begin." in second.detail


def test_new_lines_or_a_health_change_are_progress(hu, host):
    host.health = "refused"
    script = Script(hu, host, [lambda h, n=n: h.journal.append(f"line {n}") for n in range(50)])
    verdict = watch(script, chunk_s=45.0, poll_s=1.0, stall_timeout_s=5.0)
    assert verdict.state == "pending"
    host.health = "503"
    script = Script(hu, host, [lambda h, c=c: setattr(h, "health", c) for c in ("503", "refused") * 30])
    assert watch(script, chunk_s=45.0, poll_s=3.0, stall_timeout_s=5.0).state == "pending"


def test_no_progress_timeout_off_by_default(hu, host):
    host.health = "refused"
    script = Script(hu, host, [])
    assert watch(script, chunk_s=100.0, poll_s=5.0).state == "pending"


def test_each_poll_reads_on_from_the_previous_poll_s_journal_state(hu, host):
    host.health = "refused"
    script = Script(hu, host, [])
    first = watch(script, chunk_s=0.5, poll_s=0.25)
    assert script.states[0] == {}  # a new run: from the start
    assert {"cursor", "markers", "tail"} <= set(first.run.journal)  # what the reader returned
    assert script.states[1:] == [first.run.journal] * 2
    second = watch(script, chunk_s=0.0, run=first.run)
    assert second.state == "pending"
    assert script.states[-1] == first.run.journal  # the next chunk goes on from the same state


def test_a_runtime_fallback_only_in_the_status_file_fails_an_active_marker(hu, host):
    """journald dropped the kdtree-verify-fallback line; the status file still records it."""
    host.mark(101, 102).suppressed = 10
    line = "/run/kdtree/102.json: state=fallback reason=kernel\\x20error"
    host.statuses = [hu.StatusFile(pid=102, state="fallback", runtime_fallback=True, line=line)]
    verdict = judge(host, status_dir="/run/kdtree")
    assert verdict.state == "failed"
    assert "fell back to Triton at run time" in verdict.why
    assert verdict.detail == line


def test_a_failed_re_read_keeps_the_failure_and_its_traceback(hu, host):
    host.journal += TRACEBACK

    def read(query, marker=None, parts=None, journal=None):
        if parts == frozenset(("journal",)):
            raise hu.HostError("`journalctl ...` did not finish within 15 s")
        return host.snapshot()

    query = hu.Query(unit="sglang", invocation_id=INVOCATION)
    verdict = sw.watch(query, wanted(), 1.0, 0.25, None, read, lambda s: None, lambda: T0)
    assert verdict.why == "the current run logged a fatal error"
    assert "RuntimeError: boom" in verdict.detail
