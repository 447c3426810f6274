"""The status publisher (publish.py), its counters (counters.py), the Prometheus text (metrics.py), the
prometheus_client mirror (promclient.py) and the directory reader (statusdir.py); torch-free."""

from __future__ import annotations

import ast
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from extlib import EXT_DIR
from kdtree_verify import config
from kdtree_verify.state import STATE
from kdtree_verify.telemetry import counters, marker, metrics, promclient, publish, statusdir

PKG_DIR = EXT_DIR / "kdtree_verify"


@pytest.fixture(autouse=True)
def _no_publisher(monkeypatch):
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    monkeypatch.delenv("prometheus_multiproc_dir", raising=False)
    yield
    publish.stop_for_tests()


@pytest.fixture
def status_dir(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "status"
    path.mkdir(mode=0o755)
    path.chmod(0o755)
    monkeypatch.setenv("KDTREE_STATUS_DIR", str(path))
    return path


def emit_active(lib: str = "/opt/kdtree/builds/b1234/libkdtree_verify.so", mode: str = "on") -> None:
    STATE.mode, STATE.state, STATE.lib = mode, "active", lib
    assert marker.emit(mode, "active", "", lib, "ab" * 32, "0.5.23")


def status_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(marker.STATUS_PREFIX)]


# --- a strict parser of the Prometheus text format 0.0.4 ------------------------------------------

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL_VALUE = r'"(?:[^"\\\n]|\\\\|\\"|\\n)*"'
SAMPLE_RE = re.compile(
    rf"^(?P<name>{NAME})(?:\{{(?P<labels>(?:[a-zA-Z_][a-zA-Z0-9_]*={LABEL_VALUE})(?:,[a-zA-Z_][a-zA-Z0-9_]*="
    rf"{LABEL_VALUE})*)\}})? (?P<value>[-+]?(?:[0-9.]+(?:[eE][-+]?[0-9]+)?|NaN|Inf))$"
)
LABEL_RE = re.compile(rf"([a-zA-Z_][a-zA-Z0-9_]*)=({LABEL_VALUE})")


def _unescape(quoted: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), quoted[1:-1])


def parse_prom(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(name, sorted labels): value}; fails on anything the format does not allow here."""
    assert text.endswith("\n")
    types: dict[str, str] = {}
    helps: set[str] = set()
    series: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            assert re.fullmatch(NAME, name) and name not in helps, line
            helps.add(name)
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name in helps and name not in types, line  # one TYPE, after its HELP
            assert kind in ("counter", "gauge"), line
            assert name.endswith("_total") == (kind == "counter"), line
            types[name] = kind
            current = name
        else:
            match = SAMPLE_RE.match(line)
            assert match, f"not a sample line: {line!r}"
            assert match["name"] == current, f"sample outside its family: {line!r}"
            labels = tuple(sorted((k, _unescape(v)) for k, v in LABEL_RE.findall(match["labels"] or "")))
            assert len({k for k, _ in labels}) == len(labels), line
            key = (match["name"], labels)
            assert key not in series, f"duplicate series: {line!r}"
            series[key] = float(match["value"])
    return series


def doc(pid: int = 4242, **extra) -> dict:
    out = {
        "pid": pid,
        "mode": "on",
        "state": "active",
        "sglang": "0.5.23",
        "build_id": "b1234",
        "updated": 1700000000.5,
        "counters": {
            "kernel_calls": 7,
            "original_calls": {"not_verify": 3, "dtype": 1},
            "runtime_fallbacks": 0,
            "runtime_fallback_reason": "",
        },
    }
    out.update(extra)
    return out


# --- counters ---------------------------------------------------------------------------------------


def test_counts_become_kernel_calls_and_original_calls_by_slug():
    got = counters.from_counts(
        {
            "kernel": 5,
            "original:not target-verify": 9,
            "original:q/k/v not bf16": 1,
            "original:kv cache dtype float16": 2,
            "original:kv cache dtype float32": 1,
            "original:not absorbed MLA with one KV head": 4,
            "original:dispatch check failed: RuntimeError": 1,
            "original:kernel unavailable": 6,
            "original:kernel call failed": 1,
            "original:something new": 1,
            "validate": 3,
            "validate:skipped (first call under CUDA graph capture)": 1,
            "runtime_fallback": 1,
        },
        "kernel call failed: RuntimeError: x",
    )
    assert got == {
        "kernel_calls": 5,
        "original_calls": {
            "check_error": 1,
            "dtype": 1,
            "kernel_error": 1,
            "kernel_unavailable": 6,
            "kv_dtype": 3,
            "not_verify": 9,
            "other": 1,
            "shape": 4,
            "validate": 3,
            "validate_skipped_capture": 1,
        },
        "runtime_fallbacks": 1,
        "runtime_fallback_reason": "kernel call failed: RuntimeError: x",
    }


def _reason_texts() -> list[str]:
    """The literal start of every reason `dispatch.unsupported_reason` returns."""
    tree = ast.parse((PKG_DIR / "dispatch.py").read_text())
    (func,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "unsupported_reason"]
    texts = []
    for node in ast.walk(func):
        if isinstance(node, ast.Return) and node.value is not None:
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                texts.append(value.value)
            elif isinstance(value, ast.JoinedStr):
                texts.append(value.values[0].value)  # type: ignore[attr-defined]
    return texts


def test_every_reason_of_the_dispatch_has_a_stable_prometheus_slug():
    texts = _reason_texts()
    assert len(texts) >= 19, texts  # the parse sees the returns
    slugs = {text: counters.reason_slug(text) for text in texts}
    assert counters.OTHER not in slugs.values(), slugs
    for slug in [*slugs.values(), *counters.VALIDATE_SLUGS.values()]:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", slug), slug


def test_the_counter_keys_the_dispatch_writes_are_the_ones_counters_reads():
    source = (PKG_DIR / "dispatch.py").read_text()
    assert f'STATE.count("{counters.KERNEL}")' in source
    assert f'STATE.count("{counters.VALIDATE}")' in source
    assert f'STATE.count("{counters.VALIDATE_SKIPPED}")' in source
    assert 'STATE.count(f"original:{reason}")' in source and "STATE.count(RUNTIME_FALLBACK)" in source
    for reason in ("kernel unavailable", "kernel call failed"):
        assert f'STATE.count("original:{reason}")' in source
        assert counters.reason_slug(reason) != counters.OTHER


# --- the Prometheus text ----------------------------------------------------------------------------


def test_the_prom_text_parses_strictly_and_labels_every_sample_with_the_pid():
    validate = {"compared": 12, "mismatches": 1, "max_diff": 0.0078125}
    weird = doc(pid=7, sglang='0.5.23 "dev"\\x\n', validate=validate, state="fallback")
    series = parse_prom(metrics.render([doc(), weird]))
    assert series[("kdtree_verify_calls_total", (("path", "kernel"), ("pid", "4242")))] == 7
    key = ("kdtree_verify_calls_total", (("path", "original"), ("pid", "4242"), ("reason", "not_verify")))
    assert series[key] == 3
    assert series[("kdtree_verify_runtime_fallbacks_total", (("pid", "4242"),))] == 0
    assert series[("kdtree_verify_validate_compared_total", (("pid", "7"),))] == 12
    assert series[("kdtree_verify_validate_mismatches_total", (("pid", "7"),))] == 1
    assert series[("kdtree_verify_validate_max_abs_diff", (("pid", "7"),))] == 0.0078125
    assert ("kdtree_verify_validate_compared_total", (("pid", "4242"),)) not in series  # not validating
    info = dict(
        next(
            labels
            for (name, labels) in series
            if name == "kdtree_verify_patch_info" and ("pid", "7") in labels
        )
    )
    assert info == {
        "pid": "7",
        "mode": "on",
        "state": "fallback",
        "build_id": "b1234",
        "sglang": weird["sglang"],
    }
    assert series[("kdtree_verify_status_updated_timestamp_seconds", (("pid", "7"),))] == 1700000000.5
    assert all(("pid" in dict(labels)) for _, labels in series)


def test_a_nan_difference_is_written_as_prometheus_nan():
    text = metrics.render([doc(validate={"compared": 1, "mismatches": 1, "max_diff": math.nan})])
    assert 'kdtree_verify_validate_max_abs_diff{pid="4242"} NaN' in text
    parse_prom(text)


# --- the publisher ----------------------------------------------------------------------------------


def test_the_publisher_writes_json_and_prom_at_once_and_refreshes_them(status_dir, monkeypatch, capsys):
    monkeypatch.setenv("KDTREE_STATUS_INTERVAL", "0.05")
    emit_active()
    STATE.count("kernel")
    STATE.count("original:not target-verify")
    pub = publish.start()
    assert pub is not None and publish.start() is pub  # one per process
    torn: list[str] = []

    def read_all(stop: threading.Event) -> None:  # a reader never sees a half-written file
        while not stop.is_set():
            for path in status_dir.glob("*.json"):
                try:
                    json.loads(path.read_text())
                except FileNotFoundError:
                    pass
                except ValueError:
                    torn.append(path.read_text())

    stop = threading.Event()
    reader = threading.Thread(target=read_all, args=(stop,))
    reader.start()
    try:
        json_file, prom_file = status_dir / f"{os.getpid()}.json", status_dir / f"{os.getpid()}.prom"
        deadline = time.time() + 10
        while not prom_file.exists() and time.time() < deadline:
            time.sleep(0.01)
        first = json.loads(json_file.read_text())
        STATE.count("kernel")
        second = first
        while second["counters"]["kernel_calls"] < 2 and time.time() < deadline:  # a later write
            time.sleep(0.01)
            second = json.loads(json_file.read_text())
    finally:
        stop.set()
        reader.join()
    assert not torn
    assert first["schema"] == 2 and first["state"] == "active" and first["lib_sha256"] == "ab" * 32
    assert first["build_id"] == "b1234" and first["since"] <= first["updated"] <= time.time()
    assert first["counters"]["original_calls"] == {"not_verify": 1}
    assert second["updated"] > first["updated"] and second["counters"]["kernel_calls"] == 2
    assert 0 < first["updated_mono"] < second["updated_mono"] <= time.monotonic()  # schema 2
    assert "validate" not in second  # mode on
    series = parse_prom(prom_file.read_text())
    assert series[("kdtree_verify_calls_total", (("path", "kernel"), ("pid", str(os.getpid()))))] >= 1
    pub.stop()  # joins the thread: a write in flight may hold a .tmp until its rename
    assert not list(status_dir.glob("*.tmp"))
    assert not status_lines(capsys.readouterr().err)


def test_a_runtime_fallback_rewrites_the_status_file_with_the_counters_kept(status_dir):
    emit_active()
    pub = publish.Publisher(interval=60, since=1.0)
    STATE.count("kernel")
    pub.write_once()
    marker.emit_runtime_fallback("kernel call failed: X")
    data = json.loads((status_dir / f"{os.getpid()}.json").read_text())
    assert data["state"] == "fallback" and data["counters"]["kernel_calls"] == 1 and data["since"] == 1.0


def test_the_publisher_writes_once_more_at_exit(status_dir):
    emit_active()
    pub = publish.Publisher(interval=60, since=1.0)
    pub.write_once()
    STATE.count("kernel")
    pub.at_exit()
    data = json.loads((status_dir / f"{os.getpid()}.json").read_text())
    assert data["counters"]["kernel_calls"] == 1


def test_the_exit_write_gives_up_when_a_device_read_does_not_return(status_dir, monkeypatch):
    """A hung device read (the validate snapshot) must not block the process's exit: before, the
    atexit write waited for it forever."""
    emit_active(mode="validate")
    STATE.mode = "validate"
    release = threading.Event()

    class Hung:
        def snapshot(self):
            release.wait(30)
            return {"compared": 0, "mismatches": 0, "max_diff": 0.0}

        def read(self):
            return {"calls": 0}

    monkeypatch.setattr(STATE, "validate_stats", Hung())
    monkeypatch.setattr(publish, "EXIT_WRITE_TIMEOUT_S", 0.2)
    pub = publish.Publisher(interval=60, since=1.0)
    done = threading.Event()
    caller = threading.Thread(target=lambda: (pub.at_exit(), done.set()), daemon=True)
    started = time.monotonic()
    caller.start()
    try:
        assert done.wait(5), "at_exit blocked behind the device read"
        assert time.monotonic() - started < 2
    finally:
        release.set()


def test_a_huge_status_interval_never_reaches_the_publishers_wait(status_dir, monkeypatch):
    """threading.Event.wait(1e300) raises OverflowError in the thread: the default is used instead."""
    monkeypatch.setenv("KDTREE_STATUS_INTERVAL", "1e300")
    emit_active()
    pub = publish.start()
    assert pub is not None and pub.interval == config.DEFAULT_STATUS_INTERVAL
    time.sleep(0.1)
    assert pub._thread is not None and pub._thread.is_alive()


def test_no_publisher_without_a_status_dir_or_a_prometheus_dir(monkeypatch):
    monkeypatch.delenv("KDTREE_STATUS_DIR", raising=False)
    assert publish.start() is None
    assert publish.start({"KDTREE_STATUS_DIR": ""}) is None
    assert publish.start({"PROMETHEUS_MULTIPROC_DIR": "/tmp/x"}) is not None  # SGLang's /metrics only


@pytest.mark.parametrize("problem", ["symlink", "group-writable"])
def test_an_unsafe_directory_is_refused_and_said_once(status_dir, tmp_path, monkeypatch, capsys, problem):
    emit_active()  # written fine
    if problem == "symlink":
        link = tmp_path / "link"
        link.symlink_to(status_dir)
        monkeypatch.setenv("KDTREE_STATUS_DIR", str(link))
    else:
        status_dir.chmod(0o775)
    capsys.readouterr()
    pub = publish.Publisher(interval=60, since=1.0)
    for _ in range(3):
        pub.write_once()
    lines = status_lines(capsys.readouterr().err)
    assert len(lines) == 1 and marker.match_status_problem(lines[0]) == (os.getpid(), "unwritable")
    reason = marker.unescape(lines[0].split(" reason=", 1)[1])
    assert ("is a symlink" if problem == "symlink" else "group- or world-writable") in reason
    assert not (status_dir / f"{os.getpid()}.prom").exists()


def test_the_publisher_does_not_repeat_what_the_marker_said(status_dir, capsys):
    status_dir.chmod(0o777)
    emit_active()  # the marker says unwritable
    pub = publish.Publisher(interval=60, since=1.0)
    pub.write_once()
    pub.write_once()
    assert len(status_lines(capsys.readouterr().err)) == 1


def test_a_failing_write_never_raises_and_is_said_once(status_dir, monkeypatch, capsys):
    emit_active()
    capsys.readouterr()
    pub = publish.Publisher(interval=60, since=1.0)

    def disk_full(name, data):
        raise OSError(28, "No space left on device")

    writer = marker.write_status
    monkeypatch.setattr(marker, "write_status", disk_full)
    pub.write_once()
    pub.write_once()
    lines = status_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "No\\x20space\\x20left" in lines[0]
    monkeypatch.setattr(marker, "write_status", writer)

    def broken(docs):
        raise RuntimeError("render broke")

    monkeypatch.setattr(metrics, "render", broken)
    pub.write_once()
    assert not (status_dir / f"{os.getpid()}.prom").exists()

    def no_counters():
        raise RuntimeError("counters broke")

    monkeypatch.setattr(publish.counters, "snapshot", no_counters)
    pub.write_once()
    assert not status_lines(capsys.readouterr().err)  # said once per process, already


def test_a_publisher_that_fails_first_in_its_own_code_says_so_once(status_dir, monkeypatch, capsys):
    emit_active()
    capsys.readouterr()

    def no_counters(*_args):
        raise RuntimeError("counters broke")

    monkeypatch.setattr(publish.counters, "snapshot", no_counters)
    pub = publish.Publisher(interval=60, since=1.0)
    pub.write_once()
    pub.write_once()
    lines = status_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "counters\\x20broke" in lines[0]


class FakeStats:
    def __init__(self, compared=4, mismatches=1, max_diff=0.03125):
        self.values = {"compared": compared, "mismatches": mismatches, "max_diff": max_diff}
        self.snapshots = 0

    def snapshot(self):
        self.snapshots += 1
        return dict(self.values)

    def read(self):  # lifecycle.status()
        return dict(self.values)


def test_validate_statistics_appear_in_validate_mode(status_dir, monkeypatch):
    emit_active(mode="validate")
    pub = publish.Publisher(interval=60, since=1.0)
    pub.write_once()
    data = json.loads((status_dir / f"{os.getpid()}.json").read_text())
    assert data["validate"] == {"compared": 0, "mismatches": 0, "max_diff": 0.0}  # no call yet
    STATE.validate_stats = FakeStats()
    pub.write_once()
    data = json.loads((status_dir / f"{os.getpid()}.json").read_text())
    assert data["validate"] == {"compared": 4, "mismatches": 1, "max_diff": 0.03125}
    series = parse_prom((status_dir / f"{os.getpid()}.prom").read_text())
    assert series[("kdtree_verify_validate_mismatches_total", (("pid", str(os.getpid())),))] == 1

    # while SGLang captures a CUDA graph the device is not read: the last snapshot is published
    capture = SimpleNamespace(get_is_capture_mode=lambda: True)
    monkeypatch.setitem(sys.modules, "sglang.srt.model_executor.runner_utils.capture_mode", capture)
    STATE.validate_stats = FakeStats(compared=99)
    pub.write_once()
    assert STATE.validate_stats.snapshots == 0
    assert json.loads((status_dir / f"{os.getpid()}.json").read_text())["validate"]["compared"] == 4


def test_build_id_is_the_build_directory_name(tmp_path):
    build = tmp_path / "builds" / "0f3c9a" / "libkdtree_verify.so"
    build.parent.mkdir(parents=True)
    build.write_text("")
    (tmp_path / "current").symlink_to(build.parent)
    assert publish.build_id(str(build)) == "0f3c9a"
    assert publish.build_id(str(tmp_path / "current" / "libkdtree_verify.so")) == "0f3c9a"
    assert publish.build_id("/opt/kdtree/builds/abc/libkdtree_verify.so") == "abc"
    assert publish.build_id("") == ""


def test_the_status_interval_comes_from_the_environment():
    assert config.read_status_interval({}) == (5.0, "")
    assert config.read_status_interval({"KDTREE_STATUS_INTERVAL": "0.5"}) == (0.5, "")
    for bad in ("0", "-1", "nan", "inf", "soon"):
        seconds, problem = config.read_status_interval({"KDTREE_STATUS_INTERVAL": bad})
        assert seconds == 5.0 and "KDTREE_STATUS_INTERVAL" in problem


# --- prometheus_client (a recording double: the real client is in neither venv) --------------------


class FakeClient:
    """prometheus_client's Counter/Gauge surface, recording (name, labels) -> value."""

    def __init__(self):
        self.values: dict[tuple[str, tuple], float] = {}
        self.created: list[tuple[str, str, object]] = []
        client = self

        class Metric:
            kind = ""

            def __init__(self, name, documentation, labelnames=(), registry=None, multiprocess_mode=""):
                assert registry is None
                self.name, self.labelnames, self.key = name, tuple(labelnames), ()
                client.created.append((self.kind, name, multiprocess_mode))

            def labels(self, *values):
                assert len(values) == len(self.labelnames)
                child = type(self).__new__(type(self))
                child.name, child.labelnames, child.key = self.name, (), tuple(values)
                client.values.setdefault((child.name, child.key), 0.0)
                return child

            def inc(self, amount=1.0):
                assert amount > 0
                client.values[(self.name, self.key)] = client.values.get((self.name, self.key), 0.0) + amount

            def set(self, value):
                client.values[(self.name, self.key)] = value

        self.Counter = type("Counter", (Metric,), {"kind": "counter"})
        self.Gauge = type("Gauge", (Metric,), {"kind": "gauge"})


def test_the_mirror_brings_prometheus_client_counters_up_and_sets_gauges():
    client = FakeClient()
    mirror = promclient.Mirror(client)
    assert {(k, n) for k, n, _ in client.created} >= {
        ("counter", "kdtree_verify_calls"),
        ("gauge", metrics.PATCH_INFO),
    }
    assert all(mode == "all" for kind, _, mode in client.created if kind == "gauge")
    first = doc(validate={"compared": 2, "mismatches": 0, "max_diff": 0.01})
    mirror.update(first)
    mirror.update(first)  # no increase, no change
    later = doc(state="fallback", validate={"compared": 5, "mismatches": 1, "max_diff": 0.02})
    later["counters"] = {**later["counters"], "kernel_calls": 10, "kernel_calls_device": 90}
    mirror.update(later)
    v = client.values
    assert v[("kdtree_verify_calls", ("4242", "kernel", ""))] == 10
    assert v[("kdtree_verify_kernel_launches", ("4242",))] == 90
    assert v[("kdtree_verify_calls", ("4242", "original", "not_verify"))] == 3
    assert v[("kdtree_verify_runtime_fallbacks", ("4242",))] == 0  # present from the start
    assert v[("kdtree_verify_validate_compared", ("4242",))] == 5
    assert v[(metrics.VALIDATE_MAX_ABS_DIFF, ())] == 0.02
    assert v[(metrics.PATCH_INFO, ("on", "active", "b1234", "0.5.23"))] == 0
    assert v[(metrics.PATCH_INFO, ("on", "fallback", "b1234", "0.5.23"))] == 1
    assert v[(metrics.UPDATED, ())] == 1700000000.5


def test_the_mirror_exports_validate_timing_per_bucket_in_seconds():
    client = FakeClient()
    mirror = promclient.Mirror(client)
    bucket = {"batch": 1, "draft": 8, "prefix": "le256", "heads": 4, "timed_calls": 12}
    timing = {"clock": "host", "warmup_calls": 3, "untimed_warmup": 3, "untimed_captured": 0}
    timing.update(untimed_backlog=0, pending=0, buckets=[{**bucket, "original_s": 0.5, "kernel_s": 7.25}])
    mirror.update(doc(timing=timing))
    v, labels = client.values, ("4242", "1", "8", "le256", "4")
    assert v[("kdtree_verify_kernel_seconds", labels)] == 7.25
    assert v[("kdtree_verify_original_seconds", labels)] == 0.5
    assert v[("kdtree_verify_timed_calls", labels)] == 12
    assert v[("kdtree_verify_untimed_calls", ("4242", "warmup"))] == 3


def test_a_dead_processs_metric_files_with_this_pid_are_removed_and_nothing_else(tmp_path):
    """prometheus_client starts a value from what `counter_<pid>.db` holds: a scheduler that got the
    pid of a dead one would count on from its numbers."""
    pid, started = 4242, 1_700_000_000.0
    own_old = [tmp_path / f"counter_{pid}.db", tmp_path / f"gauge_all_{pid}.db"]
    kept = [
        tmp_path / f"counter_{pid + 1}.db",  # another process's
        tmp_path / f"histogram_{pid}.db",  # not a file of the patch's metrics
        tmp_path / f"gauge_livesum_{pid}.db",
    ]
    for path in own_old + kept:
        path.write_bytes(b"x")
        os.utime(path, (started - 60, started - 60))
    fresh = tmp_path / f"gauge_all_{pid}.db.new"
    fresh.write_bytes(b"x")
    removed = promclient.clear_inherited(str(tmp_path), pid, started, mapped=set())
    assert sorted(removed) == sorted(map(str, own_old))
    assert all(not p.exists() for p in own_old) and all(p.exists() for p in kept)
    # written since this process started: its own (or SGLang's in it), never removed
    (tmp_path / f"counter_{pid}.db").write_bytes(b"x")
    assert promclient.clear_inherited(str(tmp_path), pid, started, mapped=set()) == []
    # a stale file this process has mapped already (SGLang's metrics opened it): refused, kept
    old = tmp_path / f"counter_{pid}.db"
    os.utime(old, (started - 60, started - 60))
    with pytest.raises(promclient.InheritedValues, match="earlier process"):
        promclient.clear_inherited(str(tmp_path), pid, started, mapped={str(old.resolve())})
    assert old.exists()


def test_this_processs_start_time_is_read_from_proc():
    started = promclient.process_start()
    assert started is not None and started <= time.time() and started > time.time() - 7 * 86400


def test_the_publisher_feeds_prometheus_client_only_with_a_multiproc_dir(status_dir, monkeypatch, tmp_path):
    client = FakeClient()
    monkeypatch.setitem(sys.modules, "prometheus_client", client)
    emit_active()
    STATE.count("kernel")
    publish.Publisher(interval=60, since=1.0).write_once()
    assert not client.created
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    publish.Publisher(interval=60, since=1.0).write_once()
    assert client.values[("kdtree_verify_calls", (str(os.getpid()), "kernel", ""))] == 1


def test_a_missing_prometheus_client_costs_only_the_mirror(status_dir, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import raises ImportError
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    emit_active()
    pub = publish.Publisher(interval=60, since=1.0)
    pub.write_once()
    pub.write_once()
    assert (status_dir / f"{os.getpid()}.prom").exists()


# --- statusdir.py: a directory into one summary --------------------------------------------------------


def test_read_dir_merges_the_status_files_and_skips_the_rest(tmp_path):
    (tmp_path / "12.json").write_text(json.dumps(doc(pid=12)))
    (tmp_path / "3.json").write_text(
        json.dumps(doc(pid=3, validate={"compared": 2, "mismatches": 1, "max_diff": 0.5}))
    )
    (tmp_path / "4.json").write_text("{not json")
    (tmp_path / "5.json.tmp").write_text("{}")
    (tmp_path / "notes.json").write_text("{}")
    docs = statusdir.read_dir(tmp_path)
    assert [d["pid"] for d in docs] == [3, 12]
    merged = statusdir.summary(docs)
    assert merged["kernel_calls"] == 14 and merged["original_calls"] == {"dtype": 2, "not_verify": 6}
    assert merged["validate"] == {"compared": 2, "mismatches": 1, "max_diff": 0.5}
    assert merged["processes"] == 2 and merged["states"] == {"active": 2}


def test_the_summary_sums_the_device_counts_of_the_processes_that_have_them():
    new = {"pid": 1, "counters": {"kernel_calls": 1, "kernel_calls_device": 30}}
    old = {"pid": 2, "counters": {"kernel_calls": 4}}  # an older patch: no device count
    assert statusdir.summary([old])["kernel_calls"] == 4 and "kernel_calls_device" not in statusdir.summary(
        [old]
    )
    merged = statusdir.summary([new, old, {**new, "pid": 3}])
    assert merged["kernel_calls"] == 6 and merged["kernel_calls_device"] == 60
    text = metrics.render([new, old])
    assert 'kdtree_verify_kernel_launches_total{pid="1"} 30' in text.splitlines()
    assert 'kdtree_verify_kernel_launches_total{pid="2"}' not in text


def test_status_runs_by_path_without_the_package(tmp_path):
    (tmp_path / "12.json").write_text(json.dumps(doc(pid=12)))
    script = str(PKG_DIR / "telemetry" / "statusdir.py")
    env = {"PATH": os.environ.get("PATH", "")}
    prom = subprocess.run(
        [sys.executable, "-I", script, "--dir", str(tmp_path), "--prom"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert parse_prom(prom.stdout)[("kdtree_verify_calls_total", (("path", "kernel"), ("pid", "12")))] == 7
    out = subprocess.run(
        [sys.executable, "-I", script, "--dir", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout)["kernel_calls"] == 7


def test_the_documented_command_python_m_kdtree_verify_statusdir_reads_a_directory(tmp_path):
    (tmp_path / "12.json").write_text(json.dumps(doc(pid=12)))
    out = subprocess.run(
        [sys.executable, "-m", "kdtree_verify.statusdir", "--dir", str(tmp_path), "--json"],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(PKG_DIR.parent)},
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert json.loads(out.stdout)["kernel_calls"] == 7


def test_each_file_appears_whole_by_the_rename_of_a_complete_tmp_file(status_dir, monkeypatch):
    emit_active()
    pub = publish.Publisher(interval=60, since=1.0)
    pub.write_once()
    renames: list[tuple[str, str]] = []
    real_replace = os.replace

    def checked_replace(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        assert src == f"{dst}.tmp", (src, dst)
        before = (status_dir / dst).read_text()  # the previous write, whole, until the rename
        after = (status_dir / src).read_text()
        if dst.endswith(".json"):
            json.loads(before)
            json.loads(after)
        else:
            parse_prom(before)
            parse_prom(after)
        renames.append((src, dst))
        real_replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(os, "replace", checked_replace)
    STATE.count("kernel")
    pub.write_once()
    pid = os.getpid()
    assert renames == [(f"{pid}.json.tmp", f"{pid}.json"), (f"{pid}.prom.tmp", f"{pid}.prom")]


def test_the_contracts_name_every_reason_slug_the_counters_emit():
    """docs/CONTRACTS.md lists the `original_calls` slugs operators alert on; counters.py owns them."""
    text = (EXT_DIR.parents[1] / "docs" / "CONTRACTS.md").read_text()
    start = text.index("`original_calls`: calls whose output the")
    named = set(re.findall(r"`([a-z][a-z0-9_]*)`", text[start : text.index("Mode `off` installs", start)]))
    emitted = {
        *counters.REASON_SLUGS.values(),
        *(slug for _prefix, slug in counters.REASON_PREFIX_SLUGS),
        *counters.VALIDATE_SLUGS.values(),
        counters.OTHER,
    }
    assert emitted - named == set(), sorted(emitted - named)
