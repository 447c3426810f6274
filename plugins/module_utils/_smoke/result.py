"""The kdtree_smoke module's result: one Verdict per module call and the dict it returns.

The owner of the result's shape (the module's RETURN documents exactly RESULT_KEYS) and of the
failure message's format. judge() (module_utils/_smoke/judge.py) and the watch loop
(module_utils/_smoke/watch.py) answer with a Verdict; Verdict.result() is what exit_json sends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.run import RunState

# The keys of every result (RETURN documents exactly these).
RESULT_KEYS = (
    "state",
    "msg",
    "why",
    "detail",
    "health",
    "schedulers",
    "progress",
    "elapsed_s",
    "suppressed",
    "benign",
    "traffic",
    "run",
    "changed",
)


NO_TRAFFIC: dict[str, Any] = {
    "ok": True,
    "line": "traffic: none sent",
    "schedulers": [],
    "answers": [],
    "decode": None,
}


@dataclass(frozen=True)
class Verdict:
    """judge()'s answer. `follow_journal` (not returned) says the detail needs a later journal read."""

    state: str
    msg: str
    run: RunState
    health: str = ""
    schedulers: list[dict[str, Any]] = field(default_factory=list)
    progress: str = ""
    elapsed_s: float = 0.0
    why: str = ""
    detail: str = ""
    suppressed: int = 0
    benign: list[str] = field(default_factory=list)
    traffic: dict[str, Any] = field(default_factory=lambda: dict(NO_TRAFFIC))
    follow_journal: str = ""  # "", "fatal" (traceback in progress) or "unit" (unit died or restarted)

    def result(self, changed: bool) -> dict[str, Any]:
        out = {key: getattr(self, key) for key in RESULT_KEYS if key not in ("run", "changed")}
        out["schedulers"] = [dict(item) for item in self.schedulers]
        out["benign"] = list(self.benign)
        out["traffic"] = json.loads(json.dumps(self.traffic))
        out.update(run=self.run.as_option(), changed=changed)
        return out


def failure_msg(unit: str, why: str, elapsed_s: float, detail: str) -> str:
    msg = f"{unit}.service: {why} ({elapsed_s:.1f} s after the restart)"
    return msg + "\n" + detail if detail else msg


def failed_verdict(unit: str, run: RunState, why: str, now: float) -> Verdict:
    """A run that failed before there was anything to judge (a restart, the host unreadable)."""
    elapsed = now - run.started_at
    return Verdict(
        state="failed",
        msg=failure_msg(unit, why, elapsed, ""),
        run=run,
        elapsed_s=round(elapsed, 2),
        why=why,
    )
