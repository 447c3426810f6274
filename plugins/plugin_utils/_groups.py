"""Serving groups: the hosts of one multi-node SGLang server (one unit per node, started with
--nnodes N --node-rank R --dist-init-addr HOST:PORT, rank 0 serving HTTP) rolled out as one unit.

A serving group is an inventory group named GROUP_PREFIX + <name> (kdtree_serving_ds3 holds the nodes
of the server ds3). Inventory groups, not a host variable, because the play's `serial`, which cuts the
batches, is templated before any host's variables exist: it sees `groups` only. An operator who keeps
the name as a host variable makes the groups with the constructed inventory plugin's keyed_groups
(docs/serving-groups.md).

units() cuts the play's hosts, in the play's order, into units (a host alone, or all the hosts of one
group); a group whose hosts are not next to each other, a host in two groups, or a group the play only
partly holds (a --limit that leaves a node out) is refused: a group deploys, restarts and rolls back
whole. group_check() is the group's consistency rule over what each node's preflight found (one
server: the same --nnodes, equal to the group's size, one --dist-init-addr, every rank once, the same
build and mode). Controller only (the kdtree_serving_* filters); stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

GROUP_PREFIX = "kdtree_serving_"


class GroupError(ValueError):
    """An inventory whose serving groups cannot be rolled out whole, or a group whose nodes disagree."""


def serving_groups(groups: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """The serving groups of the inventory's `groups` by name (the prefix taken off), empty ones left out."""
    if not isinstance(groups, Mapping):
        raise GroupError(f"the inventory's groups must be a mapping, not {type(groups).__name__}")
    out: dict[str, list[str]] = {}
    for group, hosts in groups.items():
        if isinstance(group, str) and group.startswith(GROUP_PREFIX) and hosts:
            name = group[len(GROUP_PREFIX) :]
            if not name:
                raise GroupError(f"the inventory group {group!r} names no serving group (add a name to it)")
            out[name] = list(hosts)
    return out


def _group_by_host(groups: Mapping[str, Sequence[str]]) -> dict[str, str]:
    owner: dict[str, str] = {}
    for name, hosts in serving_groups(groups).items():
        for host in hosts:
            if host in owner and owner[host] != name:
                raise GroupError(
                    f"{host} is in two serving groups, {GROUP_PREFIX}{owner[host]} and {GROUP_PREFIX}{name}: "
                    "a node serves one server"
                )
            owner[host] = name
    return owner


def units(hosts: Sequence[str], groups: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """The play's hosts, in order, cut into rollout units: a host alone, or a serving group's hosts."""
    if isinstance(hosts, str) or not isinstance(hosts, Sequence):
        raise GroupError(f"the play's hosts must be a list of names, not {hosts!r}")
    owner = _group_by_host(groups)
    members = serving_groups(groups)
    in_play = set(hosts)
    out: list[list[str]] = []
    seen: set[str] = set()
    for host in hosts:
        name = owner.get(host)
        if name is None:
            out.append([host])
            continue
        if name in seen:
            if out[-1][0] not in members[name]:
                raise GroupError(
                    f"the hosts of serving group {name} ({', '.join(members[name])}) are not next to each "
                    f"other in the play's order ({host} comes after {out[-1][-1]}): list them together "
                    "in the inventory"
                )
            out[-1].append(host)
            continue
        left_out = [h for h in members[name] if h not in in_play]
        if left_out:
            raise GroupError(
                f"the play holds {host} of serving group {name} but not {', '.join(left_out)}: a group "
                "is deployed, restarted and rolled back whole (limit the play to all of "
                f"{', '.join(members[name])}, or to none of them)"
            )
        seen.add(name)
        out.append([host])
    return out


def group_of(host: str, hosts: Sequence[str], groups: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """{name, members (in the play's order)} of the host's serving group, {} for a host alone."""
    name = _group_by_host(groups).get(host)
    if name is None:
        return {}
    for unit in units(hosts, groups):
        if host in unit:
            return {"name": name, "members": unit}
    raise GroupError(f"{host} is not one of the play's hosts")


def fit_serial(sizes: Sequence[int], unit_sizes: Sequence[int]) -> list[int]:
    """Batch sizes that never cut a unit: each batch of `sizes` grows to the end of the unit it cuts
    (the rollback's serial: one host at a time becomes one group at a time)."""
    out: list[int] = []
    bounds, total = [], 0
    for size in unit_sizes:
        total += size
        bounds.append(total)
    done, index = 0, 0
    wanted = list(sizes) or [total]
    while done < total:
        want = wanted[min(index, len(wanted) - 1)]
        end = min(total, done + max(1, want))
        end = next(b for b in bounds if b >= end)
        out.append(end - done)
        done, index = end, index + 1
    return out


FIELDS = ("nnodes", "dist_init_addr", "build_id", "mode")


def group_check(name: str, members: Sequence[str], posts: Mapping[str, Any]) -> list[str]:
    """What makes the group's nodes not one server, from each node's preflight word ({data: {nnodes,
    node_rank, dist_init_addr, build_id, mode}}); empty when they agree. A missing word is a problem."""
    problems: list[str] = []
    facts: dict[str, dict[str, Any]] = {}
    for host in members:
        data = (posts.get(host) or {}).get("data")
        if not isinstance(data, Mapping):
            problems.append(f"{host} sent no preflight facts")
            continue
        facts[host] = dict(data)
    if problems:
        return problems
    size = len(members)
    for host, data in facts.items():
        if data.get("nnodes") != size:
            problems.append(
                f"{host} runs with --nnodes {data.get('nnodes')}, but serving group {name} has {size} nodes"
            )
        if not data.get("dist_init_addr"):
            problems.append(f"{host}'s unit sets no --dist-init-addr (the nodes of one server meet there)")
    for field in FIELDS[1:]:
        values = {str(data.get(field)) for data in facts.values()}
        if len(values) > 1:
            shown = ", ".join(f"{h} {data.get(field)!r}" for h, data in facts.items())
            problems.append(f"the nodes disagree on {field}: {shown}")
    ranks: dict[Any, list[str]] = {}
    for host, data in facts.items():
        ranks.setdefault(data.get("node_rank"), []).append(host)
    for rank, hosts in sorted(ranks.items(), key=lambda kv: str(kv[0])):
        if len(hosts) > 1:
            problems.append(f"--node-rank {rank} is on {len(hosts)} nodes ({', '.join(hosts)})")
    missing = [r for r in range(size) if r not in ranks]
    if missing:
        problems.append(f"no node has --node-rank {', '.join(str(r) for r in missing)}")
    return problems


def rank0(members: Sequence[str], posts: Mapping[str, Any]) -> str:
    """The member whose preflight word says --node-rank 0 ('' when none does)."""
    for host in members:
        if ((posts.get(host) or {}).get("data") or {}).get("node_rank") == 0:
            return host
    return ""


# What makes two nodes' last good deploys the same deploy of the server: the kernel build, the patch,
# the verify mode and the NCCL settings (a server's ranks must match on all four).
SAME_DEPLOY = ("build_id", "patch_digest", "mode", "nccl_env")


def rollback_target(name: str, members: Sequence[str], posts: Mapping[str, Any]) -> dict[str, str]:
    """Where every node of the group goes back when any node fails: {target, why}.

    Each node posts the target its own history allows ({data: {target: previous|stock, why_stock,
    previous: {build_id, patch_digest, mode, nccl_env}}}). The group goes back to the previous deploy
    only when every node can and their previous deploys are the same deploy (SAME_DEPLOY); otherwise
    every node goes to stock (the operator's own unit on each node: one server again), and `why` says
    which node or which field stopped previous. A node with no word counts as one that cannot."""
    previous: dict[str, Mapping[str, Any]] = {}
    for host in members:
        data = (posts.get(host) or {}).get("data")
        if not isinstance(data, Mapping):
            return {"target": "stock", "why": f"serving group {name}: {host} sent no rollback target"}
        if data.get("target") != "previous" or not isinstance(data.get("previous"), Mapping):
            why = str(data.get("why_stock") or "it has no last good deploy to go back to")
            return {"target": "stock", "why": f"serving group {name}: {host} goes back to stock ({why})"}
        previous[host] = data["previous"]
    for field in SAME_DEPLOY:
        values = {repr(entry.get(field)) for entry in previous.values()}
        if len(values) > 1:
            shown = ", ".join(f"{host} {entry.get(field)!r}" for host, entry in previous.items())
            return {
                "target": "stock",
                "why": f"serving group {name}: the nodes' last good deploys differ in {field} ({shown})",
            }
    return {"target": "previous", "why": ""}
