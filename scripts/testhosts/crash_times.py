"""On the crashed host, from its journal since a given time (argv[1], epoch seconds: the start of the
benchmark's deploy), whatever the host's earlier deploys left: when the run's traceback ended (its last
line), when systemd reloaded next (the rescue's first daemon-reload, after it put back or removed the
drop-in) and when the unit's next run started (`Started sglang.service`, the rescue's restart). Prints the
three epoch times, one per line, `none` for one not found. With `--started` after the time: only when the
unit's next run started from then on (a serving group's other node, restarted by its own rescue).
The time may be fractional."""

from __future__ import annotations

import json
import subprocess
import sys

UNIT = "sglang.service"
# systemd's catalog id of "Started <unit>" (a start job that finished)
STARTED_ID = "39f53479d3a045ac8e11786248231fbf"


def _message(entry: dict) -> str:
    message = entry.get("MESSAGE", "")
    if isinstance(message, list):  # non-UTF-8 bytes
        message = bytes(message).decode("utf-8", "replace")
    return message


def times(unit_entries: list[dict], systemd_entries: list[dict]) -> tuple[float | None, ...]:
    """(traceback end, next reload, next start) from the unit's and systemd's own journal entries."""

    def at(entry: dict) -> float:
        return int(entry["__REALTIME_TIMESTAMP"]) / 1e6

    end = None
    in_traceback = False
    for entry in unit_entries:
        message = _message(entry)
        if "Traceback (most recent call last)" in message:
            in_traceback = True
        elif in_traceback and not message.startswith(" "):
            end = at(entry)
            break
    if end is None:
        return None, None, None
    reload = next(
        (at(e) for e in systemd_entries if at(e) >= end and _message(e).startswith("Reloading")), None
    )
    started = next((at(e) for e in unit_entries if at(e) >= end and e.get("MESSAGE_ID") == STARTED_ID), None)
    return end, reload, started


def _journal(*match: str, since: str) -> list[dict]:
    out = subprocess.run(
        ["journalctl", *match, "-o", "json", "--no-pager", f"--since=@{since}"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


if __name__ == "__main__":
    since = float(sys.argv[1])
    entries = _journal("-u", UNIT, since=str(int(since)))
    if sys.argv[2:] == ["--started"]:
        starts = [e for e in entries if e.get("MESSAGE_ID") == STARTED_ID]
        started = next((e for e in starts if int(e["__REALTIME_TIMESTAMP"]) / 1e6 >= since), None)
        print("none" if started is None else f"{int(started['__REALTIME_TIMESTAMP']) / 1e6:.6f}")
    else:
        found = times(entries, _journal("_PID=1", since=str(int(since))))
        print("\n".join("none" if t is None else f"{t:.6f}" for t in found))
