"""Benchmark the kdtree verify kernel against SGLang's Triton extend_attention_fwd (needs a CUDA GPU).

Kimi-K2-like shapes (absorbed MLA, H=8 local heads at TP8): for every (batch, n, prefix) it prints the
kernel time, the KV-read bandwidth it achieves (each prefix KV byte counted once) as a fraction of the
GPU's peak HBM bandwidth, Triton's time on the same inputs in the same run, the speedup, and the max
difference between the two outputs. Ends with the issue's goals, each PASS/FAIL.

    python bench/kernel_bench.py --lib build/kernel/<arch>/libkdtree_verify.so [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "roles" / "kdtree_patch" / "files" / "sglang_ext"))
sys.path.insert(0, str(ROOT / "bench"))

from kdtree_verify import kernel  # noqa: E402
from kdtree_verify.shapes import HEAD_DIM_QK, HEAD_DIM_V  # noqa: E402
from kernel_cases import random_tree_mask  # noqa: E402

log = logging.getLogger("kernel_bench")

# Peak HBM bandwidth in GB/s by device-name substring (vendor data sheets); --peak-gbps overrides.
PEAK_GBPS = [
    ("H200", 4800.0),
    ("H100 NVL", 3900.0),
    ("H100 PCIe", 2000.0),
    ("H100", 3350.0),
    ("H20", 4000.0),
    ("GB200", 8000.0),
    ("B200", 8000.0),
    ("B300", 8000.0),
    ("RTX PRO 6000", 1792.0),
    ("RTX 5090", 1792.0),
]


@dataclass
class Row:
    batch: int
    n: int
    prefix: int
    heads: int
    kv_dtype: str
    splits: int
    kernel_us: float
    kv_gbps: float
    frac_peak: float
    triton_us: float | None
    speedup: float | None
    max_abs_diff: float | None


def import_triton_extend() -> tuple[Any, str]:
    """SGLang's extend_attention_fwd, or (None, why not)."""
    errors = []
    for module in (
        "sglang.kernels.ops.attention.extend_attention",
        "sglang.srt.layers.attention.triton_ops.extend_attention",
    ):
        try:
            mod = __import__(module, fromlist=["extend_attention_fwd"])
            return mod.extend_attention_fwd, module
        except Exception as exc:  # ImportError or an import-time failure inside sglang
            errors.append(f"{module}: {type(exc).__name__}: {exc}")
    return None, "; ".join(errors)


def peak_gbps(name: str, override: float | None) -> tuple[float | None, str]:
    if override:
        return override, "--peak-gbps"
    for key, value in PEAK_GBPS:
        if key in name:
            return value, f"data sheet ({key})"
    return None, "unknown device"


def measured_copy_gbps() -> float:
    """Device-to-device copy bandwidth (read + write bytes), a practical ceiling."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3 / 10
    del src, dst
    return 2 * (1 << 30) / seconds / 1e9


def make_inputs(batch: int, n: int, prefix: int, heads: int, kv_dtype: torch.dtype, seed: int) -> dict:
    """Inputs on the GPU in SGLang's verify layout (equal n per request, as SGLang sends them)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    tokens = batch * n
    pool = batch * prefix + 64
    dev = "cuda"
    q = torch.randn((tokens, heads, HEAD_DIM_QK), generator=gen, device=dev, dtype=torch.bfloat16)
    k_extend = torch.randn((tokens, 1, HEAD_DIM_QK), generator=gen, device=dev, dtype=torch.bfloat16)
    v_extend = k_extend[..., :HEAD_DIM_V]  # what SGLang's MLA path passes
    kv = torch.randn((pool, 1, HEAD_DIM_QK), generator=gen, device=dev, dtype=torch.bfloat16)
    kv_buffer = kv.to(kv_dtype) if kv_dtype != torch.bfloat16 else kv
    kv_indices = torch.randperm(pool, generator=gen, device=dev)[: batch * prefix]
    tree = random_tree_mask(n, torch.Generator().manual_seed(seed)).to(dev)
    block = torch.ones((n, prefix + n), dtype=torch.bool, device=dev)
    block[:, prefix:] = tree
    custom_mask = block.reshape(-1).repeat(batch)
    steps = torch.arange(batch + 1, dtype=torch.int32, device=dev)
    qo_indptr = steps * n
    kv_indptr = steps * prefix
    mask_indptr = torch.arange(0, batch + 1, dtype=torch.int64, device=dev) * (n * (prefix + n))
    return {
        "q": q,
        "k_extend": k_extend,
        "v_extend": v_extend,
        "kv_buffer": kv_buffer,
        "qo_indptr": qo_indptr,
        "kv_indptr": kv_indptr,
        "kv_indices": kv_indices,
        "custom_mask": custom_mask,
        "mask_indptr": mask_indptr,
        "batch_size": batch,
        "max_extend_len": n,
        "sm_scale": HEAD_DIM_QK**-0.5,
        "kv_scale": 1.0,
    }


def time_call(fn, budget_s: float = 0.25, min_iters: int = 3, max_iters: int = 200) -> float:
    """Median-free simple timing: warm up, size the loop to ~budget_s, return microseconds per call."""
    fn()
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    one = max(start.elapsed_time(end) / 1e3, 1e-6)
    iters = int(min(max_iters, max(min_iters, budget_s / one)))
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / iters


def bench_shape(vk, triton_fwd, batch, n, prefix, heads, kv_dtype, peak) -> Row:
    inputs = make_inputs(batch, n, prefix, heads, kv_dtype, seed=batch * 1000 + n * 7 + prefix)
    tokens = batch * n
    out = torch.empty((tokens, heads, HEAD_DIM_V), dtype=torch.bfloat16, device="cuda")
    kernel_us = time_call(lambda: vk.run(**inputs, out=out))
    kv_bytes = batch * prefix * HEAD_DIM_QK * inputs["kv_buffer"].element_size()
    kv_gbps = kv_bytes / (kernel_us * 1e-6) / 1e9
    splits = int(
        vk.lib.kdtree_verify_num_splits(
            torch.cuda.get_device_properties(0).multi_processor_count,
            batch,
            heads,
            n,
            int(inputs["kv_indices"].numel()),
        )
    )
    triton_us = speedup = diff = None
    if triton_fwd is not None:
        o_triton = torch.empty_like(out)
        kvb = inputs["kv_buffer"]

        def run_triton():
            triton_fwd(
                inputs["q"],
                inputs["k_extend"],
                inputs["v_extend"],
                o_triton,
                kvb,
                kvb[..., :HEAD_DIM_V],
                inputs["qo_indptr"],
                inputs["kv_indptr"],
                inputs["kv_indices"],
                inputs["custom_mask"],
                True,
                inputs["mask_indptr"],
                n,
                1.0,
                1.0,
                sm_scale=inputs["sm_scale"],
            )

        triton_us = time_call(run_triton)
        speedup = triton_us / kernel_us
        diff = float((o_triton.float() - out.float()).abs().max())
    frac = kv_gbps / peak if peak else float("nan")
    return Row(
        batch,
        n,
        prefix,
        heads,
        str(kv_dtype).replace("torch.", ""),
        splits,
        kernel_us,
        kv_gbps,
        frac,
        triton_us,
        speedup,
        diff,
    )


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def goals(rows: list[Row]) -> list[tuple[str, str]]:
    out = []
    with_triton = [r for r in rows if r.speedup is not None]
    sel = [r for r in with_triton if r.prefix >= 8192 and 1 <= r.batch <= 8]
    if sel:
        worst = min(r.speedup for r in sel)
        out.append(
            (
                f">= 5x Triton at prefix >= 8k, batch 1..8 (worst {worst:.2f}x)",
                "PASS" if worst >= 5 else "FAIL",
            )
        )
    else:
        out.append((">= 5x Triton at prefix >= 8k, batch 1..8", "NOT MEASURED (no Triton column)"))
    sel = [r for r in rows if r.prefix >= 32768 and not math.isnan(r.frac_peak)]
    if sel:
        worst = min(r.frac_peak for r in sel)
        out.append(
            (f">= 70% of peak HBM at prefix >= 32k (worst {worst:.0%})", "PASS" if worst >= 0.7 else "FAIL")
        )
    else:
        out.append((">= 70% of peak HBM at prefix >= 32k", "NOT MEASURED (no peak or no such shape)"))
    if with_triton:
        worst = min(r.speedup for r in with_triton)
        out.append((f"never slower than Triton (worst {worst:.2f}x)", "PASS" if worst >= 1 else "FAIL"))
    else:
        out.append(("never slower than Triton", "NOT MEASURED (no Triton column)"))
    return out


def parse_list(text: str) -> list[int]:
    return [
        int(float(x.lower().replace("k", "")) * (1024 if "k" in x.lower() else 1)) for x in text.split(",")
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.environ.get("KDTREE_LIB", ""), help="libkdtree_verify.so (absolute)")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--n", default="8,16,32,64")
    ap.add_argument("--prefix", default="1k,8k,32k,128k")
    ap.add_argument("--batch", default="1,4,8,32")
    ap.add_argument("--kv-dtype", choices=["bf16", "fp8"], default="bf16")
    ap.add_argument("--quick", action="store_true", help="n=8,64 prefix=1k,8k,32k,128k batch=1,8")
    ap.add_argument("--max-pool-gb", type=float, default=24.0, help="skip shapes whose KV pool is larger")
    ap.add_argument("--peak-gbps", type=float, default=None)
    ap.add_argument("--json", default=None, help="write the rows and goals here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    if not torch.cuda.is_available():
        print("kernel_bench: no CUDA GPU; nothing to measure")
        return 2
    lib = os.path.abspath(args.lib) if args.lib else ""
    vk = kernel.load(lib)
    reason = vk.unsupported_reason(torch.device("cuda"))
    if reason:
        print(f"kernel_bench: library unusable on this GPU: {reason}")
        return 2
    ns, prefixes, batches = parse_list(args.n), parse_list(args.prefix), parse_list(args.batch)
    if args.quick:
        ns, prefixes, batches = [8, 64], [1024, 8192, 32768, 131072], [1, 8]
    kv_dtype = torch.float8_e4m3fn if args.kv_dtype == "fp8" else torch.bfloat16
    name = torch.cuda.get_device_name(0)
    peak, peak_src = peak_gbps(name, args.peak_gbps)
    copy_gbps = measured_copy_gbps()
    triton_fwd, triton_src = import_triton_extend()
    print(f"device: {name}  SMs: {torch.cuda.get_device_properties(0).multi_processor_count}")
    print(f"library: {lib}  ({vk.meta['build_info']})")
    print(f"peak HBM: {fmt(peak, '.0f')} GB/s [{peak_src}]   measured D2D copy: {copy_gbps:.0f} GB/s")
    if triton_fwd is None:
        print(
            "NOTE: SGLang's Triton extend_attention_fwd is not importable, "
            f"Triton column skipped ({triton_src})"
        )
    else:
        print(f"triton: {triton_src}.extend_attention_fwd")
    header = (
        f"{'batch':>5} {'n':>3} {'prefix':>7} {'splits':>6} {'kernel_us':>10} {'KV_GB/s':>8} {'%peak':>6} "
        f"{'triton_us':>10} {'speedup':>8} {'max|diff|':>9}"
    )
    print(header)
    rows: list[Row] = []
    for batch in batches:
        for n in ns:
            for prefix in prefixes:
                pool_gb = (batch * prefix + 64) * HEAD_DIM_QK * (1 if args.kv_dtype == "fp8" else 2) / 1e9
                if pool_gb > args.max_pool_gb:
                    print(f"{batch:>5} {n:>3} {prefix:>7}  skipped: KV pool {pool_gb:.1f} GB > --max-pool-gb")
                    continue
                row = bench_shape(vk, triton_fwd, batch, n, prefix, args.heads, kv_dtype, peak)
                rows.append(row)
                print(
                    f"{batch:>5} {n:>3} {prefix:>7} {row.splits:>6} {row.kernel_us:>10.1f} "
                    f"{row.kv_gbps:>8.0f} "
                    f"{fmt(row.frac_peak * 100 if peak else None, '.0f'):>6} {fmt(row.triton_us, '.1f'):>10} "
                    f"{fmt(row.speedup, '.2f'):>8} {fmt(row.max_abs_diff, '.3g'):>9}",
                    flush=True,
                )
                torch.cuda.empty_cache()
    results = goals(rows)
    print("goals (issue 4, H200 targets):")
    for text, verdict in results:
        print(f"  {verdict:>4}  {text}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "device": name,
                    "peak_gbps": peak,
                    "copy_gbps": copy_gbps,
                    "triton": triton_src if triton_fwd else None,
                    "rows": [asdict(r) for r in rows],
                    "goals": results,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
