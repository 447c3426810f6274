"""Pure-torch reference of the verify attention (docs/CONTRACTS.md section 5), fp32 accumulation.

Ground truth for the tests and for the kernel track. Production never routes to it: without a
usable library the original Triton method runs.

Visibility, as SGLang's `extend_attention_fwd` with `skip_prefix_custom_mask=True`: the committed
prefix of request r (pool slots `kv_indices[kv_indptr[r]:kv_indptr[r+1]]`) is fully visible; draft
token `row` sees draft token `col` when
`custom_mask[mask_indptr[r] + row * (prefix_len + n) + prefix_len + col]` is non-zero, or, with
`custom_mask=None` (DFlash, and SGLang's `is_causal=True` path), when `col <= row`.

Scales, as `extend_attention_fwd`'s `k_scale` / `v_scale`: prefix scores are multiplied by `k_scale`,
prefix values by `v_scale`; the draft tokens' own K/V are never scaled.
"""

from __future__ import annotations

from typing import Any

import torch

from kdtree_verify.kernel.shapes import HEAD_DIM_V


def tree_mask(parents: list[int]) -> torch.Tensor:
    """[n, n] bool draft visibility of a tree: token i sees itself and its ancestors.

    `parents[i] < i` is the parent of token i, -1 for the root. This is the draft x draft block
    that `custom_mask` holds per request (row-major), as SGLang's tree speculation builds it.
    """
    n = len(parents)
    mask = torch.zeros((n, n), dtype=torch.bool)
    for i in range(n):
        j = i
        while j >= 0:
            mask[i, j] = True
            j = parents[j]
    return mask


def causal_mask(n: int) -> torch.Tensor:
    """[n, n] bool: the draft block of a chain (`custom_mask=None`): row t sees columns c <= t."""
    return torch.ones((n, n), dtype=torch.bool).tril()


def verify_attention_reference(
    *,
    q: torch.Tensor,
    k_extend: torch.Tensor,
    v_extend: torch.Tensor,
    kv_buffer: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    custom_mask: torch.Tensor | None,
    mask_indptr: torch.Tensor | None,
    batch_size: int,
    sm_scale: float,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:
    """[T, H, HEAD_DIM_V] float32 (T = qo_indptr[batch_size]).

    q [T, H, HEAD_DIM_QK]; k_extend [T, 1, HEAD_DIM_QK]; v_extend [T, 1, HEAD_DIM_V]; kv_buffer
    [P, 1, HEAD_DIM_QK] (any float dtype, V = its first HEAD_DIM_V dims); qo_indptr, kv_indptr,
    mask_indptr [>= B+1] and kv_indices, any integer dtype; custom_mask bool/uint8 flat or None (causal).
    """
    qo = qo_indptr.tolist()
    kvp = kv_indptr.tolist()
    mptr = mask_indptr.tolist() if custom_mask is not None else None
    total = qo[batch_size]
    heads = q.shape[1]
    out = torch.zeros((total, heads, v_extend.shape[-1]), dtype=torch.float32, device=q.device)
    mask = custom_mask.reshape(-1) != 0 if custom_mask is not None else None
    for r in range(batch_size):
        q0, q1 = qo[r], qo[r + 1]
        n = q1 - q0
        if n == 0:
            continue
        slots = kv_indices[kvp[r] : kvp[r + 1]].long()
        prefix = slots.numel()
        latent = kv_buffer[slots, 0, :].float()  # [P, shapes.HEAD_DIM_QK]
        keys = torch.cat([latent * k_scale, k_extend[q0:q1, 0, :].float()], dim=0)  # [P+n, HEAD_DIM_QK]
        values = torch.cat(
            [latent[:, :HEAD_DIM_V] * v_scale, v_extend[q0:q1, 0, :].float()], dim=0
        )  # [P+n, HEAD_DIM_V]
        scores = torch.einsum("thd,sd->hts", q[q0:q1].float(), keys) * sm_scale  # [H, n, P+n]
        if mask is None:
            draft_visible = causal_mask(n).to(q.device)  # [n, n]
        else:
            rows = torch.arange(n, device=q.device).view(n, 1) * (prefix + n)
            cols = prefix + torch.arange(n, device=q.device).view(1, n)
            draft_visible = mask[mptr[r] + rows + cols]  # [n, n]
        visible = torch.cat(
            [torch.ones((n, prefix), dtype=torch.bool, device=q.device), draft_visible], dim=1
        )
        scores = scores.masked_fill(~visible.view(1, n, prefix + n), float("-inf"))
        probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        out[q0:q1] = torch.einsum("hts,sd->thd", probs, values)
    return out


class ReferenceKernel:
    """The reference behind the `VerifyKernel` interface, so tests can route the dispatch to it.

    It serves every float dtype on any device (`serves`, as a library's capability query says)."""

    def __init__(self) -> None:
        from kdtree_verify.kernel.binding import Serves

        floats = ["bfloat16", "float16", "float32"]
        self.serves = Serves(floats, [*floats, "float8_e4m3fn"], ["cuda", "host"])

    def unsupported_reason(self, device: Any) -> str | None:
        return None

    def run(self, *, out: torch.Tensor, max_extend_len: int, **kwargs: Any) -> None:
        result = verify_attention_reference(**kwargs)
        out[: result.shape[0]].copy_(result.to(out.dtype))
