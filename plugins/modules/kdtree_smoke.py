#!/usr/bin/python
"""Watch one run of a systemd SGLang unit for a short while (runs on the managed host).

The kdtree_smoke action plugin calls this module in chunks of a few seconds and prints progress
between chunks, so a 900 s model load shows progress while a crash is still reported within a
poll interval (0.25 s) of its traceback reaching the journal.

Layout: read_host() (module_utils/_smoke_host.py) is the only code that reads the host and returns a
plain-data Snapshot; judge(snapshot, wanted) decides ok / pending / failed from it without any I/O;
watch() polls read_host and judge for one chunk; execute() is the whole module call; main() only
wraps execute() in AnsibleModule.
"""

from __future__ import annotations

# Ansible's module layout: DOCUMENTATION, EXAMPLES and RETURN come before the imports.
# ruff: noqa: E402

DOCUMENTATION = r"""
module: kdtree_smoke
short_description: Restart a SGLang unit and watch its current run until it is healthy or has failed
version_added: 0.2.0
description:
  - Restarts a systemd unit running SGLang (optionally) and watches that one run, following only the
    journal lines of the run (C(_SYSTEMD_INVOCATION_ID)) and the unit state.
  - The journal is read as JSON (C(journalctl --output=json --all)), so bytes that are not UTF-8 (a
    line journald cut at 48 KiB inside a character, binary output) are decoded with replacement and
    never stop the check; each poll reads on from the previous poll's cursor (C(--after-cursor)), and
    the cursor and what was seen travel between chunks in O(run), so a long load costs time linear in
    the size of its journal.
  - Fails at once when the run logs a line ending in "Traceback (most recent call last):", or a line
    starting (after SGLang's C([time TPn]) prefix) with "Scheduler hit an exception" or "Error in
    sitecustomize"; only lines of the run count (another process's lines never do, nor a logged
    request that merely contains the words). A fatal line is ignored when one of O(benign_tracebacks)
    or O(extra_benign_tracebacks) matches it or the run's line right before it.
  - Also fails at once when the unit restarts (new InvocationID or a higher NRestarts) or is no longer
    active; the message carries the traceback.
  - Succeeds only when the health endpoint answers 200 from a socket of the unit, the wanted number of
    scheduler processes runs in the unit's cgroup, every scheduler printed the kdtree-verify marker
    with the wanted state (and, for C(active), no runtime fallback line), every scheduler's
    C(/proc/PID/environ) holds O(nccl_env), and all of that held for O(settle_s) seconds.
  - The health answer counts only when the socket listening on the health URL's port belongs to a
    process of the unit's cgroup (C(/proc/net/tcp), C(/proc/net/tcp6) and C(/proc/PID/fd)); an answer
    from another process is reported as RV(health) C(<code> from pid <pid> (<comm>), not <unit>.service)
    and is not healthy. When no readable C(/proc/PID/fd) holds the socket (the module runs without
    root), the answer counts as before.
  - When journald's rate limiting dropped lines of the run ("Suppressed N messages from <unit>") a
    marker may be lost; the module then reads the scheduler's status file C(<status_dir>/<pid>.json)
    (written by the patch when the unit sets C(KDTREE_STATUS_DIR)) if O(status_dir) is set, and fails
    with that reason, instead of waiting for O(timeout_s), when the server answers 200 and a scheduler
    still has no marker.
  - Marker lines are parsed with the host's installed C(<patch_dir>/kdtree_verify/marker.py), the same
    file the schedulers print them with (the collection ships it in the kdtree_patch role,
    C(files/sglang_ext/kdtree_verify/marker.py); docs/CONTRACTS.md section 3 describes the line).
  - Once the run is healthy, with O(requests) above 0 and O(marker_state=active), the module sends
    traffic and proves from the status files that the verify calls reached the patched kernel (see
    O(requests)); a failure there is a failed run (RV(state=failed)) like any other, and the result's
    RV(traffic) holds a verdict per scheduler.
  - Every host command is bounded (C(systemctl show) and C(journalctl) 15 s, the health GET 2 s,
    C(systemctl restart) O(restart_timeout_s), each request O(request_timeout_s), all requests
    O(traffic_timeout_s), each wait for the status files 3 x O(status_interval_s) + 10 s, the
    installed statusdir.py's fresh_bound_s, which fails the traffic check for an interval outside 0.05-60 s).
  - Each call watches for at most O(chunk_s) seconds and then returns O(state=pending) with O(run); the
    module's action plugin calls it again with that O(run) until the state is V(ok) or V(failed) and
    prints a progress line between calls.
author: kdtree-fleet
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
attributes:
  check_mode:
    support: partial
    details: In check mode nothing is restarted or read; the module returns RV(state=ok) and
      RV(changed) true when O(restart) is set, so a check run shows the restart that would happen.
  diff_mode:
    support: none
  platform:
    platforms: posix
    details: Linux hosts with systemd and /proc.
  action:
    support: full
    details: The action plugin runs the module in chunks, prints progress and applies O(fail_on_error).
  async:
    support: none
  bypass_host_loop:
    support: none
options:
  unit:
    description: Unit name without C(.service).
    type: str
    required: true
  restart:
    description:
      - Restart the unit first and watch the new run.
      - V(false) watches the run the unit has now (or the one in O(run)).
    type: bool
    default: false
  restart_timeout_s:
    description:
      - Seconds C(systemctl restart) may take; a restart that takes longer, or fails, is a failed run
        (RV(state=failed), RV(why) "restart did not finish within N s ..."), like an unhealthy one.
    type: float
    default: 300
  run:
    description:
      - The run being watched, as the previous chunk returned it in RV(run).
      - Left empty on the first call; the action plugin passes it between chunks.
    type: dict
    default: {}
    suboptions:
      invocation_id:
        description: InvocationID of the watched run; empty takes the unit's current run.
        type: str
        default: ""
      baseline_nrestarts:
        description: NRestarts of the unit right after the restart; a higher value is a restart.
        type: int
        default: 0
      started_at:
        description: Epoch seconds of the restart; O(timeout_s) counts from here.
        type: float
        default: 0
      healthy_since:
        description: Epoch seconds since which the run has been healthy (for O(settle_s) across chunks).
        type: float
      progress_at:
        description: Epoch seconds of the last new journal line or health change (for O(stall_timeout_s)).
        type: float
        default: 0
      health:
        description: The health answer at the previous look (a change is progress).
        type: str
        default: ""
      journal:
        description:
          - What the check keeps of the run's journal (the cursor to read on from, the markers, the
            fatal excerpt, the last lines); opaque.
        type: dict
        default: {}
  chunk_s:
    description: Return after this many seconds with RV(state=pending).
    type: float
    default: 10
  timeout_s:
    description:
      - Seconds from the restart within which the run must be healthy.
      - Required, no default here; the kdtree_smoke role's O(kdtree_smoke_timeout_s) is the one default.
    type: float
    required: true
  stall_timeout_s:
    description:
      - Fail the run when, before it is healthy, no new journal line of the run arrived and the health
        answer did not change for this many seconds (a hang without a traceback, such as an NCCL P2P
        hang on PCIe), with its own message, well before O(timeout_s).
      - V(0) turns it off. A model load can be quiet for minutes (progress bars write no line until
        they end), so set it above the longest quiet phase of a healthy start.
    type: float
    default: 0
  poll_s:
    description: Seconds between two looks at the host.
    type: float
    default: 0.25
  settle_s:
    description: Seconds the healthy state must hold before the module reports success.
    type: float
    default: 3
  health_url:
    description: Health endpoint of the server; success needs HTTP 200.
    type: str
    required: true
  expected_schedulers:
    description: Number of scheduler processes wanted (the TP size); V(0) means at least one.
    type: int
    default: 0
  scheduler_prefix:
    description: Process title prefix of the scheduler processes.
    type: str
    default: "sglang::scheduler"
  marker_state:
    description:
      - Marker state every scheduler must report (V(active), V(off)).
      - Empty skips the marker check (a rollback to the stock unit); then O(patch_dir) is not needed.
    type: str
    default: active
  patch_dir:
    description:
      - Installed patch directory on the host (the one on the unit's PYTHONPATH, for example
        C(/opt/kdtree/sglang_ext)); its C(kdtree_verify/marker.py) parses the marker lines.
      - Required when O(marker_state) is not empty; a missing or unloadable marker.py fails the module
        before anything is restarted.
    type: path
    default: ""
  status_dir:
    description:
      - The unit's C(KDTREE_STATUS_DIR) on the host, where the patch writes C(<pid>.json) per process.
      - Read after journald suppressed lines of the run, or once the health URL answers 200 (journald
        may log its "Suppressed" record late); a scheduler whose marker line is missing takes its
        state from its file, and a file that records a runtime fallback counts as one (a file counts
        when its C(pid) matches and it was written after the process started).
      - Empty reads no status file.
    type: path
    default: ""
  nccl_env:
    description: Variables and values every scheduler's C(/proc/PID/environ) must hold.
    type: dict
    default: {}
  requests:
    description:
      - Generation requests to send once the run is healthy (with O(marker_state=active); V(0) sends
        none). The module reads every scheduler's status file (O(status_dir), written after the run
        became healthy) as a baseline, POSTs the requests one after the other to O(request_route) on
        the health URL's scheme, host and port, waits until every file was rewritten after the last
        answer and judges the counters (docs/CONTRACTS.md section 3b).
      - Mode C(on) needs more kernel calls, that is C(counters.kernel_calls_device) when the status files
        have it (the library's count on the device, CUDA graph replays included), else
        C(counters.kernel_calls) (Python's); verify calls sent to the original instead fail, naming
        the top reasons; no call at all fails with the device count, and with the Python count is
        fine only when the kernel served calls before (calls replayed from a CUDA graph are not
        counted in Python), else it fails. A runtime fallback fails. Mode
        C(validate) needs more C(validate.compared) and no mismatch. Mode C(off) is not checked.
      - A non-2xx answer or a timeout fails the run with the status and the head of the body.
      - Needs O(status_dir) and the installed C(<patch_dir>/kdtree_verify/statusdir.py), which reads
        the status files.
    type: int
    default: 0
  request_route:
    description: Path of the generation endpoint on the server.
    type: str
    default: /generate
  request_prompt:
    description: The C(text) of every request (its sampling is greedy, C(temperature=0)).
    type: str
    default: The capital of France is
  request_max_new_tokens:
    description: C(sampling_params.max_new_tokens) of every request.
    type: int
    default: 16
  request_timeout_s:
    description: Seconds one request may take.
    type: float
    default: 30
  traffic_timeout_s:
    description: Seconds all requests together may take.
    type: float
    default: 120
  api_key:
    description:
      - Sent as C(Authorization Bearer <api_key>) with every request when set (the server's
        C(--api-key)); never logged nor returned.
    type: str
    default: ""
  status_interval_s:
    description:
      - The unit's C(KDTREE_STATUS_INTERVAL); a status file must be rewritten within 3 times this
        plus 10 s.
    type: float
    default: 5
  benign_tracebacks:
    description:
      - Python regular expressions of tracebacks the run may log and carry on; a fatal line of the run
        is ignored when one of them is found in it or in the run's line right before it.
      - The default holds the ones SGLang 0.5.23 logs as warnings (the optional
        C(OpenAIServingResponses) endpoint failing to initialise, C(post-warmup freeze_gc failed),
        the load publisher, the forward-pass metrics publisher).
      - Replaces the default; use O(extra_benign_tracebacks) to add to it.
    type: list
    elements: str
    default:
      - "OpenAIServingResponses init traceback:"
      - post-warmup freeze_gc failed
      - "load-publisher: publish failed"
      - FPM publisher send failed
  extra_benign_tracebacks:
    description: More patterns like O(benign_tracebacks), added to them.
    type: list
    elements: str
    default: []
  fail_on_error:
    description:
      - Fail the task when the run is unhealthy (RV(state=failed)).
      - V(false) returns RV(state=failed) without failing, for a caller that decides itself.
      - Applied by the action plugin.
    type: bool
    default: true
notes:
  - The scheduler's environment is only readable when the unit sets C(SPT_NOENV=1); setproctitle
    overwrites C(/proc/PID/environ) otherwise.
"""

EXAMPLES = r"""
- name: Restart SGLang and wait until every scheduler runs the patched kernel
  kdtree.fleet.kdtree_smoke:
    unit: sglang
    restart: true
    health_url: http://127.0.0.1:30000/health
    expected_schedulers: 8
    marker_state: active
    patch_dir: /opt/kdtree/sglang_ext
    nccl_env:
      NCCL_P2P_LEVEL: SYS
      NCCL_ALGO: Ring
  register: smoke

- name: Restart the stock unit and report its health without failing
  kdtree.fleet.kdtree_smoke:
    unit: sglang
    restart: true
    health_url: http://127.0.0.1:30000/health
    marker_state: ""
    fail_on_error: false
  register: stock

- name: Watch the current run, fail a hang after 5 quiet minutes, read status files after rate limiting
  kdtree.fleet.kdtree_smoke:
    unit: sglang
    health_url: http://127.0.0.1:30000/health
    timeout_s: 900
    stall_timeout_s: 300
    marker_state: active
    patch_dir: /opt/kdtree/sglang_ext
    status_dir: /run/kdtree-verify
    requests: 4
    api_key: "{{ sglang_api_key }}"
    extra_benign_tracebacks:
      - "my_plugin: optional feature disabled"

- name: Show why the stock unit is unhealthy
  ansible.builtin.debug:
    msg: "{{ stock.msg }}"
  when: stock.state != 'ok'
"""

RETURN = r"""
state:
  description: V(ok) (healthy and settled), V(pending) (chunk over, still waiting) or V(failed).
  type: str
  returned: always
  sample: ok
msg:
  description: One-line outcome; for a failure the reason, the time since the restart and the detail.
  type: str
  returned: always
  sample: "healthy after 41.3 s (held 3 s):  41.3s health=200 schedulers=2/2 markers(active)=2/2"
why:
  description: Why the run failed, without the detail; empty unless RV(state=failed).
  type: str
  returned: always
  sample: the current run logged a fatal error
detail:
  description: The traceback (from two lines before it) or the last journal lines of the run, or the
    marker line that failed; empty unless RV(state=failed).
  type: str
  returned: always
  sample: "Traceback (most recent call last):\n  ...\nRuntimeError: boom"
health:
  description:
    - The health endpoint's status code, C(refused), or C(down) with the reason, at the last look.
    - A code answered by a process outside the unit carries who answered,
      C(200 from pid 4242 (python3), not sglang.service).
  type: str
  returned: always
  sample: "200"
suppressed:
  description: Messages of the run that journald's rate limiting dropped (0 when none).
  type: int
  returned: always
  sample: 0
benign:
  description: The first fatal-looking lines of the run that matched a benign pattern (at most 5).
  type: list
  elements: str
  returned: always
  sample: ["Traceback (most recent call last):"]
schedulers:
  description: The scheduler processes of the unit's cgroup at the last look.
  type: list
  elements: dict
  returned: always
  contains:
    pid:
      description: Process id.
      type: int
      sample: 4242
    title:
      description: Process title (first word).
      type: str
      sample: sglang::scheduler_TP0
    marker:
      description: State of the process's marker line, V(none) before it printed one.
      type: str
      sample: active
    nccl_env_ok:
      description: Whether its environment holds every O(nccl_env) value.
      type: bool
      sample: true
progress:
  description: Elapsed time, health, scheduler count and marked schedulers, as one progress line.
  type: str
  returned: always
  sample: " 12.0s health=refused schedulers=2/2 markers(active)=0/2"
elapsed_s:
  description: Seconds since the restart at the last look.
  type: float
  returned: always
  sample: 41.27
run:
  description: The watched run; pass it back as O(run) to keep watching it.
  type: dict
  returned: always
  contains:
    invocation_id:
      description: InvocationID of the watched run.
      type: str
      sample: 0123456789abcdef0123456789abcdef
    baseline_nrestarts:
      description: NRestarts right after the restart.
      type: int
      sample: 0
    started_at:
      description: Epoch seconds of the restart.
      type: float
      sample: 1764490000.5
    healthy_since:
      description: Epoch seconds since which the run has been healthy, null while it is not.
      type: float
      sample: null
    progress_at:
      description: Epoch seconds of the last new journal line of the run or health change.
      type: float
      sample: 1764490012.25
    health:
      description: The health answer at the last look.
      type: str
      sample: refused
    journal:
      description: What the check keeps of the run's journal (cursor, markers, fatal excerpt, last lines).
      type: dict
      sample: {"cursor": "s=0123...;i=4f2", "lines": 812}
traffic:
  description:
    - The traffic check once the run was healthy; C(ok) true and C(line) saying why when none was sent.
    - C(schedulers) holds per scheduler C(pid), C(mode), C(state) (V(ok), V(failed), V(skipped)), the
      increases C(kernel_calls) (from C(kernel_calls_source), V(device) or V(python)), C(compared) and
      C(original_calls) (by reason) and a C(note);
      C(answers) the status code and seconds of each request.
  type: dict
  returned: always
  sample:
    ok: true
    line: "traffic: 4 requests, kernel calls +40 in 2/2 schedulers"
    schedulers:
      - {pid: 4242, mode: "on", state: ok, kernel_calls: 20, compared: 0, original_calls: {}, note: ""}
    answers:
      - {status: 200, seconds: 0.41}
changed:
  description: Whether this call restarted the unit.
  type: bool
  returned: always
  sample: true
"""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kdtree.fleet.plugins.module_utils._journal import (
    DEFAULT_BENIGN_TRACEBACKS,
    TAIL_LINES,
    compile_benign,
)
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke_host import (
    SCHEDULER_PREFIX,
    HostError,
    Marker,
    MarkerError,
    Query,
    Snapshot,
    load_marker,
    read_host,
    restart_unit,
)
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke_run import RUN_SUBOPTIONS, RunState
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke_traffic import (
    Requests,
    StatusDirError,
    TrafficResult,
    load_statusdir,
    read_counts,
    run_traffic,
)

ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "unit": {"type": "str", "required": True},
    "restart": {"type": "bool", "default": False},
    "restart_timeout_s": {"type": "float", "default": 300.0},
    "run": {"type": "dict", "default": {}, "options": RUN_SUBOPTIONS, "apply_defaults": True},
    "chunk_s": {"type": "float", "default": 10.0},
    "timeout_s": {"type": "float", "required": True},
    "stall_timeout_s": {"type": "float", "default": 0.0},
    "poll_s": {"type": "float", "default": 0.25},
    "settle_s": {"type": "float", "default": 3.0},
    "health_url": {"type": "str", "required": True},
    "expected_schedulers": {"type": "int", "default": 0},
    "scheduler_prefix": {"type": "str", "default": SCHEDULER_PREFIX},
    "marker_state": {"type": "str", "default": "active"},
    "patch_dir": {"type": "path", "default": ""},
    "status_dir": {"type": "path", "default": ""},
    "nccl_env": {"type": "dict", "default": {}},
    "requests": {"type": "int", "default": 0},
    "request_route": {"type": "str", "default": "/generate"},
    "request_prompt": {"type": "str", "default": "The capital of France is"},
    "request_max_new_tokens": {"type": "int", "default": 16},
    "request_timeout_s": {"type": "float", "default": 30.0},
    "traffic_timeout_s": {"type": "float", "default": 120.0},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "status_interval_s": {"type": "float", "default": 5.0},
    "benign_tracebacks": {"type": "list", "elements": "str", "default": list(DEFAULT_BENIGN_TRACEBACKS)},
    "extra_benign_tracebacks": {"type": "list", "elements": "str", "default": []},
    # applied by the action plugin; part of the spec so that ansible-doc and validation know it
    "fail_on_error": {"type": "bool", "default": True},
}
LIVE_STATES = ("active", "activating", "reloading")
# After a fatal line: let the rest of the traceback reach the journal before quoting it.
FATAL_GRACE_S = 0.3
# After a restart or a dead unit: the dying process's traceback may reach the journal later.
JOURNAL_RETRIES = 5
JOURNAL_RETRY_S = 0.2
# The keys of every result (RETURN documents exactly these).
RESULT_KEYS = (
    "state",
    "msg",
    "why",
    "detail",
    "health",
    "schedulers",
    "progress",
    "elapsed_s",
    "suppressed",
    "benign",
    "traffic",
    "run",
    "changed",
)


NO_TRAFFIC: dict[str, Any] = {"ok": True, "line": "traffic: none sent", "schedulers": [], "answers": []}


class SmokeError(Exception):
    """The check cannot run (configuration): the module fails, whatever fail_on_error says."""


@dataclass(frozen=True)
class Wanted:
    """What a healthy run is: the watched run itself and the rules judge() applies to it."""

    unit: str
    run: RunState
    timeout_s: float
    expected_schedulers: int = 0
    marker_state: str = "active"
    nccl_env: dict[str, Any] = field(default_factory=dict)
    settle_s: float = 3.0
    stall_timeout_s: float = 0.0  # 0: no no-progress timeout
    status_dir: str = ""  # only named in messages; read_host reads it


@dataclass(frozen=True)
class Verdict:
    """judge()'s answer. `follow_journal` (not returned) says the detail needs a later journal read."""

    state: str
    msg: str
    run: RunState
    health: str = ""
    schedulers: list[dict[str, Any]] = field(default_factory=list)
    progress: str = ""
    elapsed_s: float = 0.0
    why: str = ""
    detail: str = ""
    suppressed: int = 0
    benign: list[str] = field(default_factory=list)
    traffic: dict[str, Any] = field(default_factory=lambda: dict(NO_TRAFFIC))
    follow_journal: str = ""  # "", "fatal" (traceback in progress) or "unit" (unit died or restarted)

    def result(self, changed: bool) -> dict[str, Any]:
        out = {key: getattr(self, key) for key in RESULT_KEYS if key not in ("run", "changed")}
        out["schedulers"] = [dict(item) for item in self.schedulers]
        out["benign"] = list(self.benign)
        out["traffic"] = json.loads(json.dumps(self.traffic))
        out.update(run=self.run.as_option(), changed=changed)
        return out


def excerpt(snapshot: Snapshot) -> str:
    """The traceback (with two lines of context) when the run logged one, else its last lines."""
    return "\n".join(snapshot.fatal or snapshot.journal[-TAIL_LINES:])


def failure_msg(unit: str, why: str, elapsed_s: float, detail: str) -> str:
    msg = f"{unit}.service: {why} ({elapsed_s:.1f} s after the restart)"
    return msg + "\n" + detail if detail else msg


def _short_title(title: str) -> str:
    return title.split(" ")[0]


def _check_schedulers(
    snapshot: Snapshot, wanted: Wanted
) -> tuple[list[dict[str, Any]], list[str], tuple[str, str] | None]:
    """(report per live scheduler, reasons to keep waiting, (why, detail) of the first bad scheduler).

    A scheduler's marker is its journal line, else its status file (read_host reads those after
    journald suppressed lines of the run or once the server answers); a status file's runtime
    fallback counts as a fallback line."""
    markers = {item.pid: item for item in snapshot.markers}
    gave_up = {item.pid: item.line for item in snapshot.runtime_fallbacks}
    for status in snapshot.statuses:
        markers.setdefault(status.pid, Marker(pid=status.pid, state=status.state, line=status.line))
        if status.runtime_fallback:
            gave_up.setdefault(status.pid, status.line)
    report: list[dict[str, Any]] = []
    waiting: list[str] = []
    problem: tuple[str, str] | None = None
    for proc in snapshot.schedulers:
        title = _short_title(proc.title)
        found = markers.get(proc.pid)
        state = found.state if found else "none"
        env = proc.environ
        if env is None:
            waiting.append(f"{title} gone")
            continue
        bad: tuple[str, str] | None = None
        wrong = {k: env.get(k) for k, v in wanted.nccl_env.items() if env.get(k) != str(v)}
        if wanted.nccl_env and not env:
            bad = (
                f"{title} (pid {proc.pid}) has an unreadable /proc/{proc.pid}/environ",
                "setproctitle overwrites it unless the unit sets SPT_NOENV=1",
            )
        elif wrong:
            bad = (
                f"{title} (pid {proc.pid}) does not run with the templated NCCL environment",
                f"wanted {json.dumps(wanted.nccl_env, sort_keys=True)}, "
                f"has {json.dumps(wrong, sort_keys=True)}",
            )
        elif wanted.marker_state:
            if state == "none":
                waiting.append(f"{title} no marker yet")
            elif state != wanted.marker_state:
                bad = (
                    f"{title} (pid {proc.pid}) reports the patch {state}, wanted {wanted.marker_state}",
                    found.line if found else "",
                )
            if bad is None and wanted.marker_state == "active" and proc.pid in gave_up:
                bad = (
                    f"{title} (pid {proc.pid}) fell back to Triton at run time: "
                    "the kernel does not run there",
                    gave_up[proc.pid],
                )
        problem = problem or bad
        report.append({"pid": proc.pid, "title": title, "marker": state, "nccl_env_ok": not wrong})
    return report, waiting, problem


def _lost_markers(snapshot: Snapshot, wanted: Wanted, waiting: list[str]) -> tuple[str, str]:
    """(why, detail) for schedulers whose marker journald dropped while the server already answers."""
    unmarked = [item[: -len(" no marker yet")] for item in waiting if item.endswith(" no marker yet")]
    why = (
        f"journald suppressed {snapshot.suppressed} messages of the run and "
        f"{', '.join(unmarked)} has no marker although the health URL answers 200"
    )
    if wanted.status_dir:
        hint = (
            f"no status file of it in {wanted.status_dir} either "
            "(does the unit set KDTREE_STATUS_DIR to that directory?)"
        )
    else:
        hint = (
            "set the module's status_dir (kdtree_smoke_status_dir) to the unit's KDTREE_STATUS_DIR "
            "to read the marker from the patch's status files, or raise journald's RateLimitBurst"
        )
    return why, f"{snapshot.suppressed_line}\n{hint}"


def judge(snapshot: Snapshot, wanted: Wanted) -> Verdict:
    """ok, pending or failed for one snapshot of the watched run; pure (no I/O, no clock).

    Rules, in this order: a fatal line in the run's journal (not a benign traceback; read_host
    classified the lines); a restart (another InvocationID, a higher NRestarts); a unit that is not
    active; a scheduler with an unreadable environ, wrong NCCL values, the wrong marker state or (for
    active) a runtime fallback. Healthy = health 200 from the unit's own socket, the expected
    scheduler count, every scheduler marked (in the journal, or in its status file after journald
    suppressed lines); ok once healthy for settle_s (the run's healthy_since carries over polls and
    chunks). A server that answers while journald dropped a scheduler's marker fails at once. Not
    healthy after timeout_s from the restart fails; so does no new journal line and no change of the
    health answer for stall_timeout_s (when set).
    """
    run = wanted.run
    elapsed = snapshot.read_at - run.started_at
    moved = snapshot.new_lines > 0 or snapshot.health != run.health or not run.progress_at
    run = replace(
        run,
        journal=snapshot.journal_state or run.journal,
        health=snapshot.health,
        progress_at=snapshot.read_at if moved else run.progress_at,
    )
    report, waiting, problem = _check_schedulers(snapshot, wanted)
    count = len(snapshot.schedulers)
    marked = sum(1 for item in report if item["marker"] == wanted.marker_state)
    progress = (
        f"{elapsed:5.1f}s health={snapshot.health} schedulers={count}/{wanted.expected_schedulers or '>=1'} "
        f"markers({wanted.marker_state or 'unchecked'})={marked}/{count}"
    )
    if snapshot.suppressed:
        progress += f" suppressed={snapshot.suppressed}"
    seen = {
        "health": snapshot.health,
        "schedulers": report,
        "progress": progress,
        "elapsed_s": round(elapsed, 2),
        "suppressed": snapshot.suppressed,
        "benign": list(snapshot.benign),
    }

    def failed(why: str, detail: str, follow: str = "") -> Verdict:
        return Verdict(
            state="failed",
            msg=failure_msg(wanted.unit, why, elapsed, detail),
            run=replace(run, healthy_since=None),
            why=why,
            detail=detail,
            follow_journal=follow,
            **seen,
        )

    if snapshot.fatal:
        return failed("the current run logged a fatal error", excerpt(snapshot), "fatal")
    props = snapshot.props
    if props.get("InvocationID") != run.invocation_id:
        why = f"the unit restarted (invocation {props.get('InvocationID')!r})"
        return failed(why, excerpt(snapshot), "unit")
    if int(props.get("NRestarts") or 0) > run.baseline_nrestarts:
        return failed(f"the unit restarted (NRestarts={props.get('NRestarts')})", excerpt(snapshot), "unit")
    if props.get("ActiveState") not in LIVE_STATES:
        why = (
            f"the unit is {props.get('ActiveState')}/{props.get('SubState')} "
            f"(Result={props.get('Result')}, ExecMainStatus={props.get('ExecMainStatus')})"
        )
        return failed(why, excerpt(snapshot), "unit")
    if problem is not None:
        return failed(*problem)

    expected = wanted.expected_schedulers
    count_ok = count >= 1 if expected <= 0 else count == expected
    if snapshot.health == "200" and count_ok and not waiting:
        since = run.healthy_since if run.healthy_since is not None else snapshot.read_at
        held = replace(run, healthy_since=since)
        if snapshot.read_at - since >= wanted.settle_s:
            msg = f"healthy after {elapsed:.1f} s (held {wanted.settle_s:g} s): {progress}"
            return Verdict(state="ok", msg=msg, run=held, **seen)
        return Verdict(state="pending", msg=f"settling: {progress}", run=held, **seen)
    if snapshot.suppressed and snapshot.health == "200" and any(w.endswith("no marker yet") for w in waiting):
        return failed(*_lost_markers(snapshot, wanted, waiting))
    tail = "\n".join(snapshot.journal[-TAIL_LINES:])
    detail = "; ".join(waiting) + ("\n" if waiting else "") + tail
    if elapsed > wanted.timeout_s:
        return failed(f"not healthy within {wanted.timeout_s:.0f} s: {progress}", detail)
    stalled = snapshot.read_at - run.progress_at
    if wanted.stall_timeout_s > 0 and stalled > wanted.stall_timeout_s:
        why = (
            f"no progress for {stalled:.0f} s (stall_timeout_s={wanted.stall_timeout_s:g}): no new "
            "journal line of the run and no change of the health answer; a hang (such as an NCCL P2P "
            f"hang): {progress}"
        )
        return failed(why, detail)
    return Verdict(state="pending", msg=f"waiting: {progress}", run=replace(run, healthy_since=None), **seen)


Reader = Callable[..., Snapshot]


def complete_journal(
    verdict: Verdict, query: Query, read: Reader, sleep: Callable[[float], None], marker: Any = None
) -> Verdict:
    """Quote the whole traceback: a dying process's lines reach the journal after its first one,
    and after the unit state changed. Each re-read continues from the run's journal cursor."""
    if not verdict.follow_journal:
        return verdict
    journal_only = frozenset(("journal",))
    state = verdict.run.journal
    try:
        if verdict.follow_journal == "fatal":
            sleep(FATAL_GRACE_S)
            snap = read(query, marker, parts=journal_only, journal=state)
        else:
            for attempt in range(JOURNAL_RETRIES):
                if attempt:
                    sleep(JOURNAL_RETRY_S)
                snap = read(query, marker, parts=journal_only, journal=state)
                state = snap.journal_state or state
                if snap.fatal:
                    break
    except HostError:
        return replace(verdict, follow_journal="")  # the failure stands, with what was read before
    detail = excerpt(snap)
    return replace(
        verdict,
        detail=detail,
        msg=failure_msg(query.unit, verdict.why, verdict.elapsed_s, detail),
        run=replace(verdict.run, journal=snap.journal_state or verdict.run.journal),
        follow_journal="",
    )


def watch(
    query: Query,
    wanted: Wanted,
    chunk_s: float,
    poll_s: float,
    marker: Any = None,
    read: Reader = read_host,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> Verdict:
    """Poll read_host + judge every poll_s until ok or failed, or until chunk_s has passed (pending).

    Each poll hands read_host the journal state of the previous one (in the run), so the journal is
    read on from its cursor."""
    deadline = clock() + chunk_s
    while True:
        try:
            verdict = judge(read(query, marker, journal=wanted.run.journal), wanted)
            if verdict.state == "failed":
                verdict = complete_journal(verdict, query, read, sleep, marker)
        except HostError as exc:
            elapsed = clock() - wanted.run.started_at
            why = f"cannot read the host: {exc}"
            return Verdict(
                state="failed",
                msg=failure_msg(wanted.unit, why, elapsed, ""),
                run=wanted.run,
                elapsed_s=round(elapsed, 2),
                why=why,
            )
        if verdict.state in ("failed", "ok"):
            return verdict
        wanted = replace(wanted, run=verdict.run)
        if clock() >= deadline:
            return verdict
        sleep(poll_s)


def _restart_failed(unit: str, run: RunState, why: str, clock: Callable[[], float]) -> dict[str, Any]:
    elapsed = clock() - run.started_at
    verdict = Verdict(
        state="failed",
        msg=failure_msg(unit, why, elapsed, ""),
        run=run,
        elapsed_s=round(elapsed, 2),
        why=why,
    )
    return verdict.result(changed=True)


Traffic = Callable[[Requests, list[int], Any, dict[str, Any]], TrafficResult]


def host_traffic(req: Requests, pids: list[int], statusdir: Any, params: dict[str, Any]) -> TrafficResult:
    """run_traffic on this host: the status files of `status_dir`, read with the host's statusdir.py
    (which also bounds each wait: fresh_bound_s of the interval, refusing an interval out of bounds)."""
    raw = params.get("status_interval_s")
    interval = 5.0 if raw in (None, "") else float(raw)
    try:
        bound = statusdir.fresh_bound_s(interval)
    except ValueError as exc:
        why = f"traffic: {exc} (status_interval_s)"
        return TrafficResult(ok=False, line=why, why=why)
    return run_traffic(
        req,
        pids,
        lambda wanted: read_counts(statusdir, params["status_dir"], wanted, interval),
        bound,
        float(params.get("poll_s") or 0.25),
    )


def traffic_wanted(params: dict[str, Any]) -> bool:
    """Requests are sent to a run of the patched kernel only (marker state active)."""
    return int(params.get("requests") or 0) > 0 and params["marker_state"] == "active"


def with_traffic(
    verdict: Verdict, params: dict[str, Any], statusdir: Any, traffic: Traffic, clock: Callable[[], float]
) -> Verdict:
    """The healthy verdict after the traffic check: ok with its line added, or failed."""
    req = Requests(
        count=int(params["requests"]),
        health_url=params["health_url"],
        route=params.get("request_route") or "/generate",
        prompt=params.get("request_prompt") or "",
        max_new_tokens=int(params.get("request_max_new_tokens") or 16),
        timeout_s=float(params.get("request_timeout_s") or 30.0),
        total_timeout_s=float(params.get("traffic_timeout_s") or 120.0),
        api_key=params.get("api_key") or "",
    )
    pids = [int(item["pid"]) for item in verdict.schedulers]
    result = traffic(req, pids, statusdir, params)
    if result.ok:
        return replace(verdict, msg=f"{verdict.msg}; {result.line}", traffic=result.as_result())
    elapsed = clock() - verdict.run.started_at
    return replace(
        verdict,
        state="failed",
        msg=failure_msg(params["unit"], result.why, elapsed, result.detail),
        why=result.why,
        detail=result.detail,
        elapsed_s=round(elapsed, 2),
        run=replace(verdict.run, healthy_since=None),
        traffic=result.as_result(),
    )


def execute(
    params: dict[str, Any],
    check_mode: bool = False,
    read: Reader = read_host,
    restart: Callable[[str, float], None] = restart_unit,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
    traffic: Traffic = host_traffic,
) -> dict[str, Any]:
    """One module call: load the marker parser, restart when asked, watch one chunk; once the run is
    healthy, send the traffic (requests > 0, marker state active) and judge the status files.

    Raises SmokeError when the check cannot run (its configuration); a restart that fails or does not
    finish within restart_timeout_s is a failed run (state=failed)."""
    unit = params["unit"]
    run = RunState.from_option(params["run"])
    if check_mode:
        msg = f"check mode: would {'restart and ' if params['restart'] else ''}watch {unit}.service"
        return Verdict(state="ok", msg=msg, run=run).result(changed=bool(params["restart"]))
    benign = tuple(params.get("benign_tracebacks") or ()) + tuple(params.get("extra_benign_tracebacks") or ())
    try:
        compile_benign(benign)
    except ValueError as exc:
        raise SmokeError(str(exc)) from exc
    marker = None
    if params["marker_state"]:
        if not params["patch_dir"]:
            raise SmokeError(f"marker_state={params['marker_state']!r} needs patch_dir (to load marker.py)")
        try:
            marker = load_marker(params["patch_dir"])
        except MarkerError as exc:
            raise SmokeError(f"cannot check the kdtree-verify markers: {exc}") from exc
    statusdir = None
    if traffic_wanted(params):
        if not params.get("status_dir"):
            raise SmokeError(
                f"requests={params['requests']} needs status_dir (the unit's KDTREE_STATUS_DIR) to read "
                "the verify counters; set requests to 0 (kdtree_smoke_requests) to send no traffic"
            )
        try:
            statusdir = load_statusdir(params["patch_dir"])
        except StatusDirError as exc:
            raise SmokeError(f"cannot check the traffic: {exc}") from exc
    changed = False
    if params["restart"]:
        run = RunState(started_at=clock())
        try:
            restart(unit, params["restart_timeout_s"])
        except HostError as exc:
            return _restart_failed(unit, run, str(exc), clock)
        changed = True
    try:
        if not run.invocation_id:
            now = read(Query(unit=unit), parts=frozenset(("unit",)))
            run = RunState(
                invocation_id=now.props.get("InvocationID", ""),
                baseline_nrestarts=int(now.props.get("NRestarts") or 0),
                started_at=run.started_at or now.read_at,
            )
    except HostError as exc:
        raise SmokeError(str(exc)) from exc
    query = Query(
        unit=unit,
        invocation_id=run.invocation_id,
        health_url=params["health_url"],
        scheduler_prefix=params["scheduler_prefix"],
        benign_tracebacks=benign,
        status_dir=params.get("status_dir") or "",
        not_before=run.started_at,
    )
    wanted = Wanted(
        unit=unit,
        run=run,
        expected_schedulers=params["expected_schedulers"],
        marker_state=params["marker_state"],
        nccl_env=params["nccl_env"] or {},
        settle_s=params["settle_s"],
        timeout_s=params["timeout_s"],
        stall_timeout_s=params.get("stall_timeout_s") or 0.0,
        status_dir=params.get("status_dir") or "",
    )
    verdict = watch(query, wanted, params["chunk_s"], params["poll_s"], marker, read, sleep, clock)
    if verdict.state == "ok" and statusdir is not None:
        verdict = with_traffic(verdict, params, statusdir, traffic, clock)
    elif verdict.state == "ok" and int(params.get("requests") or 0) > 0:
        why = f"marker state {params['marker_state'] or 'unchecked'}: the patched kernel is not wanted"
        line = f"traffic: none sent ({why})"
        verdict = replace(verdict, msg=f"{verdict.msg}; {line}", traffic={**NO_TRAFFIC, "line": line})
    return verdict.result(changed=changed)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = execute(module.params, check_mode=module.check_mode)
    except SmokeError as exc:
        module.fail_json(msg=f"{module.params['unit']}.service: {exc}", state="failed")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
