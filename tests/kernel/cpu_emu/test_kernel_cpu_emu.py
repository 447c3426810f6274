"""The CUDA kernel's own source (files/csrc/verify_attn_flash_paged.cu), run on the CPU by the emulator
(tests/kernel/cpu_emu: one OS thread per CUDA thread, ldmatrix / mma.sync / shfl from the PTX ISA's
fragment tables), matches the fp32 reference (kdtree_verify.kernel.reference) on every variant and
boundary; the emulator's hard errors, AddressSanitizer, UBSan and ThreadSanitizer catch what they claim.

make test-kernel-cpu: the short cases (and the sanitizer, fault and teeth tests); make
test-kernel-cpu-full (KDTREE_EMU_FULL=1): the long prefixes and the larger random set.
KDTREE_EMU_FAULT=last-tile|one-split builds the library with that fault: the case set must then fail.
"""

from __future__ import annotations

import bisect
import logging
import os
import random
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import emu_driver  # noqa: E402
from emu_cases import LONG, RANDOM_FULL, RANDOM_SHORT, SHORT, WIDE_BATCH, EmuCase  # noqa: E402
from emu_driver import Call, EmulatorError, EmuLibrary, run_exact  # noqa: E402
from kdtree_verify.kernel import binding  # noqa: E402
from kdtree_verify.kernel.reference import verify_attention_reference  # noqa: E402
from kdtree_verify.kernel.shapes import HEAD_DIM_V  # noqa: E402
from kernel_cases import CaseSpec, make_case  # noqa: E402
from kernel_checks import check_rows  # noqa: E402

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[3]
CSRC = ROOT / "files" / "csrc"
SENTINEL = 7.0  # written into `out` before a call: rows the kernel must not touch keep it
FULL = os.environ.get("KDTREE_EMU_FULL") == "1"
FAULT = os.environ.get("KDTREE_EMU_FAULT") or None
CASES = SHORT + RANDOM_SHORT + (LONG + RANDOM_FULL + [WIDE_BATCH] if FULL else [])


@pytest.fixture(scope="session")
def emu(tmp_path_factory) -> EmuLibrary:
    """The emulated library (with KDTREE_EMU_FAULT's fault when set)."""
    out = tmp_path_factory.mktemp("cpu-emu")
    return EmuLibrary(emu_driver.build(out, fault=FAULT))


def prepare(c: EmuCase) -> tuple[dict, torch.Tensor, int]:
    """(case, out filled with SENTINEL, valid token count) with c's edits and extra graph-sized rows."""
    case = make_case(c.spec, "cpu")
    if c.edit is not None:
        c.edit(case)
    if c.extra_rows:
        gen = torch.Generator().manual_seed(c.spec.seed + 1)
        for name in ("q", "k_extend", "v_extend"):
            t = case[name]
            extra = torch.randn((c.extra_rows, *t.shape[1:]), generator=gen).to(t.dtype)
            case[name] = torch.cat([t, extra])
    tokens, heads = case["q"].shape[:2]
    out = torch.full((tokens, heads, HEAD_DIM_V), SENTINEL, dtype=torch.bfloat16)
    return case, out, sum(c.spec.ns)


def reference(case: dict, valid: int) -> torch.Tensor:
    ref_case = dict(case)
    for name in ("q", "k_extend", "v_extend"):
        ref_case[name] = case[name][:valid]
    return verify_attention_reference(**ref_case)


def problem_of(out: torch.Tensor, ref: torch.Tensor, valid: int) -> str | None:
    """None when the valid rows match the reference (per-row relative L2, kernel_checks' tolerance) and
    every row past them still holds SENTINEL."""
    problem = check_rows(out[:valid].float(), ref)
    if problem is None and not bool((out[valid:].float() == SENTINEL).all()):
        problem = "rows past qo_indptr[-1] were written"
    return problem


def call_of(c: EmuCase) -> Call:
    return Call(c.max_len, num_splits=c.num_splits, num_sms=c.num_sms, block_m=c.block_m)


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_the_kernel_source_on_the_emulator_matches_the_reference(emu, c):
    case, out, valid = prepare(c)
    started = time.monotonic()
    calls = emu.run(case, out, call_of(c))
    log.info("%s: %.2f s", c.name, time.monotonic() - started)
    assert calls == 1, "one counted launch per run (ABI 4 call counter)"
    problem = problem_of(out, reference(case, valid), valid)
    assert problem is None, problem


def test_the_layout_and_split_choices_the_cases_rely_on(emu):
    """The case names' claims: which layout and how many non-empty splits the library runs."""
    lib = emu.lib
    assert lib.kdtree_verify_block_m(8, 4, 0) == 32 and lib.kdtree_verify_block_m(16, 4, 0) == 64
    assert lib.kdtree_verify_block_m(8, 4, 64) == 64 and lib.kdtree_verify_block_m(8, 5, 32) == -1
    # ABI 6: a unit's chunk is at least one tile (no partial-bytes floor), one unit per SM and m-block
    assert lib.kdtree_verify_min_split_tiles(1, 2, binding.KV_BF16) == 1
    assert lib.kdtree_verify_num_splits(132, 1, 1, 1, 300, binding.KV_BF16) == 132
    assert lib.kdtree_verify_num_splits(188, 300, 1, 1, 300, binding.KV_BF16) == 188


def plan_model(tiles: list[int], units: int, min_tiles: int) -> tuple[list[int], list[int]]:
    """(tiles, segments) per unit of the wave-filling partition, written from its definition in
    verify_attn_flash_paged.cu: request r costs its tiles + SEGMENT_COST positions, its tile k sits at
    position C_r + SEGMENT_COST + k, and the batch's positions are cut into `used` even ranges (unit u
    from floor(u * total / used) on), used = min(units, total // min_tiles) or 1."""
    cost = [t + SEGMENT_COST if t else 0 for t in tiles]
    total = sum(cost)
    used = max(min(units, total // max(min_tiles, 1)), 1)
    starts = [u * total // used for u in range(used)]
    unit_tiles, unit_segments = [0] * units, [0] * units
    c_r = 0
    for r, t in enumerate(tiles):
        seen = set()
        for k in range(t):
            u = bisect.bisect_right(starts, c_r + SEGMENT_COST + k) - 1
            unit_tiles[u] += 1
            if (u, r) not in seen:
                seen.add((u, r))
                unit_segments[u] += 1
        c_r += cost[r]
    return unit_tiles, unit_segments


SEGMENT_COST = 1  # KDTREE_SEGMENT_COST_TILES


def test_the_partition_is_the_wave_filling_plan_and_no_unit_costs_more_than_its_share(emu):
    """kdtree_verify_partition (the host run of the kernel's plan) is the plan of its definition
    (plan_model), every tile goes to one unit, in order, and no unit costs more than the even share of
    the batch's cost plus one segment."""
    rng = random.Random(3)
    for _ in range(300):
        batch = rng.randint(1, 300)
        heads, n = rng.choice([(8, 4), (16, 4), (1, 2), (64, 1), (8, 16)])
        prefixes = [rng.choice([0, rng.randint(1, 300), rng.randint(1, 200000)]) for _ in range(batch)]
        ns = [rng.choice([0, n, rng.randint(1, n)]) for _ in range(batch)]
        units = rng.choice([1, 2, 7, 66, 132, 188])
        part = emu.vk.partition(prefixes, ns, num_heads=heads, max_extend_len=n, num_splits=units)
        tiles = [0 if m == 0 else -(-(p + m) // part.block_n) for p, m in zip(prefixes, ns, strict=True)]
        assert part.total_tiles == sum(tiles) == sum(part.unit_tiles)
        assert (part.unit_tiles, part.unit_segments) == plan_model(tiles, units, part.min_unit_tiles)
        assert part.min_unit_tiles == 1
        cost = sum(t + SEGMENT_COST for t in tiles if t)
        share = -(-cost // max(min(units, cost), 1))
        for t, seg in zip(part.unit_tiles, part.unit_segments, strict=True):
            assert t + SEGMENT_COST * seg <= share + SEGMENT_COST, (t, seg, share)
        if units == 1:
            assert part.unit_segments == [sum(1 for t in tiles if t)], "one unit runs every request whole"


def test_the_partition_balances_the_benchmarks_batches_over_all_sms(emu):
    """Every benchmark batch, mixed (one long request among short ones) or uniform, on 132 and 188 SMs:
    the busiest SM works at most 1.15 x the even share over all SMs plus one tile (a unit's range is whole
    tiles), where ABI 5's split floor let 3 of 132 SMs work at b = 1, 1k keys."""
    import kernel_bench as kb
    import kernel_plan

    args = kb.argparse.Namespace(
        quick=True, peak_gbps=None, peak_tflops=None, kv_dtype="bf16", lib="", block_m=0
    )
    batches = [(heads, list(prefixes), n) for heads, n, prefixes in kb.MIXED_SHAPES]
    batches += [(heads, [prefix] * batch, n) for heads, batch, n, prefix in kb.select_shapes(args)]
    for sms in (132, 188):
        for heads, prefixes, n in batches:
            b = kernel_plan.plan_balance(emu.vk, prefixes, n, heads, num_sms=sms)
            assert b.makespan_tiles <= 1.15 * b.share_tiles + 1, (
                sms,
                heads,
                n,
                len(prefixes),
                max(prefixes),
                b,
            )


def test_the_benchmarks_cpu_path_prints_the_balance_of_every_batch(emu, capsys):
    """kernel_bench.py --plan --lib <the emulated library>: one balance figure per uniform and mixed batch."""
    import kernel_bench as kb

    args = kb.argparse.Namespace(
        quick=True, peak_gbps=None, peak_tflops=None, kv_dtype="bf16", lib=str(emu.path), block_m=0
    )
    shapes = kb.select_shapes(args)
    kb.plan(shapes, args)
    lines = [line for line in capsys.readouterr().out.splitlines() if " balance=" in line]
    assert len(lines) == len(shapes) + len(kb.select_mixed(args)), lines
    mixed = [float(re.search(r" balance=([0-9.]+)", line).group(1)) for line in lines if "prefixes=" in line]
    assert mixed and max(mixed) <= 1.15, lines


@pytest.mark.parametrize("sms", [132, 188])
def test_a_needle_on_both_sides_of_every_unit_boundary_is_seen(emu, sms):
    """One request cut into the library's own units for 132 and 188 SMs (ABI 6: one unit per SM, a tile
    each): a needle key on both sides of every boundary between two units (and at the ends) carries the
    reference's weight, so no unit drops, repeats or misplaces a tile, and the combine merges every unit."""
    import kernel_checks as kc
    import kernel_plan

    n, heads = 1, 1
    prefix = (sms - 1) * 32 - n  # 32-key tiles: sms - 1 tiles, one per unit after the first's segment cost
    spec = CaseSpec(prefix_lens=[prefix], ns=[n], heads=heads, seed=sms, causal=True)
    case = make_case(spec, "cpu")
    units, part = kernel_plan.plan_of(emu.vk, [prefix], [n], heads, num_sms=sms)
    tiles = -(-(prefix + n) // part.block_n)
    edges = kernel_plan.unit_edges(part, 0, tiles)
    assert units == sms and len(edges) == sms - 2, (units, len(edges))
    positions = sorted(
        {0, prefix + n - 1} | {p for e in edges for p in (e * part.block_n - 1, e * part.block_n)}
    )
    cols = kc.add_needles(case, positions)
    out = torch.full((n, heads, HEAD_DIM_V), SENTINEL, dtype=torch.bfloat16)
    emu.run(case, out, Call(n, num_splits=0, num_sms=sms))
    ref = reference(case, n)
    assert kc.check_needles(out.float(), ref, case, cols) is None, kc.check_needles(
        out.float(), ref, case, cols
    )
    assert problem_of(out, ref, n) is None


def test_the_model_prices_each_counted_event_with_the_pinned_constants(emu):
    """bench/kernel_model.py: b = 1, 1k keys, H*n = 32 on 132 SMs is 33 tiles of 32 keys, one per unit
    (after the first unit's segment cost), 33 units to combine in 2 dependent rounds: 8 + 3.0 + 2 x 0.2 us."""
    import kernel_model as km

    assert km.PINNED == km.Constants(t_fixed_us=8.0, t_tile_us={64: 2.5, 32: 3.0}, t_split_us=0.2)
    p = km.predict(emu.vk, [1024], 4, 8, 132)
    assert (p.units, p.busiest_tiles, p.busiest_segments, p.combine_units) == (132, 1, 1, 33)
    assert (p.ctas_with_work, p.ctas_usable) == (33, 33)
    assert p.us == pytest.approx(8.0 + 3.0 + 2 * 0.2)
    assert [km.combine_steps(k) for k in (1, 2, 33, 132, 188)] == [0, 2, 2, 4, 4]
    # 133 one-tile requests (64 rows) on 132 units: a unit that visits a second request pays its segment
    # cost, one tile more; no request is cut, so no combine
    two = km.predict(emu.vk, [12] * 133, 4, 16, 132)
    assert (two.busiest_tiles, two.busiest_segments, two.combine_units) == (2, 2, 1)
    assert two.us == pytest.approx(8.0 + (2 + 1) * 2.5)


def test_the_model_target_fails_a_missed_goal_and_passes_the_goals_today(emu, monkeypatch, capsys):
    """kernel_model.run: no goal missed with today's plan and combine (one known miss printed), and the
    combine goal missed with ABI 5's serial combine (one dependent step per unit)."""
    import kernel_model as km

    assert km.run(emu.vk) == []
    assert "KNOWN MISS" in capsys.readouterr().out
    monkeypatch.setattr(km, "combine_steps", lambda k: k if k > 1 else 0)
    monkeypatch.setattr(km, "goal_shapes", lambda: [])
    missed = km.run(emu.vk)
    assert any("combine at 132 units" in m for m in missed) and any(
        "combine at 188 units" in m for m in missed
    )


def test_the_model_target_fails_an_excuse_whose_goal_is_met_now(emu, monkeypatch):
    """A KNOWN_MISSES entry for a shape that meets its goal fails the target (remove the excuse), so an
    excuse never outlives its miss and hides the next regression of that shape."""
    import kernel_model as km

    shape = next(s for s in km.goal_shapes() if s.max_us is not None)
    key = f"sms=188 {shape.goal} {km.describe(shape.heads, shape.n, shape.prefixes)}"
    monkeypatch.setattr(km, "KNOWN_MISSES", {**km.KNOWN_MISSES, key: "an excuse for a goal met"})
    missed = km.run(emu.vk)
    assert missed == [f"{key}: met now; remove it from KNOWN_MISSES"]


# (what it breaks, the source text, its broken form)
PARTITION_MUTANTS = [
    (
        "first-and-last-segment-share-a-slot",
        "2 * static_cast<int64_t>(unit) + (segments > 0);",
        "2 * static_cast<int64_t>(unit);",
    ),
    (
        "unit-restarts-its-first-request",
        "const int lo = static_cast<int>(tile_at(s, n_tiles));",
        "const int lo = 0 * static_cast<int>(tile_at(s, n_tiles));",
    ),
    ("combine-merges-a-whole-request", "  if (u0 == u1) return;", "  if (u0 == u1 && u0 < 0) return;"),
    ("segment-cost-dropped-from-the-tiles", "  rel -= SEGMENT_COST;", "  rel -= 0;"),
    (
        "combine-reads-the-last-slot-of-a-first-segment",
        "return 2 * u + (c_r <= unit_start(u, total, used) ? 0 : 1);",
        "return 2 * u + (c_r < unit_start(u, total, used) ? 0 : 1);",
    ),
]


@pytest.mark.skipif(FAULT is not None, reason="the suite itself runs a fault build")
@pytest.mark.parametrize(("what", "old", "new"), PARTITION_MUTANTS, ids=[m[0] for m in PARTITION_MUTANTS])
def test_a_broken_partition_fails_the_partition_cases(tmp_path, what, old, new):
    broken = EmuLibrary(
        emu_driver.build(tmp_path / "lib", src=_mutated_source(tmp_path, old, new), lib_only=True)
    )
    # the partition cases, then one request cut from its first unit on (splits3-bm32: unit 0 holds its
    # segment cost and first tile)
    for c in [c for c in SHORT if c.name.startswith("partition-")] + [
        c for c in SHORT if c.name == "splits3-bm32"
    ]:
        case, out, valid = prepare(c)
        try:
            broken.run(case, out, call_of(c))
        except EmulatorError:
            return
        if problem_of(out, reference(case, valid), valid) is not None:
            return  # caught
    pytest.fail(f"{what}: every partition case passed")


def test_the_emulator_declares_itself_and_the_binding_never_runs_it(emu):
    """build info emulator=cpu, host memory, bf16 / fp8 as the CUDA library; the binding refuses it on
    the CPU (no double=host) and on a GPU (no cuda device in its capabilities, no arch)."""
    assert "emulator=cpu" in emu.build_info and "double=host" not in emu.build_info
    assert emu.vk.serves.devices == {"host"} and emu.vk.archs == []
    assert emu.vk.serves.io_dtypes == {"bfloat16"}
    assert emu.vk.serves.kv_dtypes == {"bfloat16", "float8_e4m3fn"}
    assert "double=host" in (emu.vk.unsupported_reason("cpu") or "")
    assert "not served" in (emu.vk.unsupported_reason("cuda") or "")
    case, out, _ = prepare(SHORT[0])
    with pytest.raises(binding.KernelUnavailable):
        emu.vk.run(**case, out=out, max_extend_len=4)


def test_the_emulator_exports_the_c_abi_of_the_cuda_library(emu):
    from test_library import EXPORTED, _dynamic_symbols

    exported = {name for name, kind in _dynamic_symbols(emu.path).items() if kind == "T"}
    assert exported == EXPORTED | {"kdtree_cpu_emu_last_error"}


def _bf16_bits(x: torch.Tensor) -> list[int]:
    return [int(v) & 0xFFFF for v in x.to(torch.bfloat16).view(torch.int16).tolist()]


def test_the_kernels_bf16_and_fp8_conversions_agree_with_torch_bit_for_bit(emu):
    """The kernel's own helpers as the emulator runs them (the CUDA headers' host code): every e4m3 byte
    to bf16, and float32 to bf16 round-to-nearest-even (ties, subnormals, overflow, signs), equal torch's
    conversions, which the reference uses; NaN only where torch has NaN."""
    gen = torch.Generator().manual_seed(5)
    floats = torch.cat(
        [torch.randn(4000, generator=gen) * 10.0 ** torch.randint(-30, 30, (4000,), generator=gen)]
    )
    bits = floats.view(torch.int32).tolist()
    bits += [
        0x3F808000,
        0x3F818000,
        0xBF808000,
        0x00008000,
        0x00018000,
        0x7F7FFFFF,
        0x7F800000,
        0x80000000,
        1,
    ]
    bits = [b & 0xFFFFFFFF for b in bits]
    proc = subprocess.run(
        [str(emu.path.parent / "conv_check")],
        input="".join(f"{b:08x}\n" for b in bits),
        capture_output=True,
        text=True,
        check=True,
    )
    fp8, bf16 = {}, {}
    for line in proc.stdout.splitlines():
        kind, key, lo, hi = line.split()
        (fp8 if kind == "fp8" else bf16)[int(key)] = (int(lo), int(hi))
    codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn)
    nan = torch.isnan(codes.float()).tolist()
    for b, want in enumerate(_bf16_bits(codes.float())):
        lo, hi = fp8[b]
        is_nan = (lo & 0x7F80) == 0x7F80 and (lo & 0x7F) != 0
        assert lo == hi and (is_nan if nan[b] else lo == want), (
            f"e4m3 byte {b:#04x}: {lo:#06x} / {hi:#06x}, torch {want:#06x}"
        )
    values = torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)
    for b, want, want_neg in zip(bits, _bf16_bits(values), _bf16_bits(-values), strict=True):
        assert bf16[b] == (want, want_neg), f"float {b:#010x}: {bf16[b]}, torch {(want, want_neg)}"


# ---- the faults of build.sh --fault, and the teeth of the checks ----------------------------------------

FAULT_CASES = {
    "last-tile": [c for c in SHORT if c.name in ("bm32-h8n4-tree-tail", "bm64-h16n4-causal")],
    "one-split": [c for c in SHORT if c.name in ("splits3-bm32", "splits3-bm64-forced")],
}


@pytest.mark.skipif(FAULT is not None, reason="the suite itself runs a fault build")
@pytest.mark.parametrize("fault", sorted(FAULT_CASES))
def test_a_fault_build_fails_the_case_set(tmp_path, fault):
    """build.sh --fault's faults, built into the emulator, fail the cases meant to catch them (make
    test-kernel-cpu FAULT=<fault> fails the same way)."""
    broken = EmuLibrary(emu_driver.build(tmp_path, fault=fault, lib_only=True))
    assert f"fault={1 if fault == 'last-tile' else 2}" in broken.build_info
    for c in FAULT_CASES[fault]:
        case, out, valid = prepare(c)
        broken.run(case, out, call_of(c))
        assert problem_of(out, reference(case, valid), valid) is not None, f"{fault} passed {c.name}"


def _mutated_source(tmp_path: Path, old: str, new: str) -> Path:
    """A copy of files/csrc with `old` (exactly once in the kernel) replaced by `new`."""
    src = tmp_path / "csrc"
    shutil.copytree(CSRC, src)
    cu = src / "verify_attn_flash_paged.cu"
    text = cu.read_text()
    assert text.count(old) == 1, f"mutation site not found once: {old!r}"
    cu.write_text(text.replace(old, new))
    return src


# (what it shows, the source line, its broken form, the emulator's message)
HARD_ERRORS = [
    (
        "divergent-barrier",
        "    __syncthreads();  // (C)",
        "    if (tid < 128) __syncthreads();  // (C)",
        r"divergent barrier",
    ),
    (
        "partial-warp-collective",
        "        ldmatrix_x4(b, kb + kk);",
        "        if (lane < 16) ldmatrix_x4(b, kb + kk);",
        r"divergent warp collective|partial-warp collective",
    ),
    (
        "ldmatrix-outside-shared-memory",
        "        ldmatrix_x4(a0, qa + kk);",
        "        ldmatrix_x4(a0, qa + kk - SROW);",
        r"ldmatrix: lane \d+'s row address is outside",
    ),
    (
        "ldmatrix-misaligned",
        "ldmatrix_x4(pa, sP + (rg * 16 + (lane & 15)) * SP_ROW + ks * 16 + (lane >> 4) * 8);",
        "ldmatrix_x4(pa, sP + (rg * 16 + (lane & 15)) * SP_ROW + ks * 16 + (lane >> 4) * 4);",
        r"not 16-byte aligned",
    ),
]


@pytest.mark.skipif(FAULT is not None, reason="the suite itself runs a fault build")
@pytest.mark.parametrize(("what", "old", "new", "message"), HARD_ERRORS, ids=[h[0] for h in HARD_ERRORS])
def test_the_emulator_stops_a_launch_on_a_cuda_rule_the_source_breaks(tmp_path, what, old, new, message):
    broken = EmuLibrary(
        emu_driver.build(tmp_path / "lib", src=_mutated_source(tmp_path, old, new), lib_only=True)
    )
    c = SHORT[0]
    case, out, _ = prepare(c)
    with pytest.raises(EmulatorError, match=message):
        broken.run(case, out, call_of(c))


@pytest.mark.skipif(FAULT is not None, reason="the suite itself runs a fault build")
def test_a_shared_memory_row_the_kernel_never_wrote_is_caught(tmp_path):
    """The last row of the Q tile left unwritten: it holds the poison (0xFF bytes, NaN scores, which the
    online softmax drops), so exactly that row (last token, last head) is wrong."""
    src = _mutated_source(
        tmp_path,
        "for (int c = tid; c < BM * Q_CHUNKS_PER_ROW; c += NTHREADS) {",
        "for (int c = tid; c < (BM - 1) * Q_CHUNKS_PER_ROW; c += NTHREADS) {",
    )
    broken = EmuLibrary(emu_driver.build(tmp_path / "lib", src=src, lib_only=True))
    c = next(c for c in SHORT if c.name == "bm64-h16n4-causal")  # 4 tokens x 16 heads: all 64 rows valid
    case, out, valid = prepare(c)
    broken.run(case, out, call_of(c))
    problem = problem_of(out, reference(case, valid), valid) or ""
    assert "at token 3 head 15 (1 rows over)" in problem, problem


# ---- sanitizers: exact-size buffers in a child process ---------------------------------------------------

SANITIZED = [
    "bm32-h8n4-tree-tail",
    "bm64-h16n4-causal",
    "fp8-scales-i32-bm32",
    "fp8-scale-i64-bm64",
    "h128n1-two-m-blocks",
    "batch-mixed-bm32",
    "no-prefix-in-the-batch",
    "rows-see-no-key-split",
    "splits3-bm32",
    "graph-sized-bm32",
    "graph-sized-bm64-splits",
]
ASAN_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=23",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=24",
}


@pytest.fixture(scope="session")
def asan(tmp_path_factory) -> Path:
    """emu_run built with AddressSanitizer and UBSan."""
    out = tmp_path_factory.mktemp("cpu-emu-asan")
    emu_driver.build(out, sanitize="address", fault=FAULT)
    return out / "emu_run"


def _env(extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **extra}


@pytest.mark.parametrize("name", SANITIZED)
def test_short_cases_are_clean_under_address_and_undefined_behaviour_sanitizers(emu, asan, name):
    c = next(c for c in SHORT if c.name == name)
    case, out, valid = prepare(c)
    proc = run_exact(asan, emu.lib, case, out, call_of(c), env=_env(ASAN_ENV))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "runtime error" not in proc.stderr, proc.stderr[-4000:]
    problem = problem_of(out, reference(case, valid), valid)
    assert problem is None, problem


@pytest.mark.skipif(FAULT is not None, reason="the suite itself runs a fault build")
def test_address_sanitizer_reports_a_read_past_an_exact_size_buffer(emu, asan):
    """kv_indices one entry short of kv_indptr[-1]: the kernel's read of the last index is past the end."""
    c = next(c for c in SHORT if c.name == "bm32-h8n4-tree-tail")
    case, out, _ = prepare(c)
    case["kv_indices"] = case["kv_indices"][:-1].clone()
    proc = run_exact(asan, emu.lib, case, out, call_of(c), env=_env(ASAN_ENV))
    assert proc.returncode == 23 and "heap-buffer-overflow" in proc.stderr, proc.stderr[-4000:]


TSAN_ENV = {"TSAN_OPTIONS": "halt_on_error=1:exitcode=66:report_signal_unsafe=0"}


@pytest.fixture(scope="session")
def tsan(tmp_path_factory) -> Path:
    """emu_run built with ThreadSanitizer."""
    out = tmp_path_factory.mktemp("cpu-emu-tsan")
    emu_driver.build(out, sanitize="thread", fault=FAULT)
    return out / "emu_run"


@pytest.mark.parametrize("name", ["h1n1", "splits3-bm32"])
def test_short_cases_are_race_free_under_thread_sanitizer(emu, tsan, name):
    c = next(c for c in SHORT if c.name == name)
    case, out, valid = prepare(c)
    proc = run_exact(tsan, emu.lib, case, out, call_of(c), env=_env(TSAN_ENV))
    assert proc.returncode == 0 and "ThreadSanitizer" not in proc.stderr, proc.stderr[-4000:]
    problem = problem_of(out, reference(case, valid), valid)
    assert problem is None, problem


@pytest.mark.skipif(FAULT is not None, reason="the suite itself runs a fault build")
def test_thread_sanitizer_reports_a_removed_barrier(tmp_path, emu):
    """Barrier (B) removed: warps read sK while others still write it, a data race TSan must name."""
    src = _mutated_source(
        tmp_path, "    __syncthreads();  // (B) sK", "    // removed: __syncthreads();  // (B) sK"
    )
    emu_driver.build(tmp_path / "lib", sanitize="thread", src=src)
    c = next(c for c in SHORT if c.name == "h1n1")
    case, out, _ = prepare(c)
    proc = run_exact(tmp_path / "lib" / "emu_run", emu.lib, case, out, call_of(c), env=_env(TSAN_ENV))
    assert re.search(r"WARNING: ThreadSanitizer: data race", proc.stderr), proc.stderr[-4000:]
