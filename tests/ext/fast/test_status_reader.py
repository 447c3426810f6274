"""statusdir.py, the one validating reader of status documents (issue 19): any bytes or document
gives a document or a clear refusal (statusdir.Refused), never a traceback; NaN stays NaN in every
summary, whatever the order; a count of the wrong type is refused, never read as 0."""

from __future__ import annotations

import json
import math
import os
import sys

import pytest

pytest.importorskip("hypothesis")  # the tools venv has it; the torch venv, which collects these too, does not
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kdtree_verify.telemetry import statusdir

GOOD = {
    "schema": 1,
    "pid": 7,
    "mode": "validate",
    "state": "active",
    "since": 1.0,
    "updated": 2.0,
    "counters": {"kernel_calls": 3, "original_calls": {"validate": 4}, "runtime_fallbacks": 0},
    "validate": {"compared": 4, "mismatches": 0, "max_diff": 0.01},
}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)
# documents shaped like a status file, with any value in any field
fields = st.sampled_from(
    [
        "pid",
        "updated",
        "since",
        "mode",
        "state",
        "counters",
        "validate",
        "kernel_calls",
        "compared",
        "mismatches",
        "max_diff",
        "original_calls",
        "runtime_fallbacks",
        "nonfinite_kernel",
    ]
)
doc_like = st.recursive(json_values, lambda inner: st.dictionaries(fields, inner, max_size=8), max_leaves=40)


def verdict(doc):
    """check() then summary(): a summary or a Refused, nothing else may come out."""
    try:
        checked = statusdir.check(doc)
    except statusdir.Refused as exc:
        assert str(exc)
        return None
    return statusdir.summary([checked])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc_like)
def test_any_document_gives_a_summary_or_a_refusal(doc):
    out = verdict(doc)
    if out is not None:
        for key in ("kernel_calls", "runtime_fallbacks"):
            assert isinstance(out[key], int) and not isinstance(out[key], bool) and out[key] >= 0
        assert all(isinstance(v, int) and v >= 0 for v in out["original_calls"].values())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_give_a_document_or_a_refusal(raw):
    try:
        doc = statusdir.load_bytes(raw)
    except statusdir.Refused:
        return
    assert isinstance(doc, dict)
    verdict(doc)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=5000))
def test_deep_nesting_is_refused_not_a_recursion_error(depth):
    raw = b"[" * depth + b"]" * depth
    obj = b'{"a":' * depth + b"1" + b"}" * depth
    for data in (raw, obj):
        if depth <= statusdir.MAX_DEPTH and data is obj:
            assert statusdir.load_bytes(data)
            continue
        with pytest.raises(statusdir.Refused):
            statusdir.load_bytes(data)


def test_a_document_nested_beyond_the_recursion_limit_is_refused():
    depth = sys.getrecursionlimit() * 2
    with pytest.raises(statusdir.Refused, match=r"nested deeper|not JSON"):
        statusdir.load_bytes(b'{"a":' * depth + b"1" + b"}" * depth)


def test_a_file_larger_than_the_cap_is_refused(tmp_path):
    path = tmp_path / "7.json"
    path.write_bytes(b" " * (statusdir.MAX_BYTES + 10) + json.dumps(GOOD).encode())
    with pytest.raises(statusdir.Refused, match="larger than"):
        statusdir.read_file(path)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"pid": "7"}, "pid is str"),
        ({"pid": True}, "pid is bool"),
        ({"pid": 8}, "pid 8 in the file named for pid 7"),
        ({"updated": "now"}, "updated is str"),
        ({"updated_mono": "soon"}, "updated_mono is str"),
        ({"updated": math.nan}, "updated is nan, not a finite number"),
        ({"counters": []}, "counters is list"),
        ({"counters": {"kernel_calls": 1.5}}, "counters.kernel_calls is float"),
        ({"validate": {"compared": 1, "mismatches": False, "max_diff": 0.0}}, "validate.mismatches is bool"),
        ({"validate": {"compared": 1, "mismatches": 0}}, "validate has no max_diff"),
        ({"validate": {"compared": 1, "mismatches": 0, "max_diff": -0.5}}, "a negative difference"),
        ({"validate": {"compared": 1, "mismatches": 0, "max_diff": "0"}}, "validate.max_diff is str"),
        ({"mode": 1}, "mode is int, not a string"),
    ],
)
def test_a_field_of_the_wrong_type_is_refused_naming_it(change, said):
    with pytest.raises(statusdir.Refused, match=said):
        statusdir.check({**GOOD, **change}, pid=7)


def test_nan_and_inf_are_kept_as_non_finite_evidence():
    nan = {**GOOD, "validate": {"compared": 4, "mismatches": 0, "max_diff": math.nan}}
    assert statusdir.check(nan) is nan
    assert "largest difference nan" in statusdir.nonfinite_problem(nan["validate"])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(min_value=0) | st.just(math.nan) | st.just(math.inf), min_size=1, max_size=6),
    st.randoms(),
)
def test_the_largest_difference_keeps_nan_in_any_order(diffs, rnd):
    """Python's max(0.0, nan) is 0.0 and max(nan, 1.0) is nan: the order decided before."""
    docs = [
        {**GOOD, "pid": i + 1, "validate": {"compared": 1, "mismatches": 0, "max_diff": d}}
        for i, d in enumerate(diffs)
    ]
    rnd.shuffle(docs)
    got = statusdir.summary(docs)["validate"]["max_diff"]
    if any(math.isnan(d) for d in diffs):
        assert math.isnan(got)
        assert "non-finite values in validate" in statusdir.summary(docs)["problems"][0]
    else:
        assert got == max(diffs)


def test_scan_reads_only_wanted_regular_pid_files_and_names_the_refused(tmp_path):
    (tmp_path / "7.json").write_text(json.dumps(GOOD))
    (tmp_path / "8.json").write_text(json.dumps(GOOD))  # a copy of 7's
    (tmp_path / "9.json").write_text(json.dumps({**GOOD, "pid": 9}))
    (tmp_path / "007.json").write_text(json.dumps(GOOD))  # not a pid's name
    os.mkfifo(tmp_path / "10.json")
    docs, refused = statusdir.scan(tmp_path, pids=[7, 8, 10])
    assert [d["pid"] for d in docs] == [7]
    assert set(refused) == {"8.json", "10.json"} and refused["10.json"] == "not a regular file"
    assert [d["pid"] for d in statusdir.read_dir(tmp_path)] == [7, 9]


@pytest.mark.parametrize(
    ("updated", "fresh"), [(100.0, True), (100.0 - 24.9, True), (100.0 - 26, False), (100.0 + 60, False)]
)
def test_freshness_is_within_fresh_intervals_of_the_status_interval(updated, fresh):
    assert statusdir.fresh_bound_s(5) == statusdir.FRESH_INTERVALS * 5 + statusdir.FRESH_SLACK_S
    assert (statusdir.freshness_problem({"updated": updated}, 100.0, 5) == "") is fresh
    assert statusdir.freshness_problem({}, 100.0, 5) == "no update time"


@pytest.mark.parametrize("interval", [0, 1e300, math.inf, math.nan, "5", True])
def test_an_interval_the_patch_would_not_use_has_no_fresh_bound(interval):
    with pytest.raises(statusdir.Refused, match="status interval"):
        statusdir.fresh_bound_s(interval)
