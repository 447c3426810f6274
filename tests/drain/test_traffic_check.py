"""scripts/testhosts/traffic.py's reading of the hosts' request logs against the router's worker list
(what molecule batch and make bench-drain assert on): synthetic logs, no router."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "testhosts"))
import traffic

A, B = "http://10.0.0.1:30000", "http://10.0.0.2:30000"


def _summary(changes: list[tuple[float, float, list[str]]]) -> dict:
    return {
        "started": 100.0,
        "ended": 200.0,
        "sent": 10,
        "answered": 10,
        "failed": 0,
        "failures": {},
        "changes": [{"t": t, "prev_t": p, "listed": listed} for t, p, listed in changes],
    }


def _log(tmp: Path, name: str, entries: list[tuple[str, float, str, bool]]) -> Path:
    path = tmp / name
    lines = [
        json.dumps({"event": e, "t": t, "id": i, "client": "10.0.0.9", "pid": 1, "ready": r})
        for e, t, i, r in entries
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_out_windows_run_from_the_first_sample_without_the_worker_to_the_last_one(tmp_path: Path) -> None:
    s = _summary([(100.0, 0.0, [A, B]), (120.0, 119.9, [B]), (140.0, 139.9, [A, B]), (190.0, 189.9, [B])])
    assert traffic.out_windows(s, A) == [(120.0, 139.9), (190.0, 200.0)]
    assert traffic.out_windows(s, B + "/") == []


def test_check_counts_cut_requests_and_those_that_reached_a_host_while_out(tmp_path: Path) -> None:
    s = _summary([(100.0, 0.0, [A, B]), (120.0, 119.9, [B]), (140.0, 139.9, [A, B])])
    a = _log(
        tmp_path,
        "a.jsonl",
        [
            ("arrived", 110.0, "1", True),
            ("answered", 110.2, "1", True),
            ("arrived", 120.3, "2", True),  # within the grace after the sample that saw A gone
            ("answered", 120.5, "2", True),
            ("arrived", 125.0, "3", True),  # reached A while the router did not list it
            ("answered", 125.2, "3", True),
            ("arrived", 130.0, "w", False),  # the server's own warm-up
            ("arrived", 150.0, "4", True),  # cut: never answered
        ],
    )
    b = _log(tmp_path, "b.jsonl", [("arrived", 50.0, "old", True), ("arrived", 111.0, "5", True)])
    seen = traffic.check(s, {A: a, B: b})
    assert seen["hosts"][A] == {"arrived": 4, "cut": 1, "out_windows": [19.9], "reached_while_out": 1}
    assert seen["hosts"][B] == {"arrived": 1, "cut": 1, "out_windows": [], "reached_while_out": 0}
    assert (seen["cut"], seen["reached_while_out"]) == (2, 1)


def test_check_refuses_missing_evidence(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="never sampled"):
        traffic.check(_summary([]), {A: tmp_path / "a.jsonl"})
    with pytest.raises(SystemExit, match="no request log"):
        traffic.check(_summary([(100.0, 0.0, [A])]), {A: tmp_path / "missing.jsonl"})
