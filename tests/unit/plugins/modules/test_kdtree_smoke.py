"""The kdtree_smoke module's documentation against what it does: the returned run is what the internal
option takes, RETURN documents every key and type of every result execute() gives (on fake hosts),
check and diff mode declared; no marker regex of its own (plugins/modules/kdtree_smoke.py). The
documentation as ansible-doc renders it, and the module through Ansible: tests/roles/test_smoke_module.py.
"""

from __future__ import annotations

import json

import yaml
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke import check as sc
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.run import RUN_SUBOPTIONS
from ansible_collections.kdtree.fleet.tests.unit.helpers.collection_tree import ROOT
from ansible_collections.kdtree.fleet.tests.unit.helpers.smoke_fakes import (
    INVOCATION,
    T0,
    Host,
    execute,
    params,
)

MODULE_UTILS = ROOT / "plugins" / "module_utils"
SMOKE_UTILS = [*sorted((MODULE_UTILS / "_smoke").glob("*.py")), MODULE_UTILS / "_unit_procs.py"]


def doc(module, name: str) -> dict:
    return yaml.safe_load(getattr(module, name))


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


def test_the_module_has_no_marker_regex_of_its_own():
    paths = ["plugins/modules/kdtree_smoke.py", *(str(p.relative_to(ROOT)) for p in SMOKE_UTILS)]
    assert len(paths) > 8
    for path in paths:
        source = (ROOT / path).read_text(encoding="utf-8")
        assert "MARKER_RE" not in source, path
        assert "re.compile" not in source, path
        assert "kdtree-verify: pid" not in source, path
