"""Validate mode's A/B timing (kdtree_verify/telemetry/timing.py): the warm-up, the host clock, the
CUDA-event bookkeeping with a fake event class (the GPU half itself is bench/gpu_check.py's), the
sampling rule under graph capture, and the export: status document, textfile, the validating reader."""

from __future__ import annotations

import math
import re

import pytest
from kdtree_verify.telemetry import metrics, statusdir, timing

KEY = timing.bucket_key(1, 4, "le256", 16)


class FakeEvent:
    """torch.cuda.Event's surface that timing.py uses: record, query, elapsed_time (ms). One stream:
    `clock` is where the host has recorded up to, `completed` how far the device has run."""

    clock = 0.0
    completed = -1.0

    def __init__(self) -> None:
        self.at = math.inf

    def record(self) -> None:
        FakeEvent.clock += 1e-3  # every record is a later point of the stream
        self.at = FakeEvent.clock

    def query(self) -> bool:
        return self.at <= FakeEvent.completed

    def elapsed_time(self, other: FakeEvent) -> float:
        assert self.query() and other.query(), "elapsed_time of events that have not completed"
        return other.at - self.at


@pytest.fixture(autouse=True)
def _fresh_stream():
    FakeEvent.clock, FakeEvent.completed = 0.0, -1.0


def _gpu_call(timings: timing.Timings, key=KEY, original_ms=2.0, kernel_ms=1.0) -> tuple:
    if not timings.start(key) or not timings.room():
        return ()
    events = (timings.event(), timings.event(), timings.event())
    events[0].record()
    FakeEvent.clock += original_ms
    events[1].record()
    FakeEvent.clock += kernel_ms
    events[2].record()
    timings.events(key, *events)
    return events


def test_the_first_calls_of_each_bucket_are_warm_up_and_not_timed():
    timings = timing.Timings()
    other = timing.bucket_key(8, 4, "le1024", 16)
    starts = [timings.start(KEY) for _ in range(timing.WARMUP_CALLS + 2)]
    assert starts == [False] * timing.WARMUP_CALLS + [True, True]
    assert timings.start(other) is False  # every bucket warms up on its own
    for _ in range(2):
        timings.host(KEY, 3_000_000, 1_000_000)
    doc = timings.snapshot()
    assert doc["untimed_warmup"] == timing.WARMUP_CALLS + 1
    assert doc["buckets"] == [
        {
            "batch": 1,
            "draft": 4,
            "prefix": "le256",
            "heads": 16,
            "timed_calls": 2,
            "original_s": 0.006,
            "kernel_s": 0.002,
        }
    ]  # a bucket without a timed call is not listed
    assert statusdir._check_timing(doc, True) is None


def test_cuda_events_are_read_later_in_order_and_only_once_complete():
    timings = timing.Timings(timing.CUDA_CLOCK, event_factory=FakeEvent)
    for _ in range(timing.WARMUP_CALLS):
        assert _gpu_call(timings) == ()
    first = _gpu_call(timings, original_ms=4.0, kernel_ms=1.0)
    second = _gpu_call(timings, original_ms=6.0, kernel_ms=2.0)
    assert timings.drain() == 0  # nothing completed: nothing waits, nothing is read
    FakeEvent.completed = first[2].at  # the device ran the first call only
    assert timings.drain() == 1
    assert timings.snapshot()["pending"] == 1
    FakeEvent.completed = second[2].at
    assert timings.drain() == 1
    (bucket,) = timings.snapshot()["buckets"]
    assert bucket["timed_calls"] == 2
    assert bucket["original_s"] == pytest.approx(0.010, rel=1e-3)
    assert bucket["kernel_s"] == pytest.approx(0.003, rel=1e-2)
    assert timings.snapshot()["pending"] == 0
    # the six events are reused, not made again
    reused = _gpu_call(timings)
    assert all(event in (*first, *second) for event in reused)


def test_the_event_backlog_is_bounded_and_counted(monkeypatch):
    monkeypatch.setattr(timing, "MAX_PENDING", 2)
    timings = timing.Timings(timing.CUDA_CLOCK, event_factory=FakeEvent)
    for _ in range(timing.WARMUP_CALLS):
        timings.start(KEY)
    calls = [_gpu_call(timings) for _ in range(3)]
    assert [bool(c) for c in calls] == [True, True, False]
    assert timings.snapshot()["untimed_backlog"] == 1


def test_captured_calls_are_not_timed_and_counted_as_such():
    timings = timing.Timings(timing.CUDA_CLOCK, event_factory=FakeEvent)
    timings.captured()
    timings.captured()
    doc = timings.snapshot()
    assert doc["untimed_captured"] == 2 and doc["buckets"] == []


def test_the_prefix_bucket_is_the_mean_prefix_rounded_up():
    assert timing.prefix_bucket(100, 1) == "le256"
    assert timing.prefix_bucket(2 * 1000, 2) == "le1024"
    assert timing.prefix_bucket(10**6, 1) == "more"
    assert timing.prefix_bucket(None, 2) == timing.UNKNOWN  # the batch does not say
    assert timing.prefix_bucket(True, 2) == timing.UNKNOWN


def _doc(**bucket_over) -> dict:
    bucket = {"batch": 1, "draft": 4, "prefix": "le256", "heads": 16, "timed_calls": 5}
    bucket.update(original_s=0.5, kernel_s=0.25)
    bucket.update(bucket_over)
    timed = {"clock": "host", "warmup_calls": 3, "untimed_warmup": 3, "untimed_captured": 0}
    timed.update(untimed_backlog=0, pending=0, buckets=[bucket])
    return {"pid": 4242, "timing": timed}


@pytest.mark.parametrize(
    ("over", "said"),
    [
        ({"kernel_s": math.nan}, "timing.buckets[0].kernel_s is nan, not a finite number"),
        ({"original_s": -0.1}, "timing.buckets[0].original_s is a negative time"),
        ({"kernel_s": 0.0}, "timing.buckets[0].kernel_s is 0 with 5 timed calls"),
        ({"kernel_s": "0.1"}, "timing.buckets[0].kernel_s is str '0.1', not a number"),
        ({"timed_calls": -1}, "timing.buckets[0].timed_calls is -1, a negative count"),
        ({"timed_calls": True}, "timing.buckets[0].timed_calls is bool True, not a count"),
    ],
)
def test_the_reader_refuses_odd_timing_never_reading_it_as_zero(over, said):
    with pytest.raises(statusdir.Refused, match=re.escape(said)):
        statusdir.check(_doc(**over))


def test_the_reader_refuses_a_bucket_or_a_count_that_is_missing():
    doc = _doc()
    del doc["timing"]["buckets"][0]["kernel_s"]
    with pytest.raises(statusdir.Refused, match=r"timing.buckets\[0\] has no kernel_s"):
        statusdir.check(doc)
    doc = _doc()
    del doc["timing"]["untimed_captured"]
    with pytest.raises(statusdir.Refused, match="timing has no untimed_captured"):
        statusdir.check(doc)


def test_the_summary_sums_the_buckets_of_every_process_and_the_textfile_names_them():
    one, two = _doc(), _doc()
    two["pid"] = 4243
    summary = statusdir.summary([one, two])
    (bucket,) = summary["timing"]["buckets"]
    assert bucket["timed_calls"] == 10 and bucket["kernel_s"] == 0.5 and bucket["original_s"] == 1.0
    text = metrics.render([one])
    labels = 'pid="4242",batch="1",draft="4",prefix="le256",heads="16"'
    assert f"{metrics.KERNEL_SECONDS}{{{labels}}} 0.25" in text
    assert f"{metrics.ORIGINAL_SECONDS}{{{labels}}} 0.5" in text
    assert f"{metrics.TIMED_CALLS}{{{labels}}} 5" in text
    assert f'{metrics.UNTIMED_CALLS}{{pid="4242",why="warmup"}} 3' in text


def test_the_textfile_s_bucket_labels_are_the_documents_keys():
    timings = timing.Timings()
    for _ in range(timing.WARMUP_CALLS + 1):
        timings.start(KEY)
    timings.host(KEY, 2, 1)
    (bucket,) = timings.snapshot()["buckets"]
    assert set(metrics.BUCKET_LABELS) <= set(bucket)
