"""Benchmark the kdtree verify kernel against SGLang's Triton extend_attention_fwd (needs a CUDA GPU).

Kimi-K2-like shapes (absorbed MLA; H local heads: 8 at TP8, 64 at TP1): for every (H, batch, n, prefix)
it prints the kernel time, the bandwidth it achieves (bytes it must move: prefix KV once, q, drafts, out),
the fraction of its roofline (max of bytes / peak HBM bandwidth and FLOPs / peak dense bf16 MMA rate of
this GPU), Triton's time on the same inputs, the speedup and the max difference. Ends with the goals,
each PASS/FAIL with its figure.

Times are COLD: before every timed call a buffer of twice the GPU's L2 is written, so the call reads its
KV from HBM as a serving step does (one layer's KV is not in L2 when the next step reaches that layer;
the goal shapes' KV, 9-38 MB, would otherwise sit in an H200's ~50 MB L2 and inflate the bandwidth). The
figure is the median of COLD_REPS calls timed with CUDA events around the call alone. The warm figure
(CUDA-graph replays of CALLS_PER_GRAPH back-to-back calls on the same inputs, L2 hot) is printed beside
it as `warm_us`; no goal reads it. Batches with mixed prefix lengths (MIXED_SHAPES: one long request
among short ones, the normal case in serving) are timed beside the uniform ones; the roofline goal
reads uniform batches only (a mixed batch's imbalance is the launch rule's, reported, not judged).

Baselines: SGLang's Triton extend kernel (vendored, it travels with the tree) is the one this check runs.
On sm_120 it is SGLang's only MLA tree-mask verify path (FlashInfer's MLA serves causal chains only); on
sm_90 SGLang's FA3 backend already serves MLA tree verify: compare with FA3 there before promoting.
FlashInfer and FA3 cannot be installed on the offline GPU machine, so this benchmark does not run them.

    python bench/kernel_bench.py --lib build/kernel/<arch>/libkdtree_verify.so [--quick] [--json out.json]
    python bench/kernel_bench.py --quick --plan    the shapes and their H200 roofline; no GPU needed
    python bench/kernel_bench.py --plan --lib <any build, the CPU emulator's too>   and the plan's balance
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "files" / "sglang_ext"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "bench" / "third_party"))

import kernel_plan  # noqa: E402
import sglang_triton  # noqa: E402
from kdtree_verify.kernel import binding as kernel  # noqa: E402
from kdtree_verify.kernel.shapes import HEAD_DIM_QK, HEAD_DIM_V  # noqa: E402
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


# Peak dense bf16 tensor-core rate (fp32 accumulate) in TFLOP/s, data sheets; --peak-tflops overrides.
PEAK_TFLOPS = [
    ("H200", 989.0),
    ("H100", 989.0),
    ("H20", 148.0),
    ("GB200", 2500.0),
    ("B200", 2250.0),
    ("B300", 2250.0),
    ("RTX PRO 6000", 503.0),
    ("RTX 5090", 209.0),
]
CALLS_PER_GRAPH = 20
COLD_REPS = 15  # cold calls per shape (median), each after an L2 flush
FLUSH_MIN_BYTES = 256 << 20  # the flush buffer: twice the L2, at least this
# Mixed-length batches, (H, n, prefixes): one long request among short ones, the serving mix.
MIXED_SHAPES = (
    (8, 4, (131072,) + (2048,) * 7),
    (8, 4, tuple(32768 >> k for k in (0, 5, 1, 6, 2, 7, 3, 8))),  # 32k, 1k, 16k, ..., 128: a spread
    (16, 4, (65536,) + (1024,) * 31),
)
# --quick (gpu-check tier 3): (H, batch, n, prefix), a few shapes for each goal of goals():
QUICK_SHAPES = (
    (8, 1, 4, 32768),  # >= 80% of roofline at prefix >= 32k, H*n <= 64
    (8, 8, 4, 131072),
    (16, 1, 4, 131072),
    (8, 1, 4, 8192),  # >= 5x Triton at prefix >= 8k
    (64, 1, 1, 8192),
    (8, 1, 4, 1024),  # never slower than Triton (short prefix, many rows)
    (64, 8, 16, 1024),
)
PLAN_DEVICE = "H200"  # --plan: the roofline figures are this device's (PEAK_GBPS / PEAK_TFLOPS)
FLOPS_PER_KEY_ROW = 2 * (HEAD_DIM_QK + HEAD_DIM_V)  # S = q.k and O += p.v


@dataclass
class Row:
    batch: int
    n: int
    prefix: int
    heads: int
    kv_dtype: str
    splits: int
    kernel_us: float  # cold (L2 flushed before the call)
    kv_gbps: float
    frac_peak: float  # fraction of the roofline: roofline time / kernel time
    triton_us: float | None  # cold, as kernel_us
    speedup: float | None
    max_abs_diff: float | None
    warm_us: float | None = None  # graph replays on the same inputs, L2 hot (not judged)
    prefixes: list[int] | None = None  # a mixed batch's prefix lengths (prefix is their maximum)


def import_triton_extend() -> tuple[Any, str]:
    """SGLang's extend_attention_fwd (installed, else the pinned wheel's vendored file), or (None, why)."""
    try:
        return sglang_triton.extend_attention_fwd()
    except Exception as exc:  # no triton, or the file does not import on this triton
        return None, f"{type(exc).__name__}: {exc}"


def peak_gbps(name: str, override: float | None) -> tuple[float | None, str]:
    if override:
        return override, "--peak-gbps"
    for key, value in PEAK_GBPS:
        if key in name:
            return value, f"data sheet ({key})"
    return None, "unknown device"


def peak_tflops(name: str, override: float | None) -> float | None:
    if override:
        return override
    return next((value for key, value in PEAK_TFLOPS if key in name), None)


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


def make_inputs(
    batch: int, n: int, prefix: int, heads: int, kv_dtype: torch.dtype, seed: int, prefixes=None
) -> dict:
    """Inputs on the GPU in SGLang's verify layout (equal n per request, as SGLang sends them); with
    `prefixes`, request r has prefixes[r] committed tokens (batch = len(prefixes))."""
    prefixes = list(prefixes) if prefixes is not None else [prefix] * batch
    batch = len(prefixes)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    tokens = batch * n
    total = sum(prefixes)
    pool = total + 64
    dev = "cuda"
    q = torch.randn((tokens, heads, HEAD_DIM_QK), generator=gen, device=dev, dtype=torch.bfloat16)
    k_extend = torch.randn((tokens, 1, HEAD_DIM_QK), generator=gen, device=dev, dtype=torch.bfloat16)
    v_extend = k_extend[..., :HEAD_DIM_V]  # what SGLang's MLA path passes
    kv = torch.randn((pool, 1, HEAD_DIM_QK), generator=gen, device=dev, dtype=torch.bfloat16)
    kv_buffer = kv.to(kv_dtype) if kv_dtype != torch.bfloat16 else kv
    kv_indices = torch.randperm(pool, generator=gen, device=dev)[:total]
    tree = random_tree_mask(n, torch.Generator().manual_seed(seed)).to(dev)
    blocks = []
    for p in prefixes:
        block = torch.ones((n, p + n), dtype=torch.bool, device=dev)
        block[:, p:] = tree
        blocks.append(block.reshape(-1))
    custom_mask = torch.cat(blocks)
    steps = torch.arange(batch + 1, dtype=torch.int32, device=dev)
    qo_indptr = steps * n
    cum = [0]
    for p in prefixes:
        cum.append(cum[-1] + p)
    kv_indptr = torch.tensor(cum, dtype=torch.int32, device=dev)
    mask_indptr = torch.tensor(
        [sum(n * (p + n) for p in prefixes[:i]) for i in range(batch + 1)], dtype=torch.int64, device=dev
    )
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
        "k_scale": 1.0,
        "v_scale": 1.0,
    }


def time_call(fn, calls: int = CALLS_PER_GRAPH, replays: int = 10) -> float:
    """Microseconds per call: `calls` back-to-back calls captured in one CUDA graph, replayed `replays`
    times after two eager warm-ups (compilation, workspace), so host overhead is not in the figure."""
    fn()
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        for _ in range(calls):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (replays * calls)


class ColdTimer:
    """Microseconds of one call with the L2 flushed before it: a write of twice the L2 (at least
    FLUSH_MIN_BYTES) precedes each call on the same stream, CUDA events around the call alone, the
    median of `reps` calls after two warm-ups. The host enqueues the call while the flush runs, so its
    launch overhead is hidden as in a serving step's stream of launches."""

    def __init__(self) -> None:
        l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 0)
        self.flush_bytes = max(2 * l2, FLUSH_MIN_BYTES)
        self.l2_bytes = l2
        self.buffer = torch.empty(self.flush_bytes, dtype=torch.uint8, device="cuda")

    def __call__(self, fn, reps: int = COLD_REPS) -> float:
        fn()
        fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for start, end in zip(starts, ends, strict=True):
            self.buffer.fill_(1)
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        times = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends, strict=True))
        return times[len(times) // 2]


def counter_cost(vk, kv_dtype) -> dict:
    """The ABI 4 call counter's cost on the smallest shape (H=8, batch 1, n=4, prefix 1k), where one
    atomicAdd per launch weighs most: microseconds per call with and without it (count_calls)."""
    inputs = make_inputs(1, 4, 1024, 8, kv_dtype, seed=4242)
    out = torch.empty((4, 8, HEAD_DIM_V), dtype=torch.bfloat16, device="cuda")
    timings = {}
    try:
        for counted in (True, False, True):  # with, without, with again (order effects)
            vk.count_calls = counted
            us = time_call(lambda: vk.run(**inputs, out=out))
            timings.setdefault("with_us" if counted else "without_us", []).append(us)
    finally:
        vk.count_calls = True
    with_us, without_us = min(timings["with_us"]), min(timings["without_us"])
    return {"with_us": with_us, "without_us": without_us, "overhead_pct": (with_us / without_us - 1) * 100}


def timing_cost(calls: int = 20000, cuda: bool = False) -> dict:
    """Validate timing's cost per call (kdtree_verify/telemetry/timing.py), in microseconds on the host,
    the forward's thread: the host clock's bookkeeping (two perf_counter_ns pairs, the bucket's warm-up
    check, the sums) and, with `cuda`, the CUDA clock's (three event records on the forward's stream,
    the queue), plus the publisher thread's drain per call (its thread, not the forward's). The device
    side of an event record is a stream marker (no kernel): nothing to add there."""
    from kdtree_verify.telemetry import timing

    key = timing.bucket_key(1, 4, "le1024", 8)
    out: dict[str, float] = {}
    host = timing.Timings()
    for _ in range(timing.WARMUP_CALLS):
        host.start(key)
    started = time.perf_counter_ns()
    for _ in range(calls):
        if host.start(key):
            a = timing.now_ns()
            b = timing.now_ns()
            host.host(key, b - a, timing.now_ns() - b)
    out["host_clock_us"] = (time.perf_counter_ns() - started) / calls / 1e3
    if cuda:
        gpu = timing.Timings(timing.CUDA_CLOCK)
        for _ in range(timing.WARMUP_CALLS):
            gpu.start(key)
        batch = min(calls, timing.MAX_PENDING)
        started = time.perf_counter_ns()
        for _ in range(batch):
            if gpu.start(key) and gpu.room():
                events = (gpu.event(), gpu.event(), gpu.event())
                for event in events:
                    event.record()
                gpu.events(key, *events)
        out["cuda_clock_us"] = (time.perf_counter_ns() - started) / batch / 1e3
        torch.cuda.synchronize()
        started = time.perf_counter_ns()
        drained = gpu.drain()
        out["drain_us"] = (time.perf_counter_ns() - started) / max(drained, 1) / 1e3
    return out


def roofline_us(batch: int, n: int, prefix: int, heads: int, kv_elem: int, gbps: float, tflops: float | None):
    """(bytes, FLOPs, roofline microseconds) of one call on a uniform batch."""
    return roofline_mixed([prefix] * batch, n, heads, kv_elem, gbps, tflops)


def roofline_mixed(prefixes, n: int, heads: int, kv_elem: int, gbps: float, tflops: float | None):
    """(bytes, FLOPs, roofline microseconds) of one call whose request r has prefixes[r] keys."""
    tokens = len(prefixes) * n
    nbytes = (
        sum(prefixes) * HEAD_DIM_QK * kv_elem  # prefix KV, once
        + tokens * heads * (HEAD_DIM_QK + HEAD_DIM_V) * 2  # q in, out
        + tokens * (HEAD_DIM_QK + HEAD_DIM_V) * 2  # draft K, V
    )
    flops = FLOPS_PER_KEY_ROW * n * heads * sum(p + n for p in prefixes)
    t = nbytes / (gbps * 1e9)
    if tflops:
        t = max(t, flops / (tflops * 1e12))
    return nbytes, flops, t * 1e6


def bench_shape(
    vk, triton_fwd, batch, n, prefix, heads, kv_dtype, peak, tflops, block_m=0, cold=None, prefixes=None
) -> Row:
    """One shape: cold kernel and Triton times (ColdTimer), the warm kernel time beside them."""
    cold = cold or ColdTimer()
    if prefixes is not None:
        batch, prefix = len(prefixes), max(prefixes)
    seed = batch * 1000 + n * 7 + prefix
    inputs = make_inputs(batch, n, prefix, heads, kv_dtype, seed=seed, prefixes=prefixes)
    tokens = batch * n
    out = torch.empty((tokens, heads, HEAD_DIM_V), dtype=torch.bfloat16, device="cuda")
    warm_us = time_call(lambda: vk.run(**inputs, out=out, block_m=block_m))
    kernel_us = cold(lambda: vk.run(**inputs, out=out, block_m=block_m))
    elem = inputs["kv_buffer"].element_size()
    all_prefixes = list(prefixes) if prefixes is not None else [prefix] * batch
    nbytes, _flops, roof_us = roofline_mixed(all_prefixes, n, heads, elem, peak or 1.0, tflops)
    kv_gbps = nbytes / (kernel_us * 1e-6) / 1e9
    splits = int(
        vk.lib.kdtree_verify_num_splits(
            torch.cuda.get_device_properties(0).multi_processor_count,
            batch,
            heads,
            n,
            int(inputs["kv_indices"].numel()),
            kernel.KV_FP8_E4M3 if kv_dtype == torch.float8_e4m3fn else kernel.KV_BF16,
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

        triton_us = cold(run_triton)
        speedup = triton_us / kernel_us
        diff = float((o_triton.float() - out.float()).abs().max())
    frac = roof_us / kernel_us if peak else float("nan")
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
        warm_us,
        list(prefixes) if prefixes is not None else None,
    )


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


@dataclass(frozen=True)
class Goal:
    """One of the issue's performance goals: the rows it judges, the figure, the least that passes."""

    title: str
    judges: Callable[[Row], bool]
    figure: str  # the Row field judged (its worst row is the smallest)
    least: float
    written: str  # how the worst figure is written (str.format)
    unmeasured: str  # why there is no verdict when no row is judged


GOALS: tuple[Goal, ...] = (
    Goal(
        ">= 80% of roofline at prefix >= 32k, H*n <= 64",
        # a mixed batch's imbalance is reported, not judged
        lambda r: (
            r.prefixes is None and r.prefix >= 32768 and r.heads * r.n <= 64 and not math.isnan(r.frac_peak)
        ),
        "frac_peak",
        0.8,
        "{:.0%}",
        "no peak or no such shape",
    ),
    Goal(
        ">= 5x Triton at prefix >= 8k",
        lambda r: r.speedup is not None and r.prefix >= 8192,
        "speedup",
        5.0,
        "{:.2f}x",
        "no Triton column",
    ),
    Goal(
        "never slower than Triton",
        lambda r: r.speedup is not None,
        "speedup",
        1.0,
        "{:.2f}x",
        "no Triton column",
    ),
)


def goals(rows: list[Row]) -> list[tuple[str, str]]:
    """The issue's performance goals: (text with the figure, PASS | FAIL | NOT MEASURED)."""
    out = []
    for goal in GOALS:
        judged = [r for r in rows if goal.judges(r)]
        if not judged:
            out.append((goal.title, f"NOT MEASURED ({goal.unmeasured})"))
            continue
        worst = min(judged, key=lambda r: getattr(r, goal.figure))
        value = getattr(worst, goal.figure)
        shape = f"H={worst.heads} batch={worst.batch} n={worst.n} prefix={worst.prefix}"
        out.append(
            (
                f"{goal.title} (worst {goal.written.format(value)}: {shape})",
                "PASS" if value >= goal.least else "FAIL",
            )
        )
    return out


def parse_list(text: str) -> list[int]:
    return [
        int(float(x.lower().replace("k", "")) * (1024 if "k" in x.lower() else 1)) for x in text.split(",")
    ]


def select_shapes(args: argparse.Namespace) -> list[tuple[int, int, int, int]]:
    """(H, batch, n, prefix) to time: QUICK_SHAPES with --quick, else the grid of the list options."""
    if args.quick:
        return list(QUICK_SHAPES)
    ns, prefixes, batches = parse_list(args.n), parse_list(args.prefix), parse_list(args.batch)
    return [(h, b, n, p) for h in parse_list(args.heads) for b in batches for n in ns for p in prefixes]


def select_mixed(args: argparse.Namespace) -> list[tuple[int, int, tuple[int, ...]]]:
    """(H, n, prefixes) of the mixed batches to time: the first two with --quick, else all."""
    return list(MIXED_SHAPES[:2] if args.quick else MIXED_SHAPES)


def mix_label(prefixes) -> str:
    return f"mix{len(prefixes)}:{max(prefixes) // 1024}k+{len(prefixes) - 1}"


def plan(shapes: list[tuple[int, int, int, int]], args: argparse.Namespace) -> int:
    """The benchmark's CPU path: every shape with its bytes and roofline on PLAN_DEVICE, the balance of
    the library's work plan (with --lib: kernel_plan, no GPU), whether SGLang's Triton kernel imports,
    and the goals it would judge (the GPU rehearsal runs this)."""
    peak, _src = peak_gbps(PLAN_DEVICE, args.peak_gbps)
    tflops = peak_tflops(PLAN_DEVICE, args.peak_tflops)
    elem = 1 if args.kv_dtype == "fp8" else 2
    kv_name = "float8_e4m3fn" if args.kv_dtype == "fp8" else "bfloat16"
    vk = kernel.load(os.path.abspath(args.lib)) if args.lib else None
    print(f"plan: {len(shapes)} shapes, roofline on an {PLAN_DEVICE} ({peak:.0f} GB/s, {tflops:.0f} TFLOP/s)")
    if vk is None:
        print("balance: not computed (no --lib)")
    else:
        print(
            f"balance: busiest SM's key tiles / the even share on all {kernel_plan.DEFAULT_SMS} SMs "
            "(bench/kernel_plan.py; the library's kdtree_verify_partition; 1.00 = even)"
        )

    def balance_text(prefixes: list[int], n: int, heads: int) -> str:
        if vk is None:
            return ""
        b = kernel_plan.plan_balance(vk, prefixes, n, heads, kv_name, block_m=args.block_m)
        return (
            f" units={b.num_splits} balance={b.ratio:.2f} (busiest {b.makespan_tiles} tiles, "
            f"share {b.share_tiles:.1f}, segments<={b.most_segments})"
        )

    for heads, batch, n, prefix in shapes:
        nbytes, flops, us = roofline_us(batch, n, prefix, heads, elem, peak, tflops)
        print(
            f"plan: H={heads} batch={batch} n={n} prefix={prefix} bytes={nbytes} flops={flops} "
            f"roof_us={us:.2f}{balance_text([prefix] * batch, n, heads)}"
        )
    for heads, n, prefixes in select_mixed(args):
        nbytes, flops, us = roofline_mixed(prefixes, n, heads, elem, peak, tflops)
        print(
            f"plan: H={heads} batch={len(prefixes)} n={n} prefixes={','.join(map(str, prefixes))} "
            f"bytes={nbytes} flops={flops} "
            f"roof_us={us:.2f}{balance_text(list(prefixes), n, heads)}"
        )
    print("timing: cold (L2 flushed before each call, median of COLD_REPS), warm beside it (not judged)")
    fwd, where = import_triton_extend()
    print(f"triton: {where if fwd is not None else 'NOT importable: ' + where}")
    print("goals:")
    for text, _verdict in goals([]):
        print(f"  NOT MEASURED (plan only, no timing)  {text}")
    return 0 if fwd is not None else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.environ.get("KDTREE_LIB", ""), help="libkdtree_verify.so (absolute)")
    ap.add_argument("--heads", default="8,16,64")
    ap.add_argument("--n", default="1,4,16")
    ap.add_argument("--prefix", default="1k,8k,32k,128k")
    ap.add_argument("--batch", default="1,8,32")
    ap.add_argument("--kv-dtype", choices=["bf16", "fp8"], default="bf16")
    ap.add_argument("--quick", action="store_true", help="QUICK_SHAPES only (a few shapes per goal)")
    ap.add_argument("--plan", action="store_true", help="print the shapes and their H200 roofline; no GPU")
    ap.add_argument("--max-pool-gb", type=float, default=24.0, help="skip shapes whose KV pool is larger")
    ap.add_argument("--peak-gbps", type=float, default=None)
    ap.add_argument("--peak-tflops", type=float, default=None)
    ap.add_argument("--block-m", type=int, default=0, choices=[0, 32, 64], help="force a CTA layout")
    ap.add_argument("--json", default=None, help="write the rows and goals here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    shapes = select_shapes(args)
    if args.plan:
        return plan(shapes, args)
    if not torch.cuda.is_available():
        print("kernel_bench: no CUDA GPU; nothing to measure")
        return 2
    lib = os.path.abspath(args.lib) if args.lib else ""
    vk = kernel.load(lib)
    reason = vk.unsupported_reason(torch.device("cuda"))
    if reason:
        print(f"kernel_bench: library unusable on this GPU: {reason}")
        return 2
    kv_dtype = torch.float8_e4m3fn if args.kv_dtype == "fp8" else torch.bfloat16
    name = torch.cuda.get_device_name(0)
    peak, peak_src = peak_gbps(name, args.peak_gbps)
    tflops = peak_tflops(name, args.peak_tflops)
    copy_gbps = measured_copy_gbps()
    triton_fwd, triton_src = import_triton_extend()
    print(f"device: {name}  SMs: {torch.cuda.get_device_properties(0).multi_processor_count}")
    print(f"library: {lib}  ({vk.meta['build_info']})")
    print(
        f"peak HBM: {fmt(peak, '.0f')} GB/s [{peak_src}]  peak bf16 MMA: {fmt(tflops, '.0f')} TFLOP/s  "
        f"measured D2D copy: {copy_gbps:.0f} GB/s"
    )
    cold = ColdTimer()
    print(
        f"timing: cold = median of {COLD_REPS} calls, each after writing {cold.flush_bytes >> 20} MiB "
        f"(L2 {cold.l2_bytes >> 20} MiB); warm_us = CUDA graphs of {CALLS_PER_GRAPH} calls on the same "
        "inputs, L2 hot (not judged)"
    )
    print(
        "baselines: SGLang's Triton extend kernel (the triton columns). Not run here: FlashInfer's MLA "
        "(causal chains; the alternative on sm_120) and SGLang's FA3 (serves MLA tree verify on sm_90)"
    )
    if triton_fwd is None:
        print(
            "NOTE: SGLang's Triton extend_attention_fwd is not importable, "
            f"Triton column skipped ({triton_src})"
        )
    else:
        print(f"triton: {triton_src}")
    header = (
        f"{'H':>3} {'batch':>5} {'n':>3} {'prefix':>12} {'splits':>6} {'kernel_us':>10} {'GB/s':>8} "
        f"{'%roof':>6} {'triton_us':>10} {'speedup':>8} {'max|diff|':>9} {'warm_us':>9}"
    )
    print(header)
    rows: list[Row] = []
    todo = [(h, b, n, p, None) for h, b, n, p in shapes]
    todo += [(h, len(ps), n, max(ps), ps) for h, n, ps in select_mixed(args)]
    for heads, batch, n, prefix, prefixes in todo:
        keys = sum(prefixes) if prefixes else batch * prefix
        label = mix_label(prefixes) if prefixes else str(prefix)
        pool_gb = (keys + 64) * HEAD_DIM_QK * (1 if args.kv_dtype == "fp8" else 2) / 1e9
        if pool_gb > args.max_pool_gb:
            print(f"{heads:>3} {batch:>5} {n:>3} {label:>12}  skipped: KV pool {pool_gb:.1f} GB")
            continue
        row = bench_shape(
            vk, triton_fwd, batch, n, prefix, heads, kv_dtype, peak, tflops, args.block_m, cold, prefixes
        )
        rows.append(row)
        print(
            f"{heads:>3} {batch:>5} {n:>3} {label:>12} {row.splits:>6} {row.kernel_us:>10.1f} "
            f"{row.kv_gbps:>8.0f} "
            f"{fmt(row.frac_peak * 100 if peak else None, '.0f'):>6} {fmt(row.triton_us, '.1f'):>10} "
            f"{fmt(row.speedup, '.2f'):>8} {fmt(row.max_abs_diff, '.3g'):>9} {fmt(row.warm_us, '.1f'):>9}",
            flush=True,
        )
        torch.cuda.empty_cache()
    cost = counter_cost(vk, kv_dtype)
    print(
        f"call counter (H=8 batch=1 n=4 prefix=1k): {cost['with_us']:.2f} us with, "
        f"{cost['without_us']:.2f} us without ({cost['overhead_pct']:+.1f} %)",
        flush=True,
    )
    cost = timing_cost(cuda=True)
    print(
        f"validate timing per call: {cost['cuda_clock_us']:.2f} us on the forward's thread (3 CUDA events), "
        f"{cost['drain_us']:.2f} us in the status thread's drain; host clock {cost['host_clock_us']:.2f} us",
        flush=True,
    )
    results = goals(rows)
    print("goals:")
    for text, verdict in results:
        print(f"  {verdict:>4}  {text}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "device": name,
                    "peak_gbps": peak,
                    "copy_gbps": copy_gbps,
                    "timing": {
                        "cold_reps": COLD_REPS,
                        "flush_bytes": cold.flush_bytes,
                        "l2_bytes": cold.l2_bytes,
                    },
                    "triton": triton_src if triton_fwd else None,
                    "rows": [asdict(r) for r in rows],
                    "call_counter": cost,
                    "goals": results,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
