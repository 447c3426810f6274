"""The service keeps the operator's PYTHONPATH: the patch directory is prepended to what the unit
already has (roles/kdtree_service's tasks/preflight.yml and drop-in template, rendered with Ansible's
templar). How the unit's environment is read: tests/unit/plugins/module_utils/test__unit_env.py."""

from __future__ import annotations

import pytest
import yaml
from conftest import ROLES


def _prepend_expression() -> str:
    tasks = yaml.safe_load((ROLES / "kdtree_service" / "tasks" / "preflight.yml").read_text(encoding="utf-8"))
    task = next(t for t in tasks if "_kdtree_service_env" in t.get("ansible.builtin.set_fact", {}))
    return task["ansible.builtin.set_fact"]["_kdtree_service_env"]


@pytest.mark.parametrize(
    ("stock", "wanted"),
    [
        (None, "/opt/kdtree/sglang_ext"),
        ("", "/opt/kdtree/sglang_ext"),
        ("/opt/cpu-shims", "/opt/kdtree/sglang_ext:/opt/cpu-shims"),
        ("/a::/b:", "/opt/kdtree/sglang_ext:/a:/b"),
        ("/opt/kdtree/sglang_ext:/a", "/opt/kdtree/sglang_ext:/a"),
    ],
)
def test_the_drop_in_prepends_the_patch_directory_to_the_unit_s_pythonpath(stock, wanted):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    environment = {} if stock is None else {"PYTHONPATH": stock}
    variables = {
        "_kdtree_service_pythonpath": "/opt/kdtree/sglang_ext",
        "kdtree_service_verify_mode": "validate",
        "_kdtree_service_lib_path": "/lib.so",
        "kdtree_service_status_dir": "/run/kdtree-sglang",
        "kdtree_service_status_interval_s": 5,
        "kdtree_service_nccl_env": {},
        "kdtree_service_env_extra": {},
        "__kdtree_service_env": {"environment": environment},
    }
    from test_dropin_template import set_fact_inputs

    templar = Templar(loader=DataLoader(), variables=variables)
    variables.update(set_fact_inputs(templar, "_kdtree_service_env"))
    templar = Templar(loader=DataLoader(), variables=variables)
    env = dict(templar.template(trust_as_template(_prepend_expression())))
    assert env["PYTHONPATH"] == wanted


def test_a_specifier_in_the_unit_s_pythonpath_reaches_the_drop_in_as_a_specifier():
    """The operator's PYTHONPATH=%h/lib must stay %h in the drop-in (systemd expands it there as in the
    unit); before, the template escaped it to %%h, a literal directory named "%h"."""
    from test_dropin_template import lines, render

    text = render({"PYTHONPATH": "%h/lib:%%literal"}, kdtree_service_env_extra={"X": "100%"})
    (pythonpath,) = [line for line in lines(text, "Environment=") if "PYTHONPATH" in line]
    assert pythonpath == 'Environment="PYTHONPATH=/opt/kdtree/patches/0123456789abcdef:%h/lib:%%literal"', (
        pythonpath
    )
    assert 'Environment="X=100%%"' in text
