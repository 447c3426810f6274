"""Checks with teeth for the verify kernel (shared by tests/kernel and bench/gpu_check runs).

- `row_rel_l2(got, ref)`: per-row relative L2 error, [T, H] float32. bf16 rounding of the output and of
  P gives about 2e-3 on N(0,1) data; a dropped 16-key tile or split gives 6e-3 to 9e-2 at 64k keys and
  more below. `ROW_REL_L2_TOL` sits between the two.
- `add_needles(case, positions)`: keys at the given virtual positions (prefix first, then drafts) that
  every row scores far above the rest, each with its own one-hot value column: the output's column i is
  the weight of needle i, so a needle that the kernel skips (a dropped first/last key, tile or split)
  shows as a column near 0 instead of about 1/len(positions) x NEEDLE_V.
- `bucket_case(spec)`: q = 0 (all scores equal) and V one-hot by key position bucket, so the exact
  output of row t is (visible keys per bucket) / (visible keys): no floating-point tolerance needed
  beyond the bf16 rounding of the result.
- `reference_dropping(case, drop)`: the fp32 reference with some virtual keys removed: a model of a
  faulty kernel, so the CPU tests show that the checks above catch what they claim to catch.
- `triton_fp8_model(case)`: SGLang's Triton arithmetic with an fp8-e4m3 KV cache on NVIDIA (Q and P
  rounded to e4m3 before their dot products, online softmax over BLOCK_N keys), for the fp8 tolerance.

All tensors follow kdtree_verify.kernel.reference: q [T, H, HEAD_DIM_QK], k_extend [T, 1, HEAD_DIM_QK],
v_extend [T, 1, HEAD_DIM_V], kv_buffer [P, 1, HEAD_DIM_QK], outputs [T, H, HEAD_DIM_V] float32.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from kdtree_verify.kernel.reference import causal_mask
from kdtree_verify.kernel.shapes import HEAD_DIM_QK, HEAD_DIM_V

ROW_REL_L2_TOL = 4e-3  # between bf16 noise (~2e-3) and one dropped tile at 64k keys (>= 6e-3)
NEEDLE_Q = 8.0  # q[..., -1] of every row
NEEDLE_K = 36.0  # k[-1] of a needle key: score NEEDLE_Q * NEEDLE_K / sqrt(HEAD_DIM_QK) = 12 (e^12 = 1.6e5 x)
NEEDLE_V = 64.0  # the needle's one-hot value (fits e4m3 and bf16 exactly)
NEEDLE_WEIGHT_RTOL = 0.05  # a needle's weight in the output vs the reference's


MEASURES_ENV = "KDTREE_GPU_MEASURES"  # set by bench/gpu_check.py: where the tests' error figures go


def record(measure: str, value: float) -> None:
    """Append one error figure of the running test to $KDTREE_GPU_MEASURES (a JSON line per figure, for
    gpu-check's per-variant summary); nothing when unset."""
    path = os.environ.get(MEASURES_ENV)
    if path:
        node = os.environ.get("PYTEST_CURRENT_TEST", "?")
        with open(path, "a") as fh:
            fh.write(json.dumps({"node": node, "measure": measure, "value": float(value)}) + "\n")


def row_rel_l2(got: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """[T, H] float32: ||got - ref|| / max(||ref||, 1e-6) over the last dim of [T, H, D] outputs."""
    diff = (got.float() - ref.float()).norm(dim=-1)
    return diff / ref.float().norm(dim=-1).clamp_min(1e-6)


def check_rows(got: torch.Tensor, ref: torch.Tensor, tol: float = ROW_REL_L2_TOL) -> str | None:
    """None when every row's relative L2 error is <= tol, else a one-line description of the worst."""
    err = row_rel_l2(got, ref)
    if not bool(torch.isfinite(got.float()).all()):
        return "non-finite values in the output"
    worst = float(err.max())
    record("row_rel_l2", worst)
    if worst <= tol:
        return None
    t, h = divmod(int(err.argmax()), err.shape[1])
    return f"row rel L2 {worst:.3g} > {tol:.3g} at token {t} head {h} ({int((err > tol).sum())} rows over)"


def _request_ranges(case: dict[str, Any]) -> list[tuple[int, int, int, int]]:
    qo = case["qo_indptr"].tolist()
    kvp = case["kv_indptr"].tolist()
    return [(qo[r], qo[r + 1], kvp[r], kvp[r + 1]) for r in range(case["batch_size"])]


def add_needles(case: dict[str, Any], positions: list[int], request: int = 0) -> list[int]:
    """Turn the keys at virtual `positions` of `request` into needles (in place); returns the value
    column of each needle (needle i -> column i % HEAD_DIM_V; at most HEAD_DIM_V positions).

    Every row of the request gets q[..., -1] = NEEDLE_Q; a needle key has k = NEEDLE_K * e_last and
    V = NEEDLE_V * e_col; the other keys get k[-1] = 0 so only needles score high. Draft positions
    (>= prefix_len) are visible only to the rows the mask lets see them.
    """
    assert len(positions) <= HEAD_DIM_V
    q0, q1, k0, k1 = _request_ranges(case)[request]
    prefix = k1 - k0
    case["q"][q0:q1, :, -1] = NEEDLE_Q
    # A prefix needle's V column is also a K dim (MLA: V is the latent): q is zero there, so every
    # needle scores exactly NEEDLE_Q * NEEDLE_K * sm_scale.
    case["q"][q0:q1, :, [i % HEAD_DIM_V for i in range(len(positions))]] = 0
    slots = case["kv_indices"][k0:k1].long()
    pool = case["kv_buffer"]
    pool_f = pool[slots].float()
    pool_f[:, 0, -1] = 0.0
    ke = case["k_extend"][q0:q1].float()
    ke[:, 0, -1] = 0.0
    ve = case["v_extend"][q0:q1].float()
    cols = []
    for i, j in enumerate(positions):
        col = i % HEAD_DIM_V
        cols.append(col)
        if j < prefix:
            pool_f[j, 0, :] = 0.0
            pool_f[j, 0, -1] = NEEDLE_K / case.get("k_scale", 1.0)
            pool_f[j, 0, col] = NEEDLE_V / case.get("v_scale", 1.0)
        else:
            c = j - prefix
            ke[c, 0, :] = 0.0
            ke[c, 0, -1] = NEEDLE_K
            ve[c, 0, :] = 0.0
            ve[c, 0, col] = NEEDLE_V
    pool[slots] = pool_f.to(pool.dtype)
    case["k_extend"][q0:q1] = ke.to(case["k_extend"].dtype)
    case["v_extend"][q0:q1] = ve.to(case["v_extend"].dtype)
    return cols


def check_needles(
    got: torch.Tensor, ref: torch.Tensor, case: dict[str, Any], cols: list[int], request: int = 0
):
    """None when every needle column of every row of `request` carries the reference's weight within
    NEEDLE_WEIGHT_RTOL (relative to the row's largest needle weight), else the first missing needle."""
    q0, q1, _, _ = _request_ranges(case)[request]
    g = got[q0:q1].float()[..., cols]  # [n, H, needles]
    r = ref[q0:q1].float()[..., cols]
    scale = r.abs().amax(dim=-1, keepdim=True).clamp_min(1e-6)
    bad = (g - r).abs() > NEEDLE_WEIGHT_RTOL * scale
    if not bool(bad.any()):
        return None
    t, h, i = (int(x) for x in bad.nonzero()[0])
    got_w, ref_w = float(g[t, h, i]), float(r[t, h, i])
    return f"needle {i} (column {cols[i]}): token {t} head {h} weight {got_w:.4g}, reference {ref_w:.4g}"


def boundary_positions(total: int, tile: int, split_edges: list[int]) -> list[int]:
    """Virtual key positions worth a needle: the first and last key, both sides of every split edge
    (`split_edges`: the request's tiles where one work unit's range ends, kernel_plan.unit_edges), and both
    sides of the tile boundaries in the first and last eight tiles (<= HEAD_DIM_V)."""
    pos = {0, total - 1}
    for edge in split_edges:
        b = edge * tile
        if 0 < b < total:
            pos.update({b - 1, b})
    for b in list(range(tile, min(total, 8 * tile), tile)) + list(
        range(max(tile, total - 8 * tile), total, tile)
    ):
        b -= b % tile
        if 0 < b < total:
            pos.update({b - 1, b})
    return sorted(pos)[:HEAD_DIM_V]


def bucket_values(total: int) -> torch.Tensor:
    """[total] int64: the one-hot V column of virtual key j (HEAD_DIM_V buckets of consecutive keys)."""
    return (torch.arange(total) * HEAD_DIM_V) // max(total, 1)


def make_bucket_case(case: dict[str, Any]) -> torch.Tensor:
    """Make `case` a q = 0 case (in place) whose exact answer is returned: [T, H, HEAD_DIM_V] float64.

    q = 0, so every visible key has the same weight; V of virtual key j is v_scale^-1 * e_bucket(j) in
    the pool (e_bucket(j) for drafts), so row t's output is the fraction of its visible keys per bucket.
    """
    case["q"].zero_()
    heads = case["q"].shape[1]
    exact = torch.zeros((case["q"].shape[0], heads, HEAD_DIM_V), dtype=torch.float64)
    mask = case.get("custom_mask")
    mptr = case["mask_indptr"].tolist() if mask is not None else None
    v_scale = case.get("v_scale", 1.0)
    for r, (q0, q1, k0, k1) in enumerate(_request_ranges(case)):
        prefix, n = k1 - k0, q1 - q0
        buckets = bucket_values(prefix + n)
        slots = case["kv_indices"][k0:k1].long()
        pool = case["kv_buffer"]
        rows = torch.zeros((prefix, 1, HEAD_DIM_QK))
        rows[torch.arange(prefix), 0, buckets[:prefix]] = 1.0 / v_scale
        pool[slots] = rows.to(pool.dtype)
        ve = torch.zeros((n, 1, HEAD_DIM_V))
        ve[torch.arange(n), 0, buckets[prefix:]] = 1.0
        case["v_extend"][q0:q1] = ve.to(case["v_extend"].dtype)
        if mask is None:
            draft = causal_mask(n)
        else:
            block = mask[mptr[r] : mptr[r] + n * (prefix + n)].reshape(n, prefix + n) != 0
            draft = block[:, prefix:]
        for t in range(n):
            visible = torch.cat([torch.ones(prefix, dtype=torch.bool), draft[t]])
            counts = torch.bincount(buckets[visible], minlength=HEAD_DIM_V).double()
            exact[q0 + t] = (counts / max(int(visible.sum()), 1)).view(1, HEAD_DIM_V)
    return exact


EXACT_RTOL = 2.0**-7  # bf16 output rounding is 2^-9; a dropped tile moves a bucket by >= 6 %


def check_exact(got: torch.Tensor, exact: torch.Tensor, rtol: float = EXACT_RTOL) -> str | None:
    """None when every element of `got` [T, H, HEAD_DIM_V] is within rtol of the exact bucket answer
    (relative to the element, floored at the row's smallest non-zero bucket weight)."""
    exact = exact.to(got.device).double()
    floor = exact.masked_fill(exact == 0, float("inf")).amin(dim=-1, keepdim=True).clamp_max(1.0)
    err = (got.double() - exact).abs() / torch.maximum(exact, floor)
    worst = float(err.max())
    if worst <= rtol:
        return None
    t, h, d = (int(x) for x in (err == err.max()).nonzero()[0])
    return f"q=0 bucket case: relative error {worst:.3g} > {rtol:.3g} at token {t} head {h} bucket {d}"


def _visibility(case: dict[str, Any], r: int, prefix: int, n: int) -> torch.Tensor:
    mask = case.get("custom_mask")
    if mask is None:
        draft = causal_mask(n)
    else:
        m0 = int(case["mask_indptr"][r])
        draft = (mask[m0 : m0 + n * (prefix + n)].reshape(n, prefix + n) != 0)[:, prefix:].cpu()
    return torch.cat([torch.ones((n, prefix), dtype=torch.bool), draft], dim=1)  # [n, P+n]


def _keys_values(
    case: dict[str, Any], q0: int, q1: int, k0: int, k1: int
) -> tuple[torch.Tensor, torch.Tensor]:
    slots = case["kv_indices"][k0:k1].long()
    latent = case["kv_buffer"][slots, 0, :].float()
    keys = torch.cat([latent * case.get("k_scale", 1.0), case["k_extend"][q0:q1, 0].float()])
    values = torch.cat(
        [latent[:, :HEAD_DIM_V] * case.get("v_scale", 1.0), case["v_extend"][q0:q1, 0].float()]
    )
    return keys, values


def reference_dropping(case: dict[str, Any], drop: dict[int, list[int]]) -> torch.Tensor:
    """The fp32 reference with the virtual keys `drop[r]` of request r removed: [T, H, HEAD_DIM_V] float32.
    A model of a kernel that skips a tile or a split (the teeth tests compare it with the checks)."""
    out = torch.zeros((case["q"].shape[0], case["q"].shape[1], HEAD_DIM_V))
    for r, (q0, q1, k0, k1) in enumerate(_request_ranges(case)):
        prefix, n = k1 - k0, q1 - q0
        if n == 0:
            continue
        keys, values = _keys_values(case, q0, q1, k0, k1)
        visible = _visibility(case, r, prefix, n)
        if drop.get(r):
            visible[:, torch.tensor(drop[r], dtype=torch.long)] = False
        scores = torch.einsum("thd,sd->hts", case["q"][q0:q1].float(), keys) * case["sm_scale"]
        scores = scores.masked_fill(~visible.view(1, n, -1), float("-inf"))
        probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        out[q0:q1] = torch.einsum("hts,sd->thd", probs, values)
    return out


def triton_fp8_model(case: dict[str, Any], block_n: int = 32) -> torch.Tensor:
    """SGLang 0.5.23's extend_attention_fwd arithmetic (NVIDIA path) with an fp8-e4m3 cache:
    prefix scores `q.to(e4m3) . k` * sm_scale * k_scale, P rounded to e4m3 for `P . V` * v_scale,
    fp32 online softmax over blocks of `block_n` keys; draft keys in bf16. [T, H, HEAD_DIM_V] float32."""
    e4m3 = torch.float8_e4m3fn
    out = torch.zeros((case["q"].shape[0], case["q"].shape[1], HEAD_DIM_V))
    for r, (q0, q1, k0, k1) in enumerate(_request_ranges(case)):
        prefix, n = k1 - k0, q1 - q0
        if n == 0:
            continue
        slots = case["kv_indices"][k0:k1].long()
        raw = case["kv_buffer"][slots, 0, :].float()  # e4m3 values, unscaled
        q = case["q"][q0:q1].float().transpose(0, 1)  # [H, n, 576]
        q8 = q.to(e4m3).float()
        heads = q.shape[0]
        acc = torch.zeros((heads, n, HEAD_DIM_V))
        deno = torch.zeros((heads, n))
        e_max = torch.full((heads, n), float("-inf"))
        for s0 in range(0, prefix, block_n):
            k = raw[s0 : s0 + block_n]
            qk = torch.einsum("hnd,sd->hns", q8, k) * case["sm_scale"] * case.get("k_scale", 1.0)
            new_max = torch.maximum(e_max, qk.amax(-1))
            re = torch.exp(e_max - new_max)
            p = torch.exp(qk - new_max[..., None])
            deno = deno * re + p.sum(-1)
            pv = torch.einsum("hns,sd->hnd", p.to(e4m3).float(), k[:, :HEAD_DIM_V])
            acc = acc * re[..., None] + pv * case.get("v_scale", 1.0)
            e_max = new_max
        visible = _visibility(case, r, prefix, n)[:, prefix:]  # [n, n]
        ke = case["k_extend"][q0:q1, 0].float()
        ve = case["v_extend"][q0:q1, 0].float()
        qk = torch.einsum("hnd,sd->hns", q, ke) * case["sm_scale"]
        qk = qk.masked_fill(~visible.view(1, n, n), float("-inf"))
        new_max = torch.maximum(e_max, qk.amax(-1))
        re = torch.exp(e_max - new_max).nan_to_num(0.0)
        p = torch.exp(qk - new_max[..., None]).nan_to_num(0.0)
        deno = deno * re + p.sum(-1)
        acc = acc * re[..., None] + torch.einsum("hns,sd->hnd", p.to(torch.bfloat16).float(), ve)
        out[q0:q1] = (acc / deno[..., None]).transpose(0, 1)
    return out
