"""The bake's Prometheus path (plugin_utils/_bake_prom): its PromQL and its client against a small
fake of Prometheus's HTTP API (/api/v1/query), then the same verdict as the direct scrapes'."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _bake as bake
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _bake_prom as bake_prom

BUCKETS = {"0.01": 0, "0.02": 900, "0.05": 995, "0.1": 1000, "+Inf": 1000}


def series(host: str, itl_sum: float = 20.0, aborted: float | None = 0.0, up: float = 1.0) -> dict[str, list]:
    """What Prometheus answers for one host, by the QUERIES part (values as the API's strings)."""
    one = [{"metric": {}, "value": [0, None]}]
    answer = {
        "requests": 100.0,
        "aborted": aborted,
        "itl_sum": itl_sum,
        "itl_count": 1000.0,
        "fallbacks": 0.0,
        "mismatches": None,
    }
    out: dict[str, list] = {}
    for part, value in answer.items():
        out[part] = [] if value is None else [{**one[0], "value": [0, str(value)]}]
    out["buckets"] = [{"metric": {"le": le}, "value": [0, str(n)]} for le, n in BUCKETS.items()]
    out["accept_lengths"] = [{"metric": {"instance": f"{host}:30000"}, "value": [0, "3.0"]}]
    out["up"] = [{"metric": {"instance": f"{host}:30000"}, "value": [0, str(up)]}]
    return out


class FakePrometheus:
    """Answers /api/v1/query from `answers` {host: {part: result}}, recognising each query by its
    PromQL (QUERIES is the owner); records the queries and their headers."""

    def __init__(self) -> None:
        self.answers: dict[str, dict[str, list]] = {}
        self.seen: list[tuple[str, str, str]] = []
        self.status = 200
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                params = urllib.parse.parse_qs(url.query)
                expr, at = params["query"][0], params["time"][0]
                fake.seen.append((expr, at, self.headers.get("Authorization", "")))
                doc = fake.answer(url.path, expr)
                body = json.dumps(doc).encode()
                self.send_response(fake.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, path: str, expr: str) -> dict:
        if path != "/api/v1/query":
            return {"status": "error", "error": f"no {path}"}
        for host, parts in self.answers.items():
            for part, result in parts.items():
                if expr == bake_prom.query_text(part, host, 600):
                    return {"status": "success", "data": {"resultType": "vector", "result": result}}
        return {"status": "error", "errorType": "bad_data", "error": f"unexpected query {expr}"}


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    fake = FakePrometheus()
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def test_the_promql_names_the_hosts_series_with_or_without_a_port() -> None:
    assert bake_prom.query_text("requests", "gpu-1.example", 600) == (
        'sum(increase(sglang:num_requests_total{instance=~"gpu\\\\-1\\\\.example(:[0-9]+)?"}[600s]))'
    )
    assert bake_prom.query_text("buckets", "h", 90, "host") == (
        'sum by (le) (increase(sglang:inter_token_latency_seconds_bucket{host=~"h(:[0-9]+)?"}[90s]))'
    )


def test_an_unchanged_host_passes_on_the_prometheus_path(prom: FakePrometheus) -> None:
    prom.answers = {"h1": series("h1"), "r1": series("r1"), "r2": series("r2")}
    client = bake_prom.Prometheus(prom.url, bearer_token="s3cret")
    mine = bake_prom.window(client, "h1", 600, 1_700_000_000.0)
    reference = bake.pool([bake_prom.window(client, h, 600, 1_700_000_000.0) for h in ("r1", "r2")])
    verdict = bake.judge("h1", mine, reference)
    assert verdict["verdict"] == "pass", verdict["message"]
    assert verdict["figures"]["baked"]["itl_mean_s"] == 0.02
    assert verdict["figures"]["reference"]["requests"] == 200
    assert {auth for _expr, _at, auth in prom.seen} == {"Bearer s3cret"}
    assert {at for _expr, at, _auth in prom.seen} == {"1700000000.000"}


def test_a_slower_host_fails_on_the_prometheus_path(prom: FakePrometheus) -> None:
    prom.answers = {"h1": series("h1", itl_sum=30.0), "r1": series("r1")}
    client = bake_prom.Prometheus(prom.url, username="u", password="p")
    verdict = bake.judge(
        "h1", bake_prom.window(client, "h1", 600, 1.0), bake.pool([bake_prom.window(client, "r1", 600, 1.0)])
    )
    assert verdict["verdict"] == "fail"
    assert "mean ITL 30.0 ms vs 20.0 ms" in verdict["message"]
    assert prom.seen[0][2] == "Basic dTpw"


def test_no_series_is_not_published_never_zero(prom: FakePrometheus) -> None:
    answers = series("h1")
    answers["fallbacks"] = []
    prom.answers = {"h1": answers, "r1": series("r1")}
    client = bake_prom.Prometheus(prom.url)
    verdict = bake.judge(
        "h1", bake_prom.window(client, "h1", 600, 1.0), bake.pool([bake_prom.window(client, "r1", 600, 1.0)])
    )
    assert verdict["verdict"] == "refused"
    assert (
        "fallbacks not published (no series: sum(increase(kdtree_verify_runtime_fallbacks_total"
        in (verdict["message"])
    )


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"up": []}, "Prometheus scrapes no target"),
        ({"up": [{"metric": {}, "value": [0, "0"]}]}, "down at the bake's end"),
        ({"requests": [{"metric": {}, "value": [0, "NaN"]}]}, "requests{} nan is not a finite number"),
        ({"itl_sum": [{"metric": {}, "value": [0, "-1"]}]}, "itl_sum{} -1.0 is not a finite number"),
    ],
)
def test_odd_answers_refuse_the_host(prom: FakePrometheus, change, said) -> None:
    prom.answers = {"h1": {**series("h1"), **change}}
    mine = bake_prom.window(bake_prom.Prometheus(prom.url), "h1", 600, 1.0)
    assert said in mine.refused


def test_prometheus_down_is_a_clear_error_never_a_pass(prom: FakePrometheus) -> None:
    url = prom.url
    prom.server.shutdown()
    prom.server.server_close()
    with pytest.raises(bake_prom.PromError, match=f"Prometheus {url} did not answer"):
        bake_prom.window(bake_prom.Prometheus(url, timeout_s=2), "h1", 600, 1.0)


def test_an_error_answer_is_a_clear_error_and_hides_the_token(prom: FakePrometheus) -> None:
    prom.status = 401
    prom.answers = {}
    with pytest.raises(bake_prom.PromError, match="answered HTTP 401") as err:
        bake_prom.window(bake_prom.Prometheus(prom.url, bearer_token="s3cret"), "h1", 600, 1.0)
    assert "s3cret" not in str(err.value)
    prom.status = 200
    with pytest.raises(bake_prom.PromError, match="refused the query"):
        bake_prom.window(bake_prom.Prometheus(prom.url), "h1", 600, 1.0)


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"url": "prometheus:9090"}, "not an http"),
        ({"url": "http://p:9090", "bearer_token": "t", "username": "u"}, "not both"),
        ({"url": "http://p:9090", "label": "in stance"}, "not a label name"),
        ({"url": "http://p:9090", "timeout_s": 0}, "not 0-300 s"),
    ],
)
def test_bad_prometheus_settings_are_refused_before_any_query(kwargs, said) -> None:
    with pytest.raises(bake.BakeInputError, match=said):
        bake_prom.Prometheus(**kwargs)
