"""Serving groups (plugin_utils/_groups.py, the kdtree_serving_* and kdtree_rollout_* filters): a group
is one rollout unit, never cut by a batch, counted as its hosts; an inventory that cannot roll a group
out whole is refused; the group's nodes are one server only when their preflight words agree."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.filter import rollout, serving
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _capacity as capacity
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _groups as groups

HOSTS = ["s1", "n0", "n1", "s2", "s3"]
INVENTORY = {"all": HOSTS, "gpu-hosts": HOSTS, "kdtree_serving_ds": ["n1", "n0"], "kdtree_serving_": []}


def word(rank: int, **change) -> dict:
    data = {"nnodes": 2, "node_rank": rank, "dist_init_addr": "10.0.0.5:5000", "build_id": "b1", "mode": "on"}
    data.update(change)
    return {"state": "ok", "data": data}


def test_a_group_is_one_unit_in_the_play_s_order():
    assert groups.units(HOSTS, INVENTORY) == [["s1"], ["n0", "n1"], ["s2"], ["s3"]]
    assert groups.group_of("n1", HOSTS, INVENTORY) == {"name": "ds", "members": ["n0", "n1"]}
    assert groups.group_of("s2", HOSTS, INVENTORY) == {}


def test_the_batches_never_cut_a_group_and_count_it_as_its_hosts():
    assert rollout.kdtree_rollout_batches(HOSTS, 2, groups=INVENTORY) == [1, 2, 2]
    # the group is the canary when it comes first
    first = ["n0", "n1", "s1", "s2", "s3"]
    assert rollout.kdtree_rollout_batches(first, 3, groups=INVENTORY) == [2, 3]
    # a batch that would cut the group ends before it
    assert rollout.kdtree_rollout_batches(["s1", "s2", "n0", "n1", "s3"], 2, groups=INVENTORY) == [1, 1, 2, 1]
    # without groups the count alone gives today's batches
    assert rollout.kdtree_rollout_batches(5, 2) == [1, 2, 2]


def test_a_group_larger_than_the_capacity_is_refused():
    with pytest.raises(AnsibleFilterError, match=r"serving group of 2 hosts restarts whole.*at least 2"):
        rollout.kdtree_rollout_batches(HOSTS, 1, groups=INVENTORY)


def test_an_explicit_serial_that_ends_inside_a_group_is_refused():
    with pytest.raises(AnsibleFilterError, match=r"end inside a serving group \(after host 2 "):
        rollout.kdtree_rollout_batches(HOSTS, 3, [2, 3], groups=INVENTORY)
    assert rollout.kdtree_rollout_batches(HOSTS, 3, [1, 3, 1], groups=INVENTORY) == [1, 3, 1]


def test_a_group_whose_hosts_are_apart_is_refused():
    with pytest.raises(groups.GroupError, match=r"not next to each other .*n1 comes after s1"):
        groups.units(["n0", "s1", "n1"], INVENTORY)


def test_a_group_the_play_holds_in_part_is_refused():
    with pytest.raises(AnsibleFilterError, match="holds n0 of serving group ds but not n1"):
        rollout.kdtree_rollout_batches(["s1", "n0"], 2, groups=INVENTORY)


def test_a_host_in_two_groups_is_refused():
    with pytest.raises(groups.GroupError, match="n0 is in two serving groups"):
        groups.units(HOSTS, {**INVENTORY, "kdtree_serving_other": ["n0"]})


def test_the_rollback_s_serial_grows_to_whole_groups():
    assert rollout.kdtree_rollout_whole_groups(HOSTS, 1, groups=INVENTORY) == [1, 2, 1, 1]
    assert rollout.kdtree_rollout_whole_groups(HOSTS, 2, groups=INVENTORY) == [3, 2]
    assert rollout.kdtree_rollout_whole_groups(HOSTS, "100%", groups=INVENTORY) == [5]
    assert groups.fit_serial(capacity.serial_sizes(1, 3), [3]) == [3]


def test_nodes_that_agree_are_one_server():
    posts = {"n0": word(0), "n1": word(1)}
    assert serving.kdtree_serving_group_check(posts, "ds", ["n0", "n1"]) == {"problems": [], "rank0": "n0"}


@pytest.mark.parametrize(
    ("posts", "problem"),
    [
        ({"n0": word(0), "n1": word(0)}, "--node-rank 0 is on 2 nodes"),
        ({"n0": word(0), "n1": word(0)}, "no node has --node-rank 1"),
        ({"n0": word(0, nnodes=3), "n1": word(1, nnodes=3)}, "--nnodes 3, but serving group ds has 2 nodes"),
        ({"n0": word(0), "n1": word(1, dist_init_addr="10.0.0.6:5000")}, "disagree on dist_init_addr"),
        ({"n0": word(0, dist_init_addr=""), "n1": word(1, dist_init_addr="")}, "sets no --dist-init-addr"),
        ({"n0": word(0), "n1": word(1, build_id="b2")}, "disagree on build_id: n0 'b1', n1 'b2'"),
        ({"n0": word(0), "n1": word(1, mode="validate")}, "disagree on mode"),
        ({"n0": word(0)}, "n1 sent no preflight facts"),
    ],
)
def test_nodes_that_disagree_are_refused_with_what_differs(posts, problem):
    found = groups.group_check("ds", ["n0", "n1"], posts)
    assert any(problem in p for p in found), found


def test_the_report_names_each_node_s_serving_group():
    from ansible_collections.kdtree.fleet.plugins.filter import report
    from ansible_collections.kdtree.fleet.plugins.plugin_utils import _report_table as table

    results = [{"row": {"unit": "sglang", "problems": []}}] * 3
    rows = report.kdtree_report_rows(results, ["s1", "n0", "n1"], groups=INVENTORY)
    assert [row.get("group") for row in rows] == [None, "ds", "ds"]
    full = [line for line in report.kdtree_report_table(rows, "full").splitlines() if line.startswith("n0")]
    assert "ds" in full[0].split() and table.COLUMNS[-3] == ("group", "GROUP")


def target(kind: str = "previous", **change) -> dict:
    previous = {"build_id": "b1", "patch_digest": "p1", "mode": "on", "nccl_env": {"NCCL_P2P_LEVEL": "SYS"}}
    previous.update(change)
    data = {"target": kind, "why_stock": "" if kind == "previous" else "no healthy deploy in the history"}
    if kind == "previous":
        data["previous"] = previous
    return {"state": "ok", "data": data}


def test_the_group_goes_back_to_previous_only_when_every_node_has_the_same_last_good_deploy():
    same = {"n0": target(), "n1": target()}
    assert serving.kdtree_serving_group_target(same, "ds", ["n0", "n1"]) == {"target": "previous", "why": ""}


def test_a_node_that_can_only_go_to_stock_takes_the_whole_group_to_stock():
    got = groups.rollback_target("ds", ["n0", "n1"], {"n0": target(), "n1": target("stock")})
    assert got["target"] == "stock"
    assert "n1 goes back to stock (no healthy deploy in the history)" in got["why"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("build_id", "b0"),
        ("patch_digest", "p0"),
        ("mode", "validate"),
        ("nccl_env", {"NCCL_P2P_LEVEL": "PIX"}),
    ],
)
def test_nodes_whose_last_good_deploys_differ_go_back_to_stock(field, value):
    got = groups.rollback_target("ds", ["n0", "n1"], {"n0": target(), "n1": target(**{field: value})})
    assert got["target"] == "stock"
    assert f"differ in {field}" in got["why"]


def test_a_node_without_a_word_counts_as_one_that_cannot_go_back():
    got = groups.rollback_target("ds", ["n0", "n1"], {"n0": target()})
    assert got == {"target": "stock", "why": "serving group ds: n1 sent no rollback target"}
    with pytest.raises(AnsibleFilterError, match="posts must be a mapping"):
        serving.kdtree_serving_group_target(None, "ds", ["n0"])
