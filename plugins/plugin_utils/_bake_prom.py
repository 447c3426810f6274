"""The bake's figures from a Prometheus the operator runs: the PromQL (QUERIES, its one owner) and
a small client of the HTTP API's instant query (/api/v1/query).

Each host's window is read with one query per part, evaluated at the bake's end over the bake's
length, on the host's series (`<label>=~"<host>(:[0-9]+)?"`, the dashboard's selector: a target
named by host, with or without its port). The queries (`{sel}` the selector, `{w}` the window in
seconds, e.g. `600s`):

requests        sum(increase(sglang:num_requests_total{sel}[w]))
aborted         sum(increase(sglang:num_aborted_requests_total{sel}[w]))
itl_sum         sum(increase(sglang:inter_token_latency_seconds_sum{sel}[w]))
itl_count       sum(increase(sglang:inter_token_latency_seconds_count{sel}[w]))
buckets         sum by (le) (increase(sglang:inter_token_latency_seconds_bucket{sel}[w]))
accept_lengths  sglang:spec_accept_length{sel} > 0
fallbacks       sum(increase(kdtree_verify_runtime_fallbacks_total{sel}[w]))
mismatches      sum(increase(kdtree_verify_validate_mismatches_total{sel}[w]))
up              up{sel}

A query that answers no series leaves its part not published (an empty sum is no evidence, never
0), as plugin_utils/_bake.window_from_scrapes does for an absent series; `aborted` is the exception
both sources share: SGLang creates it on the first abort. A target Prometheus does not scrape
(`up` empty) or saw down at the bake's end (`up` 0) refuses the host's window; so does a value that
is not a finite number >= 0. The windows then pool and judge as the direct scrapes' do
(plugin_utils/_bake: one verdict).

A Prometheus that does not answer, answers an error or something that is not its API raises
PromError: the bake refuses with its message (the Prometheus down case), never passes.

Controller only; stdlib.
"""

from __future__ import annotations

import base64
import json
import math
import re
import urllib.error
import urllib.parse
from dataclasses import dataclass

from ansible.module_utils.urls import open_url
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _bake as bake

COUNTER_QUERIES = {
    "requests": f"sum(increase({bake.REQUESTS_METRIC}{{sel}}[{{w}}]))",
    "aborted": f"sum(increase({bake.ABORTED_METRIC}{{sel}}[{{w}}]))",
    "itl_sum": f"sum(increase({bake.decode.ITL_METRIC}_sum{{sel}}[{{w}}]))",
    "itl_count": f"sum(increase({bake.decode.ITL_METRIC}_count{{sel}}[{{w}}]))",
    "fallbacks": f"sum(increase({bake.FALLBACKS_METRIC}{{sel}}[{{w}}]))",
    "mismatches": f"sum(increase({bake.MISMATCHES_METRIC}{{sel}}[{{w}}]))",
}
QUERIES = {
    **COUNTER_QUERIES,
    "buckets": f"sum by (le) (increase({bake.ITL_BUCKET_METRIC}{{sel}}[{{w}}]))",
    "accept_lengths": f"{bake.decode.ACCEPT_LENGTH_METRIC}{{sel}} > 0",
    "up": "up{sel}",
}
DEFAULT_TIMEOUT_S = 10.0
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class PromError(RuntimeError):
    """Prometheus did not answer the bake's query, or answered no API answer."""


@dataclass(frozen=True)
class Prometheus:
    """Where the operator's Prometheus is and how to reach it. `bearer_token` or `username` and
    `password` (basic), never both; `ca_path` a CA bundle; `validate_certs` false skips the check."""

    url: str
    bearer_token: str = ""
    username: str = ""
    password: str = ""
    ca_path: str = ""
    validate_certs: bool = True
    timeout_s: float = DEFAULT_TIMEOUT_S
    label: str = "instance"

    def __post_init__(self) -> None:
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise bake.BakeInputError(f"the Prometheus URL {self.url!r} is not an http(s) URL")
        if self.bearer_token and (self.username or self.password):
            raise bake.BakeInputError(
                "give the Prometheus a bearer token or a username and password, not both"
            )
        if not _LABEL.match(self.label):
            raise bake.BakeInputError(f"the Prometheus label {self.label!r} is not a label name")
        if not isinstance(self.timeout_s, (int, float)) or not 0 < self.timeout_s <= 300:
            raise bake.BakeInputError(f"the Prometheus timeout {self.timeout_s!r} is not 0-300 s")

    def headers(self) -> dict[str, str]:
        if self.bearer_token:
            return {"Authorization": f"Bearer {self.bearer_token}"}
        if self.username or self.password:
            pair = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
            return {"Authorization": f"Basic {pair}"}
        return {}

    def redact(self, text: str) -> str:
        for secret in (self.bearer_token, self.password):
            if secret:
                text = text.replace(secret, "********")
        return text


def selector(host: str, label: str = "instance") -> str:
    """The series of one host: its target named by host, with or without a port."""
    pattern = re.escape(host).replace("\\", "\\\\").replace('"', '\\"')
    return f'{{{label}=~"{pattern}(:[0-9]+)?"}}'


def query_text(part: str, host: str, window_s: int, label: str = "instance") -> str:
    """The PromQL of one part of one host's window (QUERIES)."""
    return QUERIES[part].replace("{sel}", selector(host, label)).replace("{w}", f"{int(window_s)}s")


def query(prom: Prometheus, expr: str, at: float) -> list[tuple[dict[str, str], float]]:
    """The instant vector of `expr` at Unix time `at`: (labels, value) per series. PromError when
    Prometheus does not answer, answers an error or another result type."""
    params = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    url = f"{prom.url.rstrip('/')}/api/v1/query?{params}"
    headers = {"Accept": "application/json", **prom.headers()}
    try:
        with open_url(
            url,
            headers=headers,
            timeout=prom.timeout_s,
            validate_certs=prom.validate_certs,
            ca_path=prom.ca_path or None,
            follow_redirects="none",
        ) as answer:
            body = answer.read(8 * 1024 * 1024)
    except urllib.error.HTTPError as err:
        detail = err.read(300).decode("utf-8", "replace")
        raise PromError(prom.redact(f"Prometheus {prom.url} answered HTTP {err.code}: {detail}")) from None
    except (urllib.error.URLError, OSError, TimeoutError) as err:
        reason = getattr(err, "reason", err)
        raise PromError(prom.redact(f"Prometheus {prom.url} did not answer: {reason}")) from None
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise PromError(f"Prometheus {prom.url} answered something that is not JSON") from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        error = doc.get("error") if isinstance(doc, dict) else None
        raise PromError(f"Prometheus {prom.url} refused the query {expr!r}: {error or doc!r}")
    data = doc.get("data")
    if (
        not isinstance(data, dict)
        or data.get("resultType") != "vector"
        or not isinstance(data.get("result"), list)
    ):
        raise PromError(f"Prometheus {prom.url} answered no instant vector to {expr!r}")
    out = []
    for item in data["result"]:
        metric, value = (item.get("metric"), item.get("value")) if isinstance(item, dict) else (None, None)
        if not isinstance(metric, dict) or not isinstance(value, list) or len(value) != 2:
            raise PromError(f"Prometheus {prom.url} answered a malformed sample to {expr!r}: {item!r}")
        try:
            number = float(value[1])
        except (TypeError, ValueError):
            raise PromError(
                f"Prometheus {prom.url} answered a value that is not a number: {value!r}"
            ) from None
        out.append(({str(k): str(v) for k, v in metric.items()}, number))
    return out


def _odd(part: str, labels: dict[str, str], value: float) -> str:
    if not math.isfinite(value) or value < 0:
        shown = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        return f"Prometheus {part}{{{shown}}} {value} is not a finite number >= 0"
    return ""


def window(prom: Prometheus, host: str, window_s: int, at: float) -> bake.Window:
    """One host's bake window from Prometheus (see the module's docstring). PromError when
    Prometheus does not answer."""
    out = bake.Window(hosts=[host])
    up = query(prom, query_text("up", host, window_s, prom.label), at)
    if not up:
        out.refused = f"Prometheus scrapes no target {selector(host, prom.label)} (up is absent)"
        return out
    if any(value != 1 for _labels, value in up):
        out.refused = f"Prometheus saw the target {selector(host, prom.label)} down at the bake's end"
        return out
    for part in COUNTER_QUERIES:
        found = query(prom, query_text(part, host, window_s, prom.label), at)
        for labels, value in found:
            why = _odd(part, labels, value)
            if why:
                out.refused = why
                return out
        if found:
            setattr(out, part, sum(value for _labels, value in found))
        elif part == "aborted":
            out.aborted = None
        else:
            out.why[part] = (
                f"{bake.decode.NOT_PUBLISHED} (no series: {query_text(part, host, window_s, prom.label)})"
            )
    if out.itl_count is None:
        out.why["itl"] = out.why.get("itl_count", bake.decode.NOT_PUBLISHED)
    buckets: dict[float, float] = {}
    for labels, value in query(prom, query_text("buckets", host, window_s, prom.label), at):
        why = _odd("buckets", labels, value)
        if why or "le" not in labels:
            out.refused = why or f"Prometheus bucket without le: {labels!r}"
            return out
        try:
            buckets[bake.bound(labels["le"])] = value
        except bake.BakeInputError as err:
            out.refused = str(err)
            return out
    if buckets:
        out.buckets = buckets
    else:
        out.why["itl_high"] = f"{bake.decode.NOT_PUBLISHED} (no {bake.ITL_BUCKET_METRIC} series)"
    for labels, value in query(prom, query_text("accept_lengths", host, window_s, prom.label), at):
        why = _odd("accept_length", labels, value)
        if why:
            out.refused = why
            return out
        out.accept_lengths.append(value)
    if not out.accept_lengths:
        out.why["accept_length"] = (
            f"{bake.decode.NOT_PUBLISHED} (no {bake.decode.ACCEPT_LENGTH_METRIC} above 0)"
        )
    if out.accept_lengths:
        out.accept_lengths = [round(sum(out.accept_lengths) / len(out.accept_lengths), 3)]
    return out
