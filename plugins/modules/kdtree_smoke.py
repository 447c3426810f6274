#!/usr/bin/python
"""Watch one run of a systemd SGLang unit for a short while (runs on the managed host).

The kdtree_smoke action plugin calls this module in chunks of a few seconds and prints progress
between chunks. This file is the module's documentation, its argument spec and main(); the check
itself lives in the private package module_utils/_smoke/: check.execute() (one call), watch (the poll
loop), judge (the rules, pure), host (reads the host), traffic (the traffic proof), result (the
result) and run (the run handed between chunks).
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
    the cursor and what was seen travel between chunks in RV(run), so a long load costs time linear in
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
    with the wanted state (and, for C(active), no runtime fallback line, which the patch prints when it
    gives up at run time on a library that does not load, an unsupported GPU or a kernel error on the
    first verify call; on a GPU host that first call comes during SGLang's CUDA-graph capture, before
    the health URL answers 200), every scheduler's C(/proc/PID/environ) holds O(nccl_env), and all
    of that held for O(settle_s) seconds.
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
  - Marker lines are parsed with the host's installed
    C(<patch_dir>/kdtree_verify/telemetry/marker.py), the same file the schedulers print them with
    (the collection ships it as C(files/sglang_ext/kdtree_verify/telemetry/marker.py);
    docs/CONTRACTS.md section 3 describes the line).
  - Once the run is healthy, with O(requests) above 0 and O(marker_state=active), the module sends
    traffic and proves from the status files that the verify calls reached the patched kernel (see
    O(requests)); a failure there is a failed run (RV(state=failed)) like any other, and the result's
    RV(traffic) holds a verdict per scheduler.
  - Every host command is bounded (C(systemctl show) and C(journalctl) 15 s, the health GET 2 s,
    C(systemctl restart) O(restart_timeout_s), each request O(request_timeout_s), all requests
    O(traffic_timeout_s), each wait for the status files 3 x O(status_interval_s) + 10 s, the
    installed statusdir.py's fresh_bound_s, which fails the traffic check for an interval outside 0.05-60 s).
  - Each call watches for at most O(chunk_s) seconds and then returns RV(state=pending) with RV(run);
    the module's action plugin calls it again with that run (an internal option a task cannot set)
    until the state is V(ok) or V(failed) and prints a progress line between calls.
author: kdtree-fleet contributors (!UNKNOWN)
extends_documentation_fragment:
  - kdtree.fleet.attributes
  - kdtree.fleet.unit
  - ansible.builtin.action_common_attributes.flow
attributes:
  check_mode:
    support: partial
    details: In check mode nothing is restarted or read; the module returns RV(state=ok) and
      RV(changed) true when O(restart) is set, so a check run shows the restart that would happen.
  diff_mode:
    support: none
    details: A restart changes no file.
  action:
    support: full
    details: The action plugin runs the module in chunks, prints progress and applies O(fail_on_error).
  async:
    support: none
  bypass_host_loop:
    support: none
options:
  restart:
    description:
      - Restart the unit first and watch the new run.
      - V(false) watches the run the unit has now (the action plugin's later chunks keep watching the
        run the first chunk started).
    type: bool
    default: false
  restart_timeout_s:
    description:
      - Seconds C(systemctl restart) may take; a restart that takes longer, or fails, is a failed run
        (RV(state=failed), RV(why) "restart did not finish within N s ..."), like an unhealthy one.
    type: float
    default: 300
  chunk_s:
    description: Return after this many seconds with RV(state=pending).
    type: float
    default: 10
  timeout_s:
    description:
      - Seconds from the restart within which the run must be healthy.
      - Required, without a default here; the kdtree_smoke role's variable
        O(kdtree.fleet.kdtree_smoke#role:main:kdtree_smoke_timeout_s) owns the default.
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
  marker_state:
    description:
      - Marker state every scheduler must report (V(active), V(off)).
      - Empty skips the marker check (a rollback to the stock unit); then O(patch_dir) is not needed.
    type: str
    default: active
  patch_dir:
    description:
      - Installed patch directory on the host (the one on the unit's PYTHONPATH, for example
        C(/opt/kdtree/sglang_ext)); its C(kdtree_verify/telemetry/marker.py) parses the marker lines.
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
      - The run's decode figures go into the C(decode) of RV(traffic) (module_utils/_decode.py
        defines them), the requests' tokens/s (their completion tokens over their wall-clock
        seconds) and, read from the server's C(/metrics) right before the first request and after
        the last answer (C(--enable-metrics)), SGLang's mean inter-token latency (the delta of
        C(sglang:inter_token_latency_seconds)) and accept length (C(sglang:spec_accept_length)). A
        figure not published or refused is null with why, never 0, and never fails the run.
      - Needs O(status_dir) and the installed C(<patch_dir>/kdtree_verify/telemetry/statusdir.py), which reads
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
  request_stream:
    description:
      - Send every request with C(stream) on; the answer comes as server-sent events.
      - SGLang observes its inter-token latency only from a request's second output, which only a
        streamed request has; with this off C(decode.itl_mean_s) of RV(traffic) is never published.
    type: bool
    default: true
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
  group:
    description:
      - The serving group this node restarted with (the nodes of one multi-node server), as
        C({name, members}) - the M(kdtree.fleet.kdtree_rendezvous) name its nodes meet under and their hosts.
      - Between chunks the action plugin reads, on the controller, whether another member posted V(failed)
        to that rendezvous' V(abort) phase (its deploy failed); then the watch ends at once, failed, naming
        that node - a node whose peer died may hang rather than exit (upstream, over NCCL), and the group
        goes back together.
      - Applied by the action plugin. Empty watches this node alone.
    type: dict
    default: {}
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
  description: The watched run; the action plugin hands it to the next chunk, which keeps watching it.
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
      description: Epoch seconds of the restart (the journal is read from here).
      type: float
      sample: 1764490000.5
    started_mono:
      description: >-
        The host's monotonic clock at the restart; the timeouts count from here (0 when not known:
        then from started_at).
      type: float
      sample: 81234.25
    healthy_since:
      description: >-
        Since when the run has been healthy, on the clock of the timeouts (started_mono's, or epoch
        seconds), null while it is not.
      type: float
      sample: null
    progress_at:
      description: >-
        When the run last logged a new journal line or changed its health answer, on the clock of the
        timeouts.
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
      C(answers) the status code, seconds and completion tokens (null when the answer does not say) of
      each request.
    - C(decode) the run's decode figures (null when no request was answered), C(tokens_per_s),
      C(itl_mean_s), C(accept_length) (each null when not published or refused, C(why) says why),
      C(completion_tokens), C(request_s) and C(itl_samples).
  type: dict
  returned: always
  sample:
    ok: true
    line: >-
      traffic: 4 requests, kernel calls +40 in 2/2 schedulers; decode 39.0 tokens/s, ITL 24.1 ms,
      accept length 1.02
    schedulers:
      - {pid: 4242, mode: "on", state: ok, kernel_calls: 20, compared: 0, original_calls: {}, note: ""}
    answers:
      - {status: 200, seconds: 0.41, completion_tokens: 16}
    decode:
      tokens_per_s: 39.0
      itl_mean_s: 0.0241
      accept_length: 1.02
      completion_tokens: 64
      request_s: 1.641
      itl_samples: 60
      why: {}
changed:
  description: Whether this call restarted the unit.
  type: bool
  returned: always
  sample: true
"""


from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kdtree.fleet.plugins.module_utils._journal import DEFAULT_BENIGN_TRACEBACKS
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.check import SmokeError, execute
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.run import RUN_OPTION, RUN_SUBOPTIONS
from ansible_collections.kdtree.fleet.plugins.module_utils._unit_procs import SCHEDULER_PREFIX

ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "unit": {"type": "str", "required": True},
    "restart": {"type": "bool", "default": False},
    "restart_timeout_s": {"type": "float", "default": 300.0},
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
    "request_max_new_tokens": {"type": "int", "default": 16, "no_log": False},
    "request_stream": {"type": "bool", "default": True},
    "request_timeout_s": {"type": "float", "default": 30.0},
    "traffic_timeout_s": {"type": "float", "default": 120.0},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "status_interval_s": {"type": "float", "default": 5.0},
    "benign_tracebacks": {"type": "list", "elements": "str", "default": list(DEFAULT_BENIGN_TRACEBACKS)},
    "extra_benign_tracebacks": {"type": "list", "elements": "str", "default": []},
    # applied by the action plugin, which never passes it on; in the spec so that validation knows it
    "fail_on_error": {"type": "bool", "default": True},
    "group": {"type": "dict", "default": {}},
    # internal (not in DOCUMENTATION): the run the previous chunk returned; only the action plugin sets it
    RUN_OPTION: {"type": "dict", "default": {}, "options": RUN_SUBOPTIONS, "apply_defaults": True},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = execute(module.params, check_mode=module.check_mode)
    except SmokeError as exc:
        module.fail_json(msg=f"{module.params['unit']}.service: {exc}", state="failed")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
