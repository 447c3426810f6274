"""The smoke check's journal reader (plugins/module_utils/_journal.py) on the SGLang test double's
journal noise (tests/doubles, not shipped). The reader's own tests:
tests/unit/plugins/module_utils/test__journal.py.
"""

from __future__ import annotations

import subprocess
import sys

from ansible_collections.kdtree.fleet.tests.unit.helpers.journal_records import entry, feed
from conftest import ROOT


def journald_lines(raw: bytes, line_max: int = 48 * 1024) -> list[bytes]:
    """A stdout stream as journald stores it: one entry per line, lines cut every LineMax bytes."""
    out = []
    for line in raw.split(b"\n")[:-1]:
        out += [line[i : i + line_max] for i in range(0, len(line), line_max)] or [b""]
    return out


def test_the_test_double_s_journal_noise_is_read_without_a_fatal_line(marker):
    """The SGLang double's SGLANG_DOUBLE_LOG_BYTES / _BENIGN_TRACEBACK / _FLOOD_LINES output, as a
    molecule host's journal would hold it, then the marker: no crash, no fatal line, the marker."""
    double = ROOT / "tests" / "doubles" / "sglang_double"
    program = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from sglang._double.logs import configure_logger\n"
        "from sglang._double.knobs import Knobs\n"
        "from sglang._double.scheduler import _journal_noise\n"
        "configure_logger(' TP0')\n"
        "_journal_noise(Knobs.from_env())\n"
    )
    env = {
        "SGLANG_DOUBLE_LOG_BYTES": "1",
        "SGLANG_DOUBLE_BENIGN_TRACEBACK": "1",
        "SGLANG_DOUBLE_FLOOD_LINES": "20",
    }
    raw = subprocess.run(
        [sys.executable, "-c", program, str(double)], env=env, capture_output=True, timeout=60, check=True
    ).stderr
    lines = [*journald_lines(raw), marker.format_line({"pid": 101, "state": "active"}).encode()]
    cut = [line for line in lines if len(line) == 48 * 1024]
    assert cut and not cut[0].decode("utf-8", "ignore").encode() == cut[0]  # cut inside a character
    state, new = feed(*(entry(line, n) for n, line in enumerate(lines)), marker=marker)
    assert new == len(lines) > 25
    assert state.fatal == []
    assert state.benign == ["Traceback (most recent call last):"]
    assert state.markers["101"][0] == "active"
