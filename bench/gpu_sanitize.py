"""The sanitizer tier's workload: a few small verify-attention calls, each checked against the reference.

scripts/gpu-check.sh runs this file under NVIDIA's compute-sanitizer (racecheck, synccheck, memcheck,
initcheck; bench/gpu_check.py owns the tools and the filter that keeps the report to the kernel's own
launches). The shapes are small so that the slow tools finish in seconds, yet they reach every launch
path: the 32- and 64-row layouts, one split and split-KV + combine, tree and causal masks, bf16 and fp8
KV, int32 and int64 indices, a tail tile shorter than the block, a graph-sized token buffer whose extra
rows the kernel must not touch. Buffers are exact-size (no pool slack) and torch's caching allocator is
off (PYTORCH_NO_CUDA_MEMORY_CACHING=1, set by the tier) so that memcheck sees a read past any tensor.

    python bench/gpu_sanitize.py --lib build/sm_90a/libkdtree_verify.so [--list]
Exit 0 every shape matched the reference; 1 a mismatch (named); 2 no CUDA / bad library.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "bench", ROOT / "files" / "sglang_ext"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

log = logging.getLogger("gpu_sanitize")


@dataclass(frozen=True)
class Shape:
    name: str
    prefix_lens: tuple[int, ...]
    ns: tuple[int, ...]
    heads: int
    kv: str = "bf16"  # bf16 | fp8
    index: str = "int64"  # int32 | int64 (kv_indptr, kv_indices, mask_indptr)
    causal: bool = False
    block_m: int = 0  # 0: the library's rule; 32 / 64 forced
    extra_rows: int = 0  # graph-sized token buffer: rows past qo_indptr[-1]


# Small on purpose (racecheck and initcheck slow a launch by 10-100x); the long prefixes of the split
# cases are the shortest that make the library split on a 132-SM GPU (kdtree_verify_num_splits).
SHAPES: tuple[Shape, ...] = (
    Shape("tree bf16 int64 32-row short", (17,), (4,), 8, block_m=32),
    Shape("tree bf16 int64 64-row short", (33, 5), (4, 7), 8, block_m=64),
    Shape("causal fp8 int32 32-row tail", (200, 77), (3, 1), 16, kv="fp8", index="int32", causal=True),
    Shape("tree fp8 int64 64-row split", (8192,), (8,), 8, kv="fp8", block_m=64),
    Shape("tree bf16 int32 32-row split graph", (4099, 130), (4, 2), 8, index="int32", extra_rows=3),
    Shape("causal bf16 int64 64-row split H=64", (6000,), (2,), 64, causal=True, block_m=64),
    Shape("tree bf16 int64 32-row a request without prefix", (0, 9), (4, 3), 8),
)


def run_shape(vk, shape: Shape, device: str = "cuda") -> str | None:
    """Run one shape on `device`; None when it matches the reference, else what went wrong."""
    import torch
    from kdtree_verify.kernel.reference import verify_attention_reference
    from kdtree_verify.kernel.shapes import HEAD_DIM_V
    from kernel_cases import CaseSpec, kernel_kwargs, make_case
    from kernel_checks import check_rows

    spec = CaseSpec(
        prefix_lens=list(shape.prefix_lens),
        ns=list(shape.ns),
        heads=shape.heads,
        kv_dtype=torch.float8_e4m3fn if shape.kv == "fp8" else torch.bfloat16,
        index_dtype=torch.int32 if shape.index == "int32" else torch.int64,
        k_scale=0.5 if shape.kv == "fp8" else 1.0,
        v_scale=0.25 if shape.kv == "fp8" else None,
        causal=shape.causal,
        pool_slack=0,
        seed=len(shape.name),
    )
    host = make_case(spec, "cpu")
    tokens = sum(shape.ns)
    if shape.extra_rows:
        for name in ("q", "k_extend", "v_extend"):
            t = host[name]
            host[name] = torch.cat([t, t[: shape.extra_rows].clone()])
    dev = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in host.items()}
    sentinel = 7.0
    rows = tokens + shape.extra_rows
    out = torch.full((rows, shape.heads, HEAD_DIM_V), sentinel, dtype=torch.bfloat16, device=device)
    vk.run(**kernel_kwargs(dev, out, max(shape.ns)), block_m=shape.block_m)
    if device != "cpu":
        torch.cuda.synchronize()
    got = out.cpu().float()
    if shape.extra_rows and not bool((got[tokens:] == sentinel).all()):
        return "rows past qo_indptr[-1] were written"
    ref_case = dict(host)
    for name in ("q", "k_extend", "v_extend"):
        ref_case[name] = host[name][:tokens]
    ref = verify_attention_reference(**ref_case)
    return check_rows(got[:tokens], ref)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.environ.get("KDTREE_LIB", ""))
    ap.add_argument("--list", action="store_true", help="print the shapes and exit (no GPU needed)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="gpu-sanitize: %(message)s")
    if args.list:
        for s in SHAPES:
            print(f"shape: {s.name}: prefixes {list(s.prefix_lens)} drafts {list(s.ns)} H={s.heads}")
        return 0
    import torch
    from kdtree_verify.kernel import binding

    if not torch.cuda.is_available() or not args.lib:
        log.error("needs a CUDA GPU and --lib (the built library)")
        return 2
    try:
        vk = binding.load(args.lib)
    except binding.KernelUnavailable as exc:
        log.error("library unusable: %s", exc)
        return 2
    reason = vk.unsupported_reason(torch.device("cuda"))
    if reason:
        log.error("library does not serve this GPU: %s", reason)
        return 2
    bad = 0
    for shape in SHAPES:
        problem = run_shape(vk, shape)
        log.info("%s: %s", shape.name, problem or "matches the reference")
        bad += problem is not None
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
