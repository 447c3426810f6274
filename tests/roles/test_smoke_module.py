"""The kdtree_smoke module as Ansible sees it: documentation, options, results, execute() and the
action plugin's chunk loop (plugins/modules/kdtree_smoke.py, module_utils/_smoke_check.py,
plugins/action/kdtree_smoke.py)."""

from __future__ import annotations

import copy
import importlib
import json
from types import SimpleNamespace

import pytest
import yaml
from ansible.errors import AnsibleActionFail
from ansible_collections.kdtree.fleet.plugins.module_utils import _smoke_check as sc
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke_run import RUN_OPTION, RUN_SUBOPTIONS
from conftest import (
    ANSIBLE_BIN,
    ON_LOCALHOST,
    PATCH_DIR,
    ROOT,
    ansible_doc,
    needs_ansible,
    rendered_docs,
    run_ansible,
)

INVOCATION = "0123456789abcdef0123456789abcdef"
T0 = 1_764_490_000.0
SMOKE_UTILS = sorted((ROOT / "plugins" / "module_utils").glob("_smoke_*.py"))


@pytest.fixture(scope="module")
def action():
    return importlib.import_module("ansible_collections.kdtree.fleet.plugins.action.kdtree_smoke")


def doc(module, name: str) -> dict:
    return yaml.safe_load(getattr(module, name))


# --- a host for execute() --------------------------------------------------------------------


class Host:
    """read/restart/sleep/clock for execute(): a healthy unit with one marked scheduler."""

    def __init__(self, hu, marker_state: str = "active", health: str = "200") -> None:
        self.hu = hu
        self.now = T0
        self.invocation = INVOCATION
        self.nrestarts = 0
        self.health = health
        self.marker_state = marker_state
        self.restarts: list[tuple[str, float]] = []
        self.reads: list[frozenset | None] = []
        self.queries: list[tuple] = []  # (query, journal state) of each read

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def restart(self, unit: str, timeout_s: float) -> None:
        self.restarts.append((unit, timeout_s))
        self.invocation = "a" * 32
        self.nrestarts = 3
        self.now += 1.0

    def read(self, query, marker=None, parts=None, journal=None):
        self.reads.append(parts)
        self.queries.append((query, journal))
        hu = self.hu
        props = {"ActiveState": "active", "InvocationID": self.invocation, "NRestarts": str(self.nrestarts)}
        journal = []
        markers = []
        if marker is not None:
            journal = [marker.format_line({"pid": 101, "state": self.marker_state})]
            markers, _ = hu.parse_journal(journal, marker)
        return hu.Snapshot(
            read_at=self.now,
            invocation_id=query.invocation_id or self.invocation,
            props=props,
            journal=journal,
            markers=markers,
            health=self.health,
            schedulers=[hu.Process(pid=101, title="sglang::scheduler_TP0", environ={"NCCL_ALGO": "Ring"})],
        )


def params(**over) -> dict:
    base = {
        "unit": "sglang",
        "restart": False,
        "restart_timeout_s": 300.0,
        "_run": {"invocation_id": "", "baseline_nrestarts": 0, "started_at": 0.0, "healthy_since": None},
        "chunk_s": 0.0,
        "timeout_s": 900.0,
        "poll_s": 0.25,
        "settle_s": 0.0,
        "health_url": "http://127.0.0.1:30000/health",
        "expected_schedulers": 1,
        "scheduler_prefix": "sglang::scheduler",
        "marker_state": "active",
        "patch_dir": str(PATCH_DIR),
        "nccl_env": {"NCCL_ALGO": "Ring"},
        "fail_on_error": True,
        "stall_timeout_s": 0.0,
        "status_dir": "",
        "benign_tracebacks": ["OpenAIServingResponses init traceback:"],
        "extra_benign_tracebacks": [],
    }
    base.update(over)
    return base


def execute(host, **over):
    return sc.execute(
        params(**over),
        read=host.read,
        restart=host.restart,
        sleep=host.sleep,
        clock=host.clock,
    )


# --- documentation ---------------------------------------------------------------------------


@needs_ansible
def test_documented_options_are_the_argument_spec_less_its_internal_options(smoke_module):
    """ansible-doc's options (the module's and its doc fragments') are the argument spec's, except the
    internal ones: underscored, set only by the action plugin, and never documented."""
    options = rendered_docs()["kdtree.fleet.kdtree_smoke"]["doc"]["options"]
    spec = smoke_module.ARGUMENT_SPEC
    internal = sorted(name for name in spec if name.startswith("_"))
    assert internal == [RUN_OPTION]
    assert sorted(options) == sorted(name for name in spec if name not in internal)
    for name, documented in options.items():
        entry = spec[name]
        assert documented["type"] == entry["type"], name
        assert documented.get("required", False) == entry.get("required", False), name
        assert documented.get("default") == entry.get("default"), name
        assert documented.get("description"), name
    assert spec[RUN_OPTION]["options"] == RUN_SUBOPTIONS


def test_the_returned_run_is_what_the_internal_option_takes(smoke_module):
    returned = doc(smoke_module, "RETURN")["run"]["contains"]
    assert sorted(returned) == sorted(RUN_SUBOPTIONS)
    for name, entry in RUN_SUBOPTIONS.items():
        assert returned[name]["type"] == entry["type"], name


def test_documentation_declares_check_and_diff_mode(smoke_module):
    documentation = doc(smoke_module, "DOCUMENTATION")
    assert documentation["attributes"]["check_mode"]["support"] in ("full", "partial")
    assert documentation["attributes"]["diff_mode"]["support"] == "none"
    assert "kdtree.fleet.attributes" in documentation["extends_documentation_fragment"]
    assert yaml.safe_load(smoke_module.EXAMPLES)


def results(hu) -> dict[str, dict]:
    """One real result per outcome, from execute() on fake hosts."""
    out = {
        "ok": execute(Host(hu)),
        "pending": execute(Host(hu, health="503")),
        "failed": execute(Host(hu, marker_state="fallback")),
        "check mode": sc.execute(params(restart=True), check_mode=True),
        "rollback": execute(Host(hu), marker_state="", patch_dir=""),
    }

    def unreadable(query, marker=None, parts=None, journal=None):
        raise hu.HostError("journalctl timed out")

    run = {"invocation_id": INVOCATION, "baseline_nrestarts": 0, "started_at": T0, "healthy_since": None}
    out["unreadable"] = sc.execute(params(_run=run), read=unreadable, sleep=lambda s: None)
    assert [r["state"] for r in out.values()] == ["ok", "pending", "failed", "ok", "ok", "failed"]
    return out


def test_return_documents_every_key_of_every_result(smoke_module, hu):
    returned = doc(smoke_module, "RETURN")
    for outcome, result in results(hu).items():
        assert sorted(result) == sorted(returned), outcome
        assert sorted(result["run"]) == sorted(returned["run"]["contains"]), outcome
        for scheduler in result["schedulers"]:
            assert sorted(scheduler) == sorted(returned["schedulers"]["contains"]), outcome
        json.dumps(result)  # exit_json must be able to send it


def test_return_types_match_the_results(smoke_module, hu):
    types = {"str": str, "float": float, "list": list, "dict": dict, "bool": bool, "int": int}
    returned = doc(smoke_module, "RETURN")
    result = results(hu)["ok"]
    for key, entry in returned.items():
        assert isinstance(result[key], types[entry["type"]]), key
    assert result["schedulers"]


@needs_ansible
def test_ansible_doc_renders_the_module_with_its_fragments_and_without_internal_options():
    out = ansible_doc("-t", "module", "kdtree.fleet.kdtree_smoke")
    assert out.returncode == 0, out.stderr
    for text in ("patch_dir", "restart_timeout_s", "RETURN VALUES", "check_mode", "partial"):
        assert text in out.stdout
    # from the doc fragments kdtree.fleet.unit and kdtree.fleet.attributes
    for text in ("scheduler_prefix", "Unit name without", "platforms: posix"):
        assert text in out.stdout
    assert RUN_OPTION not in out.stdout
    assert "WARNING" not in out.stderr


def test_the_module_has_no_marker_regex_of_its_own():
    paths = ["plugins/modules/kdtree_smoke.py", *(f"plugins/module_utils/{p.name}" for p in SMOKE_UTILS)]
    assert len(paths) > 5
    for path in paths:
        source = (ROOT / path).read_text(encoding="utf-8")
        assert "MARKER_RE" not in source, path
        assert "re.compile" not in source, path
        assert "kdtree-verify: pid" not in source, path


# --- execute() -------------------------------------------------------------------------------


def test_check_mode_restarts_and_reads_nothing():
    result = sc.execute(params(restart=True, patch_dir=""), check_mode=True)
    assert result["changed"] is True
    assert result["state"] == "ok"
    assert "check mode" in result["msg"]


def test_a_restart_is_bounded_and_starts_a_new_run(hu):
    host = Host(hu)
    result = execute(host, restart=True, restart_timeout_s=120.0)
    assert host.restarts == [("sglang", 120.0)]
    assert result["changed"] is True
    assert {key: result["run"][key] for key in ("invocation_id", "baseline_nrestarts", "started_at")} == {
        "invocation_id": "a" * 32,
        "baseline_nrestarts": 3,
        "started_at": T0,
    }
    assert result["run"]["healthy_since"] == T0 + 1.0
    assert result["state"] == "ok"


def test_without_a_restart_the_unit_s_current_run_is_watched(hu):
    host = Host(hu)
    result = execute(host)
    assert host.restarts == []
    assert result["changed"] is False
    assert result["run"]["invocation_id"] == INVOCATION
    assert result["run"]["started_at"] == T0
    assert host.reads[0] == frozenset(("unit",))


def test_a_later_chunk_keeps_watching_the_run_it_is_given(hu):
    host = Host(hu)
    run = {"invocation_id": INVOCATION, "baseline_nrestarts": 0, "started_at": T0 - 50, "healthy_since": None}
    result = execute(host, _run=run)
    assert host.reads == [None]  # no look at the unit's current run first
    assert result["run"]["started_at"] == T0 - 50
    assert result["elapsed_s"] == 50.0


def test_a_restart_of_the_watched_run_between_chunks_fails(hu):
    host = Host(hu)
    run = {"invocation_id": "b" * 32, "baseline_nrestarts": 0, "started_at": T0, "healthy_since": None}
    result = execute(host, _run=run)
    assert result["state"] == "failed"
    assert "restarted" in result["msg"]


def test_a_wanted_marker_state_needs_patch_dir(hu):
    host = Host(hu)
    with pytest.raises(sc.SmokeError, match="needs patch_dir"):
        execute(host, restart=True, patch_dir="")
    assert host.restarts == []


def test_a_missing_marker_py_fails_before_the_restart(hu, tmp_path):
    host = Host(hu)
    with pytest.raises(sc.SmokeError, match=r"marker\.py does not exist"):
        execute(host, restart=True, patch_dir=str(tmp_path))
    assert host.restarts == []
    assert host.reads == []


def test_a_rollback_needs_no_marker_py(hu):
    host = Host(hu)
    result = execute(host, restart=True, marker_state="", patch_dir="", nccl_env={})
    assert result["state"] == "ok"
    assert result["schedulers"][0]["marker"] == "none"


def test_a_restart_that_does_not_finish_is_a_failed_run_with_its_own_message(hu):
    """A failed run, not a module failure: with fail_on_error false (a rollback) the caller goes on."""
    host = Host(hu)

    def restart(unit, timeout_s):
        host.now += timeout_s
        raise hu.HostError(
            f"restart did not finish within {timeout_s:g} s (`systemctl restart {unit}.service`)"
        )

    result = sc.execute(params(restart=True), read=host.read, restart=restart, clock=host.clock)
    assert result["state"] == "failed"
    assert result["why"].startswith("restart did not finish within 300 s")
    assert result["msg"].startswith("sglang.service: restart did not finish within 300 s")
    assert result["changed"] is True
    assert host.reads == []


# --- the action plugin -----------------------------------------------------------------------


def run_action(action, chunks, monkeypatch, **args):
    lines: list[str] = []
    monkeypatch.setattr(action.display, "display", lambda msg, *a, **k: lines.append(msg))
    calls: list[tuple[str, dict]] = []

    class Plugin(action.ActionModule):
        def _execute_module(self, module_name=None, module_args=None, task_vars=None, **kwargs):
            calls.append((module_name, copy.deepcopy(module_args)))
            return chunks.pop(0)

    task_args = {"unit": "sglang", "restart": True, "health_url": "http://h/health", **args}
    task = SimpleNamespace(args=task_args, async_val=0, check_mode=False, action="kdtree.fleet.kdtree_smoke")
    connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir="/tmp/x"))
    plugin = Plugin(task, connection, None, None, None, None)
    result = plugin.run(task_vars={"inventory_hostname": "gpu1"})
    return result, calls, lines


def chunk(state: str, n: int, changed: bool = False) -> dict:
    run = {"invocation_id": INVOCATION, "baseline_nrestarts": 0, "started_at": T0, "healthy_since": None}
    return {"state": state, "changed": changed, "progress": f"p{n}", "run": run, "msg": state}


def test_action_prints_one_line_per_chunk_and_hands_the_run_back(action, monkeypatch):
    chunks = [chunk("pending", 1, changed=True), chunk("pending", 2), chunk("ok", 3)]
    result, calls, lines = run_action(action, chunks, monkeypatch)
    assert lines == ["  [gpu1] sglang: waiting p1", "  [gpu1] sglang: waiting p2"]
    assert [name for name, _ in calls] == ["kdtree.fleet.kdtree_smoke"] * 3
    assert calls[0][1]["restart"] is True
    assert RUN_OPTION not in calls[0][1]
    for _, args in calls[1:]:
        assert args["restart"] is False
        assert args[RUN_OPTION]["invocation_id"] == INVOCATION
    assert all("fail_on_error" not in args for _, args in calls)
    assert result["state"] == "ok"
    assert result["changed"] is True
    assert not result.get("failed")


@pytest.mark.parametrize(("fail_on_error", "failed"), [(True, True), (False, False), ("false", False)])
def test_action_fails_an_unhealthy_run_unless_fail_on_error_is_false(
    action, monkeypatch, fail_on_error, failed
):
    result, _, _ = run_action(action, [chunk("failed", 1)], monkeypatch, fail_on_error=fail_on_error)
    assert result["state"] == "failed"
    assert bool(result.get("failed")) is failed


def test_action_passes_a_module_failure_through_whatever_fail_on_error_says(action, monkeypatch):
    broken = {"failed": True, "msg": "marker.py does not exist", "state": "failed"}
    result, calls, _ = run_action(action, [broken], monkeypatch, fail_on_error=False)
    assert result["failed"] is True
    assert len(calls) == 1


@pytest.mark.parametrize("name", [RUN_OPTION, "_fail_on_error"])
def test_action_refuses_a_task_that_sets_an_internal_option(action, monkeypatch, name):
    with pytest.raises(AnsibleActionFail, match=rf"{name} is internal"):
        run_action(action, [chunk("ok", 1)], monkeypatch, **{name: {"invocation_id": INVOCATION}})


def test_action_leaves_the_internal_option_out_of_the_invocation_it_returns(action, monkeypatch):
    def with_invocation(state: str, n: int) -> dict:
        args = {"unit": "sglang", RUN_OPTION: {"journal": {"cursor": "s=1"}}}
        return {**chunk(state, n), "invocation": {"module_args": args}}

    result, _, _ = run_action(action, [with_invocation("pending", 1), with_invocation("ok", 2)], monkeypatch)
    assert result["invocation"]["module_args"] == {"unit": "sglang"}
    assert result["run"]["invocation_id"] == INVOCATION


def test_action_has_no_unused_names(action):
    assert not hasattr(action, "ACTION_ONLY")


# --- through Ansible (AnsiballZ packs the module_utils) --------------------------------------


def adhoc(args: dict, *extra: str) -> tuple[int, dict]:
    result_as_json = {
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.minimal",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
    }
    out = run_ansible(
        "ansible",
        "localhost",
        *ON_LOCALHOST,
        "-m",
        "kdtree.fleet.kdtree_smoke",
        "-a",
        json.dumps(args),
        *extra,
        env=result_as_json,
    )
    text = out.stdout
    return out.returncode, json.loads(text[text.index(" => {") + 4 :])


@pytest.mark.skipif(not (ANSIBLE_BIN / "ansible").exists(), reason="needs the tools venv")
def test_through_ansible_check_mode_reports_the_restart_with_every_documented_key(smoke_module):
    rc, result = adhoc(
        {"unit": "sglang", "restart": True, "health_url": "http://127.0.0.1:1/h", "timeout_s": 60}, "--check"
    )
    assert rc == 0, result
    assert result["changed"] is True
    assert result["state"] == "ok"
    assert set(doc(smoke_module, "RETURN")) <= set(result)


@pytest.mark.skipif(not (ANSIBLE_BIN / "ansible").exists(), reason="needs the tools venv")
def test_through_ansible_a_missing_marker_py_fails_clearly(tmp_path):
    rc, result = adhoc(
        {
            "unit": "sglang",
            "restart": True,
            "health_url": "http://127.0.0.1:1/h",
            "timeout_s": 60,
            "patch_dir": str(tmp_path),
        }
    )
    assert rc != 0
    assert result["state"] == "failed"
    assert f"{tmp_path}/kdtree_verify/telemetry/marker.py does not exist" in result["msg"]


@pytest.mark.skipif(not (ANSIBLE_BIN / "ansible").exists(), reason="needs the tools venv")
def test_through_ansible_a_task_that_sets_the_internal_run_is_refused():
    rc, result = adhoc(
        {
            "unit": "sglang",
            "health_url": "http://127.0.0.1:1/h",
            "timeout_s": 60,
            "marker_state": "",
            RUN_OPTION: {"invocation_id": INVOCATION},
        }
    )
    assert rc != 0
    assert f"{RUN_OPTION} is internal" in result["msg"]


def test_a_later_chunk_reads_the_journal_on_from_the_state_it_is_given(hu):
    host = Host(hu)
    state = {"cursor": "s=abc;i=99", "lines": 99}
    run = {"invocation_id": INVOCATION, "baseline_nrestarts": 0, "started_at": T0, "journal": state}
    execute(host, _run=run)
    assert host.queries[0][1] == state


def test_the_benign_patterns_status_dir_and_restart_time_reach_the_reader(hu):
    host = Host(hu)
    execute(
        host,
        restart=True,
        status_dir="/run/kdtree-verify",
        benign_tracebacks=["a"],
        extra_benign_tracebacks=["b"],
    )
    query = host.queries[-1][0]
    assert query.benign_tracebacks == ("a", "b")
    assert query.status_dir == "/run/kdtree-verify"
    assert query.not_before == T0


def test_an_invalid_benign_pattern_fails_before_the_restart(hu):
    host = Host(hu)
    with pytest.raises(sc.SmokeError, match="is not a regex"):
        execute(host, restart=True, extra_benign_tracebacks=["(oops"])
    assert host.restarts == []
