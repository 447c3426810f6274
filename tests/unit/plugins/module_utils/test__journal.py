"""The smoke check's journal reader (plugins/module_utils/_journal.py) on recorded journalctl output.

Records are written the way `journalctl --output=json --all` prints them: a field whose bytes are
not UTF-8 is an array of byte values; each test feeds bytes through parse_records() and
JournalState.feed(), as read_host does with the real command's stdout (journal_records.py). The SGLang
test double's journal noise (the double is not shipped): tests/roles/test_smoke_journal.py.
"""

from __future__ import annotations

import importlib
import json

import pytest
from ansible_collections.kdtree.fleet.tests.unit.helpers.journal_records import (
    T0_US,
    entry,
    feed,
)
from ansible_collections.kdtree.fleet.tests.unit.helpers.smoke_fakes import INVOCATION

journal = importlib.import_module("ansible_collections.kdtree.fleet.plugins.module_utils._journal")

OTHER_RUN = "f" * 32
# SGLang 0.5.23 http_server.py, the optional /v1/responses endpoint failing (logged at DEBUG level).
RESPONSES_TRACEBACK = [
    "[2026-11-30 10:00:01] OpenAI Responses API (/v1/responses) disabled: "
    "OpenAIServingResponses init failed (OSError: harmony vocab download failed)",
    "[2026-11-30 10:00:01] OpenAIServingResponses init traceback:",
    "Traceback (most recent call last):",
    '  File "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/entrypoints/http_server.py", line 400',
    "OSError: harmony vocab download failed",
]


# --- bytes -----------------------------------------------------------------------------------


def test_invalid_utf8_and_a_100_kib_line_cut_by_journald_are_read_with_replacement(marker):
    """journald cuts lines at 48 KiB (LineMax), here inside a two-byte character; binary output too."""
    long_line = ("é" * 50_000).encode()  # 100,000 bytes
    pieces = [long_line[:49_151], long_line[49_151:98_303], long_line[98_303:]]  # cuts inside "é"
    with pytest.raises(UnicodeDecodeError):
        pieces[0].decode("utf-8")
    binary = b"\x00\xff\xfe scheduler dumped \x80\x81 binary"
    marker_line = marker.format_line({"pid": 101, "state": "active"})
    records = [entry(piece, n) for n, piece in enumerate(pieces)]
    records += [entry(binary, 3), entry(marker_line, 4)]
    assert isinstance(records[0]["MESSAGE"], list)
    state, new = feed(*records, marker=marker)
    assert new == 5
    assert state.markers == {"101": ["active", marker_line]}
    assert state.fatal == []
    assert state.tail[0].startswith("é" * 100)
    assert state.tail[0].endswith("more characters]")  # kept lines are cut to LINE_KEEP
    assert len(state.tail[0]) < journal.LINE_KEEP + 50
    assert "\ufffd" in state.tail[3] and "scheduler dumped" in state.tail[3]
    assert state.cursor == "s=abc;i=4"


def test_raw_bytes_that_are_not_json_never_raise():
    raw = b'{"MESSAGE": "ok", "__CURSOR": "c1", "_SYSTEMD_INVOCATION_ID": "x"}\n'
    raw += b'\xff\xfe{not json\n{"MESSAGE": "cut'
    records = journal.parse_records(raw)
    assert [r["MESSAGE"] for r in records] == ["ok", "\ufffd\ufffd{not json", '{"MESSAGE": "cut']
    state = journal.JournalState()
    assert state.feed(records, "x", "sglang") == 1
    assert state.cursor == "c1"


# --- fatal and benign tracebacks -------------------------------------------------------------


def test_a_benign_traceback_from_the_allow_list_is_not_fatal():
    state, _new = feed(*(entry(line, n) for n, line in enumerate(RESPONSES_TRACEBACK)))
    assert state.fatal == []
    assert state.benign == ["Traceback (most recent call last):"]


def test_the_same_traceback_without_its_pattern_in_the_list_is_fatal():
    benign = journal.compile_benign(["post-warmup freeze_gc failed"])
    state, _new = feed(*(entry(line, n) for n, line in enumerate(RESPONSES_TRACEBACK)), benign=benign)
    assert state.fatal == RESPONSES_TRACEBACK  # two lines before the header, then the rest
    assert state.benign == []


def test_a_benign_pattern_does_not_hide_a_later_real_traceback():
    lines = [
        *RESPONSES_TRACEBACK,
        "[2026-11-30 10:00:09 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    ]
    lines += ['  File "scheduler.py", line 84', "RuntimeError: boom"]
    state, _new = feed(*(entry(line, n) for n, line in enumerate(lines)))
    assert state.fatal[2:] == lines[-3:]


def test_the_words_in_a_logged_request_are_not_a_traceback():
    line = (
        "[2026-11-30 10:00:05] Receive: obj=GenerateReqInput(text='why does Python print "
        "Traceback (most recent call last):\\n  File ...?', sampling_params={'max_new_tokens': 8})"
    )
    state, _new = feed(entry(line, 0))
    assert state.fatal == []


def test_a_traceback_of_another_process_does_not_count():
    """Records that are not the run's (another unit, an earlier run of this unit) are never judged."""
    state, new = feed(
        entry(
            "Traceback (most recent call last):", 0, invocation="", _SYSTEMD_UNIT="nginx.service", _PID="77"
        ),
        entry("Traceback (most recent call last):", 1, invocation=OTHER_RUN),
        entry("[2026-11-30 10:00:05] Scheduler hit an exception: boom", 2, invocation=OTHER_RUN),
    )
    assert (new, state.fatal, state.lines, state.tail) == (0, [], 0, [])
    assert state.cursor == "s=abc;i=2"  # read past them all the same


@pytest.mark.parametrize(
    "line",
    [
        "Traceback (most recent call last):",
        "[2026-11-29 09:14:55 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "[2026-11-29 09:14:55 TP0] Scheduler hit an exception: CUDA error",
        "Error in sitecustomize; set PYTHONVERBOSE for traceback:",
    ],
)
def test_each_fatal_line_of_the_run_is_fatal(line):
    state, _new = feed(entry("before", 0), entry(line, 1), entry("after", 2))
    assert state.fatal == ["before", line, "after"]


def test_an_invalid_benign_pattern_is_named():
    with pytest.raises(ValueError, match=r"'\(unclosed' is not a regex"):
        journal.compile_benign(["(unclosed"])


# --- journald rate limiting ------------------------------------------------------------------


def dropped(n: int, text: str, **fields) -> dict:
    record = entry(text, n, invocation="", _SYSTEMD_UNIT="systemd-journald.service", _PID="55")
    record.update(MESSAGE_ID=journal.DROPPED_MESSAGE_ID, **fields)
    return record


def test_journald_suppression_of_the_run_is_counted():
    state, new = feed(
        entry("flood", 0),
        dropped(1, "Suppressed 1234 messages from sglang.service", N_DROPPED="1234"),
        dropped(2, "Suppressed 10 messages from sglang.service", OBJECT_SYSTEMD_INVOCATION_ID=INVOCATION),
    )
    assert new == 1
    assert state.suppressed == 1244
    assert state.suppressed_line == "Suppressed 1234 messages from sglang.service"


def test_suppression_of_another_unit_or_an_earlier_run_is_not_counted():
    state, _new = feed(
        dropped(1, "Suppressed 50 messages from other.service"),
        dropped(2, "Suppressed 60 messages from sglang.service", OBJECT_SYSTEMD_INVOCATION_ID=OTHER_RUN),
        dropped(
            3, "Suppressed 70 messages from /system.slice/sglang.service", __REALTIME_TIMESTAMP=str(T0_US - 1)
        ),
    )
    assert state.suppressed == 0


def test_an_old_journald_naming_the_cgroup_is_counted():
    state, _new = feed(dropped(1, "Suppressed 70 messages from /system.slice/sglang.service"))
    assert state.suppressed == 70


# --- incremental reading ---------------------------------------------------------------------


def test_the_command_reads_the_run_and_journald_s_records_from_the_cursor():
    first = journal.journal_command(INVOCATION)
    assert "--output=json" in first and "--all" in first
    assert first[-3:] == [
        f"_SYSTEMD_INVOCATION_ID={INVOCATION}",
        "+",
        f"MESSAGE_ID={journal.DROPPED_MESSAGE_ID}",
    ]
    assert not any(arg.startswith("--after-cursor") for arg in first)
    later = journal.journal_command(INVOCATION, "s=abc;i=4")
    assert "--after-cursor=s=abc;i=4" in later


def test_the_state_carries_over_as_plain_data(marker):
    state, _new = feed(
        entry(marker.format_line({"pid": 101, "state": "active"}), 0), entry("x", 1), marker=marker
    )
    again = journal.JournalState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again == state
    more, new = feed(entry(RESPONSES_TRACEBACK[2], 2), state=again)
    assert new == 1
    assert more.fatal == [*state.tail, RESPONSES_TRACEBACK[2]]  # its context came from the earlier poll
    assert more.markers == state.markers
    assert journal.JournalState.from_dict({}) == journal.JournalState()


def test_a_traceback_excerpt_stops_at_its_limit():
    lines = ["Traceback (most recent call last):"] + [f"line {n}" for n in range(200)]
    state, _new = feed(*(entry(line, n) for n, line in enumerate(lines)))
    assert len(state.fatal) == journal.TRACEBACK_LINES
    assert state.fatal_done
    assert len(state.tail) == journal.TAIL_LINES
