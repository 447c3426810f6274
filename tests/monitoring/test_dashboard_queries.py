"""The shipped Grafana dashboard (extras/monitoring/grafana-kdtree-verify.json) against a real Prometheus
scraping the crafted hosts (crafted_hosts.py): its host variable lists both hosts, and every panel's and
annotation's query returns data, with the variable set as Grafana sets it: All (its allValue) and each
host alone (Grafana's regex escape of a value). A query that returns nothing fails with its panel's title.
"""

from __future__ import annotations

import json
import math
import re

import pytest
from ansible_collections.kdtree.fleet.tests.monitoring.crafted_hosts import DASHBOARD, HOSTS, Monitoring

HOST_VAR = "$host"


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _host_variable() -> dict:
    return next(v for v in _dashboard()["templating"]["list"] if v["name"] == "host")


def _queries() -> list[tuple[str, str]]:
    """(what it is: the panel's title and legend or the annotation's name, PromQL) of the dashboard."""
    dash = _dashboard()
    out = [
        (f"panel {p['title']!r} {t.get('legendFormat', '')!r}", t["expr"])
        for p in dash["panels"]
        for t in p["targets"]
    ]
    out += [(f"annotation {a['name']!r}", a["expr"]) for a in dash["annotations"]["list"]]
    return out


def grafana_regex_value(value: str) -> str:
    """A single value of a multi-value variable in a Prometheus regex matcher, escaped as Grafana's
    Prometheus data source does (prometheusSpecialRegexEscape): its text goes into a PromQL string."""
    value = value.replace("\\", "\\\\\\\\")
    return re.sub(r"[$^*{}\[\]'+?.()|]", lambda m: "\\\\" + m.group(0), value)


def _variable_values(mon: Monitoring) -> list[str]:
    """The host variable's options as Grafana computes them: label_values(<selector>, instance), then
    the variable's regex's first group of each, deduplicated."""
    var = _host_variable()
    selector, label = re.fullmatch(r"label_values\((.+), (\w+)\)", var["definition"]).groups()
    instances = mon.prom.api(f"label/{label}/values", **{"match[]": selector})
    pick = re.compile(var["regex"].strip("/"))
    return sorted({m.group(1) for i in instances if (m := pick.match(i))})


def test_the_host_variable_lists_every_host_once(monitoring: Monitoring):
    assert _variable_values(monitoring) == sorted(HOSTS)


def test_grafana_s_escape_keeps_a_dotted_host_literal():
    assert grafana_regex_value("127.0.0.12") == r"127\\.0\\.0\\.12"


SELECTIONS = ["All", *HOSTS]


@pytest.mark.parametrize("selected", SELECTIONS)
@pytest.mark.parametrize(("what", "expr"), _queries(), ids=[what for what, _ in _queries()])
def test_the_query_returns_data_for_the_selected_hosts(monitoring: Monitoring, what, expr, selected):
    var = _host_variable()
    value = var["allValue"] if selected == "All" else grafana_regex_value(selected)
    assert HOST_VAR in expr, f"{what}: not filtered by {HOST_VAR}"
    query = expr.replace(HOST_VAR, value)
    rows = monitoring.prom.query(query)
    assert rows, f"{what} returns nothing with host={selected}: {query}"
    finite = [r for r in rows if math.isfinite(r["value"])]
    assert finite, f"{what} returns no finite value with host={selected}: {rows}"
    # one series or more per selected host, and none of a host not selected
    want = set(HOSTS) if selected == "All" else {selected}
    assert {r["metric"]["instance"].split(":")[0] for r in finite} == want, (what, rows)
