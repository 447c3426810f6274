"""The balance of the kernel's work plan, without a GPU: how long a launch's longest SM works against an
even share of the batch's keys over every SM.

The plan is the library's own (`VerifyKernel.partition`, i.e. kdtree_verify_partition: the functions the
kernel plans with, run on the host). Its CTAs (m_blocks per work unit, in launch order: the m-block
fastest, then the unit) are placed as the hardware's block scheduler does, each on the SM that frees
first (one CTA per SM: ~98 KB of shared memory each). The figure is that makespan, in key tiles, over the
balanced share: the batch's tiles spread evenly over all SMs, or one tile per CTA when the batch has
fewer tiles than SMs (a tile is the smallest piece of work). 1.0 is a perfectly even launch. Costs are
key tiles only: a segment's prologue and the combine are not counted.
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
    usable = max(1, min(max(num_sms, 1), part.total_tiles * part.m_blocks))
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


def plan_of(
    vk: VerifyKernel,
    prefixes: list[int],
    ns: list[int],
    heads: int,
    kv_dtype: str = "bfloat16",
    num_sms: int = DEFAULT_SMS,
    block_m: int = 0,
) -> tuple[int, Partition]:
    """(units, the plan) of the call the binding would make for this batch on num_sms SMs."""
    n = max(ns, default=1)
    units = int(
        vk.lib.kdtree_verify_num_splits(num_sms, len(prefixes), heads, n, sum(prefixes), dtype_code(kv_dtype))
    )
    part = vk.partition(
        prefixes, ns, num_heads=heads, max_extend_len=n, num_splits=units, kv_dtype=kv_dtype, block_m=block_m
    )
    return units, part


def plan_balance(
    vk: VerifyKernel,
    prefixes: list[int],
    n: int,
    heads: int,
    kv_dtype: str = "bfloat16",
    num_sms: int = DEFAULT_SMS,
    block_m: int = 0,
) -> Balance:
    """The balance of the call the binding would make for this batch."""
    units, part = plan_of(vk, prefixes, [n] * len(prefixes), heads, kv_dtype, num_sms, block_m)
    return balance(part, units, num_sms)


def unit_edges(part: Partition, request_first_tile: int, request_tiles: int) -> list[int]:
    """The request's local tile positions where one work unit's range ends and the next begins."""
    edges, at = [], 0
    for tiles in part.unit_tiles:
        at += tiles
        if request_first_tile < at < request_first_tile + request_tiles:
            edges.append(at - request_first_tile)
    return edges
