"""Absorbed-MLA verify inputs laid out the way SGLang's eager TARGET_VERIFY metadata is built."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from kdtree_verify.kernel.reference import tree_mask
from kdtree_verify.kernel.shapes import HEAD_DIM_QK as QK
from kdtree_verify.kernel.shapes import HEAD_DIM_V as VD


@dataclass
class VerifyCase:
    q: torch.Tensor
    k_extend: torch.Tensor
    v_extend: torch.Tensor
    kv_buffer: torch.Tensor
    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    custom_mask: torch.Tensor
    mask_indptr: torch.Tensor
    batch_size: int
    n: int
    sm_scale: float

    def ref_kwargs(self) -> dict:
        return {
            "q": self.q,
            "k_extend": self.k_extend,
            "v_extend": self.v_extend,
            "kv_buffer": self.kv_buffer,
            "qo_indptr": self.qo_indptr,
            "kv_indptr": self.kv_indptr,
            "kv_indices": self.kv_indices,
            "custom_mask": self.custom_mask,
            "mask_indptr": self.mask_indptr,
            "batch_size": self.batch_size,
            "sm_scale": self.sm_scale,
        }


TREES = {
    "chain": [-1, 0, 1, 2],
    "binary": [-1, 0, 0, 1],
    "star": [-1, 0, 0, 0],
}


def make_case(
    prefixes: list[int],
    tree: str,
    heads: int = 4,
    index_dtype=torch.int64,
    seed: int = 0,
    dtype=torch.float32,
    pool: int = 96,
) -> VerifyCase:
    gen = torch.Generator().manual_seed(seed)
    parents = TREES[tree]
    n, bs = len(parents), len(prefixes)
    total = n * bs
    kv_buffer = torch.randn(pool, 1, QK, generator=gen).to(dtype)
    perm = torch.randperm(pool, generator=gen)  # non-contiguous pool slots
    kv_indices = perm[: sum(prefixes)].to(index_dtype)
    kv_indptr = torch.tensor([0, *torch.tensor(prefixes).cumsum(0).tolist()], dtype=index_dtype)
    qo_indptr = torch.arange(0, (bs + 1) * n, n, dtype=index_dtype)
    block = tree_mask(parents)
    pieces, mask_indptr = [], [0]
    for p in prefixes:
        full = torch.cat([torch.ones(n, p, dtype=torch.bool), block], dim=1)  # [n, p+n]
        pieces.append(full.reshape(-1))
        mask_indptr.append(mask_indptr[-1] + n * (p + n))
    return VerifyCase(
        q=torch.randn(total, heads, QK, generator=gen).to(dtype),
        k_extend=torch.randn(total, 1, QK, generator=gen).to(dtype),
        v_extend=torch.randn(total, 1, VD, generator=gen).to(dtype),
        kv_buffer=kv_buffer,
        qo_indptr=qo_indptr,
        kv_indptr=kv_indptr,
        kv_indices=kv_indices,
        custom_mask=torch.cat(pieces),
        mask_indptr=torch.tensor(
            mask_indptr, dtype=torch.int64 if index_dtype == torch.int64 else torch.int32
        ),
        batch_size=bs,
        n=n,
        sm_scale=QK**-0.5,
    )
