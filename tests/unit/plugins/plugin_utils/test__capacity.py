"""The rollout's capacity has one owner (plugin_utils/_capacity, filters kdtree_rollout_batches and
kdtree_rollout_share): the batches derive from kdtree_deploy_max_unavailable, an explicit serial or a
drain share that contradicts it is refused naming both variables, and the drain's share derives from
it. Where the play uses them: tests/roles/test_rollout_batches.py (16 local hosts, -l).
"""

from __future__ import annotations

import math

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.filter import rollout as rollout_filter
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _capacity as capacity


@pytest.mark.parametrize(
    ("hosts", "max_unavailable", "sizes"),
    [
        (16, "25%", [1, 4, 4, 4, 3]),
        (8, "25%", [1, 2, 2, 2, 1]),
        (16, "", [1, 4, 4, 4, 3]),  # empty: the default, 25%
        (16, None, [1, 4, 4, 4, 3]),
        (16, 0.25, [1, 4, 4, 4, 3]),
        (16, "0.25", [1, 4, 4, 4, 3]),
        (16, 3, [1, 3, 3, 3, 3, 3]),
        (8, "3", [1, 3, 3, 1]),  # -e passes a count as a string
        (8, 1, [1, 1, 1, 1, 1, 1, 1, 1]),
        (8, "50%", [1, 4, 3]),
        (8, "100%", [1, 7]),
        (3, "25%", [1, 1, 1]),  # a share always lets one host go
        (16, 40, [1, 15]),  # a count larger than the fleet
        (1, "25%", [1]),
        (0, "25%", [1]),  # no host: the play runs on none
    ],
)
def test_batches_derive_from_max_unavailable_canary_first(hosts, max_unavailable, sizes):
    assert capacity.batches(hosts, max_unavailable) == sizes
    assert sum(sizes) == max(hosts, 1)


@pytest.mark.parametrize("hosts", [8, 16])
def test_no_derived_batch_is_larger_than_the_default_allows_nor_the_default_drain_share(hosts):
    sizes = capacity.batches(hosts)
    assert sizes[0] == 1 and max(sizes) <= math.floor(0.25 * hosts)
    # the drain's documented share of 0.5, set explicitly, does not contradict the default batches
    assert capacity.batches(hosts, "", "", 0.5) == sizes


def test_the_old_default_serial_is_refused_on_16_hosts_naming_both_variables():
    with pytest.raises(capacity.CapacityError) as raised:
        capacity.batches(16, "", [1, "25%", "100%"])
    text = str(raised.value)
    assert "kdtree_deploy_serial [1, '25%', '100%'] makes a batch of 11 of the play's 16 hosts" in text
    assert "kdtree_deploy_max_unavailable '25%' allows at most 4" in text


@pytest.mark.parametrize(
    ("hosts", "max_unavailable", "serial", "sizes"),
    [
        (16, "25%", [1, "25%"], [1, 4, 4, 4, 3]),
        (8, "75%", [1, "25%", "100%"], [1, 2, 5]),  # Ansible's 100% of 8 is 8, capped by the hosts left
        (16, 4, [4, 1], [4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]),
        (16, "100%", [1, "25%", "100%"], [1, 4, 11]),
        (8, 2, 2, [2, 2, 2, 2]),  # a scalar serial
        (8, 2, "2", [2, 2, 2, 2]),
        (2, "100%", 0, [2]),  # 0: every host left in one batch
    ],
)
def test_an_explicit_serial_that_respects_the_capacity_is_kept(hosts, max_unavailable, serial, sizes):
    assert capacity.batches(hosts, max_unavailable, serial) == sizes


@pytest.mark.parametrize(
    ("hosts", "max_unavailable", "serial", "biggest", "most"),
    [
        (8, "25%", [1, "25%", "100%"], 5, 2),
        (16, 3, [1, "25%"], 4, 3),
        (16, "25%", 0, 16, 4),
        (8, 2, "-1", 8, 2),
    ],
)
def test_an_explicit_serial_over_the_capacity_is_refused(hosts, max_unavailable, serial, biggest, most):
    with pytest.raises(capacity.CapacityError, match=f"makes a batch of {biggest} .* allows at most {most} "):
        capacity.batches(hosts, max_unavailable, serial)


@pytest.mark.parametrize(
    ("hosts", "max_unavailable", "share", "drained"),
    [(16, "50%", 0.25, 4), (8, 4, 0.25, 2), (16, "25%", "0.2", 3)],
)
def test_a_drain_share_smaller_than_the_batches_is_refused_naming_both_variables(
    hosts, max_unavailable, share, drained
):
    with pytest.raises(capacity.CapacityError) as raised:
        capacity.batches(hosts, max_unavailable, "", share)
    text = str(raised.value)
    assert text.startswith(f"kdtree_drain_max_share {float(share):g} lets the drain take {drained} ")
    assert "kdtree_deploy_max_unavailable" in text and "the drain would refuse the rollout mid-way" in text


def test_a_drain_share_is_checked_against_the_explicit_serial_not_the_capacity():
    # 25% of 16 allows 4, but the operator's serial restarts 2 at a time: a share of 0.125 (2) holds
    assert capacity.batches(16, "25%", [1, 2], 0.125) == [1, 2, 2, 2, 2, 2, 2, 2, 1]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "a count must be at least 1"),
        ("0", "a count must be at least 1"),
        (-2, "a count must be at least 1"),
        ("0%", "a share must be more than 0% and at most 100%"),
        ("120%", "a share must be more than 0% and at most 100%"),
        (1.5, "a share is in \\(0, 1\\]"),
        (float("nan"), "a share is in \\(0, 1\\]"),
        (0.0, "a share is in \\(0, 1\\]"),
        (True, "is the boolean True"),
        ("many", "is not a count"),
        ("12.5%", "is not a count"),
        ([4], "is not a count"),
    ],
)
def test_a_max_unavailable_that_is_not_a_count_or_a_share_is_refused(value, message):
    with pytest.raises(capacity.CapacityError, match="kdtree_deploy_max_unavailable .*" + message):
        capacity.batches(16, value)


@pytest.mark.parametrize("serial", [[1, "x"], [True], ["25.5%"], [None]])
def test_a_serial_item_ansible_could_not_batch_is_refused(serial):
    with pytest.raises(capacity.CapacityError, match="kdtree_deploy_serial item"):
        capacity.batches(16, "100%", serial)


@pytest.mark.parametrize("hosts", [-1, "16", 2.0, True, None])
def test_a_host_count_that_is_not_a_count_is_refused(hosts):
    with pytest.raises(capacity.CapacityError, match="host count"):
        capacity.batches(hosts)


@pytest.mark.parametrize(
    ("max_share", "max_unavailable", "hosts", "share"),
    [
        ("", "25%", 16, 0.25),
        ("", "", 16, 0.25),
        (None, 0.4, 8, 0.4),
        ("", 3, 16, 3 / 16),
        ("", 40, 16, 1.0),
        ("", 3, 0, 1.0),
        (0.5, "25%", 16, 0.5),  # the operator's share is kept (batches() checks it against the batches)
        ("0.3", 3, 16, 0.3),
    ],
)
def test_the_drain_share_is_the_operators_or_the_one_max_unavailable_amounts_to(
    max_share, max_unavailable, hosts, share
):
    assert capacity.drain_share(max_share, max_unavailable, hosts) == pytest.approx(share)


@pytest.mark.parametrize("hosts", [3, 7, 16, 33])
@pytest.mark.parametrize("count", [1, 2, 3])
def test_a_count_as_a_share_gives_the_drain_back_that_count(hosts, count):
    """The drain floors share x pool (module_utils/_router.py check_share): c / n of n is c again."""
    share = capacity.drain_share("", count, hosts)
    assert max(1, math.floor(share * hosts + 1e-9)) == min(count, hosts)


@pytest.mark.parametrize("max_share", [0, 1.5, "half", True, float("inf")])
def test_a_drain_share_outside_0_1_is_refused(max_share):
    with pytest.raises(capacity.CapacityError, match="kdtree_drain_max_share"):
        capacity.drain_share(max_share, "25%", 16)


def test_a_running_batch_over_the_plan_is_refused_saying_the_serial_does_not_see_the_inventory():
    sizes = capacity.batches(16, 3)
    capacity.check_batch(3, sizes, 16, 3)
    with pytest.raises(capacity.CapacityError) as raised:
        capacity.check_batch(4, sizes, 16, 3)
    text = str(raised.value)
    assert "this batch has 4 of the play's 16 hosts" in text and "never the inventory's" in text


def test_the_filters_word_refusals_as_filter_errors_saying_nothing_changed():
    assert rollout_filter.kdtree_rollout_batches(16, "25%") == [1, 4, 4, 4, 3]
    assert rollout_filter.kdtree_rollout_batches(16, "25%", "", "", batch=4) == [1, 4, 4, 4, 3]
    with pytest.raises(AnsibleFilterError, match=r"^kdtree_rollout_batches: .*Nothing was deployed\.$"):
        rollout_filter.kdtree_rollout_batches(16, "25%", [1, "100%"])
    with pytest.raises(AnsibleFilterError, match=r"^kdtree_rollout_batches: this batch has 5 .*deployed\.$"):
        rollout_filter.kdtree_rollout_batches(16, "25%", batch=5)
    assert rollout_filter.kdtree_rollout_share("", "25%", 16) == 0.25
    with pytest.raises(
        AnsibleFilterError, match=r"^kdtree_rollout_share: .*Nothing was drained or restarted\.$"
    ):
        rollout_filter.kdtree_rollout_share(2, "25%", 16)


def test_the_default_is_the_deploy_roles_documented_one():
    """The role's default is empty (this module's DEFAULT_MAX_UNAVAILABLE); its spec says which."""
    import yaml
    from ansible_collections.kdtree.fleet.tests.unit.helpers.collection_tree import ROOT

    spec = yaml.safe_load((ROOT / "roles" / "kdtree_deploy" / "meta" / "argument_specs.yml").read_text())
    option = spec["argument_specs"]["main"]["options"]["kdtree_deploy_max_unavailable"]
    assert option["default"] == ""
    assert f'"{capacity.DEFAULT_MAX_UNAVAILABLE}"' in option["description"]
