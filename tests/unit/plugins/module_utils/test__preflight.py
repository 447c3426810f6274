"""The preflight's judgement of a unit as systemd merges it (module_utils/_preflight; no systemd needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _gpu_health as gpu_health
from ansible_collections.kdtree.fleet.plugins.module_utils import _path_safety as path_safety
from ansible_collections.kdtree.fleet.plugins.module_utils import _preflight as preflight
from ansible_collections.kdtree.fleet.plugins.module_utils._unit_env import service_settings
from ansible_collections.kdtree.fleet.tests.unit.helpers.collection_tree import PATCH_DIR
from ansible_collections.kdtree.fleet.tests.unit.helpers.unit_checks import (
    MANAGED,
    run_unit_checks,
)

OURS = "50-kdtree.conf"
STOCK = """[Unit]
Description=SGLang

[Service]
Environment=HF_HUB_OFFLINE=1
ExecStart=/opt/sglang/venv/bin/python -m sglang.launch_server --model-path /m \\
    --tp-size 8 --port 30000
"""


def make_unit(
    tmp_path: Path, stock: str = STOCK, dropins: dict[str, str] | None = None, **show
) -> preflight.Unit:
    unit_file = tmp_path / "sglang.service"
    unit_file.write_text(stock, encoding="utf-8")
    paths = []
    for name, text in sorted((dropins or {}).items()):
        path = tmp_path / "sglang.service.d" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        paths.append(str(path))
    unit = preflight.Unit("sglang.service", str(unit_file), paths, ours=OURS)
    unit.show = {"StandardOutput": "journal", "StandardError": "inherit", **show}
    for path in [str(unit_file), *paths]:
        if Path(path).name != OURS or path == str(unit_file):
            unit.settings.extend(service_settings(Path(path).read_text(encoding="utf-8"), path))
    return unit


def checks(
    unit: preflight.Unit, cc: str = "12.0", skip: list[str] | None = None
) -> dict[str, preflight.Check]:
    return {c.name: c for c in run_unit_checks(unit, cc, skip)}


def test_a_plain_stock_unit_passes_every_unit_check(tmp_path):
    result = checks(make_unit(tmp_path))
    assert {name: c.ok for name, c in result.items()} == {
        "command": True,
        "interpreter": True,
        "backend": True,
        "stderr": True,
        "overrides": True,
    }


@pytest.mark.parametrize("flags", ["-I", "-E", "-S", "-IS", "-sE", "-X dev -I", "-W ignore -E"])
def test_python_flags_that_drop_pythonpath_are_refused_with_file_and_line(tmp_path, flags):
    unit = make_unit(tmp_path, STOCK.replace("python -m", f"python {flags} -m"))
    check = checks(unit)["interpreter"]
    assert not check.ok
    assert check.where == f"{tmp_path}/sglang.service:6"
    assert "remove" in check.message


@pytest.mark.parametrize("flags", ["-u", "-s", "-B", "-X importtime", "-W error"])
def test_harmless_python_flags_pass(tmp_path, flags):
    unit = make_unit(tmp_path, STOCK.replace("python -m", f"python {flags} -m"))
    assert checks(unit)["interpreter"].ok


def test_a_console_script_is_read_through_its_python_shebang(tmp_path):
    script = tmp_path / "sglang"
    script.write_text("#!/opt/sglang/venv/bin/python -I\nimport sys\n", encoding="utf-8")
    unit = make_unit(
        tmp_path, STOCK.replace("/opt/sglang/venv/bin/python -m sglang.launch_server", f"{script} serve")
    )
    result = checks(unit)
    assert result["command"].ok
    assert not result["interpreter"].ok


def test_a_wrapper_shell_script_cannot_be_checked_and_says_how_to_skip(tmp_path):
    script = tmp_path / "start.sh"
    script.write_text("#!/bin/sh\nexec python -m sglang.launch_server\n", encoding="utf-8")
    unit = make_unit(
        tmp_path, STOCK.replace("/opt/sglang/venv/bin/python -m sglang.launch_server", str(script))
    )
    check = checks(unit)["command"]
    assert not check.ok
    assert "kdtree_service_preflight_skip" in check.message
    # skipped, the checks that need the python are not run; the others still are
    assert set(checks(unit, skip=["command"])) == {"stderr", "overrides"}


def test_a_later_execstart_reset_in_a_drop_in_wins(tmp_path):
    unit = make_unit(
        tmp_path, dropins={"20-mine.conf": "[Service]\nExecStart=\nExecStart=/usr/bin/env true\n"}
    )
    argv, line = preflight.exec_start(unit.settings)
    assert argv == ["/usr/bin/env", "true"]
    assert line is not None and line.path.endswith("20-mine.conf") and line.line == 3


def test_an_unbalanced_quote_in_execstart_is_refused_naming_its_file_and_line(tmp_path):
    unit = make_unit(
        tmp_path, dropins={"20-mine.conf": "[Service]\nExecStart=\nExecStart=/usr/bin/env 'true\n"}
    )
    with pytest.raises(
        preflight.UnitSyntaxError, match=r"20-mine\.conf:3 ExecStart=: an unterminated ' quote"
    ):
        preflight.exec_start(unit.settings)
    check = checks(unit)["command"]
    assert not check.ok and "20-mine.conf:3" in check.message


@pytest.mark.parametrize(
    ("extra", "cc", "ok"),
    [
        ("--attention-backend triton", "9.0", True),
        ("--attention-backend=triton", "10.0", True),
        ("--attention-backend fa3", "12.0", False),
        ("", "12.0", True),  # SGLang's default on sm_120 is triton
        ("", "9.0", False),  # fa3 on Hopper
        ("", "10.0", False),  # trtllm_mla / flashinfer on sm_100
    ],
)
def test_the_backend_must_be_the_one_the_patch_serves(tmp_path, extra, cc, ok):
    unit = make_unit(tmp_path, STOCK.replace("--port 30000", f"--port 30000 {extra}"))
    check = checks(unit, cc=cc)["backend"]
    assert check.ok is ok
    if not ok:
        assert "--attention-backend triton" in check.message


@pytest.mark.parametrize(
    ("show", "ok"),
    [
        ({"StandardError": "journal"}, True),
        ({"StandardError": "inherit", "StandardOutput": "journal+console"}, True),
        ({"StandardError": "file:/var/log/x"}, False),
        ({"StandardError": "inherit", "StandardOutput": "null"}, False),
        ({"StandardError": "null"}, False),
    ],
)
def test_stderr_must_reach_the_journal(tmp_path, show, ok):
    assert checks(make_unit(tmp_path, **show))["stderr"].ok is ok


def test_a_drop_in_sorting_after_ours_that_sets_our_variable_is_refused(tmp_path):
    unit = make_unit(tmp_path, dropins={"override.conf": "[Service]\nEnvironment=PYTHONPATH=/srv/mine X=1\n"})
    check = checks(unit)["overrides"]
    assert not check.ok
    assert f"{tmp_path}/sglang.service.d/override.conf:2 Environment= sets PYTHONPATH" in check.message


def test_a_drop_in_sorting_before_ours_may_set_our_variables(tmp_path):
    unit = make_unit(tmp_path, dropins={"10-path.conf": "[Service]\nEnvironment=PYTHONPATH=/opt/cpu-shims\n"})
    assert checks(unit)["overrides"].ok


@pytest.mark.parametrize("text", ["[Service]\nUnsetEnvironment=KDTREE_LIB\n", "[Service]\nEnvironment=\n"])
def test_later_unset_or_clear_of_our_variables_is_refused(tmp_path, text):
    assert not checks(make_unit(tmp_path, dropins={"99-x.conf": text}))["overrides"].ok


def test_unset_environment_is_refused_in_any_file_since_systemd_applies_it_last(tmp_path):
    unit = make_unit(tmp_path, dropins={"10-early.conf": "[Service]\nUnsetEnvironment=PYTHONPATH\n"})
    check = checks(unit)["overrides"]
    assert not check.ok and "10-early.conf:2 UnsetEnvironment= unsets PYTHONPATH" in check.message


def test_pass_environment_is_not_an_override(tmp_path):
    assert checks(make_unit(tmp_path, dropins={"99-x.conf": "[Service]\nPassEnvironment=NCCL_ALGO\n"}))[
        "overrides"
    ].ok


def test_a_later_empty_environment_file_is_refused_only_when_kdtree_has_secrets(tmp_path):
    unit = make_unit(tmp_path, dropins={"99-x.conf": "[Service]\nEnvironmentFile=\n"})
    assert checks(unit)["overrides"].ok
    check = preflight.check_overrides(unit, MANAGED, "/etc/kdtree/sglang.env")
    assert not check.ok and "drops kdtree's /etc/kdtree/sglang.env" in check.message


def test_an_environment_file_setting_our_variable_is_refused_wherever_it_is_named(tmp_path):
    envfile = tmp_path / "sglang.env"
    envfile.write_text("# comment\nexport KDTREE_VERIFY=off\nOTHER=1\n", encoding="utf-8")
    unit = make_unit(tmp_path, STOCK.replace("[Service]\n", f"[Service]\nEnvironmentFile=-{envfile}\n"))
    check = checks(unit)["overrides"]
    assert not check.ok
    assert (
        f"{envfile}:2 (EnvironmentFile= at {tmp_path}/sglang.service:5) sets KDTREE_VERIFY" in check.message
    )


def test_our_own_drop_in_is_never_held_against_us(tmp_path):
    unit = make_unit(
        tmp_path, dropins={OURS: "[Service]\nEnvironment=PYTHONPATH=/opt/kdtree/x KDTREE_VERIFY=on\n"}
    )
    assert checks(unit)["overrides"].ok


@pytest.mark.parametrize(
    ("args", "schedulers"),
    [
        ("--tp 4 --pp-size 2", 8),
        ("--tensor-parallel-size 4 --pipeline-parallel-size 2", 8),
        ("--tp-size 2 --dp-size 2", 4),
        ("--tp-size 4 --dp-size 2 --enable-dp-attention", 4),
        ("--tp-size $TP", 8),  # from Environment=TP=8
        ("--tp-size ${TP}", 8),
        # multi-node: each node runs its share of the ranks (SGLang's _calculate_rank_ranges)
        ("--tp-size 16 --nnodes 2 --node-rank 1", 8),
        ("--tp-size 8 --pp-size 2 --nnodes 2 --node-rank 0", 8),
        ("--tp-size 8 --pp-size 4 --nnodes 2", 16),
    ],
)
def test_the_scheduler_count_follows_the_whole_launch_configuration(tmp_path, args, schedulers):
    stock = STOCK.replace("--tp-size 8", args).replace("[Service]\n", "[Service]\nEnvironment=TP=8\n")
    facts = preflight.launch_facts(make_unit(tmp_path, stock), [])
    assert facts["schedulers"] == schedulers and facts["unparsed"] == []
    assert "argv" not in facts  # an operator's command line may hold secrets


def test_a_size_that_does_not_parse_is_refused_not_taken_as_one(tmp_path):
    unit = make_unit(tmp_path, STOCK.replace("--tp-size 8", "--tp-size eight"))
    assert preflight.launch_facts(unit, [])["unparsed"] == ["--tp-size eight"]
    found = run_unit_checks(unit)
    assert [c.ok for c in found if "cannot read --tp-size eight" in c.message] == [False]


def test_the_port_is_read_or_left_to_sglang(tmp_path):
    assert preflight.launch_facts(make_unit(tmp_path), [])["port"] == 30000
    assert preflight.launch_facts(make_unit(tmp_path, STOCK.replace(" --port 30000", "")), [])["port"] is None


def test_the_at_prefix_makes_the_second_word_argv0_and_env_is_looked_through(tmp_path):
    at = make_unit(
        tmp_path,
        STOCK.replace(
            "ExecStart=/opt/sglang/venv/bin/python", "ExecStart=@/opt/sglang/venv/bin/python sglang -I"
        ),
    )
    assert not checks(at)["interpreter"].ok
    env = make_unit(
        tmp_path,
        STOCK.replace("ExecStart=/opt/sglang/venv/bin/python", "ExecStart=/usr/bin/env X=1 python3 -E"),
    )
    result = checks(env)
    assert result["command"].ok and not result["interpreter"].ok


def test_the_unit_environment_for_the_probe_lets_environment_files_win(tmp_path):
    envfile = tmp_path / "e"
    envfile.write_text('HF_HUB_OFFLINE="0"\n', encoding="utf-8")
    unit = make_unit(tmp_path, STOCK.replace("[Service]\n", f"[Service]\nEnvironmentFile={envfile}\n"))
    assert preflight.unit_environment(unit) == {"HF_HUB_OFFLINE": "0"}


def test_an_environment_file_glob_and_specifier_are_read_as_systemd_reads_them(tmp_path):
    """systemd.exec(5): EnvironmentFile= resolves specifiers and reads a glob's files in sorted order
    (before, the path was opened as written: `%N/*.env` named no file and its KDTREE_VERIFY=off hid)."""
    conf = tmp_path / "conf" / "sglang"
    conf.mkdir(parents=True)
    (conf / "10-a.env").write_text("A=1\nKDTREE_VERIFY=off\n", encoding="utf-8")
    (conf / "20-b.env").write_text("A=2\n", encoding="utf-8")
    spec = f"-{tmp_path}/conf/%N/*.env"
    unit = make_unit(tmp_path, STOCK.replace("[Service]\n", f"[Service]\nEnvironmentFile={spec}\n"))
    assert preflight.unit_environment(unit)["A"] == "2"
    check = checks(unit)["overrides"]
    assert not check.ok and f"{conf}/10-a.env:2 (EnvironmentFile= at" in check.message, check.message


def test_a_dollar_word_becomes_the_value_s_words_and_braces_keep_one_word(tmp_path):
    """systemd.service(5) "Command lines": `$ARGS` alone is split at whitespace, `${MODEL}` is one word
    (before, `$ARGS` stayed one word and the launch's --tp-size and --port were never read)."""
    stock = (
        '[Service]\nEnvironment="ARGS=--tp-size 2 --port 31000" "MODEL=/models/a b"\n'
        "ExecStart=/opt/sglang/venv/bin/python -m sglang.launch_server $ARGS --model-path ${MODEL}\n"
    )
    facts = preflight.launch_facts(make_unit(tmp_path, stock), [])
    assert (facts["port"], facts["schedulers"], facts["unparsed"]) == (31000, 2, [])


@pytest.mark.parametrize(
    ("wrapper", "name", "wanted"),
    [
        ("env -i", "interpreter", "`env -i` clears the environment"),
        ("env --ignore-environment", "interpreter", "`env -i` clears the environment"),
        ("env --block-signal", "interpreter", "env option --block-signal is not one kdtree can follow"),
        ("env -u KDTREE_VERIFY", "overrides", "env -u KDTREE_VERIFY unsets KDTREE_VERIFY"),
        ("env KDTREE_LIB=/x", "overrides", "env KDTREE_LIB=... sets KDTREE_LIB"),
    ],
)
def test_an_env_wrapper_that_drops_or_changes_our_variables_is_refused(tmp_path, wrapper, name, wanted):
    """`env -i python ...` starts python with an empty environment: PYTHONPATH never reaches it, the
    patch never loads (before, env was looked through and the unit passed)."""
    unit = make_unit(tmp_path, STOCK.replace("ExecStart=", f"ExecStart=/usr/bin/{wrapper} "))
    check = checks(unit)[name]
    assert not check.ok and wanted in check.message, check.message


def test_a_unit_whose_files_changed_since_the_last_daemon_reload_is_refused_before_any_check(tmp_path):
    """NeedDaemonReload=yes: systemd runs what it read before, not what the files now say."""
    found = checks(make_unit(tmp_path, NeedDaemonReload="yes"))
    assert list(found) == ["unit"] and not found["unit"].ok, found
    assert "systemctl daemon-reload" in found["unit"].message
    assert set(checks(make_unit(tmp_path, NeedDaemonReload="no"))) >= {"command", "overrides"}


def make_venv(tmp_path: Path, version: str = "0.5.23", python_text: str = "#!/bin/sh\nexit 0\n") -> str:
    """A venv as its files say it is: bin/python, pyvenv.cfg, one site-packages with sglang's
    dist-info. Returns the python's path."""
    root = tmp_path / "venv"
    (root / "bin").mkdir(parents=True, exist_ok=True)
    (root / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\n")
    site = root / "lib/python3.11/site-packages"
    info = site / f"sglang-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n\nbody\n")
    python = root / "bin/python3"
    python.write_text(python_text, encoding="utf-8")
    python.chmod(0o755)
    return str(python)


@pytest.mark.parametrize(
    ("version", "ok"), [("0.5.23", True), ("0.5.23+testdouble", True), ("0.5.22", False)]
)
def test_the_sglang_version_must_be_supported(tmp_path, version, ok):
    check = preflight.check_sglang(make_venv(tmp_path, version), ("0.5.23",))
    assert check.ok is ok
    if not ok:
        assert "has sglang 0.5.22, outside the window this patch supports: 0.5.23 to 0.5.23" in check.message


WINDOW = ("0.5.21", "0.5.22", "0.5.23")


@pytest.mark.parametrize("mode", ["on", "off", ""])
def test_an_untested_release_is_refused_naming_the_window_even_with_the_opt_in_outside_validate(
    tmp_path, mode
):
    python = make_venv(tmp_path, "0.5.24")
    plain = preflight.check_sglang(python, WINDOW)
    assert not plain.ok
    assert (
        "outside the window this patch supports: 0.5.21 to 0.5.23 (0.5.21, 0.5.22, 0.5.23)" in plain.message
    )
    assert f"{preflight.ALLOW_UNTESTED_VAR}: true to run it in mode validate only" in plain.message
    opted = preflight.check_sglang(python, WINDOW, allow_untested=True, mode=mode)
    assert not opted.ok
    assert f"allows it in mode validate only, and the mode is {mode or 'unset'}" in opted.message


@pytest.mark.parametrize("version", ["0.5.24", "0.5.20"])
def test_the_opt_in_lets_an_untested_release_through_in_validate_and_says_what_that_means(tmp_path, version):
    check = preflight.check_sglang(make_venv(tmp_path, version), WINDOW, allow_untested=True, mode="validate")
    assert check.ok
    assert f"has sglang {version}, outside the window" in check.message
    assert "mode validate only: the original's result is served" in check.message


@pytest.mark.parametrize(("mode", "ok"), [("validate", True), ("on", False)])
def test_the_opt_in_takes_the_mode_the_drop_in_sets(tmp_path, mode, ok):
    """run_checks judges the release with probe_env's KDTREE_VERIFY: what the service will run with."""
    python = make_venv(tmp_path, "0.5.24")
    unit = make_unit(tmp_path, STOCK.replace("/opt/sglang/venv/bin/python", python))
    others = [c for c in preflight.CHECKS if c != "sglang"]
    (check,) = preflight.run_checks(
        unit,
        managed_vars=MANAGED,
        exec_start_override=[],
        compute_capability="12.0",
        served_backend="triton",
        supported_versions=WINDOW,
        probe_env={"KDTREE_VERIFY": mode},
        skip=others,
        timeout_s=5,
        allow_untested_sglang=True,
    )
    assert (check.name, check.ok) == ("sglang", ok), check.message


def test_the_sglang_version_is_read_without_running_the_venv_s_python(tmp_path):
    """The deploy is root: the version comes from the dist-info, the python never runs."""
    ran = tmp_path / "ran"
    python = make_venv(tmp_path, "0.5.23", f"#!/bin/sh\ntouch {ran}\necho 0.5.23\n")
    assert preflight.check_sglang(python, ("0.5.23",)).ok
    assert not ran.exists()


@pytest.mark.parametrize(
    ("breakage", "wanted"),
    [
        ("no-cfg", "is not a venv's interpreter"),
        ("two-sites", "not exactly one"),
        ("two-infos", "sglang-*.dist-info"),
        ("no-info", "0 sglang-*.dist-info"),
        ("other-name", "not a sglang release"),
        ("two-versions", "has a header more than once (Version: 0.5.23, 0.5.99): refused as ambiguous"),
    ],
)
def test_an_ambiguous_venv_is_refused_clearly(tmp_path, breakage, wanted):
    python = make_venv(tmp_path)
    root = tmp_path / "venv"
    site = root / "lib/python3.11/site-packages"
    if breakage == "no-cfg":
        (root / "pyvenv.cfg").unlink()
    elif breakage == "two-sites":
        (root / "lib/python3.12/site-packages").mkdir(parents=True)
    elif breakage == "two-infos":
        (site / "sglang-0.5.22.dist-info").mkdir()
    elif breakage == "no-info":
        (site / "sglang-0.5.23.dist-info/METADATA").unlink()
        (site / "sglang-0.5.23.dist-info").rmdir()
    elif breakage == "other-name":
        (site / "sglang-0.5.23.dist-info/METADATA").write_text("Name: sglang-router\nVersion: 0.5.23\n")
    elif breakage == "two-versions":  # importlib.metadata reads the first, a last-wins reader the second
        twice = "Name: sglang\nVersion: 0.5.23\nVersion: 0.5.99\n"
        (site / "sglang-0.5.23.dist-info/METADATA").write_text(twice)
    check = preflight.check_sglang(python, ("0.5.23",))
    assert not check.ok and wanted in check.message, check.message


FAKE_SYSTEMD_RUN = """#!/bin/sh
# systemd-run as the probe uses it: options, then -- and the command; -E sets a variable, -p
# WorkingDirectory= the cwd. Logs its arguments, one a line.
printf '%s\\n' "$@" > "$(dirname "$0")/systemd-run.args"
env_args=""
while [ "$1" != "--" ]; do
  case "$1" in
    -E) export "$2"; shift 2 ;;
    -p) case "$2" in WorkingDirectory=*) cd "${2#WorkingDirectory=}" ;; esac; shift 2 ;;
    *) shift ;;
  esac
done
shift
exec "$@"
"""


@pytest.fixture
def systemd_run(tmp_path, monkeypatch) -> Path:
    """A stand-in for systemd-run (the tests do not run under systemd); returns its argument log."""
    tool = tmp_path / "bin-tools/systemd-run"
    tool.parent.mkdir()
    tool.write_text(FAKE_SYSTEMD_RUN, encoding="utf-8")
    tool.chmod(0o755)
    monkeypatch.setattr(preflight, "SYSTEMD_RUN", str(tool))
    return tool.parent / "systemd-run.args"


def _fake_probe(tmp_path: Path, state: str, rc: int, reason: str = "") -> str:
    report = json.dumps(
        {"patch": {"state": state, "mode": "x", "reason": reason}, "active": state == "active"}
    )
    return make_venv(tmp_path, python_text=f"#!/bin/sh\necho '{report}'\nexit {rc}\n")


@pytest.mark.parametrize(
    ("mode", "state", "rc", "ok"),
    [
        ("validate", "active", 0, True),
        ("validate", "absent", 1, False),
        ("off", "off", 1, True),
        ("off", "absent", 1, False),
    ],
)
def test_the_probe_wants_the_state_of_the_mode(tmp_path, systemd_run, mode, state, rc, ok):
    check = preflight.check_probe(_fake_probe(tmp_path, state, rc), {"KDTREE_VERIFY": mode}, "/", 10)
    assert check.ok is ok, check.message


def test_the_probe_runs_as_the_unit_s_user_group_cwd_and_environment(tmp_path, systemd_run):
    python = _fake_probe(tmp_path, "active", 0)
    env = {"KDTREE_VERIFY": "validate", "PYTHONPATH": "/opt/p"}
    check = preflight.check_probe(python, env, "/srv/sglang", 10, user="sglang", group="gpu")
    assert check.ok, check.message
    args = systemd_run.read_text().splitlines()
    assert args[args.index("--") + 1 :][:3] == [python, "-m", "kdtree_verify.probe"]
    options = args[: args.index("--")]
    for wanted in ("User=sglang", "Group=gpu", "WorkingDirectory=/srv/sglang"):
        assert options[options.index(wanted) - 1] == "-p", options
    for wanted in ("KDTREE_VERIFY=validate", "PYTHONPATH=/opt/p"):
        assert options[options.index(wanted) - 1] == "-E", options
    assert {"--pipe", "--wait", "--collect"} <= set(options)


def test_a_dynamic_user_unit_is_not_probed_and_says_how_to_go_on(tmp_path, systemd_run):
    check = preflight.check_probe(_fake_probe(tmp_path, "active", 0), {}, "/", 10, dynamic_user=True)
    assert not check.ok and "DynamicUser=yes" in check.message and "[probe]" in check.message
    assert not systemd_run.exists()


@pytest.mark.parametrize("where", ["cwd", "pythonpath", "venv", "pth", "site-packages"])
def test_a_root_unit_s_probe_refuses_a_path_another_user_can_write(tmp_path, systemd_run, where):
    """No User=: the unit and the probe run as root, so nothing they import may be writable by others
    (a planted module in a user-writable working directory ran as uid 0 before)."""
    python = _fake_probe(tmp_path, "active", 0)
    site = tmp_path / "venv/lib/python3.11/site-packages"
    shared = tmp_path / "shared"
    shared.mkdir()
    env = {"KDTREE_VERIFY": "on", "PYTHONPATH": "/usr/lib"}
    cwd = "/"
    if where == "cwd":
        shared.chmod(0o777)
        cwd = str(shared)
    elif where == "pythonpath":
        shared.chmod(0o775)
        env["PYTHONPATH"] = f"/usr/lib:{shared}"
    elif where == "venv":
        (tmp_path / "venv").chmod(0o757)
    elif where == "pth":
        (site / "evil.pth").write_text(f"{shared}\n")
        os.chown(shared, 65534, 65534)
    elif where == "site-packages":
        os.chown(site, 65534, 65534)
    check = preflight.check_probe(python, env, cwd, 10)
    assert not check.ok and "runs as root" in check.message, check.message
    assert not systemd_run.exists()  # nothing ran
    assert preflight.check_probe(python, env, cwd, 10, user="sglang").ok  # as its own user: probed


def test_a_root_unit_s_probe_runs_where_everything_is_root_s(tmp_path, systemd_run):
    python = _fake_probe(tmp_path, "active", 0)
    check = preflight.check_probe(python, {"KDTREE_VERIFY": "on", "PYTHONPATH": str(tmp_path)}, "/", 10)
    assert check.ok, check.message
    assert "User=" not in systemd_run.read_text()


NO_LIB = "KDTREE_LIB is not set"


@pytest.mark.parametrize(
    ("pending", "state", "reason", "ok"),
    [
        # the library is built after the preflight: a child patched up to the library passes
        (NO_LIB, "fallback", NO_LIB, True),
        # any other fallback still fails, pending library or not
        (NO_LIB, "fallback", "SGLang 0.5.23: forward_extend has no parameter q", False),
        (NO_LIB, "absent", "", False),
        # with the library present, a fallback for want of it is a refusal
        ("", "fallback", NO_LIB, False),
    ],
)
def test_a_library_not_built_yet_passes_only_a_child_patched_up_to_the_library(
    tmp_path, systemd_run, pending, state, reason, ok
):
    python = _fake_probe(tmp_path, state, 1, reason)
    check = preflight.check_probe(python, {"KDTREE_VERIFY": "on"}, "/", 10, library_pending=pending)
    assert check.ok is ok, check.message


def checks_seen(monkeypatch) -> dict:
    """preflight.execute with a unit of its own and run_checks replaced: the keywords run_checks got."""
    seen = {}

    def fake_run_checks(unit, **kw):
        seen.update(kw)
        return []

    monkeypatch.setattr(preflight, "read_unit", lambda *a: type("U", (), {"fragment": "x"})())
    monkeypatch.setattr(preflight, "run_checks", fake_run_checks)
    monkeypatch.setattr(preflight, "launch_facts", lambda *a: {})
    monkeypatch.setattr(preflight, "gpu_check", lambda *a: gpu_health.not_checked("not this test's"))
    return seen


def execute_params(patch_dir: Path | str, probe_env: dict[str, str]) -> dict:
    """The kdtree_preflight module's parameters for a stock unit and `patch_dir`."""
    return {
        "unit": "sglang.service",
        "dropin_name": "50-kdtree.conf",
        "managed_vars": [],
        "exec_start": [],
        "compute_capability": "12.0",
        "patch_dir": str(patch_dir),
        "skip": [],
        "timeout_s": 10,
        "secret_env_file": "",
        "probe_env": probe_env,
    }


def test_the_module_probes_without_a_library_that_does_not_exist_yet(tmp_path, monkeypatch):
    """preflight.execute (the kdtree_preflight module's work): KDTREE_LIB names a build not
    compiled yet -> the probe gets it empty and target.py's NO_LIBRARY_REASON as the accepted reason."""
    seen = checks_seen(monkeypatch)
    params = execute_params(
        PATCH_DIR, {"KDTREE_LIB": str(tmp_path / "builds/x/libkdtree_verify.so"), "KDTREE_VERIFY": "on"}
    )
    result = preflight.execute(params)
    assert seen["probe_env"]["KDTREE_LIB"] == ""
    assert seen["library_pending"] == NO_LIB
    assert "built after the preflight" in result["msg"]
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"")
    params["probe_env"] = {"KDTREE_LIB": str(lib), "KDTREE_VERIFY": "on"}
    preflight.execute(params)
    assert seen["probe_env"]["KDTREE_LIB"] == str(lib)
    assert seen["library_pending"] == ""


def test_a_patch_not_installed_yet_leaves_out_its_checks_in_check_mode_and_fails_otherwise(
    tmp_path, monkeypatch
):
    """preflight.execute on a host without the patch: check mode leaves out backend, sglang and
    probe and says so; a real run stops with the missing target.py named."""
    from ansible_collections.kdtree.fleet.plugins.module_utils import _patch_files as patch_files

    seen = checks_seen(monkeypatch)
    params = execute_params(tmp_path / "patches" / "not-installed", {})
    result = preflight.execute(params, check_mode=True)
    assert {"backend", "sglang", "probe"} <= set(seen["skip"])
    assert "need the installed patch" in result["msg"]
    with pytest.raises(patch_files.PatchFileError, match=r"is the kdtree patch installed in .*not-installed"):
        preflight.execute(params)


def test_the_node_rank_is_read_and_a_rank_beyond_the_nodes_is_refused(tmp_path):
    unit = make_unit(tmp_path, STOCK.replace("--tp-size 8", "--tp-size 16 --nnodes 2 --node-rank 1"))
    facts = preflight.launch_facts(unit, [])
    assert (facts["nnodes"], facts["node_rank"], facts["unparsed"]) == (2, 1, [])
    unit = make_unit(tmp_path, STOCK.replace("--tp-size 8", "--tp-size 16 --nnodes 2 --node-rank 2"))
    assert preflight.launch_facts(unit, [])["unparsed"] == ["--node-rank 2"]


def probe_venv(root: Path) -> str:
    (root / "bin").mkdir(parents=True)
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (root / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    (root / "bin" / "python").write_text("")
    return str(root / "bin" / "python")


def test_a_file_another_user_placed_in_the_probes_working_directory_refuses_the_root_probe(tmp_path):
    """The directory is root's; a module in it is not. `python -m` imports from the working directory
    first, so the probe, run as root, would run it: the preflight names the file."""
    python = probe_venv(tmp_path / "venv")
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("not importable\n")
    os.chown(work / "notes.txt", 1234, 1234)
    assert path_safety.first_unsafe(preflight.probe_root_paths(python, {}, str(work))) == ""
    (work / "sitecustomize.py").write_text("import os\n")
    os.chown(work / "sitecustomize.py", 1234, 1234)
    reason = path_safety.first_unsafe(preflight.probe_root_paths(python, {}, str(work)))
    assert reason == f"{work / 'sitecustomize.py'} is owned by uid 1234, not root"


def test_a_writable_pycache_or_package_in_a_pythonpath_entry_refuses_the_root_probe(tmp_path):
    python = probe_venv(tmp_path / "venv")
    extra = tmp_path / "extra"
    (extra / "__pycache__").mkdir(parents=True)
    (extra / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"planted")
    (extra / "__pycache__" / "mod.cpython-311.pyc").chmod(0o666)
    env = {"PYTHONPATH": str(extra)}
    reason = path_safety.first_unsafe(preflight.probe_root_paths(python, env, str(tmp_path)))
    assert "mod.cpython-311.pyc is group- or world-writable" in reason
    (extra / "__pycache__" / "mod.cpython-311.pyc").chmod(0o644)
    (extra / "pkg").mkdir()
    (extra / "pkg").chmod(0o777)
    reason = path_safety.first_unsafe(preflight.probe_root_paths(python, env, str(tmp_path)))
    assert reason.startswith(f"{extra / 'pkg'} is group- or world-writable")


NVIDIA_SMI_DOUBLE = PATCH_DIR.parents[1] / "tests" / "doubles" / "nvidia_smi" / "nvidia-smi"


@pytest.fixture
def gpu_node(tmp_path, monkeypatch):
    """preflight.execute on a node whose nvidia-smi is the test double (its state file in tmp_path) and
    whose unit runs `schedulers` schedulers; the other checks pass."""
    state = tmp_path / "nvidia-smi.json"
    monkeypatch.setenv("NVIDIA_SMI_DOUBLE_STATE", str(state))
    unit = type("U", (), {"fragment": "x", "show": {"ControlGroup": ""}})()
    monkeypatch.setattr(preflight, "read_unit", lambda *a: unit)
    monkeypatch.setattr(preflight, "run_checks", lambda unit, **kw: [preflight.Check("command", True, "")])

    def run(gpus: dict | None, schedulers: int = 2, skip: list[str] | None = None) -> dict:
        monkeypatch.setattr(preflight, "launch_facts", lambda *a: {"schedulers": schedulers})
        if gpus is None:
            state.unlink(missing_ok=True)
        else:
            state.write_text(json.dumps(gpus))
        params = {
            **execute_params(PATCH_DIR, {}),
            "skip": skip or [],
            "gpu_min_free_mib": 8192,
            "nvidia_smi": str(NVIDIA_SMI_DOUBLE),
        }
        return preflight.execute(params)

    return run


def test_the_gpu_check_passes_a_healthy_node_and_publishes_what_it_read(gpu_node):
    result = gpu_node({"count": 8})
    assert result["failed"] is False and result["msg"] == "preflight ok: command, gpu"
    assert result["gpu_health"]["ok"] is True and result["gpu_health"]["count"] == 8


def test_the_gpu_check_refuses_a_bad_gpu_naming_its_index_and_reason(gpu_node):
    result = gpu_node({"count": 8, "gpus": {"1": {"persistence_mode": "Disabled"}}})
    assert result["failed"] is True
    assert "nothing on the host was changed" in result["msg"]
    assert "[gpu] GPU 1 (GPU-00000000-0000-4000-8000-000000000001): persistence mode off" in result["msg"]
    assert result["gpu_health"]["gpus"][1]["persistence"] is False


def test_the_gpu_check_counts_the_gpus_against_this_nodes_share_of_the_schedulers(gpu_node):
    assert gpu_node({"count": 2}, schedulers=2)["failed"] is False
    result = gpu_node({"count": 2}, schedulers=4)
    assert (
        result["failed"] is True
        and "[gpu] 2 GPUs, this node's share of the schedulers needs 4" in result["msg"]
    )


def test_a_node_without_a_driver_is_refused_unless_the_check_is_turned_off(gpu_node):
    result = gpu_node(None)
    assert result["failed"] is True and "[gpu] cannot read the GPUs:" in result["msg"]
    result = gpu_node(None, skip=["gpu"])
    assert result["failed"] is False and result["gpu_health"]["checked"] is False
    assert [c["name"] for c in result["checks"]] == ["command"]
