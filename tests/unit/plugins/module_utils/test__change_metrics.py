"""The host's deploys and rollbacks as a node-exporter textfile (module_utils/_change_metrics.py), and
kdtree_history rewriting it on every history write."""

from __future__ import annotations

import os
import re

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _change_metrics as changes
from ansible_collections.kdtree.fleet.plugins.module_utils import _history as history
from ansible_collections.kdtree.fleet.plugins.modules import kdtree_history
from ansible_collections.kdtree.fleet.tests.unit.helpers.histories import deploy, params

SAMPLE = re.compile(
    r"^kdtree_fleet_change_timestamp_seconds"
    r'\{action="(\w+)",result="(\w+)",build_id="([^"]*)",mode="(\w*)"\} (\S+)$'
)


def _entry(result: str, ended: str | None, **fields) -> dict:
    return {"id": ended or "x", "result": result, "ended": ended, **fields}


def test_a_healthy_deploy_is_a_deploy_and_every_way_back_a_rollback():
    assert changes.action_of(_entry("healthy", "2026-12-05T10:00:00Z")) == "deploy"
    assert (
        changes.action_of(_entry("healthy", "2026-12-05T10:00:00Z", restored_from="20261201T0-ab"))
        == "rollback"
    )
    assert changes.action_of(_entry("rolled_back", "2026-12-05T10:00:00Z")) == "rollback"
    assert changes.action_of(_entry("removed", "2026-12-05T10:00:00Z", restored_from="stock")) == "rollback"
    assert changes.action_of(_entry("running", None)) is None


def test_the_newest_ended_entry_of_each_action_is_its_sample_at_its_end_time():
    entries = [
        _entry("healthy", "2026-12-05T10:00:00Z", build_id="b1", mode="validate"),
        _entry("rolled_back", "2026-12-05T11:00:00Z", build_id="b2", mode="on"),
        _entry("healthy", "2026-12-05T12:00:00Z", build_id="b3", mode="on"),
        _entry("running", None, build_id="b4"),
    ]
    assert changes.samples(entries) == [
        ({"action": "deploy", "result": "healthy", "build_id": "b3", "mode": "on"}, 1796472000.0),
        ({"action": "rollback", "result": "rolled_back", "build_id": "b2", "mode": "on"}, 1796468400.0),
    ]


def test_an_entry_with_an_odd_end_is_left_out_never_counted_as_time_zero():
    entries = [_entry("healthy", "yesterday", build_id="b1"), _entry("removed", None)]
    assert changes.samples(entries) == []
    text = changes.render(entries)
    assert text.splitlines() == [f"# HELP {changes.CHANGE} {changes.HELP}", f"# TYPE {changes.CHANGE} gauge"]


def test_the_textfile_is_prometheus_text_with_escaped_labels():
    text = changes.render([_entry("healthy", "2026-12-05T10:00:00Z", build_id='a"b\\c', mode="on")])
    lines = text.splitlines()
    assert lines[1] == "# TYPE kdtree_fleet_change_timestamp_seconds gauge" and text.endswith("\n")
    assert lines[2] == (
        "kdtree_fleet_change_timestamp_seconds"
        '{action="deploy",result="healthy",build_id="a\\"b\\\\c",mode="on"} 1796464800.0'
    )


def test_the_host_history_writes_the_default_textfile_and_another_history_none_unless_given():
    assert changes.ended_s({"ended": history.now()}) is not None  # the history's end format
    assert changes.textfile_for(history.DEFAULT_PATH, None) == changes.DEFAULT_TEXTFILE
    assert changes.textfile_for("/tmp/x/state.json", None) == ""
    assert changes.textfile_for(history.DEFAULT_PATH, "") == ""
    assert changes.textfile_for("/tmp/x/state.json", "/tmp/m/k.prom") == "/tmp/m/k.prom"


def test_kdtree_history_rewrites_the_textfile_on_every_write(tmp_path):
    path, textfile = tmp_path / "kdtree" / "state.json", tmp_path / "metrics" / "kdtree_changes.prom"
    begun = kdtree_history.run(
        params(
            path,
            action="begin",
            record={"dropin": "A", "build_id": "b1", "mode": "validate"},
            textfile=str(textfile),
        ),
        False,
    )
    assert [
        SAMPLE.match(line) for line in textfile.read_text().splitlines()[2:]
    ] == []  # running: no change yet
    kdtree_history.run(
        params(path, action="finish", id=begun["entry"]["id"], result="healthy", textfile=str(textfile)),
        False,
    )
    [sample] = [SAMPLE.match(line) for line in textfile.read_text().splitlines()[2:]]
    assert sample.groups()[:4] == ("deploy", "healthy", "b1", "validate")
    ended = history.load(str(path))[-1]["ended"]
    assert float(sample.group(5)) == changes.ended_s({"ended": ended})
    assert (
        oct(textfile.stat().st_mode & 0o777) == "0o644"
        and oct(textfile.parent.stat().st_mode & 0o777) == "0o755"
    )
    assert sorted(p.name for p in textfile.parent.iterdir()) == [
        "kdtree_changes.prom"
    ]  # no temporary file left


def test_check_mode_and_reads_write_no_textfile(tmp_path):
    path, textfile = tmp_path / "state.json", tmp_path / "metrics" / "kdtree_changes.prom"
    kdtree_history.run(params(path, action="begin", record={"dropin": "A"}, textfile=str(textfile)), True)
    kdtree_history.run(params(path, textfile=str(textfile)), False)
    assert not textfile.exists()


def test_a_history_at_another_path_writes_no_textfile_unless_given(tmp_path, monkeypatch):
    monkeypatch.setattr(changes, "DEFAULT_TEXTFILE", str(tmp_path / "default" / "kdtree_changes.prom"))
    deploy(tmp_path / "state.json", "A", "healthy")
    assert not (tmp_path / "default").exists()


def test_a_textfile_directory_others_can_write_is_refused(tmp_path):
    metrics = tmp_path / "metrics"
    metrics.mkdir(mode=0o777)
    os.chmod(metrics, 0o777)
    with pytest.raises(history.HistoryError):
        kdtree_history.run(
            params(
                tmp_path / "state.json",
                action="begin",
                record={"dropin": "A"},
                textfile=str(metrics / "k.prom"),
            ),
            False,
        )
    assert not (metrics / "k.prom").exists()
