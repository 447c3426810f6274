"""scripts/testhosts/crash_times.py (make bench-smoke --batch): the crashed host's traceback end, the
rescue's first reload and the next `Started` come from the journal after the traceback only, so the
figures are the same whatever the host's history (an earlier run's start or reload does not count, and a
put-back drop-in reads like a removed one)."""

from __future__ import annotations

import importlib.util

from conftest import ROOT

_spec = importlib.util.spec_from_file_location(
    "crash_times", ROOT / "scripts" / "testhosts" / "crash_times.py"
)
crash_times = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(crash_times)


def _entry(at: float, message: str, **fields: str) -> dict:
    return {"__REALTIME_TIMESTAMP": str(int(at * 1e6)), "MESSAGE": message, **fields}


STARTED = {"MESSAGE_ID": crash_times.STARTED_ID}


def test_times_are_read_after_the_traceback_only():
    unit = [
        _entry(90.0, "Started sglang.service - SGLang.", **STARTED),  # an earlier run (history)
        _entry(100.0, "Started sglang.service - SGLang.", **STARTED),  # this deploy's restart
        _entry(106.0, "Traceback (most recent call last):"),
        _entry(106.1, '  File "x.py", line 1'),
        _entry(106.2, "RuntimeError: boom"),
        _entry(108.0, "Started sglang.service - SGLang.", **STARTED),  # the rescue's restart
    ]
    systemd = [
        _entry(95.0, "Reloading."),
        _entry(106.9, "Reloading requested from client PID 7"),
        _entry(107.5, "Reloading."),
    ]
    assert crash_times.times(unit, systemd) == (106.2, 106.9, 108.0)


def test_a_missing_piece_is_none():
    unit = [_entry(106.0, "Traceback (most recent call last):"), _entry(106.2, "RuntimeError: boom")]
    assert crash_times.times(unit, [_entry(95.0, "Reloading.")]) == (106.2, None, None)
    assert crash_times.times([_entry(1.0, "ok")], []) == (None, None, None)
