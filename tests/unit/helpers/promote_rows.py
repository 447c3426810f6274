"""Report rows for the promotion's judge (plugin_utils/_promote.qualify): a row that qualifies
(good_row: a healthy deploy in validate, 2 of 2 schedulers, 1200 compared, speedup 1.50), its schedulers
and timing buckets, and the status files of a fixture host (tests/unit/helpers/report_host.py) whose gathered
row qualifies. Used by test__promote.py beside this file and tests/roles/test_sglang_window.py; imported
by its collection path, as ansible-test units imports test files.
"""

from __future__ import annotations

import time

from ansible_collections.kdtree.fleet.plugins.module_utils import _history as history
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _promote as promote
from ansible_collections.kdtree.fleet.tests.unit.helpers.collection_tree import PATCH_DIR
from ansible_collections.kdtree.fleet.tests.unit.helpers.report_host import (
    counters,
    status,
    status_timing,
)

T0 = 1_790_000_000.0  # the deploy's start (epoch s) in the rows below
STARTED = time.strftime(promote.HISTORY_TIME, time.gmtime(T0))


def scheduler(pid: int, compared: int = 600, buckets: list | None = None, **over) -> dict:
    """One scheduler's report entry; its own timing is `buckets` (default: one bucket, speedup 1.5)."""
    item = {
        "pid": pid,
        "title": f"sglang::scheduler_TP{pid % 10}",
        "mode": "validate",
        "state": "active",
        "process_start": T0 + 5,
        "since": T0 + 30,
        "updated": T0 + 900,
        "compared": compared,
        "mismatches": 0,
        "max_diff": 0.004,
        "runtime_fallbacks": 0,
        "fresh": "",
        "speed": {"buckets": buckets if buckets is not None else [timing_bucket()]},
    }
    return {**item, **over}


def timing_bucket(calls: int = 200, original_s: float = 3.0, kernel_s: float = 2.0, **over) -> dict:
    """One shape bucket of validate's timing (the patch's telemetry/timing.py), speedup 1.5 by default."""
    item = {"batch": 1, "draft": 4, "prefix": "le1024", "heads": 16, "timed_calls": calls}
    return {**item, "original_s": original_s, "kernel_s": kernel_s, **over}


def good_row(**over) -> dict:
    """A host that qualifies: healthy deploy in validate, 2 of 2 schedulers, 1200 compared."""
    deploy = {
        "id": "d1",
        "result": "healthy",
        "rolled_back_to": "",
        "why": "",
        "when": STARTED,
        "started": STARTED,
        "build_id": "0123456789abcdef",
    }
    row = {
        "host": "gpu-1",
        "unit": "sglang.service",
        "unit_state": "active/running",
        "health": "ok",
        "node_rank": 0,
        "deployed": True,
        "build_id": "0123456789abcdef",
        "running_build_ids": ["0123456789abcdef"],
        "sglang_versions": ["0.5.23"],
        "sglang_window": ["0.5.22", "0.5.23"],
        "sglang_in_window": True,
        "patch_digest": "fedcba987654",
        "mode": "validate",
        "marker_state": "active",
        "schedulers_running": 2,
        "schedulers_patched": 2,
        "schedulers_expected": 2,
        "schedulers": [scheduler(101), scheduler(102, buckets=[timing_bucket(batch=8)])],
        "runtime_fallbacks": 0,
        "runtime_fallback_reason": "",
        "validate_compared": 1200,
        "validate_mismatches": 0,
        "validate_max_diff": 0.004,
        # 400 timed calls, 6 s of the original against 4 s of the kernel: speedup 1.50
        "speed": {"buckets": [timing_bucket(), timing_bucket(batch=8)]},
        "current_deploy": dict(deploy),
        "last_deploy": dict(deploy),
        "errors": [],
        "problems": [],
    }
    row.update(over)
    return row


def judge(row: dict, **kw) -> tuple[bool, str]:
    kw.setdefault("min_compared", 1000)
    kw.setdefault("tolerance", 0.02)
    kw.setdefault("reader", promote.status_reader(PATCH_DIR))
    return promote.qualify(row, **kw)


def write_schedulers(fixture, since: float, compared: int = 700, sglang: str = "0.5.23", **validate) -> None:
    for proc in (fixture.tp0, fixture.tp1):
        fixture.write_status(
            proc.pid,
            status(
                proc.pid,
                schema=1,
                title="sglang::scheduler_TP0",
                since=since,
                updated=time.time(),
                build_id="0123456789abcdef",
                sglang=sglang,
                counters=counters(0, {"validate": compared}),
                validate={"compared": compared, "mismatches": 0, "max_diff": 0.003, **validate},
                timing=status_timing(timing_bucket(calls=150)),
            ),
        )


def date_deploy(fixture, started: float) -> None:
    entries = history.load(str(fixture.history))
    entries[-1]["started"] = time.strftime(promote.HISTORY_TIME, time.gmtime(started))
    history.save(str(fixture.history), entries)
