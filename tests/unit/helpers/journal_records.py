"""Journal records as `journalctl --output=json --all` prints them, fed to the smoke check's journal
reader (module_utils/_journal.py: parse_records, JournalState.feed) the way read_host feeds the real
command's stdout. Imported by its collection path (see collection_tree.py); tests/roles uses it too.
"""

from __future__ import annotations

import json
from typing import Any

from ansible_collections.kdtree.fleet.plugins.module_utils import _journal as journal
from ansible_collections.kdtree.fleet.tests.unit.helpers.smoke_fakes import INVOCATION

BENIGN = journal.compile_benign(journal.DEFAULT_BENIGN_TRACEBACKS)
T0_US = 1_764_490_000_000_000


def entry(message: str | bytes, n: int, invocation: str = INVOCATION, **fields: Any) -> dict[str, Any]:
    """One record; bytes that are not UTF-8 become a byte array, as journalctl writes them."""
    if isinstance(message, bytes):
        try:
            message = message.decode("utf-8")
        except UnicodeDecodeError:
            message = list(message)
    record = {
        "__CURSOR": f"s=abc;i={n:x}",
        "__REALTIME_TIMESTAMP": str(T0_US + n),
        "_SYSTEMD_UNIT": "sglang.service",
        "_PID": "100",
        "MESSAGE": message,
    }
    if invocation:
        record["_SYSTEMD_INVOCATION_ID"] = invocation
    record.update(fields)
    return record


def stream(*records: dict[str, Any]) -> bytes:
    """The records as journalctl's stdout: one JSON object a line."""
    return b"".join(json.dumps(item).encode() + b"\n" for item in records)


def feed(
    *records: dict[str, Any], marker: Any = None, benign: Any = None, state: Any = None
) -> tuple[Any, int]:
    """The records fed to `state` (a new JournalState by default) for INVOCATION of sglang, with the
    benign patterns `benign` (None: BENIGN, the module's defaults): (state, the number of new lines)."""
    state = state or journal.JournalState()
    benign = BENIGN if benign is None else benign
    new = state.feed(journal.parse_records(stream(*records)), INVOCATION, "sglang", T0_US, marker, benign)
    return state, new
