"""CPU shim (test hosts only, not product code): replaces `vllm._custom_ops`.

Why: on SGLang 0.5.23's generic platform (`--device cpu` without the official CPU engine, whose
sgl-kernel CPU build is not on the package index) `srt/layers/rotary_embedding/base.py` imports
`vllm._custom_ops.rotary_embedding` while building the rotary embedding. It is only imported there,
never called: the rotary runs in plain torch. vllm is not installed (and has no CPU wheel to match
torch 2.14.1), so this module provides the name and raises if anything calls it.

Side effect to know: `srt/layers/moe/moe_runner/triton_utils/fused_moe.py` then sees
`_has_vllm_ops = True`; the tiny test model is dense (first_k_dense_replace = num_hidden_layers), so the
fused-MoE path never runs, and if it ever did the call would raise here instead of computing garbage.
"""


class ShimCalledError(RuntimeError):
    pass


def _refuse(name):
    def fn(*args, **kwargs):
        raise ShimCalledError(
            f"vllm._custom_ops.{name} was called: this is the kdtree-fleet CPU test shim "
            "(tests/engine/cpu_shims), which only satisfies an import; the engine took a path it "
            "should not take on the generic CPU platform"
        )

    fn.__name__ = name
    return fn


rotary_embedding = _refuse("rotary_embedding")
