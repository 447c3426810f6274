"""bench/gpu_check.py without a GPU or torch: the budget arithmetic, the order and cut-off of the tiers,
stopping a command at its deadline, reading pytest / benchmark output, the exit status, and the quick
selection's coverage of the kernel variants."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import gpu_check as gc
import pytest
from conftest import ROOT

SCRIPT = ROOT / "scripts" / "gpu-check.sh"


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _ctx(tmp_path: Path) -> gc.Context:
    return gc.Context(ROOT, tmp_path, sys.executable, "sm_90a", "/bin/false")


def test_the_budget_counts_from_the_start_and_keeps_the_reserve():
    clock = Clock(1100.0)
    budget = gc.Budget(360, started_at=1000.0, clock=clock)
    assert budget.elapsed() == 100.0
    assert budget.remaining() == 360 - 100 - gc.RESERVE_S
    with pytest.raises(ValueError):
        gc.Budget(0, started_at=0.0)


def test_a_tier_starts_with_what_is_left_and_is_cut_below_its_minimum():
    clock = Clock(1000.0)
    budget = gc.Budget(200, started_at=1000.0, clock=clock)
    tier = gc.TIER_BY_NAME["quick"]
    assert gc.decide(tier, budget, None) == ("run", 200 - gc.RESERVE_S)
    clock.now = 1000.0 + 200 - gc.RESERVE_S - tier.min_s + 1  # one second short of its minimum
    action, why = gc.decide(tier, budget, None)
    assert action == gc.CUT and f"needs >= {tier.min_s:.0f} s" in why
    assert gc.decide(tier, budget, "skipped (no GPU)") == (gc.SKIPPED, "skipped (no GPU)")


def _fake_runners(clock: Clock, cost: dict[str, float], state: dict[str, str], seen: dict[str, float]):
    def runner(tier, ctx, timeout_s):
        seen[tier.name] = timeout_s
        spent = min(cost[tier.name], timeout_s)
        clock.now += spent
        if cost[tier.name] > timeout_s:
            return gc.Result(tier, gc.CUT, "stopped at the budget", spent)
        return gc.Result(tier, state.get(tier.name, gc.PASSED), "", spent)

    return {"build": runner, "pytest": runner, "sanitize": runner, "bench": runner}


def test_tiers_run_in_order_each_with_the_rest_of_the_budget_and_the_full_ones_are_cut(tmp_path):
    clock = Clock(0.0)
    budget = gc.Budget(360, started_at=0.0, clock=clock)
    cost = {"build": 60, "quick": 90, "sanitize": 60, "bench-quick": 90, "full-tests": 600, "full-bench": 600}
    seen: dict[str, float] = {}
    results = gc.run_tiers(_ctx(tmp_path), budget, runners=_fake_runners(clock, cost, {}, seen))
    assert [r.tier.name for r in results] == [t.name for t in gc.TIERS]
    assert seen["build"] == 350 and seen["quick"] == 290 and seen["sanitize"] == 200
    assert seen["bench-quick"] == 140
    states = [r.state for r in results]
    assert states == [gc.PASSED, gc.PASSED, gc.PASSED, gc.PASSED, gc.CUT, gc.CUT]
    assert "full-tests" not in seen and "full-bench" not in seen  # 50 s left: cut without starting
    assert "needs >= 60 s" in results[4].detail and "needs >= 60 s" in results[5].detail
    assert clock.now <= 360  # ended within the budget
    assert gc.exit_code(results) == gc.EXIT_OK  # correct kernel, full tiers cut: still an answer


def test_a_failed_build_skips_everything_after_it(tmp_path):
    clock = Clock(0.0)
    budget = gc.Budget(360, started_at=0.0, clock=clock)
    cost = dict.fromkeys(gc.TIER_BY_NAME, 1.0)
    results = gc.run_tiers(
        _ctx(tmp_path), budget, runners=_fake_runners(clock, cost, {"build": gc.FAILED}, {})
    )
    assert [r.state for r in results] == [gc.FAILED] + [gc.SKIPPED] * (len(gc.TIERS) - 1)
    assert all("build failed" in r.detail for r in results[1:])
    assert gc.exit_code(results) == gc.EXIT_FAILED


def test_the_exit_status_wants_build_and_quick_passed_and_nothing_failed():
    def res(*states):
        return [gc.Result(t, s) for t, s in zip(gc.TIERS, states, strict=False)]

    assert gc.exit_code(res(gc.PASSED, gc.PASSED, gc.FAILED)) == gc.EXIT_FAILED  # bench broke
    assert gc.exit_code(res(gc.PASSED, gc.CUT, gc.CUT, gc.CUT, gc.CUT, gc.CUT)) == gc.EXIT_NO_ANSWER
    assert gc.exit_code(res(gc.PASSED, gc.PASSED, gc.PASSED, gc.PASSED, gc.FAILED, gc.CUT)) == gc.EXIT_FAILED
    # a sanitizer error fails the check; a toolkit without compute-sanitizer does not
    assert gc.exit_code(res(gc.PASSED, gc.PASSED, gc.FAILED, gc.PASSED)) == gc.EXIT_FAILED
    assert gc.exit_code(res(gc.PASSED, gc.PASSED, gc.SKIPPED, gc.PASSED)) == gc.EXIT_OK
    assert gc.exit_code(res(*[gc.SKIPPED] * len(gc.TIERS))) == gc.EXIT_NO_ANSWER


def test_without_a_gpu_every_tier_is_skipped_with_the_reason(tmp_path):
    calls = []

    def rehearse(tier, ctx, reason, timeout_s):
        calls.append(tier.name)
        return gc.Result(tier, gc.SKIPPED, reason)

    budget = gc.Budget(360, started_at=time.time())
    results = gc.run_tiers(
        _ctx(tmp_path), budget, preflight_failed="no GPU: nvidia-smi not found", rehearser=rehearse
    )
    assert [r.state for r in results] == [gc.SKIPPED] * len(gc.TIERS)
    assert all("no GPU: nvidia-smi not found" in r.detail for r in results)
    assert calls == [t.name for t in gc.TIERS]


def test_a_command_past_its_deadline_is_stopped_with_its_children(tmp_path):
    marker = tmp_path / "child.pid"
    cmd = ["bash", "-c", f"sleep 60 & echo $! > {marker}; wait"]
    start = time.monotonic()
    (run,) = gc.run_commands([cmd], [tmp_path / "log"], 1.0, dict(os.environ), tmp_path)
    assert run.returncode is None
    assert time.monotonic() - start < 1.0 + 2 * gc.KILL_GRACE_S
    child = int(marker.read_text())
    assert _gone_within(child, 5.0), f"sleep {child} outlived the cut: only bash was stopped, not its group"
    (ok,) = gc.run_commands([["true"]], [tmp_path / "log2"], 5.0, dict(os.environ), tmp_path)
    assert ok.returncode == 0


def _gone_within(pid: int, seconds: float) -> bool:
    """The process is gone or a zombie (killed, waiting for init to reap it) within `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


PYTEST_V = """\
tests/kernel/test_kernel_gpu.py::test_a[17-4-tree] PASSED                 [  4%]
tests/kernel/test_kernel_gpu.py::test_b[x] FAILED                         [  9%]
tests/kernel/test_call_counter.py::test_c[one split] PASSED               [ 13%]
tests/kernel/test_call_counter.py::test_c[one split] ERROR                [ 13%]
tests/kernel/test_teeth_gpu.py::test_d SKIPPED (needs a CUDA GPU)         [ 18%]
tests/kernel/test_teeth_gpu.py::test_e """  # cut off here: the last test never reported


def test_pytest_output_read_whole_or_cut():
    outcomes = gc.parse_pytest(PYTEST_V)
    assert outcomes == {
        "tests/kernel/test_kernel_gpu.py::test_a[17-4-tree]": "passed",
        "tests/kernel/test_kernel_gpu.py::test_b[x]": "failed",
        "tests/kernel/test_call_counter.py::test_c[one split]": "error",  # failed in teardown
        "tests/kernel/test_teeth_gpu.py::test_d": "skipped",
    }
    assert gc.tally(outcomes) == {"passed": 1, "failed": 1, "skipped": 1, "error": 1}
    assert gc.parse_collected("...\n\n22/206 tests collected (184 deselected) in 2.1s\n") == 22
    assert gc.parse_collected("no tests ran") is None


def test_goal_lines_are_what_follows_goals():
    text = "H batch\n  8 1 ...\ngoals:\n  PASS  >= 80% of roofline\n  FAIL  never slower than Triton\n"
    assert gc.parse_goals(text) == ["PASS  >= 80% of roofline", "FAIL  never slower than Triton"]
    assert gc.parse_goals("cut before the goals\n") == []


def test_the_quick_selection_covers_every_kernel_variant():
    assert gc.quick_coverage_gaps() == []
    without_fp8_64_no_split = {
        k: v for k, v in gc.QUICK.items() if not (v.kv == "fp8" and v.block_m == 64 and not v.split)
    }
    assert gc.quick_coverage_gaps(without_fp8_64_no_split) == ["fp8 64-row no-split"]
    no_faults = {k: v for k, v in gc.QUICK.items() if "fault" not in v.extra}
    assert gc.quick_coverage_gaps(no_faults) == ["fault last-tile", "fault one-split"]
    assert all(k.split("::")[0] in {Path(f).name for f in gc.GPU_TEST_FILES} for k in gc.QUICK)


def test_the_summary_has_every_tier_the_variants_and_the_goals(tmp_path):
    quick_node = next(iter(gc.QUICK))
    (tmp_path / "measures-quick.jsonl").write_text(
        f'{{"node": "tests/kernel/{quick_node} (call)", "measure": "row_rel_l2", "value": 0.002}}\n'
    )
    results = [
        gc.Result(gc.TIERS[0], gc.PASSED, "sm_90a", 50),
        gc.Result(gc.TIERS[1], gc.PASSED, "ran 22", 80, outcomes={f"tests/kernel/{quick_node}": "passed"}),
        gc.Result(gc.TIERS[2], gc.PASSED, "racecheck 0 errors; synccheck 0 errors", 40),
        gc.Result(gc.TIERS[3], gc.CUT, "stopped at the budget after 3 shapes", 90),
        gc.Result(gc.TIERS[4], gc.CUT, "budget: 5 s left, needs >= 60 s"),
        gc.Result(gc.TIERS[5], gc.SKIPPED, "skipped (asked)"),
    ]
    lines = gc.summary_lines(results, gc.Budget(360, started_at=time.time()), tmp_path)
    text = "\n".join(lines)
    for r in results:
        assert f"tier {r.tier.number} {r.tier.name}" in text
    assert "pass    tree   bf16 int64 64-row short no-split" in text and "row_rel_l2=0.002" in text
    assert "not run" in text  # the other quick tests
    assert lines[-2:] == ["goals:", "  NOT MEASURED (no benchmark tier reached its goals)"]


def _script(*args: str, tmp: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "OUT": str(tmp / "out"), "PATH": "/usr/bin:/bin", **env}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=full, timeout=120, check=False
    )


@pytest.mark.parametrize("bad", ["abc", "0", "-5", ""])
def test_a_bad_budget_is_exit_2_before_anything(tmp_path, bad):
    proc = _script("--budget-s", bad, tmp=tmp_path)
    assert proc.returncode == 2 and "--budget-s needs a whole number" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="needs a system python3")
def test_without_a_gpu_the_summary_still_lists_every_tier_and_the_goals(tmp_path):
    # /usr/bin/python3 has no torch: nothing can even be collected, and the summary says so per tier.
    proc = _script("--budget-s", "60", tmp=tmp_path, KDTREE_PYTHON="/usr/bin/python3")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    summary = (tmp_path / "out" / "gpu-check" / "summary.txt").read_text()
    for tier in gc.TIERS:
        assert f"tier {tier.number} {tier.name}" in summary
    assert summary.count("SKIPPED") == len(gc.TIERS) and "no GPU: nvidia-smi not found" in summary
    assert "goals:" in summary and "correctness NOT CHECKED" in summary
    for line in summary.splitlines():  # stdout says the same
        assert line in proc.stdout


def test_every_quick_node_exists_and_is_the_whole_tier_quick_selection():
    """With torch (make test-kernel, the GPU rehearsal): `-m tier_quick` selects exactly QUICK."""
    pytest.importorskip("torch")
    cmd = [
        sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
        "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), "-m", gc.QUICK_MARKER,
        *(str(ROOT / f) for f in gc.GPU_TEST_FILES),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = {line.split("tests/kernel/", 1)[1] for line in proc.stdout.splitlines() if "::" in line}
    assert got == set(gc.QUICK), (sorted(set(gc.QUICK) - got), sorted(got - set(gc.QUICK)))


RACECHECK_CLEAN = """========= COMPUTE-SANITIZER
gpu-sanitize: tree bf16 int64 32-row short: matches the reference
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""
RACECHECK_RACE = """========= Error: Race reported between Write access at verify_attn_kernel+0x1a20
=========     and Read access at verify_attn_kernel+0x1b00 [64 hazards]
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
MEMCHECK_OOB = """========= Invalid __global__ read of size 16 bytes
=========     at verify_attn_kernel+0x2f0
========= ERROR SUMMARY: 3 errors
"""


def test_sanitizer_summaries_are_read_as_errors_and_warnings_and_a_missing_one_is_no_answer():
    assert gc.parse_sanitizer(RACECHECK_CLEAN) == (0, 0)
    assert gc.parse_sanitizer(RACECHECK_RACE) == (1, 0)
    assert gc.parse_sanitizer(MEMCHECK_OOB) == (3, 0)
    assert gc.parse_sanitizer("========= ERROR SUMMARY: 0 errors\n") == (0, 0)
    assert gc.parse_sanitizer("gpu-sanitize: tree ...: matches the reference\n") is None  # killed mid-run


def _fake_sanitizer(tmp_path: Path, body: str, rc: int) -> Path:
    """A stand-in compute-sanitizer beside a stand-in nvcc: prints `body` for racecheck and exits `rc`
    (9: --error-exitcode), a clean summary for the other tools."""
    bindir = tmp_path / "cuda" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "nvcc").write_text("#!/bin/sh\n")
    tool = bindir / "compute-sanitizer"
    race = body.replace("'", "")
    tool.write_text(
        "#!/bin/bash\n"
        f"if [[ $2 == racecheck ]]; then printf '%s' '{race}'; exit {rc}; fi\n"
        "echo '========= ERROR SUMMARY: 0 errors'\n"
    )
    for f in (bindir / "nvcc", tool):
        f.chmod(0o755)
    return bindir / "nvcc"


@pytest.mark.parametrize(
    ("body", "rc", "state", "detail"),
    [
        (
            RACECHECK_CLEAN,
            0,
            gc.PASSED,
            "racecheck 0 errors; synccheck 0 errors; memcheck 0 errors; initcheck",
        ),
        (RACECHECK_RACE, 9, gc.FAILED, "racecheck 1 errors"),
        (RACECHECK_CLEAN, 1, gc.FAILED, "racecheck rc=1"),  # the workload itself found a mismatch
        ("killed before its summary", 0, gc.FAILED, "racecheck rc=0 (no summary)"),
    ],
)
def test_the_sanitizer_tier_fails_on_any_reported_error_or_a_run_without_a_summary(
    tmp_path, body, rc, state, detail
):
    nvcc = _fake_sanitizer(tmp_path, body, rc)
    ctx = gc.Context(ROOT, tmp_path / "dest", sys.executable, "sm_90a", str(nvcc))
    result = gc.run_sanitize(gc.TIER_BY_NAME["sanitize"], ctx, 30)
    assert result.state == state and detail in result.detail, result.detail
    assert (state == gc.PASSED) == (not result.failures)


def test_the_sanitizer_tier_is_skipped_with_its_reason_where_the_toolkit_has_none(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    (tmp_path / "bin").mkdir()
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    ctx = gc.Context(ROOT, tmp_path / "dest", sys.executable, "sm_90a", str(nvcc))
    result = gc.run_sanitize(gc.TIER_BY_NAME["sanitize"], ctx, 30)
    assert result.state == gc.SKIPPED and "no compute-sanitizer" in result.detail
    passed = [gc.Result(gc.TIERS[0], gc.PASSED), gc.Result(gc.TIERS[1], gc.PASSED)]
    assert gc.exit_code([*passed, result]) == gc.EXIT_OK
