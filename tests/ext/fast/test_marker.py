from __future__ import annotations

import json
import re

from kdtree_verify import marker

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
