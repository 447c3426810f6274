"""Device-side bookkeeping for KDTREE_VERIFY=validate (imports torch; loaded on the first validate call).

Every update is a device op on preallocated tensors: no `.item()`, no host sync, so the same code
runs eagerly and inside a CUDA graph (where it is captured and replayed with the graph).
"""

from __future__ import annotations

from typing import Any

import torch

HISTORY = 1024  # per-call (max abs, max rel) ring buffer
# stats slots
CALLS, MISMATCHES, MAX_ABS, MAX_REL = 0, 1, 2, 3


def is_capturing(device: Any) -> bool:
    return torch.device(device).type == "cuda" and torch.cuda.is_current_stream_capturing()


class ValidateStats:
    def __init__(self, device: Any, tol: float) -> None:
        self.device = torch.device(device)
        self.tol = float(tol)
        self.stats = torch.zeros(4, dtype=torch.float64, device=self.device)
        self.history = torch.zeros(HISTORY, 2, dtype=torch.float32, device=self.device)

    def scratch(self, tokens: int, width: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty((tokens, width), dtype=dtype, device=self.device)

    def record(self, kernel_out: torch.Tensor, triton_out: torch.Tensor) -> None:
        if kernel_out.numel() == 0:
            return
        ref = triton_out.float()
        max_abs = (kernel_out.float() - ref).abs().max()
        max_rel = max_abs / ref.abs().max().clamp_min(1e-6)
        slot = (self.stats[CALLS] % HISTORY).long().view(1)
        self.history.index_copy_(0, slot, torch.stack([max_abs, max_rel]).view(1, 2))
        self.stats[CALLS] += 1
        self.stats[MISMATCHES] += (max_abs > self.tol).double()
        torch.maximum(self.stats[MAX_ABS], max_abs.double(), out=self.stats[MAX_ABS])
        torch.maximum(self.stats[MAX_REL], max_rel.double(), out=self.stats[MAX_REL])

    def read(self) -> dict:
        """Host copy (this syncs: call it from status(), never from the forward)."""
        values = self.stats.tolist()
        calls = int(values[CALLS])
        recent = self.history[: min(calls, HISTORY)].tolist()
        return {
            "calls": calls,
            "mismatches": int(values[MISMATCHES]),
            "max_abs": values[MAX_ABS],
            "max_rel": values[MAX_REL],
            "tol": self.tol,
            "recent": recent[-16:] if calls <= HISTORY else None,
        }
