"""The decode figures of a deploy (module_utils/_decode.py): how they are computed from the smoke's
answers and SGLang's /metrics, None when not published, odd evidence refused; their record in the
deploy history (module_utils/_history.py, the kdtree_history module). The report's comparison with the
previous deploy is tests/unit/plugins/filter/test_report_decode.py."""

from __future__ import annotations

import math

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _decode as decode
from ansible_collections.kdtree.fleet.plugins.module_utils import _history as history
from ansible_collections.kdtree.fleet.plugins.modules import kdtree_history
from ansible_collections.kdtree.fleet.tests.unit.helpers.histories import params, record

ITL = "sglang:inter_token_latency_seconds"
ACCEPT = "sglang:spec_accept_length"


def metrics(itl: dict[str, tuple[float, float]] | None = None, accept: dict[str, float] | None = None) -> str:
    """A /metrics text: per label set (sum, count) of the ITL histogram, accept length per rank."""
    lines = ["# HELP sglang:inter_token_latency_seconds Histogram of inter-token latency in seconds."]
    lines.append(f"# TYPE {ITL} histogram")
    for labels, (total, count) in (itl or {}).items():
        lines.append(f'{ITL}_bucket{{{labels},le="+Inf"}} {count}')
        lines.append(f"{ITL}_sum{{{labels}}} {total}")
        lines.append(f"{ITL}_count{{{labels}}} {count}")
    for rank, value in (accept or {}).items():
        lines.append(f'{ACCEPT}{{model_name="m",tp_rank="{rank}"}} {value}')
    lines.append("sglang:gen_throughput 12.5")
    return "\n".join(lines) + "\n"


M = 'model_name="m"'


# ---------------------------------------------------------------------------------------------
# tokens/s


@pytest.mark.parametrize(
    ("body", "events", "done", "malformed"),
    [
        (b'data: {"a": 1}\n\ndata: {"a": 2}\n\ndata: [DONE]\n\n', [{"a": 1}, {"a": 2}], True, ""),
        (b'data: {"a": 1}\n\n', [{"a": 1}], False, ""),
        (b'data: {"a": 1}\n\ndata: nope\n\n', [{"a": 1}], False, "event 2 is not JSON"),
        (b"data: [DONE]\n\ndata: {}\n\n", [], True, "line 3 after [DONE]"),
        (b'data: {"a": 1}\nevent: x\n\n', [{"a": 1}], False, "line 2 is not a data line"),
        (b"data: \xff\n\n", [], False, "not UTF-8"),
    ],
    ids=["two-events", "no-done", "bad-event", "after-done", "other-field", "not-utf8"],
)
def test_a_streamed_answer_is_read_by_event_and_odd_streams_are_malformed(body, events, done, malformed):
    stream = decode.read_stream(body)
    assert (stream.events, stream.done, stream.malformed) == (events, done, malformed)
    assert decode.is_stream(body)


def test_tokens_per_s_is_the_completion_tokens_over_the_requests_seconds():
    answers = [{"seconds": 0.5, "completion_tokens": 16}, {"seconds": 1.5, "completion_tokens": 8}]
    figure, tokens, seconds = decode.tokens_per_s(answers)
    assert (figure.value, tokens, seconds) == (12.0, 24, 2.0)  # a ratio of sums, not a mean of rates


@pytest.mark.parametrize(
    ("answers", "why"),
    [
        pytest.param([], "not published (no request)", id="no-request"),
        pytest.param(
            [{"seconds": 0.5, "completion_tokens": 4}, {"seconds": 0.5, "completion_tokens": None}],
            "not published (answer 2 does not say its completion tokens)",
            id="an-answer-without-its-tokens",
        ),
        pytest.param(
            [{"seconds": 0.5, "completion_tokens": -1}], "refused: answer 1 completion tokens -1", id="neg"
        ),
        pytest.param(
            [{"seconds": 0.5, "completion_tokens": True}],
            "refused: answer 1 completion tokens True",
            id="bool",
        ),
        pytest.param(
            [{"seconds": math.nan, "completion_tokens": 3}], "refused: answer 1 took nan s", id="nan-seconds"
        ),
        pytest.param(
            [{"seconds": -0.1, "completion_tokens": 3}], "refused: answer 1 took -0.1 s", id="neg-seconds"
        ),
        pytest.param([{"seconds": 0.0, "completion_tokens": 3}], "refused: 1 answers in 0 s", id="no-time"),
    ],
)
def test_tokens_per_s_is_none_with_why_never_zero(answers, why):
    figure = decode.tokens_per_s(answers)[0]
    assert figure.value is None and figure.why == why


@pytest.mark.parametrize(
    ("body", "tokens"),
    [
        (b'{"text": " Paris", "meta_info": {"completion_tokens": 16, "prompt_tokens": 5}}', 16),
        (b'{"choices": [], "usage": {"completion_tokens": 7}}', 7),
        (b'{"text": " Paris", "meta_info": {}}', None),
        (b'{"meta_info": {"completion_tokens": "16"}}', None),
        (b'{"meta_info": {"completion_tokens": -2}}', None),
        (b"[1, 2]", None),
        (b"not json", None),
        (b"\xff\xfe", None),
        # streamed: the last event's meta_info (SGLang's events are cumulative)
        (
            b'data: {"text": " P", "meta_info": {"completion_tokens": 1}}\n\n'
            b'data: {"text": " Paris", "meta_info": {"completion_tokens": 2}}\n\ndata: [DONE]\n\n',
            2,
        ),
        (b'data: {"meta_info": {"completion_tokens": 3}}\n\n', 3),  # no [DONE]: the traffic refuses it
        (b'data: {"meta_info": {"completion_tokens": 1}}\n\ndata: {oops\n\ndata: [DONE]\n\n', None),
        (b"data: [DONE]\n\n", None),
    ],
)
def test_an_answer_says_its_completion_tokens_or_nothing(body, tokens):
    assert decode.completion_tokens(body) == tokens


# ---------------------------------------------------------------------------------------------
# inter-token latency: the delta of SGLang's histogram over the smoke run


def test_itl_mean_is_the_histograms_delta_sum_over_delta_count_over_every_series():
    before = metrics({M: (10.0, 100), 'model_name="m",tp_rank="1"': (1.0, 10)})
    after = metrics({M: (10.6, 120), 'model_name="m",tp_rank="1"': (1.4, 30), 'model_name="new"': (0.2, 10)})
    figure, samples = decode.itl_mean(before, after)
    assert samples == 20 + 20 + 10
    assert figure.value == pytest.approx((0.6 + 0.4 + 0.2) / 50)


@pytest.mark.parametrize(
    ("before", "after", "why"),
    [
        pytest.param(
            None,
            metrics({M: (1.0, 10)}),
            "not published (/metrics not read before the requests: 404)",
            id="unread-before",
        ),
        pytest.param(
            metrics({M: (1.0, 10)}),
            None,
            "not published (/metrics not read after the requests: 404)",
            id="unread-after",
        ),
        pytest.param(metrics(), metrics(), f"not published ({ITL} absent)", id="no-enable-metrics"),
        pytest.param(
            metrics({M: (1.0, 10)}),
            metrics({M: (1.0, 10)}),
            f"not published (no {ITL} sample during the requests)",
            id="no-new-sample",
        ),
        pytest.param(
            metrics({M: (5.0, 50)}),
            metrics({M: (0.2, 4)}),
            f"refused: {ITL}_sum{{{M}}} fell 5 -> 0.2 (a reset)",
            id="counter-reset",
        ),
        pytest.param(
            metrics({M: (1.0, 10), 'model_name="x"': (1.0, 10)}),
            metrics({M: (2.0, 20)}),
            f'refused: {ITL}_sum{{model_name="x"}} vanished (a restart?)',
            id="series-vanished",
        ),
        pytest.param(
            metrics({M: (1.0, 10)}),
            metrics({M: (math.nan, 20)}),
            f"refused: {ITL}_sum{{{M}}} nan is not a finite number",
            id="nan",
        ),
        pytest.param(
            metrics({M: (1.0, 10)}),
            metrics({M: (math.inf, 20)}),
            f"refused: {ITL}_sum{{{M}}} inf is not a finite number",
            id="inf",
        ),
        pytest.param(
            metrics({M: (-1.0, 10)}),
            metrics({M: (2.0, 20)}),
            f"refused: {ITL}_sum{{{M}}} -1 is negative",
            id="negative",
        ),
        pytest.param(
            metrics({M: (1.0, 10)}),
            metrics({M: (2.0, 20)}).replace('_count{model_name="m"} 20', '_count{model_name="m"} x'),
            f"refused: {ITL}_count{{{M}}} nan is not a finite number",
            id="unreadable",
        ),
    ],
)
def test_itl_mean_is_none_when_not_published_and_refuses_odd_evidence(before, after, why):
    figure, _samples = decode.itl_mean(before, after, "404")
    assert figure.value is None and figure.why == why


# ---------------------------------------------------------------------------------------------
# accept length


@pytest.mark.parametrize(
    ("text", "value", "why"),
    [
        pytest.param(metrics(accept={"0": 3.5, "1": 2.5}), 3.0, "", id="mean-over-ranks"),
        pytest.param(metrics(accept={"0": 3.5, "1": 0.0}), 3.5, "", id="a-rank-not-published-yet"),
        pytest.param(
            metrics(accept={"0": 0.0}), None, f"not published ({ACCEPT} still 0)", id="zero-is-not-published"
        ),
        pytest.param(metrics(), None, f"not published ({ACCEPT} absent)", id="absent"),
        pytest.param(
            metrics(accept={"0": math.nan}),
            None,
            f'refused: {ACCEPT}{{model_name="m",tp_rank="0"}} nan is not a finite number',
            id="nan",
        ),
        pytest.param(
            metrics(accept={"0": 2.0, "1": -1.0}),
            None,
            f'refused: {ACCEPT}{{model_name="m",tp_rank="1"}} -1 is negative',
            id="negative",
        ),
    ],
)
def test_the_accept_length_is_sglangs_gauge_after_the_requests(text, value, why):
    figure = decode.accept_length(text)
    assert (figure.value, figure.why) == (value, why)


def test_labels_with_braces_spaces_and_a_timestamp_are_read():
    text = f'{ACCEPT}{{model_name="/m {{x}} y",tp_rank="0"}} 2.25 1764490000000\n'
    assert decode.accept_length(text).value == 2.25


# ---------------------------------------------------------------------------------------------
# one smoke run's record


def test_a_run_with_metrics_records_every_figure():
    answers = [{"seconds": 1.0, "completion_tokens": 16}] * 2
    record = decode.figures(
        answers, metrics({M: (1.0, 10)}, {"0": 0.0}), metrics({M: (1.9, 40)}, {"0": 1.75})
    )
    assert record == {
        "tokens_per_s": 16.0,
        "itl_mean_s": 0.03,
        "accept_length": 1.75,
        "completion_tokens": 32,
        "request_s": 2.0,
        "itl_samples": 30,
        "why": {},
    }
    assert set(record) == set(decode.RECORD_KEYS) and decode.checked(record) == record


def test_a_run_without_metrics_records_tokens_per_s_and_says_why_the_rest_is_missing():
    record = decode.figures([{"seconds": 0.5, "completion_tokens": 1}], None, None, "/metrics answered 404")
    assert record["tokens_per_s"] == 2.0
    assert record["itl_mean_s"] is None and record["accept_length"] is None
    assert record["why"] == {
        "itl_mean_s": "not published (/metrics not read before the requests: /metrics answered 404)",
        "accept_length": "not published (/metrics not read after the requests: /metrics answered 404)",
    }


@pytest.mark.parametrize(
    "bad",
    [
        {"tokens_per_s": math.nan},
        {"itl_mean_s": -0.1},
        {"accept_length": "2.0"},
        {"accept_length": True},
        {"completion_tokens": 1.5},
        {"itl_samples": -1},
        {"why": ["x"]},
        ["not", "a", "dict"],
    ],
)
def test_the_history_refuses_an_odd_record(bad):
    with pytest.raises(ValueError):
        decode.checked(bad)


# ---------------------------------------------------------------------------------------------
# the deploy history: the figures recorded when a deploy ends


def deploy(path, dropin: str, figures: dict | None = None, result: str = "healthy") -> dict:
    entry = kdtree_history.run(params(path, action="begin", record={"dropin": dropin}), False)["entry"]
    finish = params(path, action="finish", id=entry["id"], result=result, decode=figures)
    return kdtree_history.run(finish, False)["entry"]


def test_the_figures_round_trip_through_the_history_file(tmp_path):
    path = tmp_path / "state.json"
    figures = decode.figures(
        [{"seconds": 0.5, "completion_tokens": 16}],
        metrics({M: (0.0, 0)}),
        metrics({M: (0.3, 15)}, {"0": 1.2}),
    )
    ended = deploy(path, "A", figures)
    assert ended["decode"] == figures
    [saved] = history.load(str(path))
    assert history.decode_of(saved) == figures
    assert history.measured(history.load(str(path))) == (saved, None)


def test_entries_without_figures_still_read_and_are_not_measured(tmp_path):
    path = tmp_path / "state.json"
    old = deploy(path, "A")  # no traffic, or written before the figures existed
    assert "decode" not in old
    entries = history.load(str(path))
    entries.append(
        {**entries[0], "id": "odd", "decode": {"tokens_per_s": "fast"}}
    )  # a record this version cannot read
    history.save(str(path), entries)
    entries = history.load(str(path))
    assert [history.decode_of(e) for e in entries] == [None, None]
    assert history.measured(entries) == (None, None)


def test_measured_deploys_are_healthy_deploys_with_figures_restores_and_rollbacks_are_not(tmp_path):
    path = tmp_path / "state.json"
    first = deploy(path, "A", record(tokens_per_s=10.0))
    deploy(path, "B")  # healthy, no traffic
    deploy(path, "C", record(tokens_per_s=99.0), result="rolled_back")
    entries = history.load(str(path))
    restore = history.begin(entries, {"dropin": "A", "restored_from": first["id"]})
    history.finish(entries, restore["id"], "healthy", decode_figures=record(tokens_per_s=98.0))
    second = history.begin(entries, {"dropin": "D"})
    history.finish(entries, second["id"], "healthy", decode_figures=record(tokens_per_s=12.0))
    newest, previous = history.measured(entries)
    assert (newest["id"], previous["id"]) == (second["id"], first["id"])


def test_odd_figures_are_refused_before_the_history_is_written(tmp_path):
    path = tmp_path / "state.json"
    entry = kdtree_history.run(params(path, action="begin", record={"dropin": "A"}), False)["entry"]
    before = path.read_bytes()
    bad = {**record(), "tokens_per_s": -3.0}
    finish = params(path, action="finish", id=entry["id"], result="healthy", decode=bad)
    with pytest.raises(history.HistoryError, match=r"decode figure tokens_per_s -3\.0"):
        kdtree_history.run(finish, False)
    assert path.read_bytes() == before


def test_a_rolled_back_deploy_keeps_its_figures_and_an_odd_record_never_leaves_it_unfinished(tmp_path):
    path = tmp_path / "state.json"
    failed = deploy(path, "A", record(tokens_per_s=3.0), result="rolled_back")
    assert failed["result"] == "rolled_back"
    assert failed["decode"]["tokens_per_s"] == 3.0
    entry = kdtree_history.run(params(path, action="begin", record={"dropin": "B"}), False)["entry"]
    bad = {**record(), "itl_mean_s": math.inf}
    finish = params(path, action="finish", id=entry["id"], result="rolled_back", decode=bad)
    ended = kdtree_history.run(finish, False)["entry"]
    assert ended["result"] == "rolled_back"
    assert "decode" not in ended
    assert "itl_mean_s" in ended["decode_refused"]
    saved = history.load(str(path))
    assert [e["result"] for e in saved] == ["rolled_back", "rolled_back"]
    assert history.measured(saved) == (None, None)
