"""How many hosts a rollout takes out of service at once: the deploy's batches (the play's `serial`)
and the drain's share, both from one setting, kdtree_deploy_max_unavailable.

The setting is a count (a whole number >= 1: at most that many hosts at once) or a share of the play's
hosts ('25%', or a number in (0, 1]: at most floor(share x hosts) at once, at least one). Empty takes
DEFAULT_MAX_UNAVAILABLE.

batches() answers the play's `serial` as explicit batch sizes: the canary (one host) first, then
batches of at most the setting's count. An explicit kdtree_deploy_serial is kept when no batch it makes
(Ansible's rules: 'N%' is floor(N% x hosts), at least one; the last item repeats; 0 or less is every
host left) is larger than the setting allows, and refused otherwise. A drain share that would refuse
one of the batches is refused too: the two settings never contradict each other mid-rollout.

drain_share() answers the share the drain's safety rule applies (roles/kdtree_drain): the operator's
kdtree_drain_max_share when set, else the share kdtree_deploy_max_unavailable amounts to.

Every refusal raises CapacityError naming the variables; nothing here reads a host, a file or a clock.
Controller only (the kdtree_rollout_* filters); stdlib only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

DEFAULT_MAX_UNAVAILABLE = "25%"

MAX_UNAVAILABLE = "kdtree_deploy_max_unavailable"
SERIAL = "kdtree_deploy_serial"
DRAIN_SHARE = "kdtree_drain_max_share"

# the drain's rule (module_utils/_router.py check_share, roles/kdtree_drain) floors share x pool with
# the same margin, so a share a count amounts to (3/16) gives back that count
_EPSILON = 1e-9
_COUNT = re.compile(r"\d+")
_PERCENT = re.compile(r"(\d+)%")


class CapacityError(ValueError):
    """A setting that is not a count or a share, or batches and shares that contradict each other."""


def _unset(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def parse_max_unavailable(value: Any) -> tuple[str, float]:
    """('count', n) or ('share', s) from kdtree_deploy_max_unavailable; empty takes the default."""
    if _unset(value):
        value = DEFAULT_MAX_UNAVAILABLE
    if isinstance(value, bool):
        raise CapacityError(f"{MAX_UNAVAILABLE} is the boolean {value}, not a count or a share")
    if isinstance(value, str):
        text = value.strip()
        percent = _PERCENT.fullmatch(text)
        if percent:
            share = int(percent.group(1)) / 100
            if not 0 < share <= 1:
                raise CapacityError(
                    f"{MAX_UNAVAILABLE} {value!r}: a share must be more than 0% and at most 100%"
                )
            return ("share", share)
        if _COUNT.fullmatch(text):
            value = int(text)
        else:
            try:
                value = float(text)
            except ValueError:
                raise CapacityError(
                    f"{MAX_UNAVAILABLE} {value!r} is not a count (a whole number >= 1) or a share ('25%')"
                ) from None
    if isinstance(value, int):
        if value < 1:
            raise CapacityError(f"{MAX_UNAVAILABLE} {value!r}: a count must be at least 1")
        return ("count", float(value))
    if isinstance(value, float):
        if not (math.isfinite(value) and 0 < value <= 1):
            raise CapacityError(
                f"{MAX_UNAVAILABLE} {value!r}: a share is in (0, 1] ('25%', 0.25); a count is whole"
            )
        return ("share", value)
    raise CapacityError(
        f"{MAX_UNAVAILABLE} {value!r} is not a count (a whole number >= 1) or a share ('25%')"
    )


def _floor_share(share: float, hosts: int) -> int:
    return max(1, math.floor(share * hosts + _EPSILON))


def allowed(max_unavailable: Any, hosts: int) -> int:
    """How many of `hosts` may be out of service at once (at least one)."""
    kind, amount = parse_max_unavailable(max_unavailable)
    if kind == "count":
        return int(amount)
    return _floor_share(amount, hosts)


def _hosts(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CapacityError(f"the play's host count must be a whole number >= 0, got {value!r}")
    return value


def _serial_item(item: Any, hosts: int) -> int:
    """One serial item as Ansible reads it (utils/helpers.py pct_to_int)."""
    if isinstance(item, bool):
        raise CapacityError(f"{SERIAL} item {item!r} is a boolean, not a count or 'N%'")
    if isinstance(item, int):
        return item
    if isinstance(item, str):
        text = item.strip()
        percent = _PERCENT.fullmatch(text)
        if percent:
            return int(int(percent.group(1)) / 100 * hosts) or 1
        if re.fullmatch(r"-?\d+", text):
            return int(text)
    raise CapacityError(f"{SERIAL} item {item!r} is not a count or 'N%'")


def serial_sizes(serial: Any, hosts: int) -> list[int]:
    """The batch sizes Ansible makes of `hosts` with this serial (playbook_executor's batches)."""
    items = list(serial) if isinstance(serial, Sequence) and not isinstance(serial, str) else [serial]
    if not items:
        return [hosts] if hosts else []
    sizes: list[int] = []
    left, index = hosts, 0
    while left > 0:
        size = _serial_item(items[index], hosts)
        if size <= 0:
            sizes.append(left)
            break
        sizes.append(min(size, left))
        left -= size
        index = min(index + 1, len(items) - 1)
    return sizes


def _share(value: Any) -> float:
    if isinstance(value, bool):
        raise CapacityError(f"{DRAIN_SHARE} is the boolean {value}, not a share in (0, 1]")
    try:
        share = float(value)
    except (TypeError, ValueError):
        raise CapacityError(f"{DRAIN_SHARE} {value!r} is not a share in (0, 1]") from None
    if not (math.isfinite(share) and 0 < share <= 1):
        raise CapacityError(f"{DRAIN_SHARE} ({value!r}) must be in (0, 1]")
    return share


def _packed(unit_sizes: Sequence[int], most: int) -> list[int]:
    """The canary (the first unit) first, then as many whole units per batch as `most` allows."""
    sizes: list[int] = []
    for index, size in enumerate(unit_sizes):
        if index == 0 or sizes[-1] + size > most or len(sizes) == 1:
            sizes.append(size)
        else:
            sizes[-1] += size
    return sizes


def batches(
    hosts: Any,
    max_unavailable: Any = "",
    serial: Any = "",
    drain_share: Any = "",
    units: Sequence[int] | None = None,
) -> list[int]:
    """The batch sizes of a rollout over `hosts` hosts (see the module's docstring); refuses an
    explicit serial or a drain share that contradicts kdtree_deploy_max_unavailable. With `units` (the
    sizes of the rollout's units in the play's order: 1 for a host alone, a serving group's size) no
    batch cuts a unit and a unit larger than the setting allows is refused."""
    count = _hosts(hosts)
    most = allowed(max_unavailable, count)
    shown = DEFAULT_MAX_UNAVAILABLE if _unset(max_unavailable) else max_unavailable
    unit_sizes = [1] * count if units is None else [int(u) for u in units]
    if sum(unit_sizes) != count:
        raise CapacityError(f"the units {unit_sizes} do not add up to the play's {count} hosts")
    if unit_sizes and max(unit_sizes) > most:
        raise CapacityError(
            f"a serving group of {max(unit_sizes)} hosts restarts whole, but {MAX_UNAVAILABLE} {shown!r} "
            f"allows at most {most} of the play's {count} hosts out of service at once: raise "
            f"{MAX_UNAVAILABLE} to at least {max(unit_sizes)}"
        )
    if _unset(serial) or serial == []:
        sizes = _packed(unit_sizes, most) if count else []
    else:
        sizes = serial_sizes(serial, count)
        inside = _cuts(sizes, unit_sizes)
        if inside:
            raise CapacityError(
                f"{SERIAL} {serial!r} makes batches {sizes} that end inside a serving group (after host "
                f"{', '.join(str(i) for i in inside)} of the play's order): a group restarts whole; make the "
                f"batches end between groups, or leave {SERIAL} unset (the batches then keep groups whole)"
            )
        if sizes and max(sizes) > most:
            raise CapacityError(
                f"{SERIAL} {serial!r} makes a batch of {max(sizes)} of the play's {count} hosts, but "
                f"{MAX_UNAVAILABLE} {shown!r} allows at most {most} out of service at once: make the batches "
                f"smaller, raise {MAX_UNAVAILABLE}, or leave {SERIAL} unset (the batches then derive from "
                f"{MAX_UNAVAILABLE})"
            )
    if not _unset(drain_share) and sizes:
        share = _share(drain_share)
        drained = _floor_share(share, count)
        if drained < max(sizes):
            raise CapacityError(
                f"{DRAIN_SHARE} {share:g} lets the drain take {drained} of the play's {count} hosts out at "
                f"once, but the batches {sizes} ({SERIAL} {serial!r}, {MAX_UNAVAILABLE} {shown!r}) restart "
                f"up to {max(sizes)} together: the drain would refuse the rollout mid-way. Lower "
                f"{MAX_UNAVAILABLE}, or raise {DRAIN_SHARE}, or leave it unset (it then derives from "
                f"{MAX_UNAVAILABLE})"
            )
    return sizes or [1]


def _cuts(sizes: Sequence[int], unit_sizes: Sequence[int]) -> list[int]:
    """The batch ends of `sizes` (as host counts) that fall inside a unit."""
    bounds, total = set(), 0
    for size in unit_sizes:
        total += size
        bounds.add(total)
    out, done = [], 0
    for size in sizes:
        done += size
        if done not in bounds and done < total:
            out.append(done)
    return out


def drain_share(max_share: Any, max_unavailable: Any, hosts: Any) -> float:
    """The share the drain's safety rule applies: kdtree_drain_max_share when set, else the share of
    the play's hosts kdtree_deploy_max_unavailable amounts to (a count c of n hosts: c / n, at most 1)."""
    if not _unset(max_share):
        return _share(max_share)
    count = _hosts(hosts)
    kind, amount = parse_max_unavailable(max_unavailable)
    if kind == "share":
        return amount
    return 1.0 if count == 0 else min(1.0, amount / count)


def check_batch(
    batch: Any, sizes: list[int], hosts: Any, max_unavailable: Any = "", serial: Any = ""
) -> None:
    """Refuses a running batch larger than the plan's largest: the play's serial sees only extra vars
    and play vars, so a kdtree_deploy_max_unavailable or kdtree_deploy_serial set in the inventory
    reaches the hosts but not the batches; the deploy role finds it here, before the batch changes."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise CapacityError(f"the running batch's size must be a whole number >= 1, got {batch!r}")
    if batch > max(sizes):
        shown = DEFAULT_MAX_UNAVAILABLE if _unset(max_unavailable) else max_unavailable
        raise CapacityError(
            f"this batch has {batch} of the play's {hosts} hosts, but {MAX_UNAVAILABLE} {shown!r} and "
            f"{SERIAL} {serial!r} as the hosts see them allow batches {sizes}: the play's serial sees only "
            f"extra vars (-e) and play vars, never the inventory's; set {MAX_UNAVAILABLE} and {SERIAL} "
            "with -e or in the play, not in the inventory"
        )
