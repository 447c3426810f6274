"""The marker line, its contract regexes (MARKER_RE, RUNTIME_FALLBACK_RE) and the status file."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from extlib import EXT_DIR
from kdtree_verify.telemetry import marker

CONTRACT_REGEX = re.compile(r"^kdtree-verify: pid=(\d+) .* state=(\w+) ")


def test_marker_line_matches_the_contract_regex_and_escapes_spaces(capsys, monkeypatch):
    monkeypatch.setattr(marker, "process_title", lambda: "sglang::scheduler TP0")
    assert marker.emit("on", "fallback", "library not found: /x y", "/x y", "", "0.5.23")
    line = capsys.readouterr().err.strip()
    assert "\n" not in line
    match = CONTRACT_REGEX.match(line)
    assert match is not None and match.group(2) == "fallback"
    fields = marker.parse_line(line)
    assert fields["title"] == "sglang::scheduler TP0"
    assert fields["reason"] == "library not found: /x y"
    assert fields["lib_sha256"] == ""
    assert list(fields) == list(marker.FIELDS)


def test_marker_is_printed_once_per_process(capsys):
    assert marker.emit("on", "active")
    assert not marker.emit("on", "fallback", "second")
    assert capsys.readouterr().err.count("kdtree-verify: pid=") == 1


def test_runtime_fallback_line_does_not_match_the_marker_regex_but_updates_the_status_file(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("KDTREE_STATUS_DIR", str(tmp_path))
    marker.emit("on", "active", lib="/lib.so", lib_sha256="ab")
    marker.emit_runtime_fallback("device cuda:0: sm_90 not in library")
    lines = capsys.readouterr().err.strip().splitlines()
    assert [bool(CONTRACT_REGEX.match(line)) for line in lines] == [True, False]
    (status_file,) = tmp_path.glob("*.json")
    data = json.loads(status_file.read_text())
    assert data["state"] == "fallback" and data["runtime_fallback"] is True
    assert status_file.name == f"{data['pid']}.json"


def test_escape_round_trips_backslashes_and_whitespace():
    for text in ["a b", "a\\x20b", "tab\there", "", "-x"]:
        assert marker.unescape(marker.escape(text)) == (text if text != "" else "")
        assert " " not in marker.escape(text)


def _fields(**overrides: object) -> dict:
    fields = {
        "pid": 4242,
        "ppid": 1,
        "title": "sglang::scheduler",
        "mode": "on",
        "state": "active",
        "reason": "",
        "lib": "/opt/kdtree/current/libkdtree_verify.so",
        "lib_sha256": "ab" * 32,
        "sglang": "0.5.23",
    }
    fields.update(overrides)
    return fields


def test_match_marker_reads_pid_and_state_from_a_format_line_output():
    assert marker.match_marker(marker.format_line(_fields())) == (4242, "active")
    assert marker.match_marker(marker.format_line(_fields(state="fallback", reason="x"))) == (
        4242,
        "fallback",
    )


def test_a_title_with_spaces_is_escaped_and_the_line_still_matches():
    line = marker.format_line(_fields(title="sglang::scheduler TP0  extra", state="off"))
    assert "title=sglang::scheduler\\x20TP0\\x20\\x20extra " in line
    assert marker.match_marker(line) == (4242, "off")
    assert marker.parse_line(line)["title"] == "sglang::scheduler TP0  extra"


def test_a_reason_that_mentions_another_state_cannot_change_the_matched_state():
    line = marker.format_line(_fields(state="fallback", reason="was state=active before"))
    assert marker.match_marker(line) == (4242, "fallback")


def test_a_runtime_fallback_line_is_matched_only_by_match_runtime_fallback(capsys):
    marker.emit("on", "active")
    marker.emit_runtime_fallback("device cuda:0: sm_90 not in library")
    marker_line, fallback_line = capsys.readouterr().err.strip().splitlines()
    pid = os.getpid()
    assert marker.match_marker(fallback_line) is None
    assert marker.match_runtime_fallback(fallback_line) == pid
    assert marker.match_runtime_fallback(marker_line) is None
    assert marker.match_marker(marker_line) == (pid, "active")
    assert marker.match_marker("some other log line") is None
    assert marker.match_runtime_fallback("some other log line") is None


STANDALONE = """
import importlib.util, json, sys
before = set(sys.modules)
spec = importlib.util.spec_from_file_location("kdtree_marker_standalone", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
line = module.format_line({"pid": 7, "state": "active", "title": "a b"})
new = sorted(set(sys.modules) - before - {"kdtree_marker_standalone"})
print(json.dumps({
    "marker": module.match_marker(line),
    "fallback": module.match_runtime_fallback("kdtree-verify-fallback: pid=9 state=fallback reason=-"),
    "non_stdlib": [m for m in new if m.split(".")[0] not in sys.stdlib_module_names],
}))
"""


def test_marker_py_loads_standalone_by_file_path_with_the_stdlib_only():
    """As the Ansible smoke module loads it on a host: by path, in an isolated interpreter (-I: no
    PYTHONPATH, no user site), where `kdtree_verify` is not importable at all."""
    path = EXT_DIR / "kdtree_verify" / "telemetry" / "marker.py"
    res = subprocess.run(
        [sys.executable, "-I", "-c", STANDALONE, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd="/",
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {"marker": [7, "active"], "fallback": 9, "non_stdlib": []}


def test_a_status_file_that_cannot_be_finished_leaves_no_tmp_and_says_unwritable(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("KDTREE_STATUS_DIR", str(tmp_path))

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(marker.os, "replace", disk_full)
    marker.emit("on", "active")
    assert list(tmp_path.iterdir()) == []
    (line,) = capsys.readouterr().err.strip().splitlines()[1:]
    assert marker.match_status_problem(line) == (os.getpid(), "unwritable")
    assert "No\\x20space\\x20left" in line and marker.match_runtime_fallback(line) is None
    assert marker.delivery() == {
        "marker_printed": True,
        "status_file": "unwritable: [Errno 28] No space left on device",
    }


def test_a_directory_squatting_on_the_tmp_name_makes_the_status_file_unwritable(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("KDTREE_STATUS_DIR", str(tmp_path))
    (tmp_path / f"{os.getpid()}.json.tmp").mkdir()
    marker.emit("on", "active")
    err = capsys.readouterr().err
    assert f"{marker.STATUS_PREFIX} pid={os.getpid()} state=unwritable " in err
    assert not (tmp_path / f"{os.getpid()}.json").exists()


def test_say_never_raises_and_reports_a_lost_line(monkeypatch):
    class Broken:
        def fileno(self):
            raise ValueError("I/O operation on closed file")

        def write(self, text):
            raise ValueError("I/O operation on closed file")

        def flush(self):
            raise ValueError("I/O operation on closed file")

    monkeypatch.setattr(sys, "stderr", Broken())
    assert marker.say("lost") is False
    monkeypatch.setattr(sys, "stderr", None)
    assert marker.say("lost") is False
