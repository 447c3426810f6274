"""Random verify-attention inputs in SGLang's layout (shared by tests/kernel and bench/kernel_bench.py).

One request r has `prefix_lens[r]` committed tokens in scattered pool slots (`kv_indices` is a random
permutation, never contiguous) and `ns[r]` draft tokens whose visibility follows a random tree: a
draft token sees itself and its ancestors. The mask block of a request is `[n, prefix+n]` bytes,
prefix part all ones (as SGLang builds it; the kernel must ignore it), flattened and concatenated.
With `causal=True` there is no mask (`custom_mask=None`, as DFlash's target verify): draft token t
sees draft tokens c <= t; mask_indptr is still passed, as SGLang's graph metadata does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from kdtree_verify.kernel.reference import tree_mask
from kdtree_verify.kernel.shapes import HEAD_DIM_QK, HEAD_DIM_V


@dataclass
class CaseSpec:
    prefix_lens: list[int]
    ns: list[int]
    heads: int
    kv_dtype: torch.dtype = torch.bfloat16
    index_dtype: torch.dtype = torch.int64
    qo_dtype: torch.dtype = torch.int32
    mask_dtype: torch.dtype = torch.bool
    k_scale: float = 1.0  # SGLang's k_descale: the fp8 cache holds K / k_scale
    v_scale: float | None = None  # SGLang's v_descale; None: the same as k_scale
    causal: bool = False
    seed: int = 0
    pool_slack: int = 7  # unused pool slots, so kv_indices never covers the pool exactly


def random_tree_mask(n: int, gen: torch.Generator) -> torch.Tensor:
    """[n, n] bool: row i sees j when j is i or an ancestor of i (parent(i) < i, random)."""
    parents = [-1] + [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, n)]
    return tree_mask(parents)


def make_case(spec: CaseSpec, device: str | torch.device) -> dict[str, Any]:
    """Keyword arguments for VerifyKernel.run / verify_attention_reference (without `out`)."""
    gen = torch.Generator().manual_seed(spec.seed)
    batch = len(spec.prefix_lens)
    assert len(spec.ns) == batch
    total_prefix = sum(spec.prefix_lens)
    total_tokens = sum(spec.ns)
    pool = total_prefix + spec.pool_slack
    heads = spec.heads

    q = torch.randn((total_tokens, heads, HEAD_DIM_QK), generator=gen).to(torch.bfloat16)
    k_extend = torch.randn((total_tokens, 1, HEAD_DIM_QK), generator=gen).to(torch.bfloat16)
    v_extend = torch.randn((total_tokens, 1, HEAD_DIM_V), generator=gen).to(torch.bfloat16)
    kv = torch.randn((pool, 1, HEAD_DIM_QK), generator=gen)
    if spec.kv_dtype == torch.float8_e4m3fn:
        kv_buffer = (kv / spec.k_scale).to(torch.float8_e4m3fn)
    else:
        kv_buffer = kv.to(spec.kv_dtype)
    slots = torch.randperm(pool, generator=gen)[:total_prefix]
    kv_indices = slots.to(spec.index_dtype)

    qo = [0]
    kvp = [0]
    mp = [0]
    masks = []
    for p, n in zip(spec.prefix_lens, spec.ns, strict=True):
        qo.append(qo[-1] + n)
        kvp.append(kvp[-1] + p)
        mp.append(mp[-1] + n * (p + n))
        block = torch.ones((n, p + n), dtype=torch.bool)
        if n and not spec.causal:
            block[:, p:] = random_tree_mask(n, gen)
        masks.append(block.reshape(-1))
    custom_mask = torch.cat(masks) if masks else torch.zeros(0, dtype=torch.bool)
    custom_mask = None if spec.causal else custom_mask.to(spec.mask_dtype)
    args = {
        "q": q,
        "k_extend": k_extend,
        "v_extend": v_extend,
        "kv_buffer": kv_buffer,
        "qo_indptr": torch.tensor(qo, dtype=spec.qo_dtype),
        "kv_indptr": torch.tensor(kvp, dtype=spec.index_dtype),
        "kv_indices": kv_indices,
        "custom_mask": custom_mask,
        "mask_indptr": torch.tensor(mp, dtype=spec.index_dtype),
        "batch_size": batch,
        "sm_scale": HEAD_DIM_QK**-0.5,
        "k_scale": spec.k_scale,
        "v_scale": spec.k_scale if spec.v_scale is None else spec.v_scale,
    }
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in args.items()}


def kernel_kwargs(case: dict[str, Any], out: torch.Tensor, max_extend_len: int) -> dict[str, Any]:
    return {**case, "out": out, "max_extend_len": max_extend_len}


def reference_kwargs(case: dict[str, Any]) -> dict[str, Any]:
    return dict(case)
