"""scripts/mutation_check.py finds every mutation site exactly once in this tree (so another branch's
edit that moves or removes a site shows up here, in the fast tests, and not only in make
mutation-check), and says "not found" rather than mutating something else."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from extlib import ROOT

spec = importlib.util.spec_from_file_location("mutation_check", ROOT / "scripts" / "mutation_check.py")
mc = importlib.util.module_from_spec(spec)
sys.modules["mutation_check"] = mc  # dataclasses look the module up while the class is built
spec.loader.exec_module(mc)


@pytest.mark.parametrize("mutant", mc.MUTANTS, ids=lambda m: m.name)
def test_every_mutation_site_is_found_once_and_changes_only_its_region(mutant):
    text = (ROOT / mutant.path).read_text()
    mutated = mc.mutate_text(text, mutant)
    start, end = mc.region_span(text, mutant.region)
    assert mutated != text
    assert mutated[:start] == text[:start]
    assert mutated[len(mutated) - (len(text) - end) :] == text[end:]


def test_a_site_that_is_gone_or_ambiguous_is_reported_not_mutated():
    (mode,) = [m for m in mc.MUTANTS if m.name == "mode-case-sensitive"]
    with pytest.raises(mc.SiteNotFound, match="matches 0 times in read_mode"):
        mc.mutate_text("def read_mode(env):\n    return env['KDTREE_VERIFY']\n", mode)
    with pytest.raises(mc.SiteNotFound, match="matches 2 times"):
        mc.mutate_text("def read_mode(env):\n    return env.lower().lower()\n", mode)
    with pytest.raises(mc.SiteNotFound, match="no top-level def read_mode"):
        mc.mutate_text("def other(env):\n    return env.lower()\n", mode)


def test_a_region_ends_at_the_next_top_level_statement_not_at_a_split_signature():
    text = "def a(\n    x,\n):\n    return x.lower()\n\n\ndef b():\n    return 1\n"
    start, end = mc.region_span(text, "a")
    assert text[start:end].rstrip().endswith("return x.lower()")


SCRATCH_TESTS = "tests" + "/x"  # a scratch tree's test directory (not one of this repository's)


def _tree(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    (tmp_path / "tests" / "x").mkdir(parents=True)
    (tmp_path / "tests" / "x" / "test_f.py").write_text("def test_f():\n    pass\n")
    (tmp_path / "tests" / "x" / "conftest.py").write_text("")
    return mc.Mutant("m", "pkg/mod.py", "f", "1", "2", (f"{SCRATCH_TESTS}/test_f.py::test_f",), "f returns 2")


def test_a_kept_result_changes_with_the_mutated_file_its_tests_their_conftest_and_its_definition(tmp_path):
    mutant = _tree(tmp_path)
    key = mc.result_key(mutant, tmp_path)
    assert mc.result_key(mutant, tmp_path) == key
    for edit in ("pkg/mod.py", f"{SCRATCH_TESTS}/test_f.py", f"{SCRATCH_TESTS}/conftest.py"):
        path = tmp_path / edit
        before = path.read_text()
        path.write_text(before + "# changed\n")
        assert mc.result_key(mutant, tmp_path) != key, edit
        path.write_text(before)
    assert mc.result_key(mutant, tmp_path) == key
    other = mc.Mutant("m", "pkg/mod.py", "f", "1", "3", mutant.tests, mutant.why)
    assert mc.result_key(other, tmp_path) != key


def test_only_a_killed_mutant_is_kept_and_only_in_the_machine_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KDTREE_CACHE_HOME", str(tmp_path / "cache"))
    mutant = mc.MUTANTS[0]
    assert not mc.kept(mutant)
    mc.keep(mutant, 1.5)
    assert mc.kept(mutant)
    (stored,) = (tmp_path / "cache" / "mutation-results").glob(f"{mutant.name}-*.json")
    stored.write_text('{"verdict": "SURVIVED"}')
    assert not mc.kept(mutant)
    stored.write_text("{torn")
    assert not mc.kept(mutant)
