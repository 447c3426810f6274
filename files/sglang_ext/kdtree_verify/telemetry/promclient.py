"""Mirror the status document into SGLang's own /metrics (prometheus_client multiprocess mode).

SGLang 0.5.23 with ``--enable-metrics`` sets ``PROMETHEUS_MULTIPROC_DIR`` in the launcher before it
spawns the schedulers (`engine._set_envs_and_config` -> `set_prometheus_multiproc_dir`), and its HTTP
server's /metrics is a `MultiProcessCollector` over every ``*.db`` file of that directory
(`utils.common.add_prometheus_middleware`). prometheus_client in a scheduler picks the mmap-backed
value class from the inherited variable, so a Counter or Gauge created there, in any registry or
none, is in /metrics: SGLang's own scheduler metrics work this way. The metrics here are created
with ``registry=None`` (no clash with anything in the process's default registry).

Names and labels are the textfile's (`metrics.py`), with two differences that the multiprocess
collector dictates:
- counters carry ``pid`` as a label of their own (the collector sums counters across processes);
- gauges use ``multiprocess_mode="all"``: the collector adds ``pid`` from the file name (this
  process's pid, the same value). ``max``/``mostrecent``/``livesum`` would drop every label called
  ``pid`` and merge the processes; ``liveall`` needs `mark_process_dead`, which SGLang never calls.
  A dead scheduler's series stay until SGLang removes its temporary directory.
``kdtree_verify_patch_info`` is set to 0 for a label set that is no longer this process's (a
runtime fallback changes ``state``): a multiprocess file cannot forget a series.

The counters are brought up to STATE's by their increase since the last call: the forward path
itself never touches prometheus_client.

A restarted server whose scheduler gets the pid of a dead one would inherit that process's values:
prometheus_client names its files `<type>_<pid>.db` and a new value starts from what the file holds
for its key (same metric, same labels, pid included). Before its first metric, the Mirror removes
the files this pid's own metrics would use (OWN_FILE_PREFIXES: `counter_<pid>.db`,
`gauge_all_<pid>.db`) when they were last written before this process started, and only when this
process has not mapped them itself (/proc/self/maps: SGLang's own metrics of this process may
share `counter_<pid>.db`; a file they already opened is never pulled from under them). When such
a stale file is mapped already, the Mirror refuses to start (its numbers would include the dead
process's): the status files stay the evidence. The drop-in owns only the environment, so nothing
else removes these files; no other file is ever touched.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Mapping
from typing import Any

from kdtree_verify.telemetry import metrics

logger = logging.getLogger(__name__)

INFO_LABELS = ("mode", "state", "build_id", "sglang")
# prometheus_client's file prefixes of the metrics created here (counters; gauges in mode "all")
OWN_FILE_PREFIXES = ("counter", "gauge_all")


class InheritedValues(RuntimeError):
    """A dead process's multiprocess file for this pid is mapped in this process already."""


def multiproc_dir(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return env.get("PROMETHEUS_MULTIPROC_DIR") or env.get("prometheus_multiproc_dir") or ""


def process_start(pid: int | None = None) -> float | None:
    """When process `pid` (default: this one) started, epoch seconds (/proc: the start time in clock
    ticks since boot, plus the boot time); None when /proc cannot say."""
    pid = os.getpid() if pid is None else pid
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rpartition(")")[2].split()
        with open("/proc/stat", encoding="ascii", errors="replace") as handle:
            boot = next(float(line.split()[1]) for line in handle if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def mapped_paths() -> set[str]:
    """The files this process has mapped (/proc/self/maps), real paths."""
    out: set[str] = set()
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    out.add(os.path.realpath(parts[5].strip()))
    except OSError:
        pass
    return out


def inherited_files(directory: str, pid: int, started: float) -> list[str]:
    """This pid's own metric files in `directory` (OWN_FILE_PREFIXES) last written before `started`:
    a dead process's with the same pid. Regular files only; nothing else is considered."""
    out = []
    for prefix in OWN_FILE_PREFIXES:
        path = os.path.join(directory, f"{prefix}_{pid}.db")
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and info.st_mtime < started:
            out.append(path)
    return out


def clear_inherited(
    directory: str, pid: int | None = None, started: float | None = None, mapped: set[str] | None = None
) -> list[str]:
    """Remove the inherited_files of `pid` (default: this process, started at its /proc start) and
    return them; InheritedValues when one is mapped in this process already (`mapped`, default
    /proc/self/maps). Nothing is removed without a known start time."""
    pid = os.getpid() if pid is None else pid
    started = process_start(pid) if started is None else started
    if not directory or started is None:
        return []
    stale = inherited_files(directory, pid, started)
    mapped = mapped_paths() if mapped is None else mapped
    held = [path for path in stale if os.path.realpath(path) in mapped]
    if held:
        raise InheritedValues(
            f"{', '.join(held)}: written by an earlier process with pid {pid} and already open here: "
            "its values would be counted as this process's"
        )
    removed = []
    for path in stale:
        try:
            os.unlink(path)
            removed.append(path)
        except FileNotFoundError:
            continue
    if removed:
        logger.info("kdtree-verify: removed an earlier process's metric files: %s", ", ".join(removed))
    return removed


def wanted(env: Mapping[str, str] | None = None) -> bool:
    """PROMETHEUS_MULTIPROC_DIR is set (SGLang runs with --enable-metrics); `env` defaults to os.environ."""
    return bool(multiproc_dir(env))


def _base(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


class Mirror:
    """prometheus_client Counters/Gauges kept equal to the status documents given to `update`."""

    def __init__(self, client: Any = None) -> None:
        if client is None:
            import prometheus_client as client  # raises ImportError when absent

            clear_inherited(multiproc_dir())  # before the first metric of ours opens a file
        self._client = client
        self._seen: dict[tuple[int, tuple[str, ...]], float] = {}
        self._info: tuple[str, ...] | None = None
        help_of = {name: text for name, (_kind, text) in metrics.FAMILIES.items()}
        counter, gauge = client.Counter, client.Gauge
        self.calls = counter(
            _base(metrics.CALLS), help_of[metrics.CALLS], ["pid", "path", "reason"], registry=None
        )
        self.launches = counter(
            _base(metrics.KERNEL_LAUNCHES), help_of[metrics.KERNEL_LAUNCHES], ["pid"], registry=None
        )
        self.fallbacks = counter(
            _base(metrics.RUNTIME_FALLBACKS), help_of[metrics.RUNTIME_FALLBACKS], ["pid"], registry=None
        )
        self.compared = counter(
            _base(metrics.VALIDATE_COMPARED), help_of[metrics.VALIDATE_COMPARED], ["pid"], registry=None
        )
        self.mismatches = counter(
            _base(metrics.VALIDATE_MISMATCHES), help_of[metrics.VALIDATE_MISMATCHES], ["pid"], registry=None
        )
        bucket = ["pid", *metrics.BUCKET_LABELS]
        self.timed = {
            name: counter(_base(name), help_of[name], bucket, registry=None)
            for name in (metrics.KERNEL_SECONDS, metrics.ORIGINAL_SECONDS, metrics.TIMED_CALLS)
        }
        self.untimed = counter(
            _base(metrics.UNTIMED_CALLS), help_of[metrics.UNTIMED_CALLS], ["pid", "why"], registry=None
        )
        self.max_diff = gauge(
            metrics.VALIDATE_MAX_ABS_DIFF,
            help_of[metrics.VALIDATE_MAX_ABS_DIFF],
            registry=None,
            multiprocess_mode="all",
        )
        self.info = gauge(
            metrics.PATCH_INFO,
            help_of[metrics.PATCH_INFO],
            list(INFO_LABELS),
            registry=None,
            multiprocess_mode="all",
        )
        self.updated = gauge(
            metrics.UPDATED, help_of[metrics.UPDATED], registry=None, multiprocess_mode="all"
        )

    def _bring_up(self, metric: Any, labels: tuple[str, ...], value: float) -> None:
        key = (id(metric), labels)
        increase = value - self._seen.get(key, 0.0)
        if increase > 0:
            metric.labels(*labels).inc(increase)
            self._seen[key] = value
        elif key not in self._seen:  # the series exists from the first write, at 0
            metric.labels(*labels)
            self._seen[key] = 0.0

    def update(self, doc: dict[str, Any]) -> None:
        pid = str(doc.get("pid", os.getpid()))
        for name, labels, value in metrics.samples(doc):
            if name == metrics.CALLS:
                row = (pid, labels["path"], labels.get("reason", ""))
                self._bring_up(self.calls, row, float(value))
            elif name == metrics.KERNEL_LAUNCHES:
                self._bring_up(self.launches, (pid,), float(value))
            elif name == metrics.RUNTIME_FALLBACKS:
                self._bring_up(self.fallbacks, (pid,), float(value))
            elif name == metrics.VALIDATE_COMPARED:
                self._bring_up(self.compared, (pid,), float(value))
            elif name == metrics.VALIDATE_MISMATCHES:
                self._bring_up(self.mismatches, (pid,), float(value))
            elif name in self.timed:
                row = (pid, *(labels[key] for key in metrics.BUCKET_LABELS))
                self._bring_up(self.timed[name], row, float(value))
            elif name == metrics.UNTIMED_CALLS:
                self._bring_up(self.untimed, (pid, labels["why"]), float(value))
            elif name == metrics.VALIDATE_MAX_ABS_DIFF:
                self.max_diff.set(float(value))
            elif name == metrics.PATCH_INFO:
                info = tuple(labels[key] for key in INFO_LABELS)
                if self._info is not None and self._info != info:
                    self.info.labels(*self._info).set(0)
                self.info.labels(*info).set(1)
                self._info = info
            elif name == metrics.UPDATED:
                self.updated.set(float(value))
