"""The balance of the kernel's work plan, without a GPU: how long a launch's longest SM works against an
even share of the batch's keys.

The plan is the library's own (`VerifyKernel.partition`, i.e. kdtree_verify_partition: the functions the
kernel plans with, run on the host). Its CTAs (m_blocks per work unit, in launch order: the m-block
fastest, then the unit) are placed as the hardware's block scheduler does, each on the SM that frees
first (one CTA per SM: ~98 KB of shared memory each). The figure is that makespan, in key tiles, over the
balanced share: the batch's tiles spread evenly over the CTAs it can use, that is every SM, or as many
CTAs as the split floor allows when the batch is too short for all of them (a unit shorter than
`min_unit_tiles` would write partial outputs that cost more traffic than its keys: kdtree_verify.h). 1.0
is a perfectly even launch; a mix whose longest request sets the time is far above it. Costs are key
tiles only: a segment's Q load and partial output and the combine are not counted.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from kdtree_verify.kernel.binding import Partition, VerifyKernel, dtype_code

DEFAULT_SMS = 132  # an H200 / H100 SXM


@dataclass(frozen=True)
class Balance:
    num_splits: int
    units: int
    total_tiles: int
    makespan_tiles: int  # the busiest SM's tiles
    share_tiles: float  # total_tiles * m_blocks / the CTAs the batch can use
    longest_unit_tiles: int
    most_segments: int

    @property
    def ratio(self) -> float:
        return self.makespan_tiles / self.share_tiles if self.share_tiles else 1.0


def makespan(cta_costs: list[int], num_sms: int) -> int:
    """Greedy list scheduling in launch order: each CTA starts on the SM that is free first."""
    free = [0] * max(num_sms, 1)
    for cost in cta_costs:
        start = heapq.heappop(free)
        heapq.heappush(free, start + cost)
    return max(free)


def balance(part: Partition, num_splits: int, num_sms: int = DEFAULT_SMS) -> Balance:
    ctas = [tiles for tiles in part.unit_tiles for _ in range(part.m_blocks)]
    usable = min(max(num_sms, 1), part.m_blocks * max(1, -(-part.total_tiles // max(part.min_unit_tiles, 1))))
    return Balance(
        num_splits=num_splits,
        units=len(part.unit_tiles),
        total_tiles=part.total_tiles,
        makespan_tiles=makespan(ctas, num_sms),
        share_tiles=part.total_tiles * part.m_blocks / usable,
        longest_unit_tiles=max(part.unit_tiles, default=0),
        most_segments=max(part.unit_segments, default=0),
    )


def request_tiles(prefix: int, n: int, block_n: int) -> int:
    """A request's key tiles (its prefix and its n draft keys), as the kernel's request_tiles counts them."""
    return 0 if n <= 0 or prefix < 0 else -(-(prefix + n) // block_n)


def abi4_balance(
    part: Partition, prefixes: list[int], n: int, num_splits: int, num_sms: int = DEFAULT_SMS
) -> Balance:
    """The balance the same call had under ABI 4's per-request splits (the figure before the batch-wide
    plan): CTA (m-block, split s, request r) took tiles [s * per, (s + 1) * per) of request r alone, with
    per = max(ceil(tiles_r / num_splits), min_unit_tiles), launched m-block fastest, then the split, then
    the request; the share is the same as balance()'s, so the two figures compare."""
    costs: list[int] = []
    units: list[int] = []
    for prefix in prefixes:
        tiles = request_tiles(prefix, n, part.block_n)
        per = max(-(-tiles // max(num_splits, 1)), part.min_unit_tiles if num_splits > 1 else 0, 1)
        for split in range(max(num_splits, 1)):
            cost = max(0, min(tiles, (split + 1) * per) - split * per)
            units.append(cost)
            costs.extend([cost] * part.m_blocks)
    now = balance(part, num_splits, num_sms)
    return Balance(
        num_splits=num_splits,
        units=len(units),
        total_tiles=now.total_tiles,
        makespan_tiles=makespan(costs, num_sms),
        share_tiles=now.share_tiles,
        longest_unit_tiles=max(units, default=0),
        most_segments=1 if units else 0,
    )


def plan_balances(
    vk: VerifyKernel,
    prefixes: list[int],
    n: int,
    heads: int,
    kv_dtype: str = "bfloat16",
    num_sms: int = DEFAULT_SMS,
    block_m: int = 0,
) -> tuple[Balance, Balance]:
    """(ABI 4's per-request splits, today's plan) of the call the binding would make for this batch."""
    splits = int(
        vk.lib.kdtree_verify_num_splits(num_sms, len(prefixes), heads, n, sum(prefixes), dtype_code(kv_dtype))
    )
    part = vk.partition(
        prefixes,
        [n] * len(prefixes),
        num_heads=heads,
        max_extend_len=n,
        num_splits=splits,
        kv_dtype=kv_dtype,
        block_m=block_m,
    )
    return abi4_balance(part, prefixes, n, splits, num_sms), balance(part, splits, num_sms)


def unit_edges(part: Partition, request_first_tile: int, request_tiles: int) -> list[int]:
    """The request's local tile positions where one work unit's range ends and the next begins."""
    edges, at = [], 0
    for tiles in part.unit_tiles:
        at += tiles
        if request_first_tile < at < request_first_tile + request_tiles:
            edges.append(at - request_first_tile)
    return edges
