"""The drop-in's environment has one owner (module_utils/_dropin_env, filter kdtree_dropin_env): its
fixed variables in order, PYTHONPATH in unit syntax (kdtree's directory first, escaped, never twice; the
unit's own entries kept as written), NCCL_* and the extra variables sorted as the drop-in always sorted
them, every value as text; and the deploy history's allowlist is the same list. The filter:
tests/unit/plugins/filter/test_service.py."""

from __future__ import annotations

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _dropin_env as dropin_env
from ansible_collections.kdtree.fleet.plugins.module_utils import _history as history
from ansible_collections.kdtree.fleet.tests.unit.helpers.dropin_inputs import INPUTS


def test_kdtrees_variables_come_first_in_their_fixed_order():
    pairs = dropin_env.env_pairs(**INPUTS)
    assert pairs == [
        ["PYTHONPATH", "/opt/kdtree/patches/v1"],
        ["KDTREE_VERIFY", "validate"],
        ["KDTREE_LIB", "/opt/kdtree/builds/b1/libkdtree_verify.so"],
        ["KDTREE_STATUS_DIR", "/run/kdtree-sglang"],
        ["KDTREE_STATUS_INTERVAL", "5"],
        ["PYTHONUNBUFFERED", "1"],
        ["SPT_NOENV", "1"],
    ]
    assert tuple(pair[0] for pair in pairs) == dropin_env.FIXED_ENV


def test_pythonpath_puts_kdtree_first_and_keeps_the_units_own_entries_as_written():
    pairs = dropin_env.env_pairs(
        **{**INPUTS, "pythonpath": "/opt/k%1", "unit_pythonpath": "/srv/a::/opt/k%%1:%h/lib"}
    )
    assert dict(pairs)["PYTHONPATH"] == "/opt/k%%1:/srv/a:%h/lib"


def test_nccl_and_extra_variables_follow_sorted_by_name_case_folded_as_text():
    pairs = dropin_env.env_pairs(
        **INPUTS,
        nccl_env={"NCCL_P2P_LEVEL": "SYS", "NCCL_IB_DISABLE": 1, "NCCL_ALGO": "Ring"},
        env_extra={"b_var": "x y", "Zed": "%h", "A_VAR": True, "a_var2": 2.5},
    )
    assert pairs[7:] == [
        ["NCCL_ALGO", "Ring"],
        ["NCCL_IB_DISABLE", "1"],
        ["NCCL_P2P_LEVEL", "SYS"],
        ["A_VAR", "True"],
        ["a_var2", "2.5"],
        ["b_var", "x y"],
        ["Zed", "%h"],  # case folded: after b_var, as Jinja's dictsort put it
    ]


def test_the_historys_allowlist_is_the_same_list():
    assert history.FIXED_ENV is dropin_env.FIXED_ENV
    for name in dropin_env.FIXED_ENV:
        assert history.owned_key(name, [])
    assert not history.owned_key("LD_PRELOAD", [])


def test_a_mapping_that_is_not_one_is_refused_naming_the_variable():
    with pytest.raises(dropin_env.DropinEnvError, match="kdtree_service_env_extra must be a mapping"):
        dropin_env.env_pairs(**INPUTS, env_extra=["A=1"])
