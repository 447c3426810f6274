"""A fake host for the smoke check's execute() (module_utils/_smoke/check): read/restart/sleep/clock of
a healthy unit with one marked scheduler, and the kdtree_smoke module's parameters. Imported by its
collection path (see collection_tree.py).
"""

from __future__ import annotations

from typing import Any

from ansible_collections.kdtree.fleet.plugins.module_utils._smoke import check as sc
from ansible_collections.kdtree.fleet.tests.unit.helpers.collection_tree import PATCH_DIR

INVOCATION = "0123456789abcdef0123456789abcdef"
T0 = 1_764_490_000.0


class Host:
    """read/restart/sleep/clock for execute(): a healthy unit with one marked scheduler."""

    def __init__(self, hu, marker_state: str = "active", health: str = "200") -> None:
        self.hu = hu
        self.now = T0
        self.invocation = INVOCATION
        self.nrestarts = 0
        self.health = health
        self.marker_state = marker_state
        self.restarts: list[tuple[str, float]] = []
        self.reads: list[frozenset | None] = []
        self.queries: list[tuple] = []  # (query, journal state) of each read

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def restart(self, unit: str, timeout_s: float) -> None:
        self.restarts.append((unit, timeout_s))
        self.invocation = "a" * 32
        self.nrestarts = 3
        self.now += 1.0

    def read(self, query, marker=None, parts=None, journal=None):
        self.reads.append(parts)
        self.queries.append((query, journal))
        hu = self.hu
        props = {"ActiveState": "active", "InvocationID": self.invocation, "NRestarts": str(self.nrestarts)}
        journal = []
        markers = []
        if marker is not None:
            journal = [marker.format_line({"pid": 101, "state": self.marker_state})]
            markers, _fallbacks = hu.parse_journal(journal, marker)
        return hu.Snapshot(
            read_at=self.now,
            invocation_id=query.invocation_id or self.invocation,
            props=props,
            journal=journal,
            markers=markers,
            health=self.health,
            schedulers=[hu.Process(pid=101, title="sglang::scheduler_TP0", environ={"NCCL_ALGO": "Ring"})],
        )


def params(**over: Any) -> dict[str, Any]:
    """kdtree_smoke's parameters (as Ansible passes them) for execute(): `over` replaces some."""
    base = {
        "unit": "sglang",
        "restart": False,
        "restart_timeout_s": 300.0,
        "_run": {"invocation_id": "", "baseline_nrestarts": 0, "started_at": 0.0, "healthy_since": None},
        "chunk_s": 0.0,
        "timeout_s": 900.0,
        "poll_s": 0.25,
        "settle_s": 0.0,
        "health_url": "http://127.0.0.1:30000/health",
        "expected_schedulers": 1,
        "scheduler_prefix": "sglang::scheduler",
        "marker_state": "active",
        "patch_dir": str(PATCH_DIR),
        "nccl_env": {"NCCL_ALGO": "Ring"},
        "fail_on_error": True,
        "stall_timeout_s": 0.0,
        "status_dir": "",
        "benign_tracebacks": ["OpenAIServingResponses init traceback:"],
        "extra_benign_tracebacks": [],
    }
    base.update(over)
    return base


def execute(host: Host, **over: Any) -> dict[str, Any]:
    """execute() on `host` with params(**over)."""
    return sc.execute(
        params(**over),
        read=host.read,
        restart=host.restart,
        sleep=host.sleep,
        clock=host.clock,
        monotonic=host.clock,
    )
