"""Device-side bookkeeping for KDTREE_VERIFY=validate (imports torch; loaded on the first validate call).

Every update is a device op on preallocated tensors: no `.item()`, no host sync, so the same code
runs eagerly and inside a CUDA graph (where it is captured and replayed with the graph).
"""

from __future__ import annotations

from typing import Any

import torch

HISTORY = 1024  # per-call (max abs, max rel) ring buffer

# With an fp8-e4m3 KV cache SGLang's Triton kernel (NVIDIA) computes Q.K with Q rounded to e4m3 and
# P.V with P rounded to e4m3 (`q.to(k.dtype)`, `p.to(v.dtype)` in extend_attention.py), while the kdtree
# kernel reads the same e4m3 cache exactly into bf16. e4m3 has 3 mantissa bits: unit roundoff
# u = 2^-4. Rounding P moves the output by at most u * max|V| (normal P) plus 2^-10 * max|V| per key
# for subnormal P; rounding Q moves each logit by ~u * |q.k| * sm_scale, and a logit change d moves
# the output by at most 2 * d * max|V|. For unit-scale logits that is about 3u of max|V| in the
# worst row; |out| is at most max|V|, so a call is a mismatch when
# max|kernel - triton| > tol + FP8_REL_TOL * max|triton|, FP8_REL_TOL = 4u (one u of margin).
# tests/kernel/test_checks_cpu.py measures an emulation of Triton's fp8 arithmetic (bench/kernel_checks.py's
# triton_fp8_model) against the exact reference (< FP8_REL_TOL) and a kernel that drops a key tile.
E4M3_UNIT_ROUNDOFF = 2.0**-4
FP8_REL_TOL = 4 * E4M3_UNIT_ROUNDOFF
# stats slots. NONFINITE_*: calls whose kernel / original output held a NaN or an infinity; such a
# call is a mismatch, and a non-finite difference stays in MAX_ABS (torch.maximum keeps NaN).
CALLS, MISMATCHES, MAX_ABS, MAX_REL, NONFINITE_KERNEL, NONFINITE_ORIGINAL = 0, 1, 2, 3, 4, 5
SLOTS = 6


def rel_tol_for(kv_dtype: str) -> float:
    """Relative part of the mismatch bound for a KV cache dtype name ("bfloat16", "float8_e4m3fn")."""
    return FP8_REL_TOL if kv_dtype == "float8_e4m3fn" else 0.0


def is_capturing(device: Any) -> bool:
    return torch.device(device).type == "cuda" and torch.cuda.is_current_stream_capturing()


class ValidateStats:
    def __init__(self, device: Any, tol: float) -> None:
        self.device = torch.device(device)
        self.tol = float(tol)
        self.stats = torch.zeros(SLOTS, dtype=torch.float64, device=self.device)
        self.history = torch.zeros(HISTORY, 2, dtype=torch.float32, device=self.device)
        self._copy_stream: Any = None  # the status publisher's side stream and pinned buffer (CUDA)
        self._host: torch.Tensor | None = None

    def scratch(self, tokens: int, width: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty((tokens, width), dtype=dtype, device=self.device)

    def record(self, kernel_out: torch.Tensor, triton_out: torch.Tensor, rel_tol: float = 0.0) -> None:
        """kernel_out, triton_out [T, H*HEAD_DIM_V] bf16: one call's outputs. A mismatch is
        max|kernel - triton| > tol + rel_tol * max|triton| (rel_tol: `rel_tol_for` the KV dtype), or
        any NaN or infinity in either output or in the difference (a comparison with NaN is false:
        without this a NaN output would pass as 0 mismatches)."""
        if kernel_out.numel() == 0:
            return
        ref = triton_out.float()
        max_abs = (kernel_out.float() - ref).abs().max()
        ref_max = ref.abs().max()
        max_rel = max_abs / ref_max.clamp_min(1e-6)
        slot = (self.stats[CALLS] % HISTORY).long().view(1)
        self.history.index_copy_(0, slot, torch.stack([max_abs, max_rel]).view(1, 2))
        self.stats[CALLS] += 1
        kernel_bad = ~torch.isfinite(kernel_out).all()
        original_bad = ~torch.isfinite(triton_out).all()
        beyond = (max_abs > self.tol + rel_tol * ref_max) | ~torch.isfinite(max_abs)
        self.stats[MISMATCHES] += (beyond | kernel_bad | original_bad).double()
        self.stats[NONFINITE_KERNEL] += kernel_bad.double()
        self.stats[NONFINITE_ORIGINAL] += original_bad.double()
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
            "nonfinite_kernel": int(values[NONFINITE_KERNEL]),
            "nonfinite_original": int(values[NONFINITE_ORIGINAL]),
            "recent": recent[-16:] if calls <= HISTORY else None,
        }

    def snapshot(self) -> dict:
        """{"compared", "mismatches", "max_diff", "nonfinite_kernel", "nonfinite_original"} for the
        status publisher, without synchronising the
        forward stream: on CUDA a non-blocking copy on a side stream into pinned memory, and a wait
        for that copy only (it does not wait for the forward's pending updates either, so the values
        may lag by the calls still in flight). On the CPU a plain read. Call it from one thread."""
        if self.device.type == "cuda":
            if self._copy_stream is None:
                self._copy_stream = torch.cuda.Stream(device=self.device)
                self._host = torch.empty(SLOTS, dtype=torch.float64, pin_memory=True)
            assert self._host is not None
            with torch.cuda.stream(self._copy_stream):
                self._host.copy_(self.stats, non_blocking=True)
                done = torch.cuda.Event()
                done.record(self._copy_stream)
            done.synchronize()
            values = self._host.tolist()
        else:
            values = self.stats.tolist()
        return {
            "compared": int(values[CALLS]),
            "mismatches": int(values[MISMATCHES]),
            "max_diff": values[MAX_ABS],
            "nonfinite_kernel": int(values[NONFINITE_KERNEL]),
            "nonfinite_original": int(values[NONFINITE_ORIGINAL]),
        }
