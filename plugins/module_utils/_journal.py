"""The watched run's journal: read incrementally from a cursor, as bytes, and what its lines mean.

journal_command() is the `journalctl` call for one poll: JSON output (`--output=json --all`: a
field with bytes that are not UTF-8 arrives as an array of byte values, never as a broken string),
the run's own lines (`_SYSTEMD_INVOCATION_ID`) or (`+`) journald's "Suppressed N messages" records,
and `--after-cursor` from the second poll on, so that every poll reads only what is new and a
15-minute load costs time linear in its journal size.

parse_records() turns journalctl's raw bytes into records without ever raising on the bytes;
JournalState.feed() folds one poll's records into what the check keeps of the run: the cursor, the
last lines, the first fatal error (with the lines that follow it), the kdtree-verify markers and
runtime fallbacks per pid, journald's suppression count, the benign tracebacks skipped. The state
is plain data (to_dict/from_dict): the module hands it from one chunk to the next in its `run`.

Which lines are fatal: FATAL_PATTERNS, only on lines of the watched run (_SYSTEMD_INVOCATION_ID),
unless one of the benign patterns matches the fatal line or the run's line right before it (SGLang
logs an optional feature's failure as a message line followed by the traceback).

Stdlib only and without imports of other module_utils (scripts/testhosts/hostread.py sends the
source of the host-side module_utils to a test host's bare python3).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

# systemd's SD_MESSAGE_JOURNAL_DROPPED: journald's "Suppressed N messages from <unit>" record,
# logged when a unit exceeds RateLimitBurst= within RateLimitIntervalSec=.
DROPPED_MESSAGE_ID = "a596d6fe7bfa4994828e72dfa8b8a6d5"
SUPPRESSED_RE = re.compile(r"Suppressed (\d+) messages from (\S+)")
# Fields journalctl prints (besides __CURSOR and the timestamps it always prints).
OUTPUT_FIELDS = (
    "MESSAGE",
    "MESSAGE_ID",
    "N_DROPPED",
    "_PID",
    "_SYSTEMD_UNIT",
    "_SYSTEMD_INVOCATION_ID",
    "OBJECT_SYSTEMD_UNIT",
    "OBJECT_SYSTEMD_INVOCATION_ID",
)
# A fatal line of the run. A Python traceback's header ends its line ("...: Traceback (most recent
# call last):"); a logged request that merely contains the words has them inside a repr, followed
# by more text. SGLang's scheduler failure and Python's sitecustomize failure start their line
# (after SGLang's "[time TPn] " prefix).
FATAL_PATTERNS = (
    r"Traceback \(most recent call last\):\s*$",
    r"^(\[[^\]]*\] )?Scheduler hit an exception",
    r"^(\[[^\]]*\] )?Error in sitecustomize",
)
_FATAL_RES = tuple(re.compile(pattern) for pattern in FATAL_PATTERNS)
# Tracebacks SGLang 0.5.23 logs and carries on (regexes searched in the fatal line and the run's
# line before it): the module's `benign_tracebacks` default.
DEFAULT_BENIGN_TRACEBACKS = (
    # srt/entrypoints/http_server.py: the optional /v1/responses endpoint failed to initialise
    # (WARNING "OpenAI Responses API (/v1/responses) disabled", the traceback at DEBUG)
    r"OpenAIServingResponses init traceback:",
    # srt/entrypoints/http_server.py: WARNING with exc_info after the warm-up request
    r"post-warmup freeze_gc failed",
    # srt/managers/scheduler_components/load_publisher.py: WARNING with exc_info, routers fall back
    r"load-publisher: publish failed",
    # srt/observability/forward_pass_metrics.py: WARNING with exc_info
    r"FPM publisher send failed",
)
# What the state keeps: the last lines (the detail of a failure without a traceback), the fatal
# excerpt (two lines before the fatal line and what follows), each line cut to LINE_KEEP characters.
TAIL_LINES = 30
TRACEBACK_LINES = 80
CONTEXT_LINES = 2
LINE_KEEP = 4000
BENIGN_KEEP = 5


def journal_command(invocation_id: str, cursor: str = "") -> list[str]:
    """journalctl for one poll: the run's lines and journald's suppression records after `cursor`."""
    args = ["journalctl", "--no-pager", "--all", "--output=json"]
    args.append("--output-fields=" + ",".join(OUTPUT_FIELDS))
    if cursor:
        args.append(f"--after-cursor={cursor}")
    args += [f"_SYSTEMD_INVOCATION_ID={invocation_id}", "+", f"MESSAGE_ID={DROPPED_MESSAGE_ID}"]
    return args


def field_text(value: Any) -> str:
    """A journal field as text: JSON strings as they are, byte arrays decoded with replacement."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        if all(isinstance(item, int) for item in value):
            return bytes(item & 0xFF for item in value).decode("utf-8", "replace")
        return " ".join(field_text(item) for item in value)  # a field the record has more than once
    return str(value)


def parse_records(raw: bytes) -> list[dict[str, Any]]:
    """journalctl --output=json's bytes as records; never raises (a line that is not a JSON object,
    such as a cut last line, becomes a record with only its text, which belongs to no run)."""
    records = []
    for chunk in raw.split(b"\n"):
        if not chunk.strip():
            continue
        text = chunk.decode("utf-8", "replace")
        try:
            record = json.loads(text)
        except ValueError:
            record = None
        records.append(record if isinstance(record, dict) else {"MESSAGE": text})
    return records


def _cut(line: str) -> str:
    if len(line) <= LINE_KEEP:
        return line
    return f"{line[:LINE_KEEP]} ...[{len(line) - LINE_KEEP} more characters]"


def is_fatal(line: str) -> bool:
    return any(regex.search(line) for regex in _FATAL_RES)


def compile_benign(patterns: list[str] | tuple[str, ...]) -> list[re.Pattern[str]]:
    """The benign patterns as regexes; raises ValueError naming a pattern that does not compile."""
    out = []
    for pattern in patterns:
        try:
            out.append(re.compile(pattern))
        except re.error as exc:
            raise ValueError(f"benign traceback pattern {pattern!r} is not a regex: {exc}") from exc
    return out


@dataclass
class Suppression:
    """journald dropped `count` messages of the watched unit; `line` is journald's record."""

    count: int
    line: str


def suppression_of(
    record: dict[str, Any], invocation_id: str, unit: str, not_before_us: int
) -> Suppression | None:
    """journald's "Suppressed N messages from X" record about the watched run, else None.

    journald names the run in OBJECT_SYSTEMD_INVOCATION_ID when it knows it; otherwise a record
    naming the unit (or its cgroup) counts when it was written at or after not_before_us.
    """
    if field_text(record.get("MESSAGE_ID")) != DROPPED_MESSAGE_ID:
        return None
    text = field_text(record.get("MESSAGE"))
    match = SUPPRESSED_RE.search(text)
    about = field_text(record.get("OBJECT_SYSTEMD_INVOCATION_ID"))
    if about:
        ours = about == invocation_id
    else:
        names = {field_text(record.get("OBJECT_SYSTEMD_UNIT")), match.group(2) if match else ""}
        service = f"{unit}.service"
        named = any(name == service or name.endswith("/" + service) for name in names)
        try:
            written = int(field_text(record.get("__REALTIME_TIMESTAMP")) or 0)
        except ValueError:
            written = 0
        ours = named and written >= not_before_us
    if not ours:
        return None
    try:
        count = int(field_text(record.get("N_DROPPED")) or (match.group(1) if match else 0))
    except ValueError:
        count = 0
    return Suppression(count=max(count, 1), line=text)


@dataclass
class JournalState:
    """What the check keeps of the run's journal between polls and chunks (plain data)."""

    cursor: str = ""
    lines: int = 0  # the run's lines read so far
    tail: list[str] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)  # empty until the first fatal line
    fatal_done: bool = False  # the excerpt holds TRACEBACK_LINES lines
    benign: list[str] = field(default_factory=list)  # the first benign fatal lines skipped
    markers: dict[str, list[str]] = field(default_factory=dict)  # pid -> [state, line] (the last)
    fallbacks: dict[str, str] = field(default_factory=dict)  # pid -> runtime fallback line (the first)
    suppressed: int = 0
    suppressed_line: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> JournalState:
        data = data or {}
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        return cls(**known)

    def feed_line(self, line: str, marker: Any = None, benign: list[re.Pattern[str]] | None = None) -> None:
        """One line of the watched run."""
        kept = _cut(line)
        before = self.tail[-1] if self.tail else ""
        if self.fatal and not self.fatal_done:
            self.fatal.append(kept)
            self.fatal_done = len(self.fatal) >= TRACEBACK_LINES
        elif not self.fatal and is_fatal(line):
            if any(regex.search(line) or regex.search(before) for regex in benign or ()):
                if len(self.benign) < BENIGN_KEEP:
                    self.benign.append(kept)
            else:
                self.fatal = [*self.tail[-CONTEXT_LINES:], kept]
        self.tail = [*self.tail, kept][-TAIL_LINES:]
        self.lines += 1
        if marker is not None:
            found = marker.match_marker(line)
            if found is not None:
                pid, state = found
                self.markers[str(pid)] = [state, kept]
                return
            pid = marker.match_runtime_fallback(line)
            if pid is not None:
                self.fallbacks.setdefault(str(pid), kept)

    def feed(
        self,
        records: list[dict[str, Any]],
        invocation_id: str,
        unit: str,
        not_before_us: int = 0,
        marker: Any = None,
        benign: list[re.Pattern[str]] | None = None,
    ) -> int:
        """One poll's records; returns the number of the run's lines among them."""
        new = 0
        for record in records:
            cursor = field_text(record.get("__CURSOR"))
            if cursor:
                self.cursor = cursor
            if field_text(record.get("_SYSTEMD_INVOCATION_ID")) == invocation_id and invocation_id:
                self.feed_line(field_text(record.get("MESSAGE")), marker, benign)
                new += 1
                continue
            dropped = suppression_of(record, invocation_id, unit, not_before_us)
            if dropped is not None:
                self.suppressed += dropped.count
                self.suppressed_line = self.suppressed_line or dropped.line
        return new
