"""Apply each deliberate bug (mutant) to a temporary copy of the tree and expect its tests to fail.

Run through scripts/mutation-check.sh (make mutation-check). For every mutant: copy the working tree
(tracked and untracked, not ignored files; never the working files themselves), change one site of
one file, run the mutant's test selection with pytest there, and print one line:

    KILLED    <name>  <seconds> s   (pytest failed: a test caught the bug)
    SURVIVED  <name>  <seconds> s   (pytest passed: no test caught it)
    ERROR     <name>  ...           (pytest could not run the selection: exit status other than 0 or 1)
    NOT-FOUND <name>  ...           (the mutation site is gone: the pattern matched 0 or >1 times)

A site is a regex inside a region (from a `def name(` line to the next top-level statement; in C++,
region `c++:name`, from the line at column 0 that defines `name(` to the next `}` at column 0), so an
edit elsewhere in the file does not move it; a pattern that matches nothing, or more than once,
is reported as "mutation site not found" instead of mutating the wrong line. Before the mutants,
every selection must pass on an unmutated copy (else the run stops: a kill would mean nothing).
Exit status 0 only when every mutant was killed.

A killed mutant is remembered in the machine-level cache (scripts/devcache.py: mutation-results/) by
the hash of its definition, the file it mutates and its selected test files with their directory's
conftest.py; while none of them changes, later runs print it as `KILLED (kept)` without running it, and
the baseline runs only the selections of the mutants that do run. --fresh runs every mutant (before a
release: make test-periodic).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import devcache  # noqa: E402 the machine-level cache's home has one owner

EXT = "files/sglang_ext"
PKG = f"{EXT}/kdtree_verify"
SMOKE = "plugins/module_utils/_smoke/judge.py"  # the rules of the smoke check: judge()
REPORT = "plugins/module_utils/_report.py"  # the host side (the kdtree_report module's)
REPORT_TABLE = "plugins/plugin_utils/_report_table.py"  # the controller side: rows and the table
REPORT_TESTS = "tests/unit/plugins/module_utils/test__report.py"
REPORT_TABLE_TESTS = "tests/unit/plugins/plugin_utils/test__report_table.py"
PROMOTE = "plugins/plugin_utils/_promote.py"
PROMOTE_TESTS = "tests/unit/plugins/plugin_utils/test__promote.py"
PROMOTE_RULES = f"{PROMOTE_TESTS}::test_each_rule_keeps_the_host_in_validate_and_says_why"
PROMOTE_SCHEDULERS = (
    f"{PROMOTE_TESTS}::test_each_scheduler_is_judged_on_its_own_timing_not_only_the_hosts_sum"
)
SPEED = "plugins/module_utils/_speed.py"
SPEED_TESTS = "tests/unit/plugins/module_utils/test__speed.py"
HTTP = "plugins/module_utils/_http_client.py"
HTTP_TESTS = "tests/unit/plugins/module_utils/test__http_client.py"
LOCK = "plugins/module_utils/_lock.py"
LOCK_TESTS = "tests/unit/plugins/module_utils/test__lock.py"
HISTORY = "plugins/module_utils/_history.py"
HISTORY_TESTS = "tests/unit/plugins/module_utils/test__history.py"
# the restore of a last good deploy against the service role's drop-in rule (role-rendered entries)
HISTORY_RESTORE_TESTS = "tests/roles/test_history.py"
PREFLIGHT = "plugins/module_utils/_preflight.py"
PREFLIGHT_TESTS = "tests/unit/plugins/module_utils/test__preflight.py"
PATH_SAFETY = "plugins/module_utils/_path_safety.py"
UNIT_ENV = "plugins/module_utils/_unit_env.py"
ROUTER = "plugins/module_utils/_router.py"
ROUTER_TESTS = "tests/drain/test_router_client.py"
ROUTER_UNIT_TESTS = "tests/unit/plugins/module_utils/test__router.py"
DRAIN_RECORD = "plugins/module_utils/_drain_record.py"
DRAIN_RECORD_TESTS = "tests/unit/plugins/module_utils/test__drain_record.py"
BUILD_CACHE = "plugins/plugin_utils/_build_cache.py"
BUILD_CACHE_TESTS = "tests/unit/plugins/plugin_utils/test__build_cache.py"
# The CUDA kernel's source: its mutants are killed by its CPU-emulator tests, which need the torch venv.
KERNEL = "files/csrc/verify_attn_flash_paged.cu"
CPU_EMU_TESTS = "tests/kernel/cpu_emu/test_kernel_cpu_emu.py"
CPU_EMU = f"{CPU_EMU_TESTS}::test_the_kernel_source_on_the_emulator_matches_the_reference"
TORCH_PYTHON = ROOT / ".cache" / "sglang-venv" / "bin" / "python"
# Untracked links into /work/main in a worktree: never copied (the run uses this venv's pytest).
SKIP_TOP = {".venv", ".cache", ".git"}


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # file to mutate, relative to the root
    region: str  # name of the top-level def that holds the site
    pattern: str  # regex matched inside the region, exactly once
    replacement: str  # re.sub replacement
    tests: tuple[str, ...]  # pytest arguments (node ids, files, -k ...)
    why: str
    torch: bool = False  # run the tests with the torch venv's pytest (TORCH_PYTHON), not the tools venv's


PATCH_DOUBLE = "tests/ext/fast/test_patch_double.py"
STATUS_READER = "tests/ext/fast/test_status_reader.py"
UNSUPPORTED = f"{PATCH_DOUBLE}::test_unsupported_shapes_and_options_go_to_the_original_unchanged"
MUTANTS = (
    Mutant(
        "validate-reraises",
        f"{PKG}/dispatch.py",
        "_validate",
        r'(_runtime_fallback\(f"kernel call failed[^\n]*\n)([ \t]+)return triton_out',
        r"\1\2raise",
        (f"{PATCH_DOUBLE}::test_a_kernel_exception_in_validate_mode_returns_tritons_output_and_falls_back",),
        "_validate re-raises a kernel exception instead of returning Triton's output",
    ),
    Mutant(
        "check-error-to-kernel",
        f"{PKG}/dispatch.py",
        "dispatch",
        r'reason = f"dispatch check failed: [^\n]*',
        "reason = None",
        (f"{PATCH_DOUBLE}::test_an_exception_while_checking_a_call_sends_it_to_the_original_not_the_kernel",),
        "an exception inside unsupported_reason sends the call to the kernel",
    ),
    Mutant(
        "no-mha-one-shot",
        f"{PKG}/dispatch.py",
        "unsupported_reason",
        r"\n[ \t]+if [^\n]*mha_one_shot[^\n]*:\n[ \t]+return [^\n]*",
        "",
        (f"{UNSUPPORTED}[mha one-shot]",),
        "the mha_one_shot check is removed",
    ),
    Mutant(
        "chain-to-last",
        f"{EXT}/sitecustomize.py",
        "_next_sitecustomize",
        r"fresh\[0\]",
        "fresh[-1]",
        ("tests/ext/fast/test_faults.py::test_the_chain_runs_the_next_sitecustomize_not_a_later_one",),
        "sitecustomize chains to the last sitecustomize on sys.path instead of the next",
    ),
    Mutant(
        "mode-case-sensitive",
        f"{PKG}/config.py",
        "read_mode",
        r"\.lower\(\)",
        "",
        ("tests/ext/fast/test_config.py",),
        "mode parsing drops .lower()",
    ),
    Mutant(
        "nccl-missing-accepted",
        SMOKE,
        "_check_schedulers",
        r"if env\.get\((\w+)\) != str\((\w+)\)",
        r"if \1 in env and env.get(\1) != str(\2)",
        ("tests/unit/plugins/module_utils/test_smoke_mutants.py", "-k", "nccl"),
        "the smoke check accepts a scheduler that lacks a wanted NCCL variable",
    ),
    Mutant(
        "scheduler-count-ge",
        SMOKE,
        "judge",
        r"count == expected",
        "count >= expected",
        ("tests/unit/plugins/module_utils/test_smoke_mutants.py", "-k", "schedulers"),
        "the smoke check accepts more schedulers than TP ranks (== became >=)",
    ),
    Mutant(
        "sliding-window-gt-0",
        f"{PKG}/dispatch.py",
        "unsupported_reason",
        r"sliding_window_size > -1(?=:)",  # the code, not the docstring that quotes it
        "sliding_window_size > 0",
        (f"{UNSUPPORTED}[sliding window of size 0]",),
        "the sliding-window check becomes > 0 (a window of 0 would reach the kernel)",
    ),
    Mutant(
        "report-stale-status-counts",
        REPORT,
        "read_status_files",
        r"if pid not in live:",
        "if False:",
        (REPORT_TESTS, "-k", "stale"),
        "the fleet report counts the status file of a process that is not the unit's",
    ),
    Mutant(
        "report-reused-pid",
        REPORT,
        "read_status_files",
        r"written < started - 1\.0",
        "written < started - 1e9",
        (REPORT_TESTS, "-k", "older_than_its_process"),
        "the fleet report takes an earlier process's file for a live process with the same pid",
    ),
    Mutant(
        "report-host-without-row",
        REPORT_TABLE,
        "rows",
        r'out\.append\(\{"host": host, "errors": \[why\], "problems": \[why\]\}\)',
        "pass",
        (REPORT_TABLE_TESTS, "-k", "every_host"),
        "the fleet report leaves out an unreachable host instead of a row that says so",
    ),
    Mutant(
        "report-zero-without-why",
        REPORT,
        "kernel_note",
        r'if speculative == "":',
        "if False:",
        (REPORT_TESTS, "-k", "says_why"),
        "the fleet report shows a bare 0 for a unit that runs no speculative decoding",
    ),
    Mutant(
        "promote-stale-statistics",
        PROMOTE,
        "_current_run",
        r"started < deploy_start or since < deploy_start",
        "since < deploy_start",
        (f"{PROMOTE_RULES}[process-started-before-the-deploy]",),
        "the promotion takes statistics of a scheduler that started before the current deploy",
    ),
    Mutant(
        "promote-idle-scheduler",
        PROMOTE,
        "qualify",
        r"if idle:",
        "if False:",
        (f"{PROMOTE_RULES}[one-scheduler-compared-nothing]",),
        "the promotion accepts a host one of whose schedulers compared no call",
    ),
    Mutant(
        "speed-seconds-without-calls",
        SPEED,
        "bucket_problem",
        r"if not calls and bucket\[key\]:",
        "if False:",
        (f"{SPEED_TESTS}::test_seconds_without_a_timed_call_refuse_rather_than_inflate_the_sum",),
        "seconds of a bucket that timed no call count in the speed sums",
    ),
    Mutant(
        "speed-no-per-call-bound",
        SPEED,
        "bucket_problem",
        r"not MIN_CALL_S <= per_call <= MAX_CALL_S",
        "False",
        (f"{SPEED_TESTS}::test_a_time_per_call_no_verify_call_can_take_refuses",),
        "a kernel time per call no verify call can take (1e-300 s) gives a speedup",
    ),
    Mutant(
        "promote-host-sum-only",
        PROMOTE,
        "qualify",
        r"why \+= slow or scheduler_speed_problems\(reporting\)",
        "why += slow",
        (PROMOTE_SCHEDULERS,),
        "the promotion judges speed only summed over the host: a slow or untimed scheduler is hidden",
    ),
    Mutant(
        "promote-tolerance",
        PROMOTE,
        "qualify",
        r"or max_diff > tol\)",
        "or max_diff > tol + 1)",
        (f"{PROMOTE_RULES}[max-diff-over-tolerance]",),
        "the promotion accepts a largest difference above the tolerance",
    ),
    # issue 19: evidence that cannot be fooled (the traffic client, the lock, the history)
    Mutant(
        "http-redirect-accepted",
        HTTP,
        "read_answer",
        r"if 300 <= status < 400:\n(\s+)raise fail\(",
        r"if 300 <= status < 400:\n\1return Answer(status=status, body=raw, seconds=seconds)\n\1raise fail(",
        (HTTP_TESTS, "-k", "redirect"),
        "the client takes a 3xx answer as a success (a redirect is not a failure)",
    ),
    Mutant(
        "http-per-read-timeout",
        HTTP,
        "recv_before",
        r"sock\.settimeout\(left\)",
        "pass",
        (HTTP_TESTS, "-k", "silent"),
        "the socket timeout stays per read instead of the time left before the deadline",
    ),
    Mutant(
        "traffic-no-total-deadline",
        "plugins/module_utils/_smoke/traffic.py",
        "send_requests",
        r"timeout = min\(req\.timeout_s, left\)",
        "timeout = req.timeout_s",
        (HTTP_TESTS, "-k", "total_bound_holds"),
        "a request may outlast the bound of all requests (its own timeout only)",
    ),
    Mutant(
        "redact-one-base64-alignment",
        HTTP,
        "secret_forms",
        r"for pad in range\(3\):",
        "for pad in range(1):",
        (HTTP_TESTS, "-k", "echoing"),
        "the key is redacted in base64 only when it starts on a 3-byte boundary",
    ),
    Mutant(
        "redact-no-line-splits",
        HTTP,
        "redact",
        r"if not char\.isspace\(\)\]",
        "]",
        (HTTP_TESTS, "-k", "echoing"),
        "a key split across lines (or padded with whitespace inside) is not redacted",
    ),
    Mutant(
        "lock-swap-unverified",
        LOCK,
        "_swap_out",
        r"if seen\.same_as\(observe\(aside\)\):",
        "if True:",
        (LOCK_TESTS, "-k", "swap"),
        "breaking a lock removes whatever file is there, not the one the run observed",
    ),
    Mutant(
        "lock-break-fresh-lock",
        LOCK,
        "acquire",
        r"if seen is not None and seen\.started\(\) >= since:",
        "if False:",
        (LOCK_TESTS, "-k", "after_this_run_started or concurrent_breakers"),
        "a breaking run also breaks a lock taken after it started (another breaker's: several win)",
    ),
    Mutant(
        "history-lib-outside-build-root",
        HISTORY,
        "restore_fields",
        r'why = _under\(lib, build_root, f"builds/\{build_id\}/\{LIBRARY\}"\)'
        r' if isinstance\(lib, str\) else "no library"',
        'why = ""',
        (HISTORY_RESTORE_TESTS, "-k", "tampered"),
        "a previous rollback accepts a recorded library outside the build root",
    ),
    Mutant(
        "history-any-env-key",
        HISTORY,
        "owned_key",
        r'return key in FIXED_ENV or key\.startswith\("NCCL_"\) or key in extra_keys',
        "return True",
        (HISTORY_RESTORE_TESTS, "-k", "tampered or refusal or allowlist"),
        "a previous rollback re-renders environment variables kdtree does not own (LD_PRELOAD, GCONV_PATH)",
    ),
    Mutant(
        "history-unlocked-write",
        "plugins/module_utils/_history_call.py",
        "run",
        r"with history\.locked\(path\):",
        "with open(os.devnull):",
        (HISTORY_TESTS, "-k", "concurrent"),
        "history writers do not lock the read-modify-write (concurrent writers lose entries)",
    ),
    Mutant(
        "root-path-not-root-owned",
        PATH_SAFETY,
        "unsafe_reason",
        r"if st\.st_uid not in owners:",
        "if False:",
        (PREFLIGHT_TESTS, "-k", "refuses_a_path_another_user_can_write"),
        "a root unit's probe imports from a path owned by another user",
    ),
    Mutant(
        "root-path-writable",
        PATH_SAFETY,
        "unsafe_reason",
        r"if writable and not sticky_parent:",
        "if False:",
        (PREFLIGHT_TESTS, "-k", "refuses_a_path_another_user_can_write"),
        "a root unit's probe imports from a group- or world-writable path",
    ),
    Mutant(
        "venv-any-distribution-name",
        "plugins/module_utils/_venv.py",
        "installed_version",
        r'name\.lower\(\)\.replace\("_", "-"\) != distribution or ',
        "",
        (PREFLIGHT_TESTS, "-k", "ambiguous_venv"),
        "the version check takes the Version: of a dist-info whose METADATA names another distribution",
    ),
    Mutant(
        "probe-ignores-user",
        PREFLIGHT,
        "probe_argv",
        r'argv \+= \["-p", f"User=\{user\}"\]',
        "pass",
        (f"{PREFLIGHT_TESTS}::test_the_probe_runs_as_the_unit_s_user_group_cwd_and_environment",),
        "the preflight probe runs as root although the unit has a User=",
    ),
    Mutant(
        "unit-comment-in-continuation",
        UNIT_ENV,
        "service_settings",
        r'if line\.startswith\(\("#", ";"\)\):',
        'if not pending and line.startswith(("#", ";")):',
        ("tests/unit/plugins/module_utils/test_unit_corpus.py", "-k", "comment_in_continuation"),
        "a comment line inside a continued ExecStart= becomes part of the command line",
    ),
    Mutant(
        "unit-dollar-word-not-split",
        UNIT_ENV,
        "expand_exec_words",
        r'out\.extend\(env\.get\(word\[1:\], ""\)\.split\(\)\)',
        'out.append(env.get(word[1:], ""))',
        (
            "tests/unit/plugins/module_utils/test__unit_env.py::test_exec_dollar_expansion_splits_a_lone_variable_and_keeps_braces_whole",
            f"{PREFLIGHT_TESTS}::test_a_dollar_word_becomes_the_value_s_words_and_braces_keep_one_word",
        ),
        "a lone $VAR in ExecStart= stays one word instead of the value's words",
    ),
    # issue 19: evidence that cannot be fooled
    Mutant(
        "status-nan-dropped-by-max",
        f"{PKG}/telemetry/statusdir.py",
        "nan_max",
        r"if math\.isnan\(value\):\n([ \t]+)return math\.nan\n",
        r"if False:\n\1return math.nan\n",
        (f"{STATUS_READER}::test_the_largest_difference_keeps_nan_in_any_order",),
        "a NaN largest difference vanishes from the summary (Python's max, by order)",
    ),
    Mutant(
        "smoke-nan-not-a-mismatch",
        "plugins/module_utils/_smoke/traffic.py",
        "judge_scheduler",
        r"if after\.nonfinite:",
        "if False:",
        ("tests/unit/plugins/module_utils/test__smoke_traffic.py", "-k", "non_finite"),
        "the traffic check passes a scheduler whose validate statistics hold NaN/inf",
    ),
    Mutant(
        "promote-nan-qualifies",
        PROMOTE,
        "_evidence_problems",
        r"if nonfinite:",
        "if False:",
        (f"{PROMOTE_RULES}[nonfinite-kernel-output]",),
        "the promotion qualifies a host whose validate found NaN/inf kernel outputs",
    ),
    Mutant(
        "status-pid-name-mismatch",
        f"{PKG}/telemetry/statusdir.py",
        "check",
        r"if pid is not None and own != pid:",
        "if False:",
        (f"{STATUS_READER}::test_scan_reads_only_wanted_regular_pid_files_and_names_the_refused",),
        "a copy of one scheduler's status file under another pid's name counts as that scheduler",
    ),
    Mutant(
        "status-freshness",
        f"{PKG}/telemetry/statusdir.py",
        "freshness_problem",
        r"if age > fresh_bound_s\(interval_s\):",
        "if False:",
        (STATUS_READER, "-k", "freshness"),
        "a status file whose publisher stopped writing long ago counts as fresh",
    ),
    Mutant(
        "status-bool-is-a-count",
        f"{PKG}/telemetry/statusdir.py",
        "count_problem",
        r"if isinstance\(value, bool\) or not isinstance\(value, int\):",
        "if not isinstance(value, int):",
        (STATUS_READER, "-k", "wrong_type"),
        "a bool (or a count read the lax way) is taken as a count instead of refused",
    ),
    Mutant(
        "promote-odd-count",
        PROMOTE,
        "_evidence_problems",
        r"if odd:",
        "if False:",
        (f"{PROMOTE_RULES}[bool-row-mismatches]",),
        "the promotion reads a count of the wrong type (False for 0 mismatches) instead of refusing it",
    ),
    Mutant(
        "drain-share-off-by-one",
        ROUTER,
        "check_share",
        r"if len\(leaving\) > allowed:",
        "if len(leaving) > allowed + 1:",
        (ROUTER_TESTS, "-k", "share"),
        "the drain's safety rule lets one more host than the share out of the router at once",
    ),
    Mutant(
        "drain-odd-load-is-idle",
        ROUTER,
        "in_flight",
        r'if "ConnectionRefusedError" in exc.reason:',
        "if True:",
        (ROUTER_TESTS, "-k", "odd_evidence"),
        "any failure to read a host's /v1/loads counts as nothing in flight, not only a refused connection",
    ),
    Mutant(
        "small-file-follows-links",
        "plugins/module_utils/_small_file.py",
        "_open_regular",
        r"info = os\.stat\(path\) if follow else os\.lstat\(path\)",
        "info = os.stat(path)",
        ("tests/unit/plugins/module_utils/test__small_file.py",),
        "the small-file reader follows a link root was not told to follow (kdtree's drop-in, a .pth)",
    ),
    Mutant(
        "build-cache-takes-a-planted-artifact",
        BUILD_CACHE,
        "_entry_problem",
        r"if st\.st_uid not in \(0, uid\):",
        "if False:",
        (BUILD_CACHE_TESTS, "-k", "planted"),
        "an artifact another local user planted in the build cache is installed as root",
    ),
    Mutant(
        "build-lock-follows-a-symlink",
        BUILD_CACHE,
        "open_lock",
        r"os\.O_CREAT \| os\.O_NOFOLLOW \|",
        "os.O_CREAT |",
        (BUILD_CACHE_TESTS, "-k", "symlink"),
        "the compile lock is opened through a planted symlink (truncating a root-only file)",
    ),
    Mutant(
        "build-claim-of-a-killed-run-waited-for",
        BUILD_CACHE,
        "claim",
        r'if state == "gone" or',
        "if False or",
        (BUILD_CACHE_TESTS, "-k", "gone"),
        "a claim left by a killed run makes every host of the next run wait out the bound",
    ),
    Mutant(
        "drain-record-names-another-router",
        DRAIN_RECORD,
        "_same",
        r"if left != right:",
        "if False:",
        (DRAIN_RECORD_TESTS, "-k", "anything_else"),
        "a planted drain record sends the router's API key to its own URL or adds a foreign backend",
    ),
    Mutant(
        "drain-urls-compared-as-written",
        ROUTER,
        "canonical",
        r"return f\"\{scheme\}://\{_host\(host\)\}:\{port\}\{parts\.path\.rstrip\('/'\)\}\"",
        "return url.strip()",
        (ROUTER_UNIT_TESTS, "-k", "written_otherwise or default_ports"),
        "a worker URL spelled otherwise than the router lists it (:08000) is not found (a no-op drain)",
    ),
    Mutant(
        "drain-check-mode-waits",
        "plugins/modules/kdtree_router.py",
        "wait_idle",
        r"if check_mode:",
        "if False:",
        (ROUTER_UNIT_TESTS, "-k", "check_mode"),
        "check mode waits for in-flight requests it never removed (and fails a healthy host)",
    ),
    Mutant(
        "small-file-no-cap",
        "plugins/module_utils/_small_file.py",
        "read_small",
        r"if size > max_bytes:",
        "if False:",
        ("tests/unit/plugins/module_utils/test__small_file.py", "-k", "cap"),
        "a file larger than the cap is read (up to the cap) instead of refused by its size",
    ),
    Mutant(
        "history-pythonpath-first-entry-only",
        HISTORY,
        "restore_fields",
        r'for part in found\["PYTHONPATH"\]\.split\(":"\)\[1:\]:',
        'for part in found["PYTHONPATH"].split(":")[1:1]:',
        (HISTORY_RESTORE_TESTS, "-k", "pythonpath"),
        "a restored PYTHONPATH is checked at its first entry only",
    ),
    Mutant(
        "probe-cwd-contents-unchecked",
        PREFLIGHT,
        "probe_root_paths",
        r"    paths \+= importable_entries\(workdir\)",
        "    pass",
        (PREFLIGHT_TESTS, "-k", "working_directory"),
        "the root probe's working directory is judged by its owner and mode, not by what it holds",
    ),
    Mutant(
        "smoke-chunk-on-the-wall-clock",
        "plugins/module_utils/_smoke/watch.py",
        "watch",
        r"deadline = monotonic\(\) \+ chunk_s",
        "deadline = clock() + chunk_s",
        ("tests/unit/plugins/module_utils/test__smoke_watch.py", "-k", "monotonic"),
        "a smoke chunk's deadline counts on the wall clock, which a step back stretches",
    ),
    Mutant(
        "smoke-timeout-on-the-wall-clock",
        SMOKE,
        "judge",
        r"now = snapshot\.mono_at if run\.started_mono and snapshot\.mono_at else snapshot\.read_at",
        "now = snapshot.read_at",
        ("tests/unit/plugins/module_utils/test__smoke_watch.py", "-k", "monotonic"),
        "the load timeout counts on the wall clock",
    ),
    Mutant(
        "status-freshness-on-the-wall-clock",
        "plugins/module_utils/_status_clock.py",
        "judged_now",
        r"return updated \+ \(mono_now - updated_mono\)",
        "return wall_now",
        ("tests/unit/plugins/module_utils/test__smoke_traffic.py", "-k", "monotonic_clock_when"),
        "a status file's freshness counts on the wall clock, which a step makes stale or fresh",
    ),
    Mutant(
        "rescue-restarts-a-stuck-unit",
        "plugins/plugin_utils/_rescue.py",
        "plan",
        r"fast = bool\(target\) and not stuck and",
        "fast = bool(target) and",
        ("tests/unit/plugins/plugin_utils/test__rescue.py", "-k", "did_not_finish"),
        "the rescue restarts a unit whose stop hung instead of killing it",
    ),
    Mutant(
        "rescue-restarts-the-untouched-run",
        "plugins/plugin_utils/_rescue.py",
        "plan",
        r"undo_restart = fast and not untouched",
        "undo_restart = fast",
        ("tests/unit/plugins/plugin_utils/test__rescue.py", "-k", "before_the_restart"),
        "a deploy that failed before its restart restarts the run that was still serving",
    ),
    Mutant(
        "mode-yaml-boolean-unnamed",
        "plugins/module_utils/_modes.py",
        "mode_problem",
        r"if isinstance\(value, bool\):",
        "if False:",
        ("tests/unit/plugins/module_utils/test__modes.py", "-k", "unquoted"),
        "an unquoted on/off is refused without naming YAML's boolean",
    ),
    Mutant(
        "kernel-accumulator-rows",
        KERNEL,
        "c++:attend",
        r"lr\[i\] = rg \* 16 \+ g \+ 8 \* i;",
        "lr[i] = rg * 16 + 2 * g + i;",
        (f"{CPU_EMU}[bm32-h8n4-tree-tail]",),
        "the kernel's map of the mma accumulator fragment to rows (c0/c1 row g, c2/c3 row g+8) is wrong",
        torch=True,
    ),
    Mutant(
        "kernel-mask-index",
        KERNEL,
        "c++:attend",
        r"static_cast<int64_t>\(tok\[i\]\) \* total \+ j\]",
        "static_cast<int64_t>(tok[i]) * n + j]",
        (f"{CPU_EMU}[bm32-h8n4-tree-tail]", f"{CPU_EMU}[batch-mixed-bm32]"),
        "the tree mask's row stride is the draft count, not prefix + draft",
        torch=True,
    ),
    Mutant(
        "kernel-k-scale-dropped",
        KERNEL,
        "c++:attend",
        r"const float scale2k = scale2 \* a\.k_scale;",
        "const float scale2k = scale2;",
        (f"{CPU_EMU}[fp8-scales-i32-bm32]",),
        "prefix scores are not multiplied by k_scale",
        torch=True,
    ),
    Mutant(
        "kernel-unit-start-rounds-up",
        KERNEL,
        "c++:unit_start",
        r"u \* total / used;",
        "(u * total + used - 1) / used;",
        (
            f"{CPU_EMU_TESTS}::test_the_partition_is_the_wave_filling_plan_and_no_unit_costs_more_than_its_share",
        ),
        "the units' first positions round up: the plan is not the even cut of the batch's cost it defines",
        torch=True,
    ),
    Mutant(
        "kernel-unit-of-off-by-one",
        KERNEL,
        "c++:unit_of",
        r"\(\(p \+ 1\) \* used - 1\) / total;",
        "p * used / total;",
        (f"{CPU_EMU}[partition-mixed-bm32]", f"{CPU_EMU}[partition-mixed-bm64-causal-fp8]"),
        "the unit that holds a cost position is one too low at uneven cuts: the combine misses a unit",
        torch=True,
    ),
)


class SiteNotFound(Exception):
    pass


def region_span(text: str, name: str) -> tuple[int, int]:
    """[start, end) of the top-level `def name(` block: up to the next line that starts at column 0
    with something other than a comment or the `)` of a signature split over lines. `c++:name`: the
    C++ function defined by the line at column 0 that holds `name(`, up to the next `}` at column 0."""
    if name.startswith("c++:"):
        func = name[len("c++:") :]
        match = re.search(rf"^[A-Za-z_][^\n;]*\b{re.escape(func)}\([^;]*?\{{", text, re.M)
        if match is None:
            raise SiteNotFound(f"no C++ function {func}()")
        close = re.search(r"^\}", text[match.end() :], re.M)
        return match.start(), match.end() + close.end() if close else len(text)
    match = re.search(rf"^(?:async )?def {re.escape(name)}\(", text, re.M)
    if match is None:
        raise SiteNotFound(f"no top-level def {name}()")
    body_start = text.find("\n", match.end()) + 1 or len(text)
    following = re.search(r"^(?=[^\s#)])", text[body_start:], re.M)  # `)` closes a long signature
    return match.start(), body_start + following.start() if following else len(text)


def mutate_text(text: str, mutant: Mutant) -> str:
    start, end = region_span(text, mutant.region)
    body = text[start:end]
    found = list(re.finditer(mutant.pattern, body))
    if len(found) != 1:
        raise SiteNotFound(f"/{mutant.pattern}/ matches {len(found)} times in {mutant.region}() (wanted 1)")
    changed = re.sub(mutant.pattern, mutant.replacement, body, count=1)
    if changed == body:
        raise SiteNotFound("the replacement changes nothing")
    return text[:start] + changed + text[end:]


def tree_files(root: Path) -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sorted(
        {p for p in out.split("\0") if p and p.split("/", 1)[0] not in SKIP_TOP and os.path.lexists(root / p)}
    )


def copy_tree(root: Path, files: list[str], dest: Path) -> None:
    for rel in files:
        src, dst = root / rel, dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)


def run_pytest(pytest: list[str], tree: Path, args: tuple[str, ...], timeout: float) -> tuple[int, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    cmd = [*pytest, "-q", "-x", "-p", "no:cacheprovider", "-o", "addopts=", *args]
    try:
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:.0f} s"
    return proc.returncode, proc.stdout + proc.stderr


def pytest_command(args: argparse.Namespace, mutant: Mutant) -> list[str]:
    """The tools venv's pytest, or for a mutant whose tests need torch the torch venv's."""
    return [str(args.torch_python), "-m", "pytest"] if mutant.torch else [args.pytest]


def test_dir_groups(selection: tuple[str, ...]) -> list[tuple[str, ...]]:
    """`selection` split by test directory (tests/<dir>/...), order kept within each."""
    groups: dict[str, list[str]] = {}
    for arg in selection:
        groups.setdefault("/".join(arg.split("::")[0].split("/")[:2]), []).append(arg)
    return [tuple(args) for args in groups.values()]


def last_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def result_key(mutant: Mutant, root: Path = ROOT) -> str:
    """The hash of what decides a mutant's result: its definition, the file it mutates and its selected
    test files with their directory's conftest.py (a -k expression is part of the definition)."""
    digest = hashlib.sha256(repr(mutant).encode())
    files = [mutant.path]
    for arg in mutant.tests:
        if arg.startswith("tests/"):
            path = arg.split("::")[0]
            files += [path, str(Path(path).parent / "conftest.py") if path.endswith(".py") else path]
    for name in dict.fromkeys(files):
        path = root / name
        digest.update(name.encode() + b"\0")
        if path.is_file():
            digest.update(path.read_bytes())
        elif path.is_dir():
            for sub in sorted(path.rglob("*.py")):
                digest.update(str(sub.relative_to(root)).encode() + b"\0" + sub.read_bytes())
        else:
            digest.update(b"<missing>")
    return digest.hexdigest()[:32]


def results_dir() -> Path:
    return devcache.home() / "mutation-results"


def kept(mutant: Mutant) -> bool:
    """Was this mutant, exactly as it is now, killed before?"""
    path = results_dir() / f"{mutant.name}-{result_key(mutant)}.json"
    try:
        return json.loads(path.read_text()).get("verdict") == "KILLED"
    except (OSError, ValueError):
        return False


def keep(mutant: Mutant, seconds: float) -> None:
    """Remember a killed mutant (written whole, then renamed: a reader never sees half a file)."""
    where = results_dir()
    where.mkdir(parents=True, exist_ok=True)
    (where / devcache.LINKED).touch()
    path = where / f"{mutant.name}-{result_key(mutant)}.json"
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"verdict": "KILLED", "seconds": round(seconds, 1), "at": time.time()}))
    tmp.rename(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pytest", default=str(ROOT / ".venv" / "bin" / "pytest"))
    parser.add_argument("--torch-python", default=str(TORCH_PYTHON), help="python of the torch venv")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per pytest run")
    parser.add_argument("--only", action="append", default=[], help="run only this mutant (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary trees")
    parser.add_argument("--fresh", action="store_true", help="run every mutant, even one killed before")
    args = parser.parse_args(argv)
    listed = [m for m in MUTANTS if not args.only or m.name in args.only]
    unknown = set(args.only) - {m.name for m in MUTANTS}
    if unknown:
        print(f"mutation-check: unknown mutant(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    width = max(len(m.name) for m in listed)
    mutants = listed if args.fresh else [m for m in listed if not kept(m)]
    for mutant in listed:
        if mutant not in mutants:
            print(f"{'KILLED':<9} {mutant.name:<{width}}  (kept)  {mutant.why}")
    if not mutants:
        print(f"mutation-check: {len(listed)}/{len(listed)} mutants killed ({len(listed)} kept)")
        return 0
    files = tree_files(ROOT)
    work = Path(tempfile.mkdtemp(prefix="kdtree-mutation-"))
    try:
        baseline = work / "baseline"
        copy_tree(ROOT, files, baseline)
        started = time.monotonic()
        for torch_venv in (False, True):
            selection = tuple(
                arg
                for m in mutants
                if m.torch == torch_venv
                for arg in m.tests
                if arg != "-k" and not _is_k_expr(m, arg)
            )
            pytest = [str(args.torch_python), "-m", "pytest"] if torch_venv else [args.pytest]
            # one pytest run per test directory: each has its own conftest module (they cannot share a run)
            for group in test_dir_groups(tuple(dict.fromkeys(selection))):
                rc, output = run_pytest(pytest, baseline, group, args.timeout)
                if rc != 0:
                    print(
                        f"mutation-check: the unmutated selections do not pass (pytest exit {rc}):",
                        file=sys.stderr,
                    )
                    print(output[-4000:], file=sys.stderr)
                    return 2
        print(f"baseline  unmutated tree, every selection passes  {time.monotonic() - started:5.1f} s")
        failures = 0
        for mutant in mutants:
            started = time.monotonic()
            tree = work / mutant.name
            copy_tree(ROOT, files, tree)
            target = tree / mutant.path
            try:
                target.write_text(mutate_text(target.read_text(), mutant))
            except (SiteNotFound, FileNotFoundError) as exc:
                failures += 1
                print(f"NOT-FOUND {mutant.name:<{width}}  mutation site not found in {mutant.path}: {exc}")
                continue
            rc, output = run_pytest(pytest_command(args, mutant), tree, mutant.tests, args.timeout)
            seconds = time.monotonic() - started
            verdict = {0: "SURVIVED", 1: "KILLED"}.get(rc, "ERROR")
            failures += verdict != "KILLED"
            detail = (
                mutant.why if verdict == "KILLED" else f"{mutant.why}; pytest exit {rc}: {last_line(output)}"
            )
            print(f"{verdict:<9} {mutant.name:<{width}}  {seconds:5.1f} s  {detail}", flush=True)
            if verdict == "KILLED":
                keep(mutant, seconds)
            if not args.keep:
                shutil.rmtree(tree, ignore_errors=True)
        killed = len(listed) - failures
        print(f"mutation-check: {killed}/{len(listed)} mutants killed ({len(listed) - len(mutants)} kept)")
        return 0 if failures == 0 else 1
    finally:
        if args.keep:
            print(f"mutation-check: trees kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def _is_k_expr(mutant: Mutant, arg: str) -> bool:
    """Is `arg` the expression after a -k in the mutant's arguments?"""
    tests = mutant.tests
    return any(tests[i] == "-k" and tests[i + 1] == arg for i in range(len(tests) - 1))


if __name__ == "__main__":
    sys.exit(main())
