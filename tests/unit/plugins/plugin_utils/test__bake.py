"""The bake's verdict is one pure function (plugin_utils/_bake.judge) over windows that two sources
fill: two /metrics texts read through the host (window_from_scrapes, here) and the operator's
Prometheus (test__bake_prom.py). Pass, fail, not enough traffic and refused are four verdicts; only
pass passes, and missing or odd evidence refuses, never counts as zero."""

from __future__ import annotations

import math

import pytest
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _bake as bake

BOUNDS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, math.inf)


def metrics_text(
    requests: float = 0,
    aborted: float | None = 0,
    itl: list[float] | None = None,
    accept: float | None = 3.0,
    fallbacks: float | None = 0,
    mismatches: float | None = None,
    labels: str = 'model_name="m"',
) -> str:
    """A /metrics text as SGLang 0.5.23 with the kdtree patch serves it (counters since start)."""
    itl = itl or []
    lines = [f"sglang:num_requests_total{{{labels}}} {requests}"]
    if aborted is not None:
        lines.append(f"sglang:num_aborted_requests_total{{{labels}}} {aborted}")
    for bound in BOUNDS:
        le = "+Inf" if math.isinf(bound) else repr(bound)
        count = sum(1 for v in itl if v <= bound)
        lines.append(f'sglang:inter_token_latency_seconds_bucket{{le="{le}",{labels}}} {count}')
    lines.append(f"sglang:inter_token_latency_seconds_sum{{{labels}}} {sum(itl)}")
    lines.append(f"sglang:inter_token_latency_seconds_count{{{labels}}} {len(itl)}")
    if accept is not None:
        lines.append(f"sglang:spec_accept_length{{{labels}}} {accept}")
    if fallbacks is not None:
        lines.append(f'kdtree_verify_runtime_fallbacks_total{{pid="11"}} {fallbacks}')
    if mismatches is not None:
        lines.append(f'kdtree_verify_validate_mismatches_total{{pid="11"}} {mismatches}')
    return "\n".join(lines) + "\n"


def window(
    host: str,
    requests: int = 100,
    itl_s: float = 0.02,
    tokens: int = 1000,
    aborted: int = 0,
    accept: float = 3.0,
    fallbacks: int = 0,
    mismatches: int | None = None,
) -> bake.Window:
    """A host's bake window: its scrape at the start (some earlier traffic) and at the end."""
    earlier = [0.015] * 50
    before = metrics_text(10, 0, earlier, accept, 0, None if mismatches is None else 0)
    after = metrics_text(10 + requests, aborted, earlier + [itl_s] * tokens, accept, fallbacks, mismatches)
    return bake.window_from_scrapes(host, before, after)


def reference(**kwargs) -> bake.Window:
    return bake.pool([window("ref1", **kwargs), window("ref2", **kwargs)])


def test_an_unchanged_host_passes_with_its_figures_and_a_one_line_message() -> None:
    verdict = bake.judge("h1", window("h1"), reference())
    assert verdict["verdict"] == "pass", verdict["message"]
    assert verdict["message"].startswith("bake pass on h1: error rate 0.00% vs 0.00%")
    assert "\n" not in verdict["message"]
    assert verdict["reference_hosts"] == ["ref1", "ref2"]
    baked = verdict["figures"]["baked"]
    assert baked["requests"] == 100
    assert baked["itl_samples"] == 1000
    assert baked["itl_mean_s"] == pytest.approx(0.02)
    assert baked["accept_length"] == 3.0
    assert verdict["figures"]["reference"]["requests"] == 200  # pooled: summed, not averaged
    assert all(check["ok"] for check in verdict["checks"])


def test_a_slower_mean_inter_token_latency_fails() -> None:
    verdict = bake.judge("h1", window("h1", itl_s=0.03), reference())
    assert verdict["verdict"] == "fail"
    assert "mean ITL 30.0 ms vs 20.0 ms (+50.0%, at most +10%)" in verdict["message"]


def test_a_slower_high_quantile_alone_fails() -> None:
    # 2 % of the tokens at 150 ms: a tail the mean hides once its threshold is wide
    mine = bake.window_from_scrapes(
        "h1",
        metrics_text(0, 0, []),
        metrics_text(100, 0, [0.019] * 980 + [0.15] * 20),
    )
    verdict = bake.judge("h1", mine, reference(), {"itl_mean_pct": 50})
    assert verdict["verdict"] == "fail"
    failed = [c["figure"] for c in verdict["checks"] if not c["ok"]]
    assert failed == ["itl_high_s"]
    assert "p99 ITL" in verdict["message"]


def test_more_errors_than_the_reference_fail() -> None:
    verdict = bake.judge("h1", window("h1", aborted=5), reference())
    assert verdict["verdict"] == "fail"
    assert "error rate 5.00% vs 0.00% (+5.00 pp, at most +1)" in verdict["message"]


def test_errors_within_the_threshold_pass() -> None:
    verdict = bake.judge("h1", window("h1", aborted=1), reference(aborted=1))
    assert verdict["verdict"] == "pass", verdict["message"]


def test_a_shorter_accept_length_fails() -> None:
    verdict = bake.judge("h1", window("h1", accept=2.5), reference())
    assert verdict["verdict"] == "fail"
    assert "accept length 2.50 vs 3.00 (-16.7%, at least -5%)" in verdict["message"]


def test_a_longer_accept_length_and_a_faster_latency_pass() -> None:
    verdict = bake.judge("h1", window("h1", accept=3.5, itl_s=0.01), reference())
    assert verdict["verdict"] == "pass", verdict["message"]


def test_one_runtime_fallback_fails_even_on_little_traffic() -> None:
    verdict = bake.judge("h1", window("h1", requests=1, tokens=3, fallbacks=1), reference())
    assert verdict["verdict"] == "fail"
    assert verdict["message"] == "bake fail on h1: fallbacks 1 (at most 0)"


def test_validate_mismatches_fail_and_are_required_in_validate_mode() -> None:
    bad = bake.judge("h1", window("h1", mismatches=2), reference(), expect_mismatches=True)
    assert bad["verdict"] == "fail"
    assert "mismatches 2 (at most 0)" in bad["message"]
    clean = bake.judge("h1", window("h1", mismatches=0), reference(), expect_mismatches=True)
    assert clean["verdict"] == "pass", clean["message"]
    unpublished = bake.judge("h1", window("h1"), reference(), expect_mismatches=True)
    assert unpublished["verdict"] == "refused"
    assert "kdtree_verify_validate_mismatches_total absent" in unpublished["message"]


@pytest.mark.parametrize(
    ("mine", "ref", "said"),
    [
        ({"requests": 5}, {}, "baked 5 requests (at least 20)"),
        ({"tokens": 50}, {}, "baked 50 inter-token samples (at least 200)"),
        ({}, {"requests": 3}, "reference 6 requests (at least 20)"),
        ({"requests": 0, "tokens": 0}, {}, "baked 0 requests"),
    ],
)
def test_too_little_traffic_is_its_own_verdict_never_a_pass(mine, ref, said) -> None:
    verdict = bake.judge("h1", window("h1", **mine), reference(**ref))
    assert verdict["verdict"] == "not_enough_traffic"
    assert said in verdict["message"]


def test_too_little_traffic_is_judged_before_a_slow_figure() -> None:
    verdict = bake.judge("h1", window("h1", requests=2, itl_s=0.5), reference())
    assert verdict["verdict"] == "not_enough_traffic"


def test_no_reference_host_refuses() -> None:
    verdict = bake.judge("h1", window("h1"), bake.pool([]))
    assert verdict["verdict"] == "refused"
    assert "no reference host" in verdict["message"]


@pytest.mark.parametrize(
    ("before", "after", "said"),
    [
        (None, metrics_text(5), "/metrics not read at the bake's start: timed out"),
        (metrics_text(5), None, "/metrics not read at the bake's end"),
        (
            metrics_text(50),
            metrics_text(10),
            'sglang:num_requests_total{model_name="m"} fell 50 -> 10 (a reset)',
        ),
        (metrics_text(5), metrics_text(10, labels='model_name="other"'), "vanished (a restart?)"),
        (metrics_text(5), metrics_text(10).replace(" 10\n", " NaN\n", 1), "is not a finite number"),
        (metrics_text(5), metrics_text(10, accept=math.nan), "spec_accept_length"),
        (
            metrics_text(5, fallbacks=3),
            metrics_text(10, fallbacks=1),
            'fallbacks_total{pid="11"} fell 3 -> 1',
        ),
    ],
)
def test_odd_evidence_refuses(before, after, said) -> None:
    mine = bake.window_from_scrapes("h1", before, after, "timed out")
    verdict = bake.judge("h1", mine, reference())
    assert verdict["verdict"] == "refused"
    assert said in verdict["message"]


def test_a_refused_reference_host_refuses_naming_it() -> None:
    odd = bake.window_from_scrapes("ref2", metrics_text(50), metrics_text(10))
    verdict = bake.judge("h1", window("h1"), bake.pool([window("ref1"), odd]))
    assert verdict["verdict"] == "refused"
    assert "reference ref2: sglang:num_requests_total" in verdict["message"]


@pytest.mark.parametrize(
    ("missing", "said"),
    [
        ({"fallbacks": None}, "fallbacks not published (kdtree_verify_runtime_fallbacks_total absent)"),
        ({"accept": None}, "baked accept_length not published (sglang:spec_accept_length absent)"),
    ],
)
def test_a_missing_figure_refuses_never_counts_as_zero(missing, said) -> None:
    mine = bake.window_from_scrapes(
        "h1", metrics_text(0, **missing), metrics_text(100, 0, [0.02] * 1000, **missing)
    )
    verdict = bake.judge("h1", mine, reference())
    assert verdict["verdict"] == "refused"
    assert said in verdict["message"]


def test_a_reference_host_without_a_figure_leaves_the_pool_without_it() -> None:
    lacking = bake.window_from_scrapes(
        "ref2", metrics_text(0, accept=None), metrics_text(100, 0, [0.02] * 1000, accept=None)
    )
    pooled = bake.pool([window("ref1"), lacking])
    verdict = bake.judge("h1", window("h1"), pooled)
    assert verdict["verdict"] == "refused"
    assert "reference accept_length" in verdict["message"]


def test_absent_aborted_series_with_requests_is_no_abort() -> None:
    mine = bake.window_from_scrapes(
        "h1", metrics_text(0, aborted=None), metrics_text(100, None, [0.02] * 1000)
    )
    assert bake.figures(mine, 0.99)["error_rate"] == 0.0


def test_quantile_interpolates_within_a_bucket_as_promql_does() -> None:
    buckets = {0.1: 50.0, 0.2: 100.0, math.inf: 100.0}
    assert bake.quantile(0.5, buckets) == pytest.approx(0.1)
    assert bake.quantile(0.75, buckets) == pytest.approx(0.15)
    assert bake.quantile(0.99, {0.1: 0.0, math.inf: 10.0}) == 0.1  # +Inf: the highest finite bound
    assert bake.quantile(0.99, {0.1: 0.0, math.inf: 0.0}) is None
    with pytest.raises(bake.BakeInputError, match=r"\+Inf"):
        bake.quantile(0.5, {0.1: 1.0})


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"itl_mean_pct": -1}, "not a finite number >= 0"),
        ({"itl_mean_pct": "10"}, "not a finite number >= 0"),
        ({"min_requests": 2.5}, "not a whole count"),
        ({"quantile": 1.5}, "between 0 and 1"),
        ({"itl_p99": 1}, "unknown bake thresholds"),
        ([], "must be a dict"),
    ],
)
def test_bad_thresholds_are_refused_before_judging(given, said) -> None:
    with pytest.raises(bake.BakeInputError, match=said):
        bake.judge("h1", window("h1"), reference(), given)


def test_a_threshold_moves_the_line() -> None:
    slower = window("h1", itl_s=0.024)  # +20 %; its p99 lands in the next bucket up (0.02-0.05 s)
    assert bake.judge("h1", slower, reference())["verdict"] == "fail"
    assert (
        bake.judge("h1", slower, reference(), {"itl_mean_pct": 25, "itl_high_pct": 200})["verdict"] == "pass"
    )


def test_a_window_survives_the_trip_through_ansible_facts() -> None:
    mine = window("h1")
    again = bake.Window.from_dict(mine.as_dict())
    assert bake.figures(again, 0.99) == bake.figures(mine, 0.99)
    with pytest.raises(bake.BakeInputError, match="not a finite number"):
        bake.Window.from_dict({**mine.as_dict(), "requests": -1})


@pytest.mark.parametrize(
    ("batch", "failed", "hosts", "what"),
    [
        (["a"], [], ["b", "c", "d"], "not yet deployed"),
        (["b", "c"], [], ["d"], "not yet deployed"),
        (["d"], [], ["a", "b", "c"], "earlier batches that passed"),
        (["c", "d"], ["b"], ["a"], "earlier batches that passed"),
        (["a", "b"], ["z"], [], "no reference host: its own figures before its restart"),
    ],
)
def test_the_reference_is_the_hosts_not_yet_deployed_else_the_earlier_that_passed(
    batch, failed, hosts, what
) -> None:
    every = ["a", "b"] if failed == ["z"] else ["a", "b", "c", "d"]
    assert bake.reference_hosts(every, batch, failed) == (hosts, what)


def test_a_batch_outside_the_play_is_refused() -> None:
    with pytest.raises(bake.BakeInputError, match="not part of the play"):
        bake.reference_hosts(["a"], ["z"], [])


def test_a_host_failing_with_its_batch_says_which_sibling_and_what_it_said() -> None:
    posts = {
        "h2": {"state": "ok", "data": {"message": "bake pass on h2: ..."}},
        "h3": {"state": "failed", "data": {"message": "bake fail on h3: mean ITL 30.0 ms vs 15.0 ms"}},
    }
    assert bake.batch_message(["h3", "h4"], posts) == (
        "the bake of the batch failed on h3, h4: bake fail on h3: mean ITL 30.0 ms vs 15.0 ms; "
        "h4: no bake verdict (its deploy failed or timed out)"
    )
    with pytest.raises(bake.BakeInputError):
        bake.batch_message(None, posts)


@pytest.mark.parametrize(
    ("result", "text", "why"),
    [
        ({"status": 200, "content": "x 1\n"}, "x 1\n", ""),
        ({"status": 404, "msg": "Status code was 404"}, None, "HTTP 404: Status code was 404"),
        ({"status": -1, "msg": "Connection refused"}, None, "HTTP -1: Connection refused"),
        ({"status": 200}, None, "no content"),
        ("odd", None, "no read result ('odd')"),
    ],
)
def test_a_failed_read_is_no_text_and_says_why(result, text, why) -> None:
    assert bake.scrape_text(result) == (text, why)


def test_a_verdict_goes_into_the_history_with_its_figures() -> None:
    from ansible_collections.kdtree.fleet.plugins.module_utils import _history as history

    verdict = bake.judge("h1", window("h1", itl_s=0.03), reference())
    entries = [{"id": "d1"}]
    entry = history.finish(entries, "d1", "rolled_back", verdict["message"], bake=bake.record(verdict))
    assert entry["bake"]["verdict"] == "fail"
    assert entry["bake"]["message"] == verdict["message"]
    assert entry["bake"]["reference_hosts"] == ["ref1", "ref2"]
    assert entry["bake"]["baked"]["itl_mean_s"] == pytest.approx(0.03)
    assert entry["bake"]["reference"]["requests"] == 200


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"verdict": "maybe"}, "bake verdict 'maybe' is not one of"),
        ({"message": "two\nlines"}, "one line"),
        ({"baked": {"itl_mean_s": -1.0}}, "baked figure itl_mean_s -1.0"),
        ({"reference": {"requests": math.nan}}, "reference figure requests nan"),
        ({"reference_hosts": "r1"}, "list of host names"),
    ],
)
def test_an_odd_bake_record_is_refused_for_a_healthy_deploy_and_noted_for_a_failed_one(change, said) -> None:
    from ansible_collections.kdtree.fleet.plugins.module_utils import _history as history

    good = bake.record(bake.judge("h1", window("h1"), reference()))
    odd = {**good, **change}
    with pytest.raises(history.HistoryError, match=said):
        history.finish([{"id": "d1"}], "d1", "healthy", "", bake=odd)
    entry = history.finish([{"id": "d1"}], "d1", "rolled_back", "", bake=odd)
    assert "bake" not in entry
    assert said in entry["bake_refused"]


def test_a_reference_node_that_serves_no_sglang_series_is_left_out_of_the_pool() -> None:
    # a serving group's node of rank > 0 answers /metrics without SGLang's series (its rank 0 serves)
    idle = bake.window_from_scrapes("ref3", "", 'kdtree_verify_runtime_fallbacks_total{pid="9"} 0\n')
    assert not idle.serves
    verdict = bake.judge("h1", window("h1"), bake.pool([window("ref1"), idle]))
    assert verdict["verdict"] == "pass", verdict["message"]
    assert verdict["reference_hosts"] == ["ref1"]
    alone = bake.judge("h1", window("h1"), bake.pool([idle]))
    assert alone["verdict"] == "refused"
    assert "no reference host serving SGLang's series (ref3 serve none)" in alone["message"]
    # the baked host itself must serve them: no series is no evidence
    mine = bake.judge("h1", idle, reference())
    assert mine["verdict"] == "refused"
