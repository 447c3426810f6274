"""TEST DOUBLE of `KVWriteLoc` from `sglang/srt/mem_cache/memory_pool.py` (sglang==0.5.23)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class KVWriteLoc:
    loc: Any
    swa_loc: Any = None
    full_loc: Any = None
    physical: bool = False

    @classmethod
    def for_batch(cls, forward_batch: Any, *, swa_loc: Any = None, full_loc: Any = None) -> KVWriteLoc:
        # Same body as the real classmethod.
        return cls(
            forward_batch.out_cache_loc, swa_loc, full_loc, physical=forward_batch.out_cache_loc_is_physical
        )
