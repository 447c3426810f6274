"""The monitoring examples shipped with the collection (extras/monitoring): every series a Grafana query,
annotation or alert rule names is one the hosts publish (the patch's, kdtree_verify/telemetry/metrics.py
FAMILIES, and the deploy history's textfile, module_utils/_change_metrics.py: the owners of the names)
or one SGLang 0.5.23 defines (its installed sources, .cache/sglang-venv). The dashboard filters every
query by its host variable and marks deploys and rollbacks from the history's textfile. A real Prometheus
loads the alert rules and runs every query (tests/monitoring, make test-monitoring)."""

from __future__ import annotations

import json
import os
import re

import pytest
import yaml
from ansible_collections.kdtree.fleet.plugins.module_utils import _change_metrics as change_metrics
from ansible_collections.kdtree.fleet.plugins.module_utils import _history as history
from ansible_collections.kdtree.fleet.plugins.module_utils import _patch_files as patch_files
from conftest import PATCH_DIR, ROOT

MONITORING = ROOT / "extras" / "monitoring"
DASHBOARD = MONITORING / "grafana-kdtree-verify.json"
RULES = MONITORING / "kdtree-alerts.yml"
SGLANG_SRT = ROOT / ".cache" / "sglang-venv" / "lib"
# a series: a name followed by a selector or a range, or one of the project's or SGLang's names
# anywhere; histogram series end in _bucket/_sum/_count
SERIES = re.compile(
    r"(?<![\w:])([a-zA-Z_][a-zA-Z0-9_:]*)\s*[{\[]|\b(kdtree_(?:verify|fleet)_[a-z_]+|sglang:[a-z_]+)"
)
# a series of the hosts or SGLang with its selector, if any
SELECTED = re.compile(r"\b(kdtree_(?:verify|fleet)_[a-z_]+|sglang:[a-z_]+)(\{[^}]*\})?")
# the host variable's filter: the instance without its port (node-exporter's and SGLang's ports differ)
HOST_FILTER = 'instance=~"$host(:[0-9]+)?"'
LABEL_REF = re.compile(r"\{\{\s*(\w+)\s*\}\}")
HISTOGRAM = re.compile(r"_(bucket|sum|count)$")


def _annotations() -> list[dict]:
    return json.loads(DASHBOARD.read_text())["annotations"]["list"]


def _queries() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [a["expr"] for a in _annotations()]
    rules = yaml.safe_load(RULES.read_text())
    exprs += [r["expr"] for g in rules["groups"] for r in g["rules"]]
    return exprs


def _series() -> set[str]:
    found = {a or b for expr in _queries() for a, b in SERIES.findall(expr)}
    return {HISTOGRAM.sub("", name) for name in found}


def _published() -> set[str]:
    """Every kdtree series a host publishes: the patch's families and the history's textfile."""
    metrics = patch_files.load_file(
        PATCH_DIR / "kdtree_verify/telemetry/metrics.py", "kdtree_monitoring_metrics", ("FAMILIES",)
    )
    return {*metrics.FAMILIES, change_metrics.CHANGE}


def test_every_kdtree_series_is_one_the_hosts_publish():
    named = {s for s in _series() if not s.startswith("sglang:")}
    assert named, "no kdtree series in the examples"
    assert named <= _published(), named - _published()
    # the speed and coverage panels are there
    assert {"kdtree_verify_kernel_seconds_total", "kdtree_verify_original_seconds_total"} <= named


def test_every_sglang_series_is_one_sglang_0_5_23_defines():
    # only a finished venv (its stamp is written last): make test builds it beside tests/roles
    finished = (SGLANG_SRT.parent / ".kdtree-stamp").is_file()
    sources = sorted(SGLANG_SRT.glob("python3*/site-packages/sglang/srt")) if finished else []
    if not sources:
        why = "no SGLang venv here (.cache/sglang-venv: make sglang-venv)"
        if os.environ.get("KDTREE_REQUIRE_SGLANG_VENV"):  # make test: it must run, never skip
            pytest.fail(why)
        pytest.skip(why)
    text = "\n".join(p.read_text(errors="replace") for p in sources[0].rglob("*.py"))
    named = {s for s in _series() if s.startswith("sglang:")}
    assert {"sglang:spec_accept_length", "sglang:inter_token_latency_seconds"} <= named
    missing = {s for s in named if f'"{s}"' not in text}
    assert not missing, missing


def test_the_dashboard_is_grafana_json_with_unique_panels():
    dash = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) and dash["uid"] and dash["schemaVersion"] >= 30
    # each panel has a query (tests/monitoring runs every one in a real Prometheus)
    assert all(panel["targets"] for panel in dash["panels"])


def test_the_host_variable_lists_the_hosts_that_publish_kdtree_series_without_their_port():
    variables = {v["name"]: v for v in json.loads(DASHBOARD.read_text())["templating"]["list"]}
    host = variables["host"]
    assert host["type"] == "query" and host["multi"] and host["includeAll"] and host["allValue"] == ".*"
    assert host["query"]["query"] == host["definition"]
    listed = re.fullmatch(r'label_values\(\{__name__=~"([^"]+)"\}, instance\)', host["definition"])
    assert listed and set(listed.group(1).split("|")) <= _published()
    assert change_metrics.CHANGE in listed.group(1)  # a host rolled back to stock stays selectable
    strip = re.compile(host["regex"].strip("/"))
    assert [strip.match(i).group(1) for i in ("gpu-7:9100", "gpu-7:30000", "gpu-7")] == ["gpu-7"] * 3
    # what the variable gives matches each instance through the panels' filter
    value = re.fullmatch(r'instance=~"(.*)"', HOST_FILTER).group(1).replace("$host", "gpu-7")
    assert all(re.fullmatch(value, i) for i in ("gpu-7:9100", "gpu-7:30000")) and not re.fullmatch(
        value, "gpu-77:1"
    )


def test_every_series_of_every_panel_and_annotation_is_filtered_by_host():
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]] + [a["expr"] for a in _annotations()]
    unfiltered = [
        (expr, name) for expr in exprs for name, sel in SELECTED.findall(expr) if HOST_FILTER not in sel
    ]
    assert not unfiltered, unfiltered
    assert all(SELECTED.search(expr) for expr in exprs)


def test_deploys_and_rollbacks_are_annotated_from_the_change_time_the_hosts_publish():
    by_action = {}
    for annotation in _annotations():
        expr = annotation["expr"]
        assert change_metrics.CHANGE in expr and annotation["enable"], annotation
        action = re.search(r'action="(\w+)"', expr).group(1)
        by_action[action] = annotation
        # the value is the change's Unix time: Grafana reads it as the annotation's time in ms
        assert annotation["useValueForTime"] is True and expr.endswith(") * 1000"), expr
        grouped = set(re.search(r"max by \(([^)]*)\)", expr).group(1).replace(" ", "").split(","))
        assert grouped <= {"instance", *change_metrics.LABELS}
        shown = LABEL_REF.findall(annotation["titleFormat"] + annotation["textFormat"])
        shown += annotation["tagKeys"].split(",")
        assert set(shown) <= grouped, (shown, grouped)
    assert set(by_action) == set(change_metrics.ACTIONS) == {"deploy", "rollback"}


def test_the_roles_history_writes_are_the_hosts_own_so_they_write_the_textfile():
    # kdtree_history writes the default textfile for the default history path (textfile_for): a role that
    # moved the history or turned the textfile off would leave the annotations without their series
    writes = []
    for tasks in sorted(ROOT.glob("roles/*/tasks/*.yml")):
        for task in _tasks(yaml.safe_load(tasks.read_text()) or []):
            args = task.get("kdtree.fleet.kdtree_history")
            if isinstance(args, dict) and args.get("action") in ("begin", "finish"):
                writes.append((tasks.name, args))
    assert len(writes) >= 6, writes  # deploy: begin, finish, rescue; rollback: previous and stock
    assert not [(name, args) for name, args in writes if {"path", "textfile"} & set(args)]
    assert change_metrics.textfile_for(history.DEFAULT_PATH, None) == change_metrics.DEFAULT_TEXTFILE


def _tasks(items: list) -> list[dict]:
    out = []
    for item in items:
        if isinstance(item, dict):
            out.append(item)
            for key in ("block", "rescue", "always"):
                out += _tasks(item.get(key) or [])
    return out
