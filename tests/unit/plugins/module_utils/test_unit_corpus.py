"""The unit reader agrees with a real systemd on every case of data/unit_corpus (beside this file).

Each case's expected.json is `systemctl show` of its unit.service as systemd 252 (the test hosts'
image) read it, recorded by scripts/testhosts/record_unit_corpus.py; no container runs here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _preflight as preflight
from ansible_collections.kdtree.fleet.plugins.module_utils import _unit_env as unit_env

CORPUS = Path(__file__).parent / "data" / "unit_corpus"
# cases whose command line kdtree refuses clearly rather than read (the recording cannot tell it apart)
REFUSED = {"quotes_and_escapes"}
CASES = sorted(p.name for p in CORPUS.iterdir() if (p / "expected.json").is_file())


def load(case: str) -> tuple[list[unit_env.Setting], dict, dict[str, str]]:
    path = CORPUS / case / "unit.service"
    expected = json.loads((CORPUS / case / "expected.json").read_text(encoding="utf-8"))
    settings = unit_env.service_settings(path.read_text(encoding="utf-8"), str(path))
    ctx = expected["context"]
    context = unit_env.specifier_context(expected["unit"]) | {
        "H": ctx["hostname"],
        "l": ctx["hostname"].split(".", 1)[0],
        "h": ctx["root_home"],
    }
    return settings, expected, context


def last(settings: list[unit_env.Setting], key: str) -> str:
    values = [s.value for s in settings if s.key == key]
    return values[-1] if values else ""


def test_the_corpus_covers_the_cases_issue_19_names():
    wanted = {
        "comment_in_continuation",
        "escaped_backslash_at_end",
        "dollar_variables",
        "environment_file_glob",
        "env_i_wrapper",
        "specifiers",
        "stock",
    }
    assert wanted <= set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_the_environment_is_what_systemd_says(case):
    settings, expected, context = load(case)
    env = unit_env.UnitEnvironment()
    # systemctl show's Environment is the Environment= lines; UnsetEnvironment= applies at exec
    unit_env.apply_settings(env, [s for s in settings if s.key != "UnsetEnvironment"])
    mine = {k: unit_env.resolve_specifiers(v, context) for k, v in env.environment.items()}
    theirs = dict(w.split("=", 1) for w in unit_env.split_words(expected["show"]["Environment"]))
    assert mine == theirs


@pytest.mark.parametrize("case", CASES)
def test_the_command_line_is_what_systemd_says(case, monkeypatch):
    settings, expected, context = load(case)
    monkeypatch.setattr(preflight, "specifier_context", lambda unit: context)
    if case in REFUSED:
        # systemd 252 prints `a\ b` unquoted: one word or two cannot be told, so kdtree refuses it
        with pytest.raises(unit_env.UnitSyntaxError):
            preflight.exec_start(settings, expected["unit"])
        return
    argv, _where = preflight.exec_start(settings, expected["unit"])
    show = expected["show"]["ExecStart"]
    # systemd 252 prints argv[] joined by spaces, unquoted, before its $ expansion (done at exec)
    theirs = show.split(" ; argv[]=", 1)[1].split(" ; ignore_errors=", 1)[0] if show else ""
    raw = unit_env.split_words(last(settings, "ExecStart"))
    # "@": systemd runs the first word with the second as argv[0]; show prints argv[] from the second
    words = argv if not raw or raw[0][:1] != "@" else [raw[1], *argv[1:]]
    assert " ".join(words) == theirs


@pytest.mark.parametrize("case", CASES)
def test_user_group_dynamic_user_and_working_directory_are_what_systemd_says(case):
    settings, expected, context = load(case)
    show = expected["show"]
    dynamic = last(settings, "DynamicUser") == "yes"
    # DynamicUser=yes without User=: systemd names the user after the unit
    named = expected["unit"].rsplit(".", 1)[0] if dynamic else ""
    assert (last(settings, "User") or named) == show["User"]
    assert (last(settings, "Group") or named) == show["Group"]
    assert (last(settings, "DynamicUser") or "no") == show["DynamicUser"]
    # show writes an optional directory ("-" in the unit) with "!"
    theirs = show["WorkingDirectory"].replace("!", "-", 1)
    assert unit_env.resolve_specifiers(last(settings, "WorkingDirectory"), context) == theirs


@pytest.mark.parametrize("case", CASES)
def test_environment_files_are_the_paths_systemd_names(case, monkeypatch):
    settings, expected, context = load(case)
    monkeypatch.setattr(preflight, "specifier_context", lambda unit: context)
    env = unit_env.UnitEnvironment()
    unit_env.apply_settings(env, settings)
    mine = [
        (unit_env.resolve_specifiers(spec.removeprefix("-"), context), spec.startswith("-"))
        for spec in env.environment_files
    ]
    assert mine == unit_env.show_environment_files(expected["show"].get("EnvironmentFiles", ""))
