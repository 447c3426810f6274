"""TEST DOUBLE of `sglang/srt/layers/attention/triton_backend.py` (sglang==0.5.23).

What is real here: the module path, the class name, the signatures of `__init__`,
`forward_extend` and `forward_decode`, the attributes the kdtree patch reads
(`is_draft_runner`, `token_to_kv_pool`, `page_size`, `use_mla`, `dcp_size`,
`enable_deterministic`, `forward_metadata` with the real `ForwardMetadata` field names,
`use_dense_fp8_chunked_prefill`, `dllm_attention`), and the order inside `forward_extend`
(KV write first, through `KVWriteLoc.for_batch` and `token_to_kv_pool.set_kv_buffer`, then the
extend kernel). What is not: no torch import, no Triton. The extend kernel is the instance
attribute `extend_attention_fwd` (as in the real `__init__`); here it defaults to a function
that returns `DOUBLE_OUTPUT`, and tests may replace it on an instance.

The process-model double (`python -m sglang.launch_server`) imports this module in each
scheduler child, as the real scheduler does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
from sglang.srt.layers.radix_attention import AttentionType
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

__all__ = ["DOUBLE_OUTPUT", "ForwardBatch", "ForwardMetadata", "ForwardMode", "TritonAttnBackend"]

DOUBLE_OUTPUT = "triton-double-output"


def extend_attention_fwd(*args: Any, **kwargs: Any) -> str:
    """Stand-in for sglang.kernels.ops.attention.extend_attention.extend_attention_fwd."""
    return DOUBLE_OUTPUT


@dataclass
class ForwardMetadata:
    attn_logits: Any = None
    attn_lse: Any = None
    max_extend_len: int = 0
    num_kv_splits: Any = None
    kv_indptr: Any = None
    kv_indices: Any = None
    qo_indptr: Any = None
    custom_mask: Any = None
    mask_indptr: Any = None
    window_kv_indptr: Any = None
    window_kv_indices: Any = None
    window_num_kv_splits: Any = None
    window_kv_offsets: Any = None
    swa_attn_logits: Any = None
    swa_out_cache_loc: Any = None


class TritonAttnBackend(AttentionBackend):
    def __init__(
        self,
        model_runner: Any,
        skip_prefill: bool = False,
        kv_indptr_buf: Any | None = None,
        *,
        dllm_fa4: bool = False,
    ):
        super().__init__()
        self.skip_prefill = skip_prefill
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        self.page_size = getattr(model_runner, "page_size", 1) or 1
        self.use_mla = getattr(model_runner.model_config, "attention_arch", None) == "MLA"
        self.dcp_size = 1
        self.dcp_rank = 0
        self.enable_deterministic = False
        self.use_dense_fp8_chunked_prefill = False
        self.forward_metadata: ForwardMetadata = None
        self.is_draft_runner = model_runner.is_draft_worker
        self.extend_attention_fwd = extend_attention_fwd
        self.calls: list[str] = []

    def _set_kv_buffer(self, forward_batch, layer, loc_info, k, v, k_scale=None, v_scale=None) -> None:
        if k_scale is None and v_scale is None:
            self.token_to_kv_pool.set_kv_buffer(layer, loc_info, k, v)
        else:
            self.token_to_kv_pool.set_kv_buffer(layer, loc_info, k, v, k_scale, v_scale)

    def forward_extend(
        self,
        q,
        k,
        v,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache=True,
        sinks=None,
        score_mod=None,
        aux_tensors=None,
    ):
        self.calls.append("forward_extend")
        if k is not None and v is not None and save_kv_cache:
            loc_info = KVWriteLoc.for_batch(forward_batch, swa_loc=self.forward_metadata.swa_out_cache_loc)
            if layer.k_scale is None:
                self._set_kv_buffer(forward_batch, layer, loc_info, k, v)
            elif self.use_mla:
                self.token_to_kv_pool.set_kv_buffer(layer, loc_info, k.clone().div_(layer.k_scale), v)
            else:
                self._set_kv_buffer(
                    forward_batch, layer, loc_info, k.clone(), v.clone(), layer.k_scale, layer.v_scale
                )
        causal = not (layer.is_cross_attention or layer.attn_type == AttentionType.ENCODER_ONLY)
        if layer.k_scale is not None and layer.v_scale is not None:
            k_descale, v_descale = layer.k_scale_float, layer.v_scale_float
        else:
            k_descale, v_descale = 1.0, 1.0
        md = self.forward_metadata
        if not hasattr(q, "contiguous"):  # plain-Python test objects: no tensor maths
            return self.extend_attention_fwd(q, k, v, None, layer, md, causal)
        o = q.new_empty((q.shape[0], layer.tp_q_head_num * layer.v_head_dim))
        self.extend_attention_fwd(
            q.view(-1, layer.tp_q_head_num, layer.qk_head_dim),
            k.contiguous(),
            v.contiguous(),
            o.view(-1, layer.tp_q_head_num, layer.v_head_dim),
            self.token_to_kv_pool.get_key_buffer(layer.layer_id),
            self.token_to_kv_pool.get_value_buffer(layer.layer_id),
            md.qo_indptr,
            md.kv_indptr,
            md.kv_indices,
            md.custom_mask,
            causal,
            md.mask_indptr,
            md.max_extend_len,
            k_descale,
            v_descale,
            layer.scaling,
            logit_cap=layer.logit_cap,
            sliding_window_size=-1,
            sinks=sinks,
            page_size=self.page_size,
        )
        return o

    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache=True,
        sinks=None,
        score_mod=None,
        aux_tensors=None,
    ):
        self.calls.append("forward_decode")
        return DOUBLE_OUTPUT
