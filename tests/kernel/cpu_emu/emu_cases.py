"""The case set of the CPU-emulated kernel: every variant and boundary, short prefixes (make test) and long
ones (make test-kernel-cpu-full), plus seeded random cases. Each case is a kernel_cases.CaseSpec, the
host-side call (splits, layout hint, max_extend_len) and optional extra rows of a graph-sized buffer.

Layouts: the library picks 32 rows / 32-key tiles when H * max_extend_len <= 32, else 64 rows / 16-key
tiles; `block_m=64` forces the large layout on a small shape. Splits: a split covers at least
kdtree_verify_min_split_tiles tiles (64 keys for H * n <= 4), so short requests with few rows are what
give several non-empty splits quickly.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from kernel_cases import CaseSpec

FP8 = torch.float8_e4m3fn


@dataclass
class EmuCase:
    name: str
    spec: CaseSpec
    num_splits: int = 1  # 0: the library's choice for num_sms
    block_m: int = 0
    max_extend_len: int | None = None  # None: max(spec.ns)
    extra_rows: int = 0  # graph-sized q/k/v/out: rows past qo_indptr[-1] that must stay untouched
    num_sms: int = 132
    edit: Callable[[dict[str, Any]], None] | None = field(default=None, repr=False)

    @property
    def max_len(self) -> int:
        return self.max_extend_len if self.max_extend_len is not None else max(self.spec.ns)


def _no_key_visible(case: dict[str, Any]) -> None:
    """Request 0 has no prefix; clear its whole tree-mask block: its rows see no key at all."""
    n = int(case["qo_indptr"][1] - case["qo_indptr"][0])
    m0 = int(case["mask_indptr"][0])
    case["custom_mask"][m0 : m0 + n * n] = 0


def _spec(prefix: list[int], ns: list[int], heads: int, seed: int, **kw: Any) -> CaseSpec:
    return CaseSpec(prefix_lens=prefix, ns=ns, heads=heads, seed=seed, **kw)


SHORT: list[EmuCase] = [
    # layouts, tails, draft keys across a tile boundary
    EmuCase("bm32-h8n4-tree-tail", _spec([40], [4], 8, 1)),
    EmuCase("bm64-forced-h8n4-tree", _spec([40], [4], 8, 2), block_m=64),
    EmuCase("bm64-h16n4-causal", _spec([37], [4], 16, 3, causal=True)),
    EmuCase("bm64-h16n4-tile-multiple", _spec([12], [4], 16, 4)),
    EmuCase("bm32-h8n4-tile-multiple", _spec([28], [4], 8, 5)),
    EmuCase("bm64-drafts-across-tiles", _spec([14], [4], 16, 6)),
    EmuCase("bm64-h5n7-odd-heads", _spec([23], [7], 5, 7)),
    EmuCase("bm32-h3n7-odd-heads-causal", _spec([9], [7], 3, 8, causal=True)),
    # head counts
    EmuCase("h1n1", _spec([5], [1], 1, 9)),
    EmuCase("h128n1-two-m-blocks", _spec([20], [1], 128, 10)),
    EmuCase("h64n3-three-m-blocks-causal", _spec([11], [3], 64, 11, causal=True)),
    # KV dtypes and scales, index dtypes
    EmuCase(
        "fp8-scales-i32-bm32",
        _spec([50], [4], 8, 12, kv_dtype=FP8, k_scale=0.5, v_scale=2.0, index_dtype=torch.int32),
    ),
    EmuCase("fp8-scale-i64-bm64", _spec([33], [2], 32, 13, kv_dtype=FP8, k_scale=0.25)),
    EmuCase("bf16-scales", _spec([30], [4], 16, 14, k_scale=0.5, v_scale=1.5)),
    EmuCase(
        "qo-i64-mask-u8-index-i32",
        _spec([26], [5], 8, 15, qo_dtype=torch.int64, mask_dtype=torch.uint8, index_dtype=torch.int32),
    ),
    EmuCase("qo-i32-index-i64-mask-bool", _spec([19], [3], 4, 16)),
    # batches, empty prefixes, rows that see nothing
    EmuCase("batch-mixed-bm32", _spec([0, 17, 3, 31], [4, 1, 4, 2], 8, 17)),
    EmuCase("batch-causal-bm64", _spec([21, 0, 9], [3, 5, 1], 16, 18, causal=True)),
    EmuCase("no-prefix-in-the-batch", _spec([0, 0], [3, 4], 8, 28)),
    EmuCase("no-prefix-in-the-batch-causal-splits", _spec([0, 0], [2, 1], 2, 29, causal=True), num_splits=2),
    EmuCase("rows-see-no-key", _spec([0, 12], [3, 2], 8, 19, mask_dtype=torch.uint8), edit=_no_key_visible),
    EmuCase("rows-see-no-key-split", _spec([0, 150], [2, 2], 1, 20), num_splits=3, edit=_no_key_visible),
    # split-KV + combine
    EmuCase("splits3-bm32", _spec([200], [2], 1, 21), num_splits=3),
    EmuCase("splits3-bm64-forced", _spec([300], [2], 4, 22), num_splits=3, block_m=64),
    EmuCase("splits6-empty-tail-causal", _spec([150, 3], [2, 1], 2, 23, causal=True), num_splits=6),
    EmuCase("splits-library-choice", _spec([300], [1], 1, 24), num_splits=0),
    EmuCase(
        "splits2-fp8-scales", _spec([250], [2], 2, 25, kv_dtype=FP8, k_scale=0.5, v_scale=0.5), num_splits=2
    ),
    # the length-balanced partition (ABI 5): units spanning several requests (whole ones written
    # directly), requests cut between units, empty requests (n = 0, as a padded graph batch has)
    EmuCase("partition-mixed-bm32", _spec([300, 5, 0, 120, 64, 1], [2, 1, 2, 2, 2, 1], 2, 30), num_splits=2),
    EmuCase(
        "partition-mixed-bm64-causal-fp8",
        _spec([3, 260, 17, 0, 90], [3, 2, 4, 1, 3], 16, 31, causal=True, kv_dtype=FP8, k_scale=0.5),
        num_splits=3,
    ),
    EmuCase(
        "partition-empty-requests-graph-sized",
        _spec([40, 77, 0, 150, 9], [2, 0, 3, 0, 1], 4, 32, mask_dtype=torch.uint8),
        num_splits=4,
        max_extend_len=4,
        extra_rows=3,
    ),
    EmuCase(
        "partition-two-m-blocks",
        _spec([100, 3, 180], [2, 4, 1], 32, 33),
        num_splits=2,
    ),
    # graph-sized buffers: max_extend_len above every draft length, rows past qo_indptr[-1]
    EmuCase(
        "graph-sized-bm32",
        _spec([10, 25], [4, 2], 4, 26, qo_dtype=torch.int64, mask_dtype=torch.uint8),
        max_extend_len=6,
        extra_rows=3,
    ),
    EmuCase(
        "graph-sized-bm64-splits",
        _spec([120, 7], [3, 1], 16, 27),
        max_extend_len=5,
        extra_rows=2,
        num_splits=2,
    ),
]

# More requests than a CTA has threads: the device plan's scans run over several chunks of the batch.
WIDE_BATCH = EmuCase(
    "partition-300-requests",
    _spec([(37 * r) % 61 for r in range(300)], [1 + r % 2 for r in range(300)], 1, 34),
    num_splits=2,
)

LONG: list[EmuCase] = [
    EmuCase("long-bm32-h8n4-5000", _spec([5000], [4], 8, 101), num_splits=4),
    EmuCase("long-bm64-h16n4-4096-causal", _spec([4096], [4], 16, 102, causal=True), num_splits=2),
    EmuCase(
        "long-fp8-h8n4-3000",
        _spec([3000], [4], 8, 103, kv_dtype=FP8, k_scale=0.5, v_scale=2.0),
        num_splits=0,
        num_sms=8,
    ),
    EmuCase(
        "long-batch-h8n4", _spec([1500, 777, 2049], [4, 3, 4], 8, 104, index_dtype=torch.int32), num_splits=2
    ),
    EmuCase("long-h128n1-2000", _spec([2000], [1], 128, 105), num_splits=1),
    EmuCase("long-bf16-one-split-4999", _spec([4999], [2], 2, 106, k_scale=0.5, v_scale=2.0)),
]


def random_cases(count: int, seed: int, max_prefix: int) -> list[EmuCase]:
    """`count` seeded random cases: batch 1-3, H in {1, 2, 3, 8, 16, 32}, n 1-6, prefixes 0..max_prefix,
    every dtype mix, tree or causal, 1-4 splits, the layout hint when it is valid."""
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        batch = rng.randint(1, 3)
        heads = rng.choice([1, 2, 3, 8, 16, 32])
        ns = [rng.randint(1, 6) for _ in range(batch)]
        prefixes = [rng.randint(0, max_prefix) for _ in range(batch)]
        fp8 = rng.random() < 0.4
        k_scale = rng.choice([0.25, 0.5, 1.0, 2.0])
        spec = _spec(
            prefixes,
            ns,
            heads,
            seed * 1000 + i,
            kv_dtype=FP8 if fp8 else torch.bfloat16,
            k_scale=k_scale,
            v_scale=rng.choice([0.5, 1.0, 2.0]),
            causal=rng.random() < 0.4,
            index_dtype=rng.choice([torch.int32, torch.int64]),
            qo_dtype=rng.choice([torch.int32, torch.int64]),
            mask_dtype=rng.choice([torch.bool, torch.uint8]),
        )
        small = heads * max(ns) <= 32
        block_m = rng.choice([0, 64, 32] if small else [0, 64])
        cases.append(EmuCase(f"random-{seed}-{i}", spec, num_splits=rng.randint(1, 4), block_m=block_m))
    return cases


RANDOM_SHORT = random_cases(6, seed=7, max_prefix=70)
RANDOM_FULL = random_cases(24, seed=8, max_prefix=600)
