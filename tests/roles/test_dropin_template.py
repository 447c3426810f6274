"""The drop-in template renders a systemd-correct ExecStart and Environment (Ansible's templar)."""

from __future__ import annotations

import shlex

import pytest
from conftest import ROLES, load_yaml

ansible_template = pytest.importorskip("ansible.template")


def render(**over) -> str:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    variables = load_yaml(ROLES / "kdtree_service" / "defaults" / "main.yml")
    variables.update(kdtree_service_model_path="/models/tiny-test", kdtree_service_tp_size=2)
    # required inputs the deploy play hands on from the patch and build roles, and the facts entry point
    variables.update(
        kdtree_service_pythonpath="/opt/kdtree/sglang_ext",
        _kdtree_service_pythonpath="/opt/kdtree/sglang_ext:/opt/cpu-shims",
        kdtree_service_lib_path="/opt/kdtree/current/libkdtree_verify.so",
        kdtree_service_backup_path="/var/lib/kdtree/stock/sglang.service",
    )
    variables.update(over)
    argv = [
        variables["kdtree_service_python"], "-m", "sglang.launch_server",
        "--model-path", variables["kdtree_service_model_path"],
        "--tp-size", str(variables["kdtree_service_tp_size"]),
        "--host", variables["kdtree_service_host"], "--port", str(variables["kdtree_service_port"]),
        "--attention-backend", variables["kdtree_service_attention_backend"],
        *variables["kdtree_service_speculative_args"], *variables["kdtree_service_extra_args"],
    ]  # fmt: skip
    variables["_kdtree_service_argv"] = argv
    source = (ROLES / "kdtree_service" / "templates" / "dropin.conf.j2").read_text(encoding="utf-8")
    loader = DataLoader()
    loader.set_basedir(str(ROLES / "kdtree_service"))
    templar = Templar(loader=loader, variables=variables)
    # the template action renders files with escape_backslashes=False; do the same
    return templar.template(trust_as_template(source), escape_backslashes=False)


def lines(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


def test_execstart_is_cleared_then_set_once_without_python_I_or_E():
    text = render()
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
        'Environment="PYTHONPATH=/opt/kdtree/sglang_ext:/opt/cpu-shims"',
        'Environment="KDTREE_VERIFY=validate"',
        'Environment="KDTREE_LIB=/opt/kdtree/current/libkdtree_verify.so"',
        'Environment="PYTHONUNBUFFERED=1"',
        'Environment="SPT_NOENV=1"',
        'Environment="NCCL_P2P_LEVEL=SYS"',
        'Environment="NCCL_PROTO=LL"',
    ):
        assert want in env


def test_arguments_with_spaces_percent_and_dollar_are_quoted_for_systemd():
    text = render(kdtree_service_extra_args=["--json-model-override-args", '{"a": "50% $HOME"}'])
    execstart = lines(text, "ExecStart=")[1]
    assert '"{\\"a\\": \\"50%% $$HOME\\"}"' in execstart


def test_environment_values_escape_quotes_and_percent():
    text = render(kdtree_service_env_extra={"X": 'say "hi" 100%'})
    assert 'Environment="X=say \\"hi\\" 100%%"' in lines(text, "Environment=")
