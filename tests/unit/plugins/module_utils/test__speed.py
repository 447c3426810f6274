"""module_utils/_speed.py: what timing evidence it refuses (never a figure from fabricated or broken
seconds) and the bounds on a call's time, whose one owner it is."""

from __future__ import annotations

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _speed as speed


def _bucket(calls: int = 200, original_s: float = 3.0, kernel_s: float = 2.0, **over) -> dict:
    item = {"batch": 1, "draft": 4, "prefix": "le1024", "heads": 16, "timed_calls": calls}
    return {**item, "original_s": original_s, "kernel_s": kernel_s, **over}


def test_good_buckets_give_the_ratio_of_sums():
    figure = speed.speed([_bucket(), _bucket(batch=8, original_s=1.0, kernel_s=1.0)])
    assert figure["problem"] == "" and figure["speedup"] == pytest.approx(4.0 / 3.0)


def test_seconds_without_a_timed_call_refuse_rather_than_inflate_the_sum():
    # 0.5x where calls were timed; 1000 s of the original "from" a bucket that timed nothing
    buckets = [
        _bucket(calls=0, original_s=1000.0, kernel_s=0.0, batch=2),
        _bucket(original_s=1.0, kernel_s=2.0),
    ]
    figure = speed.speed(buckets)
    assert figure["speedup"] is None and "original_s is 1000.0 with 0 timed calls" in figure["problem"]


@pytest.mark.parametrize(
    ("over", "part"),
    [
        pytest.param({"kernel_s": 1e-300}, "kernel_s is 5e-303 s per call", id="kernel-time-of-nothing"),
        pytest.param({"original_s": 200.0 * 3600}, "original_s is 3.6e+03 s per call", id="an-hour-a-call"),
        pytest.param({"kernel_s": 200 * 0.5e-6}, "kernel_s is 5e-07 s per call", id="below-a-microsecond"),
    ],
)
def test_a_time_per_call_no_verify_call_can_take_refuses(over, part):
    figure = speed.speed([_bucket(**over)])
    assert figure["speedup"] is None and part in figure["problem"], figure["problem"]
    assert f"[{speed.MIN_CALL_S:g}, {speed.MAX_CALL_S:g}] s" in figure["problem"]


def test_the_bounds_are_inclusive_and_real_timings_pass():
    lo = _bucket(calls=10, original_s=10 * speed.MIN_CALL_S, kernel_s=10 * speed.MIN_CALL_S)
    hi = _bucket(calls=10, original_s=10 * speed.MAX_CALL_S, kernel_s=10 * speed.MAX_CALL_S, batch=2)
    assert speed.speed([lo, hi])["problem"] == ""


def test_sums_that_overflow_refuse_instead_of_giving_inf_or_nan():
    calls = 10**307  # per call 5 s: within the bounds, yet four of them sum past the largest float
    same = [_bucket(calls=calls, original_s=5e307, kernel_s=2.5e307) for _copy in range(4)]
    figure = speed.speed(same)
    assert figure["speedup"] is None and figure["problem"] == "the timing sums overflow (not finite)"
    assert figure["buckets"] == [] and figure["timed_calls"] == 0
