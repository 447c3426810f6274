"""Head dims of absorbed MLA (DeepSeek-V3 / Kimi-K2), the only shape the kernel serves.

This is the one place in Python where these numbers are written: the dispatch, the binding, the
reference and the tests import them. The C header (files/csrc/kdtree_verify.h,
``KDTREE_HEAD_DIM`` / ``KDTREE_V_DIM``) has its own copies; tests/ext/fast/test_shapes.py checks
that the two agree. Stdlib-free constants only.
"""

KV_LORA_RANK = 512  # the latent part of q/k, and all of v
QK_ROPE_HEAD_DIM = 64  # the rotary part of q/k
HEAD_DIM_QK = KV_LORA_RANK + QK_ROPE_HEAD_DIM  # q, k_extend and the KV cache rows
HEAD_DIM_V = KV_LORA_RANK  # v_extend and the output rows (the KV cache's first HEAD_DIM_V dims)
