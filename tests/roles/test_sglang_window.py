"""The SGLang window as the fleet sees it: the report shows each host's SGLang release and whether it is
in the window of the patch it runs (module_utils/_report.sglang_facts, the SGLANG column), and the
promotion keeps a host on a release outside it (or one it cannot place) in validate. The window is the
patch's own (files/sglang_ext/kdtree_verify/target.py, loaded by path from the history's patch_dir).
"""

from __future__ import annotations

import re
import runpy
import subprocess
import sys
import time

import pytest

pytest.importorskip("ansible")  # the tools venv has it; the torch venv, which collects these too, does not
import yaml
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _report_table as report_table
from ansible_collections.kdtree.fleet.tests.helpers.code_text import other_code, python_code
from ansible_collections.kdtree.fleet.tests.unit.helpers.promote_rows import (
    date_deploy,
    good_row,
    judge,
    write_schedulers,
)
from ansible_collections.kdtree.fleet.tests.unit.helpers.report_host import (  # noqa: F401 (fixtures)
    counters,
    gather,
    health_server,
    host,
    status,
)
from conftest import PATCH_DIR, ROOT

WINDOW = tuple(runpy.run_path(str(PATCH_DIR / "kdtree_verify/target.py"))["SUPPORTED_SGLANG_VERSIONS"])


def _write(fixture, version: str) -> None:
    """Both schedulers in validate, enough compared and timed calls (write_schedulers), on `version`."""
    write_schedulers(fixture, time.time(), sglang=version)


@pytest.mark.parametrize(
    ("version", "in_window"), [(WINDOW[0], True), (WINDOW[-1] + "+local", True), ("0.5.99", False)]
)
def test_a_gathered_row_says_the_release_and_whether_the_patch_s_window_holds_it(
    host,  # noqa: F811 (the imported fixture)
    health_server,  # noqa: F811 (the imported fixture)
    version,
    in_window,
):
    host.deploy(nccl_env={})
    date_deploy(host, time.time() - 60)
    _write(host, version)
    row = gather(host, health_server)
    assert row["sglang_versions"] == [version]
    assert tuple(row["sglang_window"]) == WINDOW
    assert row["sglang_in_window"] is in_window
    untested = [p for p in row["problems"] if "outside the supported window" in p]
    assert bool(untested) is not in_window, row["problems"]
    ok, why = judge(row)
    assert ok is in_window, why
    if not in_window:
        assert f"sglang 0.5.99 is outside the patch's supported window {WINDOW[0]} to {WINDOW[-1]}" in why
        assert "stays in validate (untested release)" in why


@pytest.mark.parametrize(
    ("over", "said"),
    [
        (
            {"sglang_versions": ["0.5.24"], "sglang_in_window": False},
            "outside the patch's supported window 0.5.22 to 0.5.23",
        ),
        (
            {"sglang_versions": [], "sglang_in_window": None},
            "cannot tell whether sglang ? is in the patch's supported window",
        ),
        (
            {"sglang_in_window": None, "sglang_window_problem": "target.py does not exist"},
            "(target.py does not exist)",
        ),
    ],
)
def test_the_promotion_keeps_an_untested_or_unplaced_release_in_validate(over, said):
    ok, why = judge(good_row(**over))
    assert not ok and said in why, why


def test_the_report_table_shows_the_release_and_marks_an_untested_one():
    assert ("sglang", "SGLANG") in report_table.COLUMNS
    assert report_table.cells(good_row())["sglang"] == "0.5.23"
    assert (
        report_table.cells(good_row(sglang_versions=["0.5.24"], sglang_in_window=False))["sglang"]
        == "0.5.24 (untested)"
    )
    assert report_table.cells(good_row(sglang_in_window=None))["sglang"] == "0.5.23 (window?)"
    assert report_table.cells(good_row(sglang_versions=[]))["sglang"] == report_table.NONE


def test_the_window_is_written_only_in_target_py():
    """No code outside the patch's target.py names a release of the window: the preflight, the report,
    the promotion, the patch and the wheel fetcher all read SUPPORTED_SGLANG_VERSIONS."""
    pattern = re.compile(r"\b(" + "|".join(re.escape(v) for v in WINDOW) + r")\b")
    owner = PATCH_DIR / "kdtree_verify/target.py"
    assert pattern.search(python_code(owner.read_text()))
    # the real-wheel venvs run the window's ends (mk/ext.mk reads them from target.py); the test hosts'
    # double is its own fact, and it must be in the window
    double = (ROOT / "scripts/testhosts/install-double.sh").read_text()
    (double_version,) = re.findall(r"^VERSION=(\S+)$", double, re.M)
    assert double_version.split("+", 1)[0] in WINDOW, f"the test hosts' double is sglang {double_version}"
    found = []
    for top in ("plugins", "roles", "playbooks", "mk", "scripts", "files/sglang_ext"):
        for path in sorted((ROOT / top).rglob("*")):
            if (
                not path.is_file()
                or path == owner
                or path.suffix not in (".py", ".yml", ".sh", ".mk", ".j2")
                or path.name == "argument_specs.yml"  # descriptions are prose
                or "testhosts" in path.parts  # test-host tooling: the double's own version, checked above
            ):
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            code = python_code(text) if path.suffix == ".py" else other_code(text)
            found += [f"{path.relative_to(ROOT)}: {m.group(1)}" for m in pattern.finditer(code)]
    assert found == []


def _make_dry_run(target: str) -> str:
    """What `make -n -s target` would run (the recipes, nothing run)."""
    return subprocess.run(
        ["make", "-n", "-s", "--no-print-directory", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.mark.parametrize(("target", "end"), [("test-sglang", -1), ("test-sglang-oldest", 0)])
def test_the_real_wheel_tests_run_on_the_window_s_ends(target, end):
    """make test-sglang runs the real-wheel tests on the window's newest release, test-sglang-oldest on
    its oldest: both read from target.py, both in make test."""
    out = _make_dry_run(target)
    assert "sglang-venv.sh " in out and f" {WINDOW[end]}\n" in out, out
    assert f"KDTREE_SGLANG_RELEASE={WINDOW[end]} " in out, out
    help_text = subprocess.run(
        ["make", "-n", "-p", "--no-print-directory", "help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    (targets,) = re.findall(r"^TEST_TARGETS :?= (.*)$", help_text, re.M)
    assert target in targets.split()


def test_the_venv_script_refuses_a_release_outside_the_window(tmp_path):
    venv = tmp_path / "venv"
    res = subprocess.run(
        ["bash", str(ROOT / "scripts/sglang-venv.sh"), str(venv), sys.executable, "0.5.99"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert res.returncode == 2, res
    assert "sglang 0.5.99 is outside the supported window" in res.stderr and WINDOW[0] in res.stderr
    assert not venv.exists()


@pytest.mark.parametrize(
    ("scenario", "venv_target", "end"), [("engine", "sglang-venv", -1), ("oldest", "sglang-venv-oldest", 0)]
)
def test_the_real_engine_runs_on_the_window_s_ends(scenario, venv_target, end):
    """molecule's engine scenario mounts the venv of the window's newest release into its real-engine
    host, the oldest scenario the venv of its oldest; each venv is built for that end of target.py."""
    platform = yaml.safe_load((ROOT / "molecule" / scenario / "molecule.yml").read_text())["platforms"][0]
    (venv,) = [v.rsplit(":", 2)[0] for v in platform["volumes"] if v.endswith(":/opt/sglang/venv:ro")]
    venv = venv.replace("${MOLECULE_PROJECT_DIRECTORY}", str(ROOT))
    out = _make_dry_run(venv_target)
    assert f"sglang-venv.sh {venv} /usr/bin/python3.11 {WINDOW[end]}\n" in out, out
