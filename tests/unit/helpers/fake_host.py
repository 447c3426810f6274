"""A fake host for the smoke check's host reader (module_utils/_smoke/host.read_host, restart_unit):
systemctl and journalctl as small scripts first on PATH, a scheduler as a real child process found
through this machine's /proc in this process's own cgroup, /health as a local HTTP server; install(),
scheduler_process() and health_server() also as the fixtures fake, scheduler and health_server.
Imported by its collection path (see collection_tree.py); tests/roles uses it too.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.tests.unit.helpers.http_servers import serving
from ansible_collections.kdtree.fleet.tests.unit.helpers.smoke_fakes import INVOCATION


def own_cgroup() -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hierarchy, _sep, path = line.partition(":")[2].partition(":")
        if hierarchy in ("", "name=systemd"):
            return path
    pytest.skip("no systemd or unified cgroup line")


# The fake journalctl: prints journal.jsonl (one JSON record a line, as `journalctl --output=json`
# writes them) from the record after --after-cursor=C on; no filtering, so the reader's own
# classification of the records is what the tests see.
FAKE_JOURNALCTL = """\
import os, sys
calls, out = sys.argv[1], sys.argv[2]
args = sys.argv[3:]
with open(calls, "a") as handle:
    handle.write("journalctl " + " ".join(args) + "\\n")
with open(out, "rb") as handle:
    lines = handle.read().splitlines(keepends=True)
cursor = next((a.split("=", 1)[1] for a in args if a.startswith("--after-cursor=")), None)
if cursor is not None:
    index = next(i for i, line in enumerate(lines) if b'"__CURSOR": "%s"' % cursor.encode() in line)
    lines = lines[index + 1 :]
sys.stdout.buffer.write(b"".join(lines))
"""


def record(message: str | bytes, n: int, **fields) -> dict:
    """A record as `journalctl --output=json --all` prints it (text that is not UTF-8: a byte array)."""
    if isinstance(message, bytes):
        try:
            message = message.decode("utf-8")
        except UnicodeDecodeError:
            message = list(message)
    base = {"__CURSOR": f"s=fake;i={n:x}", "__REALTIME_TIMESTAMP": str(int((time.time() + n) * 1e6))}
    base.update({"_SYSTEMD_INVOCATION_ID": INVOCATION, "_SYSTEMD_UNIT": "sglang.service", "_PID": "100"})
    base.update(fields)
    base["MESSAGE"] = message
    return base


class FakeHost:
    """Fake systemctl/journalctl on PATH; what they print and how they were called.

    journal: the run's lines (str, or bytes for raw output); records: extra records (another unit's
    lines, journald's suppression record) written after them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir()
        self.calls = root / "calls"
        self.calls.touch()
        self.props = {"ActiveState": "active", "InvocationID": INVOCATION, "NRestarts": "0"}
        self.journal: list[str | bytes] = []
        self.records: list[dict] = []
        script = self.bin / "systemctl"
        script.write_text(
            textwrap.dedent(
                f"""\
                #!/bin/sh
                echo "systemctl $*" >> {self.calls}
                if [ "$1" = restart ]; then
                  sleep "${{FAKE_RESTART_SLEEP:-0}}"; exit "${{FAKE_RESTART_RC:-0}}"
                fi
                sleep "${{FAKE_SYSTEMCTL_SLEEP:-0}}"
                cat {root / "systemctl"}.out
                exit "${{FAKE_SYSTEMCTL_RC:-0}}"
                """
            )
        )
        script.chmod(0o755)
        (root / "journalctl.py").write_text(FAKE_JOURNALCTL)
        script = self.bin / "journalctl"
        script.write_text(
            textwrap.dedent(
                f"""\
                #!/bin/sh
                sleep "${{FAKE_JOURNALCTL_SLEEP:-0}}"
                exec {sys.executable} {root / "journalctl.py"} {self.calls} {root / "journal.jsonl"} "$@"
                """
            )
        )
        script.chmod(0o755)

    def write(self) -> None:
        (self.root / "systemctl.out").write_text("".join(f"{k}={v}\n" for k, v in self.props.items()))
        records = [record(line, n) for n, line in enumerate(self.journal)]
        records += [
            {"__CURSOR": f"s=fake;i={n + len(records):x}", **extra} for n, extra in enumerate(self.records)
        ]
        (self.root / "journal.jsonl").write_text("".join(json.dumps(item) + "\n" for item in records))

    def called(self) -> list[str]:
        return self.calls.read_text().splitlines()

    def journal_calls(self) -> list[str]:
        return [call for call in self.called() if call.startswith("journalctl")]


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHost:
    """A FakeHost in `tmp_path` (the unit in this process's cgroup), first on PATH."""
    host = FakeHost(tmp_path)
    host.props["ControlGroup"] = own_cgroup()
    host.write()
    monkeypatch.setenv("PATH", f"{host.bin}:{os.environ['PATH']}")
    return host


@contextlib.contextmanager
def scheduler_process() -> Iterator[tuple[int, str]]:
    """A child process titled like a scheduler, with NCCL values in its environment."""
    title = f"kdtree-test::scheduler_TP0-{os.getpid()}"
    proc = subprocess.Popen([title, "60"], executable="/bin/sleep", env={"NCCL_ALGO": "Ring"})
    deadline = time.time() + 5
    while time.time() < deadline:
        if Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(title.encode()):
            break
        time.sleep(0.01)
    try:
        yield proc.pid, title
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def health_server() -> Iterator[str]:
    """http://127.0.0.1:PORT/health answers 200; /busy answers 503."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 503)
            self.end_headers()

        def log_message(self, *args):
            pass

    with serving(Handler) as url:
        yield url


# The fixtures of the test files that read this fake host (tests/unit and tests/roles): import them into
# the test file (noqa F401) to use them.
@pytest.fixture(name="fake")
def fake_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    return install(tmp_path, monkeypatch)


@pytest.fixture(name="scheduler")
def scheduler_fixture() -> Iterator[tuple[int, str]]:
    with scheduler_process() as found:
        yield found


@pytest.fixture(name="health_server", scope="module")
def health_server_fixture() -> Iterator[str]:
    with health_server() as url:
        yield url
