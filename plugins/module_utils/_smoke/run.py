"""The one run a kdtree_smoke check watches, handed between its chunks.

The kdtree_smoke module returns it as `run`; the action plugin passes that dict back unchanged as
the module's internal `_run` option (RUN_OPTION) of the next chunk. Shared by the module
(plugins/modules/kdtree_smoke.py, module_utils/_smoke/check.py) and the action plugin
(plugins/action/kdtree_smoke.py); stdlib only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# The module option that carries the run between chunks. Internal, like community.general's
# iptables_state `_back`: in the module's argument_spec but not in its DOCUMENTATION; only the
# action plugin sets it, and it refuses a task that does.
RUN_OPTION = "_run"
# Its suboptions, as AnsibleModule's argument_spec writes them (RunState's fields; the module's
# RETURN documents them under `run`).
RUN_SUBOPTIONS: dict[str, dict[str, Any]] = {
    "invocation_id": {"type": "str", "default": ""},
    "baseline_nrestarts": {"type": "int", "default": 0},
    "started_at": {"type": "float", "default": 0.0},
    "started_mono": {"type": "float", "default": 0.0},
    "healthy_since": {"type": "float"},
    "progress_at": {"type": "float", "default": 0.0},
    "health": {"type": "str", "default": ""},
    "journal": {"type": "dict", "default": {}},
}


@dataclass(frozen=True)
class RunState:
    """Which run is watched and what the previous chunks saw of it.

    invocation_id: the unit's InvocationID of the watched run ("" = not known yet: the first chunk
    of a check without a restart takes the unit's current run).
    baseline_nrestarts: NRestarts right after the restart; more means systemd restarted the unit.
    started_at: epoch seconds of the restart (or of the first look): the journal is read from here.
    started_mono: the host's monotonic clock (CLOCK_MONOTONIC, one clock for every process of the
    host) at that moment; timeouts count from here, so a step of the wall clock neither stretches nor
    cuts them (0: not known, an older run state: the wall clock is used).
    healthy_since: the judge's clock (started_mono's, or epoch seconds when that is 0) since which
    every poll found the run healthy, None when the last poll did not (the settle time may span chunks).
    progress_at: the judge's clock at the last poll that read a new journal line of the run or a changed
    health answer (the no-progress timeout counts from here); health: that last health answer.
    journal: what the check keeps of the run's journal (module_utils/_journal.JournalState as plain
    data: the cursor to read on from, the markers, the fatal excerpt, the last lines).
    """

    invocation_id: str = ""
    baseline_nrestarts: int = 0
    started_at: float = 0.0
    started_mono: float = 0.0
    healthy_since: float | None = None
    progress_at: float = 0.0
    health: str = ""
    journal: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_option(cls, value: dict[str, Any] | None) -> RunState:
        """From the module's `_run` option or a chunk result's `run` (missing keys take defaults)."""
        value = value or {}
        healthy_since = value.get("healthy_since")
        return cls(
            invocation_id=str(value.get("invocation_id") or ""),
            baseline_nrestarts=int(value.get("baseline_nrestarts") or 0),
            started_at=float(value.get("started_at") or 0.0),
            started_mono=float(value.get("started_mono") or 0.0),
            healthy_since=None if healthy_since is None else float(healthy_since),
            progress_at=float(value.get("progress_at") or 0.0),
            health=str(value.get("health") or ""),
            journal=dict(value.get("journal") or {}),
        )

    def as_option(self) -> dict[str, Any]:
        return asdict(self)
