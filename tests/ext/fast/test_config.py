"""The environment the patch reads (kdtree_verify/config.py): mode spelling, the tolerance."""

from __future__ import annotations

import pytest
from kdtree_verify import config


@pytest.mark.parametrize(
    ("raw", "mode"), [("ON", "on"), ("Validate", "validate"), (" Off ", "off"), ("vAlIdAtE\n", "validate")]
)
def test_the_mode_is_read_case_insensitively_and_without_surrounding_blanks(raw, mode):
    assert config.read_mode({"KDTREE_VERIFY": raw}) == (mode, "")


def test_an_unset_or_empty_mode_is_off_and_an_unknown_one_is_a_problem():
    assert config.read_mode({}) == ("off", "")
    assert config.read_mode({"KDTREE_VERIFY": " "}) == ("off", "")
    mode, problem = config.read_mode({"KDTREE_VERIFY": "yes"})
    assert mode == "off" and "unknown KDTREE_VERIFY='yes'" in problem


@pytest.mark.parametrize(
    ("raw", "tol"), [("", config.DEFAULT_TOL), ("0.05", 0.05), ("0", 0.0), (" 1e-3 ", 1e-3)]
)
def test_a_finite_tolerance_is_taken(raw, tol):
    assert config.read_tol({"KDTREE_VERIFY_TOL": raw}) == (tol, "")


@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-inf", "Infinity", "-0.1", "abc"])
def test_a_tolerance_that_is_not_a_finite_number_at_least_zero_is_refused(raw):
    tol, problem = config.read_tol({"KDTREE_VERIFY_TOL": raw})
    assert tol == config.DEFAULT_TOL
    assert f"KDTREE_VERIFY_TOL={raw!r} is not a finite number >= 0" in problem
