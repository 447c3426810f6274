"""TEST DOUBLE of `sglang/srt/model_executor/forward_batch_info.py` (sglang==0.5.23).

`ForwardMode` is copied member for member from the real wheel (same order, same values, same
predicates). `ForwardBatch` keeps only the fields the triton backend's `forward_extend` reads.
Torch-free on purpose: the double must import on hosts without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, auto
from typing import Any


class ForwardMode(IntEnum):
    EXTEND = auto()
    DECODE = auto()
    MIXED = auto()
    IDLE = auto()
    TARGET_VERIFY = auto()
    DRAFT_EXTEND_V2 = auto()
    PREBUILT = auto()
    SPLIT_PREFILL = auto()
    DLLM_EXTEND = auto()

    def is_prefill(self, include_draft_extend_v2: bool = False) -> bool:
        return self.is_extend(include_draft_extend_v2=include_draft_extend_v2)

    def is_extend(self, include_draft_extend_v2: bool = False) -> bool:
        return (
            self == ForwardMode.EXTEND
            or self == ForwardMode.MIXED
            or (include_draft_extend_v2 and self == ForwardMode.DRAFT_EXTEND_V2)
            or self == ForwardMode.TARGET_VERIFY
            or self == ForwardMode.SPLIT_PREFILL
            or self == ForwardMode.DLLM_EXTEND
        )

    def is_decode(self) -> bool:
        return self == ForwardMode.DECODE

    def is_mixed(self) -> bool:
        return self == ForwardMode.MIXED

    def is_idle(self) -> bool:
        return self == ForwardMode.IDLE

    def is_decode_or_idle(self) -> bool:
        return self == ForwardMode.DECODE or self == ForwardMode.IDLE

    def is_target_verify(self) -> bool:
        return self == ForwardMode.TARGET_VERIFY

    def is_draft_extend_v2(self) -> bool:
        return self == ForwardMode.DRAFT_EXTEND_V2

    def is_cuda_graph(self) -> bool:
        return self in (
            ForwardMode.DECODE,
            ForwardMode.TARGET_VERIFY,
            ForwardMode.IDLE,
            ForwardMode.DLLM_EXTEND,
        )

    def is_dllm_extend(self) -> bool:
        return self == ForwardMode.DLLM_EXTEND

    def is_split_prefill(self) -> bool:
        return self == ForwardMode.SPLIT_PREFILL

    def is_extend_without_speculative(self) -> bool:
        return self.is_extend() and not self.is_target_verify()

    def is_prebuilt(self) -> bool:
        return self == ForwardMode.PREBUILT


@dataclass
class ForwardBatch:
    """The fields of the real ForwardBatch that `TritonAttnBackend.forward_extend` reads."""

    forward_mode: ForwardMode
    batch_size: int = 0
    out_cache_loc: Any = None
    out_cache_loc_is_physical: bool = False
    spec_info: Any = None
    extend_seq_lens_cpu: Any = None
    seq_lens_sum: Any = None  # a host int in 0.5.23 (the patch's timing buckets read it)
    mha_one_shot: bool = False
    attn_attend_prefix_cache: bool = False
    mha_return_lse: bool = False
