"""The tiers of scripts/gpu-check.sh, their budget and their summary (standard library only).

gpu-check.sh does the preflight (driver, arch, python, pytest from the wheelhouse) and hands over here;
this module runs the tiers in order, each with what is left of one wall-clock budget as its timeout:

  1 build        the library for the GPU's arch and both fault builds (build.sh, in parallel)
  2 quick        one test per kernel variant (QUICK below: the one selection list; marker tier_quick)
  3 sanitize     compute-sanitizer racecheck, synccheck, memcheck, initcheck on bench/gpu_sanitize.py's
                 small shapes (SKIPPED with the reason where the toolkit has no compute-sanitizer)
  4 bench-quick  a few shapes per goal (kernel_bench.py --quick), CUDA-graph timing, the goal lines
  5 full-tests   every other GPU test and the CPU halves (-m "not tier_quick")
  6 full-bench   the whole benchmark grid

A tier starts only while at least its `min_s` is left; one that runs out of budget is stopped (its
process group) and reported CUT with what it had done. Without a GPU every tier is SKIPPED with the
reason, after a collection of its tests (or the benchmark's plan), so the check still proves that the
software on the machine can import and select everything. The summary (stdout and <dest>/summary.txt)
always has one line per tier (PASSED | FAILED | CUT | SKIPPED) and the benchmark's goal lines.

    python bench/gpu_check.py --root R --dest D --budget-s N --started-at EPOCH --python PY
        (--arch A --nvcc NVCC | --preflight-failed REASON --exit-code K)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("gpu_check")

DEFAULT_BUDGET_S = 360  # build + quick + bench-quick on an H200 (docs/gpu-check.md), full tiers after
RESERVE_S = 10.0  # kept back from every timeout: stopping a cut tier and writing the summary
KILL_GRACE_S = 5.0  # SIGTERM -> SIGKILL for a cut tier's process group
EXIT_OK, EXIT_FAILED, EXIT_NO_ANSWER = 0, 1, 6  # 6: the quick tier did not finish (budget)

PASSED, FAILED, CUT, SKIPPED = "PASSED", "FAILED", "CUT", "SKIPPED"


@dataclass(frozen=True)
class Tier:
    number: int
    name: str
    kind: str  # "build" | "pytest" | "sanitize" | "bench"
    min_s: float  # the least budget left worth starting it (expected durations: docs/gpu-check.md)
    what: str


TIERS: tuple[Tier, ...] = (
    Tier(1, "build", "build", 30, "build.sh for the GPU's arch + the two fault builds"),
    Tier(2, "quick", "pytest", 45, "one test per kernel variant (-m tier_quick)"),
    Tier(3, "sanitize", "sanitize", 45, "compute-sanitizer's four tools on a few small shapes"),
    Tier(4, "bench-quick", "bench", 45, "kernel_bench.py --quick: a few shapes per goal"),
    Tier(5, "full-tests", "pytest", 60, 'every other GPU test + CPU halves (-m "not tier_quick")'),
    Tier(6, "full-bench", "bench", 60, "kernel_bench.py, the whole grid"),
)
TIER_BY_NAME = {t.name: t for t in TIERS}

GPU_TEST_FILES = (
    "tests/kernel/test_kernel_gpu.py",
    "tests/kernel/test_teeth_gpu.py",
    "tests/kernel/test_call_counter.py",
    "tests/kernel/test_timing_gpu.py",
)
FULL_EXTRA_FILES = ("tests/kernel/test_checks_cpu.py",)
QUICK_MARKER = "tier_quick"
FAULTS = ("last-tile", "one-split")
# The sanitizer tier: its tools (run side by side, one process each), its workload, and the most of the
# budget it may take (the benchmark after it must still start within the default budget).
SANITIZER_TOOLS = ("racecheck", "synccheck", "memcheck", "initcheck")
SANITIZE_WORKLOAD = "bench/gpu_sanitize.py"
SANITIZE_CAP_S = 150.0


@dataclass(frozen=True)
class Variant:
    """What one quick test covers (split: on a 132-SM H200, from kdtree_verify_num_splits)."""

    mask: str  # tree | causal
    kv: str  # bf16 | fp8
    index: str  # int32 | int64 (kv_indptr / kv_indices)
    block_m: int  # 32 | 64 rows per CTA
    prefix: str  # short (< 1k) | long (>= 64k) | mid
    split: bool  # split-KV + combine kernel
    extra: str = ""  # fault build, CUDA graph, Triton, ...


# THE selection of the quick tier: test node (relative to tests/kernel) -> the variant it covers.
# tests/kernel/conftest.py marks these `tier_quick`, and fails collection when one no longer exists.
QUICK: dict[str, Variant] = {
    "test_kernel_gpu.py::test_matches_reference_over_prefix_and_draft_lengths[17-4-tree]": Variant(
        "tree", "bf16", "int64", 64, "short", False
    ),
    "test_kernel_gpu.py::test_matches_reference_over_prefix_and_draft_lengths[131072-4-causal]": Variant(
        "causal", "bf16", "int64", 64, "long", True
    ),
    "test_kernel_gpu.py::test_matches_reference_over_prefix_and_draft_lengths[131072-1-tree]": Variant(
        "tree", "bf16", "int64", 32, "long", True
    ),
    "test_kernel_gpu.py::test_fp8_kv_cache_with_a_scale[1-4-index_dtype0]": Variant(
        "tree", "fp8", "int32", 32, "short", False
    ),
    "test_kernel_gpu.py::test_fp8_kv_cache_with_a_scale[65536-8-index_dtype1]": Variant(
        "tree", "fp8", "int64", 64, "long", True
    ),
    "test_kernel_gpu.py::test_cuda_graph_layout_int64_qo_indptr_uint8_mask_int32_indices[kv_dtype1]": Variant(
        "tree", "fp8", "int32", 64, "mid", True, "int64 qo_indptr, uint8 mask"
    ),
    "test_kernel_gpu.py::test_mixed_batch_of_prefix_and_draft_lengths": Variant(
        "tree", "bf16", "int64", 64, "long", True, "batch of 8, n = 1..64"
    ),
    "test_kernel_gpu.py::test_the_production_shape_eagle3_topk1[32768-tree]": Variant(
        "tree", "bf16", "int64", 32, "mid", True, "H=8 n=4 batch 8 (production)"
    ),
    "test_kernel_gpu.py::test_replayed_cuda_graph_follows_new_lengths_and_data[causal]": Variant(
        "causal", "bf16", "int64", 64, "mid", True, "CUDA graph replay, new lengths"
    ),
    "test_teeth_gpu.py::test_every_needle_at_the_ends_and_at_split_and_tile_boundaries_is_seen"
    "[65536-8-4-causal-fp8]": Variant("causal", "fp8", "int64", 32, "long", True, "needles at split edges"),
    "test_teeth_gpu.py::test_q0_gives_the_exact_bucket_answer[65536-index_dtype0-tree-bf16]": Variant(
        "tree", "bf16", "int32", 64, "long", True, "exact q=0 answer"
    ),
    "test_teeth_gpu.py::test_both_layouts_serve_the_production_shape[33-bf16-32]": Variant(
        "tree", "bf16", "int64", 32, "short", False
    ),
    "test_teeth_gpu.py::test_both_layouts_serve_the_production_shape[33-fp8-64]": Variant(
        "tree", "fp8", "int64", 64, "short", False, "64-row layout forced"
    ),
    "test_teeth_gpu.py::test_both_layouts_serve_the_production_shape[65536-bf16-64]": Variant(
        "tree", "bf16", "int64", 64, "long", True, "64-row layout forced"
    ),
    "test_teeth_gpu.py::test_the_checks_fail_on_a_kernel_built_with_a_fault[last-tile-32]": Variant(
        "tree", "bf16", "int64", 32, "long", True, "fault last-tile caught"
    ),
    "test_teeth_gpu.py::test_the_checks_fail_on_a_kernel_built_with_a_fault[last-tile-64]": Variant(
        "tree", "bf16", "int64", 64, "long", True, "fault last-tile caught"
    ),
    "test_teeth_gpu.py::test_the_checks_fail_on_a_kernel_built_with_a_fault[one-split-32]": Variant(
        "tree", "bf16", "int64", 32, "long", True, "fault one-split caught"
    ),
    "test_teeth_gpu.py::test_the_checks_fail_on_a_kernel_built_with_a_fault[one-split-64]": Variant(
        "tree", "bf16", "int64", 64, "long", True, "fault one-split caught"
    ),
    "test_teeth_gpu.py::test_agrees_with_sglangs_own_triton_kernel_in_bf16[8192-8-4-tree]": Variant(
        "tree", "bf16", "int64", 32, "mid", True, "vs SGLang Triton"
    ),
    "test_teeth_gpu.py::test_agrees_with_sglangs_triton_on_an_fp8_cache_within_the_validate_bound"
    "[8192-0.5-0.25]": Variant("tree", "fp8", "int64", 32, "mid", True, "vs SGLang Triton, fp8"),
    "test_call_counter.py::test_graph_replays_bump_the_device_counter_not_the_python_count"
    "[one split]": Variant("tree", "bf16", "int64", 32, "short", False, "device call counter"),
    "test_call_counter.py::test_graph_replays_bump_the_device_counter_not_the_python_count"
    "[split-KV + combine]": Variant("tree", "bf16", "int64", 32, "mid", True, "device call counter"),
    "test_timing_gpu.py::test_events_are_read_later_without_waiting_for_the_forward_stream": Variant(
        "tree", "bf16", "int64", 32, "short", False, "validate timing: CUDA events read later"
    ),
    "test_timing_gpu.py::test_a_call_under_graph_capture_is_not_timed_and_the_graph_still_replays": Variant(
        "tree", "bf16", "int64", 32, "short", False, "validate timing: captured calls untimed"
    ),
}


def quick_coverage_gaps(quick: dict[str, Variant] = QUICK) -> list[str]:
    """Kernel variants the quick selection misses: each of the four template instantiations (kv dtype x
    rows per CTA) with and without the split/combine path, each mask, index dtype, prefix class and fault."""
    have = set(quick.values())
    gaps = []
    for kv in ("bf16", "fp8"):
        for bm in (32, 64):
            for split in (False, True):
                if not any(v.kv == kv and v.block_m == bm and v.split == split for v in have):
                    gaps.append(f"{kv} {bm}-row {'split' if split else 'no-split'}")
    wanted = {"mask": ("tree", "causal"), "index": ("int32", "int64"), "prefix": ("short", "long")}
    for attr, values in wanted.items():
        gaps += [f"{attr}={v}" for v in values if not any(getattr(x, attr) == v for x in have)]
    gaps += [f"fault {f}" for f in FAULTS if not any(f"fault {f}" in v.extra for v in have)]
    return gaps


# --- the budget ----------------------------------------------------------------------------------
class Budget:
    """One wall-clock budget from `started_at` (epoch seconds, when gpu-check.sh started)."""

    def __init__(self, total_s: float, started_at: float, clock: Callable[[], float] = time.time) -> None:
        if total_s <= 0:
            raise ValueError(f"budget must be > 0 s, not {total_s}")
        self.total_s = float(total_s)
        self.started_at = float(started_at)
        self.clock = clock

    def elapsed(self) -> float:
        return self.clock() - self.started_at

    def remaining(self) -> float:
        """Seconds a tier may still use (the reserve for stopping and the summary held back)."""
        return self.total_s - self.elapsed() - RESERVE_S


@dataclass
class Result:
    tier: Tier
    state: str  # PASSED | FAILED | CUT | SKIPPED
    detail: str = ""
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    goals: list[str] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)  # pytest tiers: node id -> outcome


def decide(tier: Tier, budget: Budget, blocked: str | None) -> tuple[str, float | str]:
    """("run", timeout_s) or (SKIPPED | CUT, reason) for the next tier."""
    if blocked:
        return SKIPPED, blocked
    left = budget.remaining()
    if left < tier.min_s:
        return CUT, f"budget: {max(left, 0):.0f} s left, needs >= {tier.min_s:.0f} s"
    return "run", left


# --- running a command under a deadline ----------------------------------------------------------
@dataclass
class Run:
    returncode: int | None  # None: stopped at the deadline
    seconds: float


def run_commands(
    cmds: Sequence[Sequence[str]], logs: Sequence[Path], timeout_s: float, env: dict[str, str], cwd: Path
) -> list[Run]:
    """Run `cmds` concurrently (each in its own process group, output to its log); stop every one still
    running at `timeout_s` (SIGTERM, then SIGKILL after KILL_GRACE_S)."""
    start = time.monotonic()
    procs = []
    for cmd, path in zip(cmds, logs, strict=True):
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as fh:
            procs.append(
                subprocess.Popen(
                    list(cmd), stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
                )
            )
    runs: list[Run | None] = [None] * len(procs)
    deadline = start + timeout_s
    for i, proc in enumerate(procs):
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0))
            runs[i] = Run(proc.returncode, time.monotonic() - start)
        except subprocess.TimeoutExpired:
            runs[i] = Run(None, time.monotonic() - start)
    for i, proc in enumerate(procs):
        if runs[i].returncode is None and proc.poll() is None:
            _stop(proc)
    return [r for r in runs if r is not None]


def _stop(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=KILL_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


# --- reading what a tier printed -----------------------------------------------------------------
_PYTEST_LINE = re.compile(r"^(\S+::\S.*?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
_KIND = {"PASSED": "passed", "XPASS": "passed", "FAILED": "failed", "ERROR": "error"}


def parse_pytest(text: str) -> dict[str, str]:
    """node id -> passed | failed | error | skipped, from `pytest -v` output, complete or cut (a test
    with a failing teardown after passing counts as error)."""
    outcomes: dict[str, str] = {}
    for line in text.splitlines():
        m = _PYTEST_LINE.match(line)
        if m:
            node, word = m.groups()
            kind = _KIND.get(word, "skipped")
            if outcomes.get(node) in (None, "passed", "skipped"):
                outcomes[node] = kind
    return outcomes


def tally(outcomes: dict[str, str]) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "skipped": 0, "error": 0}
    for kind in outcomes.values():
        counts[kind] += 1
    return counts


def parse_collected(text: str) -> int | None:
    """The number `pytest --collect-only -q` reports ("21/206 tests collected (185 deselected)")."""
    for line in text.splitlines():
        m = re.match(r"^(\d+)(?:/\d+)? tests? collected", line.strip())
        if m:
            return int(m.group(1))
    return None


def parse_goals(text: str) -> list[str]:
    """The lines after kernel_bench.py's "goals:" line."""
    lines = text.splitlines()
    if "goals:" not in lines:
        return []
    return [line.strip() for line in lines[lines.index("goals:") + 1 :] if line.strip()]


# --- the tiers -----------------------------------------------------------------------------------
@dataclass
class Context:
    root: Path
    dest: Path
    python: str
    arch: str = ""
    nvcc: str = ""
    bench_args: list[str] = field(default_factory=list)

    @property
    def build_dir(self) -> Path:
        return self.dest / "build"

    @property
    def lib(self) -> Path:
        return self.build_dir / self.arch / "libkdtree_verify.so"

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            KDTREE_LIB=str(self.lib),
            KDTREE_KERNEL_BUILD_DIR=str(self.build_dir),
            KDTREE_NVCC=self.nvcc,
            **extra,
        )
        return env

    def pytest_cmd(self, tier: Tier, *extra: str) -> list[str]:
        files = [*GPU_TEST_FILES, *(FULL_EXTRA_FILES if tier.name == "full-tests" else ())]
        marker = QUICK_MARKER if tier.name == "quick" else f"not {QUICK_MARKER}"
        return [
            self.python, "-m", "pytest", "-p", "no:cacheprovider", "-c", str(self.root / "pyproject.toml"),
            "--rootdir", str(self.root), "-m", marker, *extra, *(str(self.root / f) for f in files),
        ]  # fmt: skip

    def bench_cmd(self, tier: Tier, *extra: str) -> list[str]:
        quick = ["--quick"] if tier.name == "bench-quick" else []
        return [
            self.python, str(self.root / "bench" / "kernel_bench.py"), "--lib", str(self.lib), *quick,
            *self.bench_args, *extra,
        ]  # fmt: skip


def run_build(tier: Tier, ctx: Context, timeout_s: float) -> Result:
    build_sh = str(ctx.root / "files" / "csrc" / "build.sh")
    outs = [ctx.build_dir / ctx.arch, *(ctx.build_dir / f"fault-{f}" / ctx.arch for f in FAULTS)]
    cmds = [["bash", build_sh, "--arch", ctx.arch, "--out", str(out), "--nvcc", ctx.nvcc] for out in outs]
    for cmd, fault in zip(cmds[1:], FAULTS, strict=True):
        cmd += ["--fault", fault]
    logs = [ctx.dest / "build.log", *(ctx.dest / f"build-fault-{f}.log" for f in FAULTS)]
    runs = run_commands(cmds, logs, timeout_s, ctx.env(), ctx.root)
    seconds = max(r.seconds for r in runs)
    for out, path in zip(outs, logs, strict=True):  # where tests/kernel/conftest.py expects the log
        if (out / "libkdtree_verify.so").exists():
            (out / "build.log").write_text(path.read_text())
    if any(r.returncode is None for r in runs):
        return Result(tier, CUT, "build stopped at the budget", seconds)
    bad = [p.name for p, r in zip(logs, runs, strict=True) if r.returncode != 0]
    if bad:
        return Result(tier, FAILED, f"build failed: see {', '.join(bad)}", seconds)
    ptxas = [
        line.strip()
        for line in logs[0].read_text().splitlines()
        if re.search(r"Used \d+ registers|spill", line)
    ]
    regs = sorted({m.group(1) for line in ptxas for m in [re.search(r"Used (\d+) registers", line)] if m})
    spills = any(re.search(r"[1-9]\d* bytes spill", line) for line in ptxas)
    detail = f"{ctx.arch} + faults {', '.join(FAULTS)}; registers {'/'.join(regs) or '?'}; spills: {spills}"
    return Result(tier, PASSED, detail, seconds)


def run_pytest(tier: Tier, ctx: Context, timeout_s: float) -> Result:
    log_path = ctx.dest / f"pytest-{tier.name}.txt"
    measures = ctx.dest / f"measures-{tier.name}.jsonl"
    measures.unlink(missing_ok=True)
    cmd = ctx.pytest_cmd(tier, "-v", "-rfEs", f"--junitxml={ctx.dest / f'pytest-{tier.name}.xml'}")
    (run,) = run_commands([cmd], [log_path], timeout_s, ctx.env(KDTREE_GPU_MEASURES=str(measures)), ctx.root)
    outcomes = parse_pytest(log_path.read_text(errors="replace"))
    counts = tally(outcomes)
    failures = [node for node, kind in outcomes.items() if kind in ("failed", "error")]
    ran = sum(counts.values())
    bad = counts["failed"] + counts["error"]
    figures = f"ran {ran}: {counts['passed']} passed, {bad} failed, {counts['skipped']} skipped"
    if run.returncode is None:
        return Result(
            tier, CUT, f"stopped at the budget; {figures}", run.seconds, counts, failures, outcomes=outcomes
        )
    if run.returncode == 0 and ran and (counts["skipped"] == 0 or tier.name != "quick"):
        return Result(tier, PASSED, figures, run.seconds, counts, failures, outcomes=outcomes)
    if run.returncode == 0:  # a skipped quick test on a GPU machine proved nothing
        return Result(
            tier,
            FAILED,
            f"{figures} (a skip with a GPU proves nothing)",
            run.seconds,
            counts,
            failures,
            outcomes=outcomes,
        )
    why = {5: "no tests selected", 2: "interrupted or collection error", 4: "usage error"}.get(
        run.returncode, ""
    )
    detail = f"pytest rc={run.returncode} {why}; {figures}"
    return Result(tier, FAILED, detail, run.seconds, counts, failures, outcomes=outcomes)


def run_bench(tier: Tier, ctx: Context, timeout_s: float) -> Result:
    log_path = ctx.dest / f"bench-{tier.name}.txt"
    cmd = ctx.bench_cmd(tier, "--json", str(ctx.dest / f"bench-{tier.name}.json"))
    (run,) = run_commands([cmd], [log_path], timeout_s, ctx.env(), ctx.root)
    text = log_path.read_text(errors="replace")
    goals = parse_goals(text)
    row = re.compile(r"^\s*\d+\s+\d+\s+\d+\s+(\d+|mix\S+)\s+\d+\s")  # H batch n prefix|mix splits
    rows = sum(1 for line in text.splitlines() if row.match(line))
    if run.returncode is None:
        return Result(tier, CUT, f"stopped at the budget after {rows} shapes", run.seconds, goals=goals)
    if run.returncode != 0 or not goals:
        return Result(
            tier, FAILED, f"kernel_bench rc={run.returncode} (see {log_path.name})", run.seconds, goals=goals
        )
    return Result(tier, PASSED, f"{rows} shapes", run.seconds, goals=goals)


def find_sanitizer(nvcc: str) -> Path | None:
    """compute-sanitizer of the toolkit that built the kernel (beside nvcc, or the toolkit's
    compute-sanitizer/ folder), else the one on PATH; None when the toolkit has none."""
    cands = []
    if nvcc:
        bindir = Path(nvcc).resolve().parent
        cands += [bindir / "compute-sanitizer", bindir.parent / "compute-sanitizer" / "compute-sanitizer"]
    found = shutil.which("compute-sanitizer")
    cands += [Path(found)] if found else []
    return next((c for c in cands if c.is_file() and os.access(c, os.X_OK)), None)


_SANITIZER_SUMMARY = re.compile(r"(?:ERROR|RACECHECK) SUMMARY: (\d+) (?:errors?|hazards? displayed)")
_RACECHECK_COUNTS = re.compile(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?")


def parse_sanitizer(text: str) -> tuple[int, int] | None:
    """(errors, warnings) from a compute-sanitizer log's summary line; None when it has none (the run
    did not finish). racecheck's warnings are hazards it could not prove harmful; they are reported, not
    failed on."""
    m = _RACECHECK_COUNTS.search(text)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = _SANITIZER_SUMMARY.search(text)
    return (int(m.group(1)), 0) if m else None


def run_sanitize(tier: Tier, ctx: Context, timeout_s: float) -> Result:
    tool_path = find_sanitizer(ctx.nvcc)
    if tool_path is None:
        where = ctx.nvcc or "nvcc"
        return Result(tier, SKIPPED, f"no compute-sanitizer in the toolkit of {where} or on PATH")
    workload = [ctx.python, str(ctx.root / SANITIZE_WORKLOAD), "--lib", str(ctx.lib)]
    cmds = [
        [str(tool_path), "--tool", tool, "--error-exitcode", "9", "--report-api-errors", "no",
         "--print-limit", "20", *workload]
        for tool in SANITIZER_TOOLS
    ]  # fmt: skip
    logs = [ctx.dest / f"sanitize-{tool}.txt" for tool in SANITIZER_TOOLS]
    # exact-size allocations: torch's caching allocator would hide a read past a tensor from memcheck
    env = ctx.env(PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    runs = run_commands(cmds, logs, min(timeout_s, SANITIZE_CAP_S), env, ctx.root)
    seconds = max(r.seconds for r in runs)
    parts, failures, state = [], [], PASSED
    for tool, path, run in zip(SANITIZER_TOOLS, logs, runs, strict=True):
        counts = parse_sanitizer(path.read_text(errors="replace"))
        if run.returncode is None:
            parts.append(f"{tool} cut")
            state = CUT if state == PASSED else state
        elif counts is None or run.returncode not in (0, 9):
            parts.append(f"{tool} rc={run.returncode}" + (" (no summary)" if counts is None else ""))
            failures.append(f"{tool}: see {path.name}")
            state = FAILED
        else:
            errors, warnings = counts
            parts.append(f"{tool} {errors} errors" + (f" {warnings} warnings" if warnings else ""))
            if errors or run.returncode:
                failures.append(f"{tool}: {errors} errors (see {path.name})")
                state = FAILED
    return Result(tier, state, "; ".join(parts), seconds, failures=failures)


RUNNERS = {"build": run_build, "pytest": run_pytest, "sanitize": run_sanitize, "bench": run_bench}


def rehearse(tier: Tier, ctx: Context, reason: str, timeout_s: float) -> Result:
    """A tier that cannot run here: SKIPPED, with the collection (or the benchmark plan) it would run."""
    if tier.kind == "build" or timeout_s < 5:
        return Result(tier, SKIPPED, reason)
    if tier.kind == "sanitize":
        log_path = ctx.dest / f"plan-{tier.name}.txt"
        cmd = [ctx.python, str(ctx.root / SANITIZE_WORKLOAD), "--list"]
        (run,) = run_commands([cmd], [log_path], timeout_s, ctx.env(), ctx.root)
        text = log_path.read_text(errors="replace")
        shapes = sum(1 for line in text.splitlines() if line.startswith("shape: "))
        tool = find_sanitizer(ctx.nvcc)
        have = f"compute-sanitizer at {tool}" if tool else "no compute-sanitizer here"
        if run.returncode == 0 and shapes:
            would = f"would run {len(SANITIZER_TOOLS)} tools on {shapes} shapes"
            return Result(tier, SKIPPED, f"{reason}; {would} ({have})", run.seconds)
        why = f"workload --list rc={run.returncode}, see {log_path.name}"
        return Result(tier, SKIPPED, f"{reason}; {why}", run.seconds)
    if tier.kind == "pytest":
        log_path = ctx.dest / f"collect-{tier.name}.txt"
        (run,) = run_commands(
            [ctx.pytest_cmd(tier, "--collect-only", "-q")], [log_path], timeout_s, ctx.env(), ctx.root
        )
        n = parse_collected(log_path.read_text(errors="replace"))
        if run.returncode == 0 and n:
            return Result(tier, SKIPPED, f"{reason}; would run {n} tests (collected, no errors)", run.seconds)
        return Result(
            tier, SKIPPED, f"{reason}; collection rc={run.returncode}, see {log_path.name}", run.seconds
        )
    log_path = ctx.dest / f"plan-{tier.name}.txt"
    (run,) = run_commands([ctx.bench_cmd(tier, "--plan")], [log_path], timeout_s, ctx.env(), ctx.root)
    text = log_path.read_text(errors="replace")
    shapes = sum(1 for line in text.splitlines() if line.startswith("plan: H="))
    goals = parse_goals(text)
    if run.returncode == 0:
        return Result(
            tier, SKIPPED, f"{reason}; would time {shapes} shapes (plan ok)", run.seconds, goals=goals
        )
    return Result(
        tier, SKIPPED, f"{reason}; benchmark plan rc={run.returncode}, see {log_path.name}", run.seconds
    )


def run_tiers(
    ctx: Context, budget: Budget, tiers: Sequence[Tier] = TIERS, preflight_failed: str | None = None,
    runners: dict[str, Callable[[Tier, Context, float], Result]] | None = None,
    skip: frozenset[str] = frozenset(),
    rehearser: Callable[[Tier, Context, str, float], Result] | None = None,
) -> list[Result]:  # fmt: skip
    """Every tier in order, each with the budget left; stops starting tiers once the budget is spent."""
    runners = runners or RUNNERS
    rehearser = rehearser or rehearse
    results: list[Result] = []
    for tier in tiers:
        blocked = None
        if preflight_failed:
            blocked = f"skipped ({preflight_failed})"
        elif tier.name in skip:
            blocked = "skipped (asked)"
        elif results and results[0].state != PASSED:
            blocked = f"skipped (build {results[0].state.lower()})"
        action, arg = decide(tier, budget, blocked)
        if action == SKIPPED and preflight_failed:
            results.append(rehearser(tier, ctx, str(arg), budget.remaining()))
        elif action in (SKIPPED, CUT):
            results.append(Result(tier, action, str(arg)))
        else:
            log.info("tier %d %s: starting with %.0f s of budget", tier.number, tier.name, arg)
            results.append(runners[tier.kind](tier, ctx, float(arg)))
    return results


def exit_code(results: Sequence[Result]) -> int:
    states = {r.tier.name: r.state for r in results}
    if FAILED in states.values():
        return EXIT_FAILED
    if states.get("build") == PASSED and states.get("quick") == PASSED:
        return EXIT_OK
    return EXIT_NO_ANSWER


def measures(path: Path) -> dict[str, dict[str, float]]:
    """node id -> {measure: worst value} from the tests' KDTREE_GPU_MEASURES file (kernel_checks.record)."""
    out: dict[str, dict[str, float]] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue
        node = str(item["node"]).rsplit(" (", 1)[0]  # PYTEST_CURRENT_TEST: "<node id> (call)"
        slot = out.setdefault(node, {})
        slot[item["measure"]] = max(slot.get(item["measure"], float("-inf")), float(item["value"]))
    return out


def summary_lines(results: Sequence[Result], budget: Budget, dest: Path) -> list[str]:
    lines = [f"gpu-check tiers (budget {budget.total_s:.0f} s, used {budget.elapsed():.0f} s):"]
    for r in results:
        took = f"{r.seconds:5.0f} s" if r.seconds else "    - "
        lines.append(f"  tier {r.tier.number} {r.tier.name:<11} {r.state:<7} {took}  {r.detail}")
        lines += [f"      FAILED {node}" for node in r.failures[:20]]
    quick = next((r for r in results if r.tier.name == "quick" and (r.outcomes or r.state == FAILED)), None)
    if quick:
        seen = measures(dest / "measures-quick.jsonl")
        lines.append("quick tier by variant (worst row rel L2 / max abs err where measured):")
        for node, v in QUICK.items():
            outcome = next((o for k, o in quick.outcomes.items() if k.endswith("/" + node)), "not run")
            verdict = {"passed": "pass", "failed": "FAIL", "error": "FAIL"}.get(outcome, outcome)
            figs = next((m for k, m in seen.items() if k.endswith("/" + node)), {})
            fig = " ".join(f"{k}={val:.3g}" for k, val in sorted(figs.items()))
            lines.append(
                f"  {verdict:<7} {v.mask:<6} {v.kv:<4} {v.index} {v.block_m}-row {v.prefix:<5} "
                f"{'split' if v.split else 'no-split':<8} {v.extra:<32} {fig}"
            )
    goal_lines = [(r.tier.name, g) for r in results for g in r.goals]
    lines.append("goals:")
    if goal_lines:
        lines += [f"  [{name}] {g}" for name, g in goal_lines]
    else:
        lines.append("  NOT MEASURED (no benchmark tier reached its goals)")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--dest", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S)
    ap.add_argument("--started-at", type=float, default=None, help="epoch seconds the check started")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--arch", default="")
    ap.add_argument("--nvcc", default="")
    ap.add_argument("--skip", default="", help="comma-separated tier names to skip")
    ap.add_argument("--bench-args", default="", help="extra kernel_bench.py arguments")
    ap.add_argument("--preflight-failed", default=None, help="why no tier can run (every tier SKIPPED)")
    ap.add_argument("--exit-code", type=int, default=None, help="with --preflight-failed: the exit status")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="gpu-check: %(message)s")
    skip = frozenset(s for s in args.skip.split(",") if s)
    unknown = skip - set(TIER_BY_NAME)
    if unknown:
        ap.error(f"unknown tier(s) {', '.join(sorted(unknown))} (known: {', '.join(TIER_BY_NAME)})")
    budget = Budget(args.budget_s, args.started_at if args.started_at is not None else time.time())
    args.dest.mkdir(parents=True, exist_ok=True)
    ctx = Context(args.root, args.dest, args.python, args.arch, args.nvcc, args.bench_args.split())
    results = run_tiers(ctx, budget, preflight_failed=args.preflight_failed, skip=skip)
    lines = summary_lines(results, budget, args.dest)
    rc = args.exit_code if args.preflight_failed and args.exit_code is not None else exit_code(results)
    if args.preflight_failed:
        verdict = f"correctness NOT CHECKED ({args.preflight_failed})"
    else:
        verdict = {EXIT_OK: "correctness PASS", EXIT_FAILED: "correctness FAIL"}.get(
            rc, "correctness NOT ESTABLISHED (the quick tier did not finish within the budget)"
        )
    lines.append(f"gpu-check: {verdict} (exit {rc}); results in {args.dest}")
    with (args.dest / "summary.txt").open("a") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
