"""CPU shim (test hosts only, not product code): replaces `sgl_kernel.speculative`.

Why: SGLang's NGRAM worker (its verify metadata) does
`from sgl_kernel.speculative import reconstruct_indices_from_tree_mask` at module level on every
platform but CUDA/HIP/XPU. The CUDA wheel of sgl-kernel cannot load without a GPU and its CPU build is
not on the package index.
- From SGLang 0.5.21 on, SGLang ships its own Triton kernel with the same contract (used on Intel XPU):
  `kernels/ops/speculative/reconstruct_tree.py` `reconstruct_indices_from_tree_mask_triton`, which runs
  on CPU tensors under TRITON_INTERPRET=1. This module forwards to it; nothing is rewritten.
- Before 0.5.21 SGLang has no version of the op of its own, so this module computes the op's contract
  (as that file's docstring states it) in torch: `reconstruct_indices_torch`. Its equality with SGLang's
  Triton kernel on random trees is tested (tests/ext/sglang/test_cpu_shims.py).
"""

from __future__ import annotations


def reconstruct_indices_from_tree_mask(*args, **kwargs) -> None:
    """sgl_kernel's op, called as SGLang calls it: the arguments of `reconstruct_indices_torch`."""
    # Imported here: reconstruct_tree.py imports this module while it is itself being imported.
    try:
        from sglang.kernels.ops.speculative.reconstruct_tree import (
            reconstruct_indices_from_tree_mask_triton as op,
        )
    except ModuleNotFoundError as exc:
        if exc.name != "sglang.kernels.ops.speculative.reconstruct_tree":
            raise
        op = reconstruct_indices_torch
    op(*args, **kwargs)


def reconstruct_indices_torch(
    tree_mask,
    verified_seq_len,
    positions,
    retrieve_index,
    retrieve_next_token,
    retrieve_next_sibling,
    batch_size,
    draft_token_num,
) -> None:
    """The op's contract in torch, writing the first `batch_size * n` entries of each output in place.

    Shapes and dtypes (n = draft_token_num, bs = batch_size), each tensor contiguous:
      tree_mask              bool  [>= bs * n * n]  tree_mask[b, i, j]: node j is an ancestor of node i
      verified_seq_len       int   [>= bs]
      positions              int64 [>= bs * n]  out: #strict ancestors of the node + verified_seq_len[b]
      retrieve_index         int64 [>= bs * n]  out: b * n + node
      retrieve_next_token    int64 [>= bs * n]  out: the node's first child (smallest k > node whose
                                                ancestor it is), else -1
      retrieve_next_sibling  int64 [>= bs * n]  out: the smallest k > node with the same parent
                                                (parent: the largest strict ancestor), else -1; -1 for a root
    """
    import torch

    bs, n = int(batch_size), int(draft_token_num)
    if bs == 0:
        return
    mask = tree_mask.reshape(-1)[: bs * n * n].reshape(bs, n, n).to(torch.bool)
    node = torch.arange(n, device=mask.device)
    row, col = node.view(1, n, 1), node.view(1, 1, n)  # i (the node described), j (ancestor candidate)
    ancestors = mask & (col < row)
    parent = torch.where(ancestors, col, -1).amax(dim=2)  # [bs, n] by i
    first_child = torch.where(ancestors, row, n).amin(dim=1)  # [bs, n] by the column j
    same_parent = (parent.unsqueeze(2) == parent.unsqueeze(1)) & (row > col)  # [b, k, tid]
    first_sibling = torch.where(same_parent, row, n).amin(dim=1)  # [bs, n] by tid

    def put(out, value) -> None:
        out.view(-1)[: bs * n].copy_(value.reshape(-1).to(out.dtype))

    put(positions, ancestors.sum(dim=2) + verified_seq_len.reshape(-1)[:bs].to(torch.int64).view(bs, 1))
    put(retrieve_index, torch.arange(bs * n, device=mask.device))
    put(retrieve_next_token, torch.where(first_child < n, first_child, -1))
    put(retrieve_next_sibling, torch.where((parent >= 0) & (first_sibling < n), first_sibling, -1))
