"""The drop-in template renders a systemd-correct ExecStart and Environment (Ansible's templar)."""

from __future__ import annotations

import shlex

import pytest
from conftest import ROLES, load_yaml

ansible_template = pytest.importorskip("ansible.template")


def _set_fact_expression(name: str, tasks_file: str = "preflight.yml"):
    """The role's expression for fact `name` (tasks/<tasks_file>): the test renders what the role does."""
    tasks = load_yaml(ROLES / "kdtree_service" / "tasks" / tasks_file)
    task = next(t for t in tasks if name in t.get("ansible.builtin.set_fact", {}))
    return task["ansible.builtin.set_fact"][name]


def set_fact_inputs(templar, name: str, tasks_file: str = "preflight.yml") -> dict:
    """The task vars of the set_fact that names fact `name` (its inputs, such as the drop-in
    environment's filter inputs), rendered as the task renders them."""
    from ansible.template import trust_as_template

    tasks = load_yaml(ROLES / "kdtree_service" / "tasks" / tasks_file)
    task = next(t for t in tasks if name in t.get("ansible.builtin.set_fact", {}))
    rendered = {}
    for key, value in (task.get("vars") or {}).items():
        if isinstance(value, dict):
            rendered[key] = {k: templar.template(trust_as_template(v)) for k, v in value.items()}
        else:
            rendered[key] = templar.template(trust_as_template(value))
    return rendered


def render_fields(fields: dict, **over) -> str:
    """The drop-in the role's one rule (tasks/render_dropin.yml's template) renders from `fields`."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    variables = {
        "kdtree_service_secret_env_path": "/etc/kdtree/sglang.env",
        "kdtree_service_status_dir": "/run/kdtree-sglang",
        "kdtree_service_dropin_fields": fields,
        **over,
    }
    loader = DataLoader()
    loader.set_basedir(str(ROLES / "kdtree_service"))
    templar = Templar(loader=loader, variables=variables)
    source = (ROLES / "kdtree_service" / "templates" / "dropin.conf.j2").read_text(encoding="utf-8")
    return templar.template(trust_as_template(source), escape_backslashes=False)


def fields_of(**over) -> dict:
    """The drop-in's fields as tasks/preflight.yml names them (what the history records)."""
    return _render_vars(**over)["kdtree_service_dropin_fields"]


def _render_vars(unit_env: dict | None = None, **over) -> dict:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    variables = load_yaml(ROLES / "kdtree_service" / "defaults" / "main.yml")
    variables.update(kdtree_service_model_path="/models/tiny-test", kdtree_service_tp_size=2)
    variables.update(
        _kdtree_service_pythonpath="/opt/kdtree/patches/0123456789abcdef",
        _kdtree_service_lib_path="/opt/kdtree/builds/sm_120a-x/libkdtree_verify.so",
        kdtree_service_secret_env_path="/etc/kdtree/sglang.env",
        kdtree_service_status_dir="/run/kdtree-sglang",
        __kdtree_service_env={"environment": unit_env or {"PYTHONPATH": "/opt/cpu-shims"}},
    )
    variables.update(over)
    loader = DataLoader()
    loader.set_basedir(str(ROLES / "kdtree_service"))
    templar = Templar(loader=loader, variables=variables)
    variables.update(set_fact_inputs(templar, "_kdtree_service_env"))
    templar = Templar(loader=loader, variables=variables)
    for name in ("_kdtree_service_env", "_kdtree_service_argv"):
        variables[name] = templar.template(trust_as_template(_set_fact_expression(name)))
    templar = Templar(loader=loader, variables=variables)
    fields = _set_fact_expression("kdtree_service_dropin_fields")
    variables["kdtree_service_dropin_fields"] = {
        key: templar.template(trust_as_template(value)) for key, value in fields.items()
    }
    return variables


def render(unit_env: dict | None = None, **over) -> str:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    variables = _render_vars(unit_env, **over)
    loader = DataLoader()
    loader.set_basedir(str(ROLES / "kdtree_service"))
    templar = Templar(loader=loader, variables=variables)
    source = (ROLES / "kdtree_service" / "templates" / "dropin.conf.j2").read_text(encoding="utf-8")
    # the template lookup renders files with escape_backslashes=False; do the same
    return templar.template(trust_as_template(source), escape_backslashes=False)


def lines(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


def test_by_default_the_drop_in_sets_environment_only_and_leaves_execstart_alone():
    text = render()
    assert lines(text, "ExecStart") == []
    assert lines(text, "Environment=")
    assert lines(text, "RuntimeDirectory=") == ["RuntimeDirectory=kdtree-sglang"]


def test_the_execstart_opt_in_clears_it_then_sets_it_once_without_python_I_or_E():
    text = render(kdtree_service_replace_exec_start=True)
    assert lines(text, "ExecStart=")[0] == "ExecStart="
    execs = lines(text, "ExecStart=")[1:]
    assert len(execs) == 1
    argv = shlex.split(execs[0].removeprefix("ExecStart="))
    assert argv[:3] == ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"]
    assert "-I" not in argv and "-E" not in argv
    assert argv[argv.index("--tp-size") + 1] == "2"


def test_environment_has_pythonpath_kdtree_and_nccl_values():
    text = render(kdtree_service_nccl_env={"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL"})
    env = lines(text, "Environment=")
    for want in (
        'Environment="PYTHONPATH=/opt/kdtree/patches/0123456789abcdef:/opt/cpu-shims"',
        'Environment="KDTREE_VERIFY=validate"',
        'Environment="KDTREE_LIB=/opt/kdtree/builds/sm_120a-x/libkdtree_verify.so"',
        'Environment="KDTREE_STATUS_DIR=/run/kdtree-sglang"',
        'Environment="KDTREE_STATUS_INTERVAL=5"',
        'Environment="PYTHONUNBUFFERED=1"',
        'Environment="SPT_NOENV=1"',
        'Environment="NCCL_P2P_LEVEL=SYS"',
        'Environment="NCCL_PROTO=LL"',
    ):
        assert want in env


def test_arguments_with_spaces_percent_and_dollar_are_quoted_for_systemd():
    text = render(
        kdtree_service_replace_exec_start=True,
        kdtree_service_extra_args=["--json-model-override-args", '{"a": "50% $HOME"}'],
    )
    execstart = lines(text, "ExecStart=")[1]
    assert '"{\\"a\\": \\"50%% $$HOME\\"}"' in execstart


def test_environment_values_escape_quotes_and_percent():
    text = render(kdtree_service_env_extra={"X": 'say "hi" 100%'})
    assert 'Environment="X=say \\"hi\\" 100%%"' in lines(text, "Environment=")


def test_secret_values_never_reach_the_drop_in_which_names_their_root_only_file():
    text = render(kdtree_service_env_secret={"SGLANG_API_KEY": "s3cr3t-value"})
    assert "s3cr3t-value" not in text
    assert lines(text, "EnvironmentFile=") == ["EnvironmentFile=/etc/kdtree/sglang.env"]
    assert "EnvironmentFile" not in render()
