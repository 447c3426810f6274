"""The watch loop of one module call: poll the host and judge it until ok, failed or the chunk ends.

A failure's detail may still be arriving (a dying process's traceback reaches the journal after its
first line, and after the unit state changed): complete_journal() reads on before the verdict is
returned.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.host import (
    HostError,
    Query,
    Snapshot,
    read_host,
)
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.judge import Wanted, excerpt, judge
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.result import (
    Verdict,
    failed_verdict,
    failure_msg,
)

# After a fatal line: let the rest of the traceback reach the journal before quoting it.
FATAL_GRACE_S = 0.3
# After a restart or a dead unit: the dying process's traceback may reach the journal later.
JOURNAL_RETRIES = 5
JOURNAL_RETRY_S = 0.2


Reader = Callable[..., Snapshot]


def complete_journal(
    verdict: Verdict, query: Query, read: Reader, sleep: Callable[[float], None], marker: Any = None
) -> Verdict:
    """Quote the whole traceback: a dying process's lines reach the journal after its first one,
    and after the unit state changed. Each re-read continues from the run's journal cursor."""
    if not verdict.follow_journal:
        return verdict
    journal_only = frozenset(("journal",))
    state = verdict.run.journal
    try:
        if verdict.follow_journal == "fatal":
            sleep(FATAL_GRACE_S)
            snap = read(query, marker, parts=journal_only, journal=state)
        else:
            for attempt in range(JOURNAL_RETRIES):
                if attempt:
                    sleep(JOURNAL_RETRY_S)
                snap = read(query, marker, parts=journal_only, journal=state)
                state = snap.journal_state or state
                if snap.fatal:
                    break
    except HostError:
        return replace(verdict, follow_journal="")  # the failure stands, with what was read before
    detail = excerpt(snap)
    return replace(
        verdict,
        detail=detail,
        msg=failure_msg(query.unit, verdict.why, verdict.elapsed_s, detail),
        run=replace(verdict.run, journal=snap.journal_state or verdict.run.journal),
        follow_journal="",
    )


def watch(
    query: Query,
    wanted: Wanted,
    chunk_s: float,
    poll_s: float,
    marker: Any = None,
    read: Reader = read_host,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
) -> Verdict:
    """Poll read_host + judge every poll_s until ok or failed, or until chunk_s has passed (pending, on
    the monotonic clock: a step of the host's wall clock neither stretches nor cuts a chunk).

    Each poll hands read_host the journal state of the previous one (in the run), so the journal is
    read on from its cursor."""
    deadline = monotonic() + chunk_s
    while True:
        try:
            verdict = judge(read(query, marker, journal=wanted.run.journal), wanted)
            if verdict.state == "failed":
                verdict = complete_journal(verdict, query, read, sleep, marker)
        except HostError as exc:
            return failed_verdict(wanted.unit, wanted.run, f"cannot read the host: {exc}", clock())
        if verdict.state in ("failed", "ok"):
            return verdict
        wanted = replace(wanted, run=verdict.run)
        if monotonic() >= deadline:
            return verdict
        sleep(poll_s)
