"""CPU shims for the draft-model algorithms (EAGLE3, NEXTN, DFLASH) on SGLang 0.5.23's generic platform.

Test-host setup, never shipped. Each AROUND hook below stands in for one place of SGLang (paths inside
the wheel's `sglang/` package) that has no branch for a plain CPU, and calls SGLang's own function
instead; on every platform SGLang does serve the hooks call the original unchanged. Facts:
/work/shared/reference/sglang-cpu-speculative.md. Registered by `kdtree_cpu_shims.register()`.
"""

from __future__ import annotations

import threading
from typing import Any

# kernels/ops/speculative/spec_tree.py:431 (EAGLE3, NEXTN): the generic platform falls through to the CUDA
# op `sgl_build_tree_kernel_efficient` (NameError); the hook calls SGLang's own Triton
# `sgl_build_tree_kernel_triton`, as the function's XPU branch at :396 does.
BUILD_TREE = "sglang.kernels.ops.speculative.spec_tree.build_tree_kernel_efficient_func"
# srt/models/deepseek_v2.py:3442 (NEXTN, reached from srt/speculative/eagle_worker_v2.py:378):
# `set_embed_and_head` calls torch.cuda.empty_cache() and torch.cuda.synchronize() unconditionally
# ("Found no NVIDIA driver"); the hook runs SGLang's own method with those two as no-ops.
SET_EMBED_AND_HEAD = "sglang.srt.models.deepseek_v2.DeepseekV2ForCausalLM.set_embed_and_head"
# srt/arg_groups/speculative_hook.py:287 `_handle_dflash` (DFLASH) refuses devices other than
# cuda/npu/xpu (:299); the hook runs SGLang's own check with the device read as "cuda" (one declaration).
HANDLE_DFLASH = "sglang.srt.arg_groups.speculative_hook._handle_dflash"
# srt/speculative/dflash_worker_v2.py:2481 (in DFlashWorkerV2.forward_batch_generation, DFLASH) calls
# `batch.seq_lens.record_stream(...)` unconditionally (RuntimeError on CPU tensors); the hook runs SGLang's
# own method with Tensor.record_stream a no-op for CPU tensors during the call (there is no other stream).
DFLASH_FORWARD = "sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2.forward_batch_generation"
# srt/model_executor/model_runner.py:1764 `_extend_forward_kwargs` casts input_embeds to bfloat16 (:1772)
# whatever the model's dtype; the DFlash draft always passes input embeddings, so a float32 draft fails in
# `linear` (BFloat16 != float). The hook runs SGLang's own method and gives the embeddings back in the
# runner's dtype (`ModelRunner.dtype`).
EXTEND_KWARGS = "sglang.srt.model_executor.model_runner.ModelRunner._extend_forward_kwargs"

HOOKS: dict[str, Any] = {}
_in_dflash = threading.local()


def _shims():
    import kdtree_cpu_shims

    return kdtree_cpu_shims


def build_tree_around(original, *args, **kwargs):
    shims = _shims()
    if not shims.generic_platform():
        return original(*args, **kwargs)
    from sglang.kernels.ops.speculative.spec_tree import sgl_build_tree_kernel_triton

    a = shims.bind(original, args, kwargs)
    shims.count(BUILD_TREE, "SGLang Triton sgl_build_tree_kernel_triton")
    # The same call as the function's own XPU branch.
    return sgl_build_tree_kernel_triton(
        a["parent_list"],
        a["top_scores_index"],
        a["seq_lens"],
        a["tree_mask"],
        a["positions"],
        a["retrieve_index"],
        a["retrieve_next_token"],
        a["retrieve_next_sibling"],
        a["topk"],
        a["spec_steps"],
        a["num_verify_tokens"],
        a["tree_mask_mode"],
    )


def set_embed_and_head_around(original, *args, **kwargs):
    shims = _shims()
    if not shims.generic_platform():
        return original(*args, **kwargs)
    import torch

    shims.count(
        SET_EMBED_AND_HEAD, "SGLang's set_embed_and_head with torch.cuda.empty_cache/synchronize as no-ops"
    )
    saved = torch.cuda.empty_cache, torch.cuda.synchronize
    torch.cuda.empty_cache = lambda *a, **k: None
    torch.cuda.synchronize = lambda *a, **k: None
    try:
        return original(*args, **kwargs)
    finally:
        torch.cuda.empty_cache, torch.cuda.synchronize = saved


def handle_dflash_around(original, server_args, *args, **kwargs):
    shims = _shims()
    if getattr(server_args, "device", None) != "cpu" or not shims.generic_platform():
        return original(server_args, *args, **kwargs)
    shims.count(HANDLE_DFLASH, "SGLang's _handle_dflash with the device read as cuda")
    # _handle_dflash reads the device through resolving_view(), where the newest declaration of a field
    # wins (arg_groups/model_override_base.py ResolvingConfig): declare device "cuda" for this one call
    # and take exactly that declaration back afterwards; what _handle_dflash declares itself stays.
    stash = getattr(server_args, "_resolved_overrides", None)
    if stash is None:
        stash = server_args._resolved_overrides = []
    entry = ("kdtree_cpu_shims: DFLASH device check", {"device": "cuda"})
    stash.append(entry)
    try:
        return original(server_args, *args, **kwargs)
    finally:
        for lst in (stash, getattr(server_args, "_resolved_overrides", None) or []):
            lst[:] = [e for e in lst if e is not entry]


def _install_record_stream_filter() -> None:
    import torch

    if getattr(torch.Tensor.record_stream, "_kdtree_cpu_shims", False):
        return
    real = torch.Tensor.record_stream

    def record_stream(self, stream):
        if getattr(_in_dflash, "active", False) and self.device.type == "cpu":
            return None
        return real(self, stream)

    record_stream._kdtree_cpu_shims = True  # type: ignore[attr-defined]
    torch.Tensor.record_stream = record_stream


def dflash_forward_around(original, *args, **kwargs):
    shims = _shims()
    if not shims.generic_platform():
        return original(*args, **kwargs)
    shims.count(
        DFLASH_FORWARD, "SGLang's forward_batch_generation with record_stream a no-op for CPU tensors"
    )
    _install_record_stream_filter()
    _in_dflash.active = True
    try:
        return original(*args, **kwargs)
    finally:
        _in_dflash.active = False
        # DFLASH's verify step calls no verify_tree_greedy_func, whose hook writes the status otherwise
        shims.write_status()


def extend_kwargs_around(original, runner, *args, **kwargs):
    shims = _shims()
    out = original(runner, *args, **kwargs)
    if not shims.generic_platform():
        return out
    embeds = out.get("input_embeds") if isinstance(out, dict) else None
    dtype = getattr(runner, "dtype", None)
    if embeds is not None and dtype is not None and embeds.dtype != dtype:
        shims.count(EXTEND_KWARGS, f"SGLang's _extend_forward_kwargs, input_embeds back in {dtype}")
        out["input_embeds"] = embeds.to(dtype)
    return out


HOOKS.update(
    {
        BUILD_TREE: build_tree_around,
        SET_EMBED_AND_HEAD: set_embed_and_head_around,
        HANDLE_DFLASH: handle_dflash_around,
        DFLASH_FORWARD: dflash_forward_around,
        EXTEND_KWARGS: extend_kwargs_around,
    }
)
