"""The environment the patch reads (kdtree_verify/config.py): mode spelling, the tolerance."""

from __future__ import annotations

from pathlib import Path

import pytest
from kdtree_verify import config

ROOT = Path(__file__).resolve().parents[3]


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


@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-inf", "Infinity", "-0.1", "abc", "1.5", "1e30"])
def test_a_tolerance_that_is_not_a_finite_number_at_least_zero_is_refused(raw):
    tol, problem = config.read_tol({"KDTREE_VERIFY_TOL": raw})
    assert tol == config.DEFAULT_TOL
    assert f"KDTREE_VERIFY_TOL={raw!r} is not a finite number >= 0" in problem


@pytest.mark.parametrize("raw", ["1e300", "61", "1e19", "0.01"])
def test_a_status_interval_outside_its_bounds_is_refused(raw):
    """1e300 s overflowed the publisher's Event.wait (OverflowError: the thread died, the host failed)
    and made the smoke check's wait for a rewrite endless."""
    seconds, problem = config.read_status_interval({"KDTREE_STATUS_INTERVAL": raw})
    assert seconds == config.DEFAULT_STATUS_INTERVAL
    assert f"<= {config.MAX_STATUS_INTERVAL:g}" in problem
    assert config.read_status_interval({"KDTREE_STATUS_INTERVAL": str(config.MAX_STATUS_INTERVAL)})[1] == ""


def test_the_roles_bound_of_the_status_interval_is_the_patchs():
    """roles/kdtree_service preflight refuses what config.py would replace by the default."""
    text = (ROOT / "roles/kdtree_service/tasks/preflight.yml").read_text()
    assert f"kdtree_service_status_interval_s | float >= {config.MIN_STATUS_INTERVAL:g}" in text
    assert f"kdtree_service_status_interval_s | float <= {config.MAX_STATUS_INTERVAL:g}" in text
