"""The kdtree_smoke module as Ansible sees it: its options and documentation as ansible-doc renders
them (doc fragments merged in), and the module run through `ansible` (AnsiballZ packs the
module_utils). Its unit tests: tests/unit/plugins/{modules,module_utils,action}/."""

from __future__ import annotations

import json

import pytest
import yaml
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.run import RUN_OPTION, RUN_SUBOPTIONS
from ansible_collections.kdtree.fleet.tests.unit.helpers.smoke_fakes import INVOCATION
from conftest import ANSIBLE_BIN, ON_LOCALHOST, ansible_doc, needs_ansible, rendered_docs, run_ansible


def doc(module, name: str) -> dict:
    return yaml.safe_load(getattr(module, name))


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
