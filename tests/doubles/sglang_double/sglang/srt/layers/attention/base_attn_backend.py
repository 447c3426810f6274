"""TEST DOUBLE of `sglang/srt/layers/attention/base_attn_backend.py` (sglang==0.5.23).

`AttentionBackend.forward` routes exactly like the real one (idle -> empty, decode ->
forward_decode, everything else, TARGET_VERIFY included -> forward_extend), looking the method
up on the instance at call time, so a patch of the class attribute reaches existing instances.
"""

from __future__ import annotations

from typing import Any


class AttentionBackend:
    dllm_attention = None

    def forward(
        self, q: Any, k: Any, v: Any, layer: Any, forward_batch: Any, save_kv_cache: bool = True, **kwargs
    ):
        if forward_batch.forward_mode.is_idle():
            return "idle"
        if forward_batch.forward_mode.is_decode():
            return self.forward_decode(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache, **kwargs)
        return self.forward_extend(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache, **kwargs)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache: bool = True, **kwargs):
        raise NotImplementedError()

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache: bool = True, **kwargs):
        raise NotImplementedError()
