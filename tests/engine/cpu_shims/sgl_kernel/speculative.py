"""CPU shim (test hosts only, not product code): replaces `sgl_kernel.speculative`.

Why: SGLang 0.5.23's `kernels/ops/speculative/reconstruct_tree.py` (NGRAM's verify metadata) does
`from sgl_kernel.speculative import reconstruct_indices_from_tree_mask` at module level on every
platform but CUDA/HIP/XPU. The CUDA wheel of sgl-kernel cannot load without a GPU and its CPU build is
not on the package index. SGLang ships its own Triton kernel with the same contract (used on Intel
XPU): `reconstruct_indices_from_tree_mask_triton`, which runs on CPU tensors under TRITON_INTERPRET=1.
This module forwards to it; nothing of SGLang's logic is rewritten.
"""


def reconstruct_indices_from_tree_mask(
    tree_mask,
    verified_seq_len,
    positions,
    retrieve_index,
    retrieve_next_token,
    retrieve_next_sibling,
    batch_size,
    draft_token_num,
):
    # Imported here: reconstruct_tree.py imports this module while it is itself being imported.
    from sglang.kernels.ops.speculative.reconstruct_tree import reconstruct_indices_from_tree_mask_triton

    reconstruct_indices_from_tree_mask_triton(
        tree_mask,
        verified_seq_len,
        positions,
        retrieve_index,
        retrieve_next_token,
        retrieve_next_sibling,
        batch_size,
        draft_token_num,
    )
