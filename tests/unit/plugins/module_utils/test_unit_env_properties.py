"""Any unit text gives the reader a verdict or a clear refusal, never a traceback (hypothesis)."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.kdtree.fleet.plugins.module_utils import _preflight as preflight
from ansible_collections.kdtree.fleet.plugins.module_utils import _unit_env as unit_env
from ansible_collections.kdtree.fleet.tests.unit.helpers.unit_checks import run_unit_checks
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# the characters that matter to systemd's syntax, plus some of everything else
SYNTAX = st.sampled_from([*list(" \t\\\"'%$#;={}[]@-+!:|\n"), "%h", "%n", "%%", "${A}", "$A", "\\x4", "\\"])
TEXT = st.lists(st.one_of(SYNTAX, st.text(max_size=4)), max_size=40).map("".join)
KEYS = st.sampled_from(
    ["Environment", "UnsetEnvironment", "EnvironmentFile", "ExecStart", "User", "WorkingDirectory"]
)
LINES = st.lists(st.tuples(KEYS, TEXT).map(lambda kv: f"{kv[0]}={kv[1]}"), max_size=8)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=LINES, tail=TEXT)
def test_any_unit_gives_a_verdict_or_a_clear_refusal(tmp_path_factory, lines, tail):
    path = tmp_path_factory.mktemp("u") / "sglang.service"
    path.write_text("[Service]\n" + "\n".join(lines) + "\n" + tail, encoding="utf-8", errors="replace")
    unit = preflight.Unit("sglang.service", str(path), [], ours="50-kdtree.conf")
    unit.show = {"StandardOutput": "journal", "StandardError": "inherit"}
    unit.settings = unit_env.service_settings(Path(path).read_text(encoding="utf-8"), str(path))
    found = run_unit_checks(unit, managed=["PYTHONPATH", "KDTREE_VERIFY"])
    assert found and all(isinstance(c.ok, bool) and c.message for c in found)
    facts = preflight.launch_facts(unit, [])
    assert isinstance(facts["schedulers"], int)


@settings(max_examples=300, deadline=None)
@given(value=TEXT)
def test_words_specifiers_and_expansion_refuse_clearly_or_answer(value):
    try:
        words = unit_env.split_words(value)
    except unit_env.UnitSyntaxError:
        return
    assert unit_env.expand_exec_words(words, {"A": "x y"}) is not None
    for word in words:
        try:
            unit_env.resolve_specifiers(word, unit_env.specifier_context("sglang.service"))
        except unit_env.UnknownSpecifier:
            pass
