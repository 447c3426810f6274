"""The CPU half of the GPU tests' teeth: the checks in bench/kernel_checks.py catch a kernel that drops
its first or last key, a tile or a split, on models of such kernels (kernel_checks.reference_dropping),
and accept the exact answer. No GPU, no library: these run in `make test`."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import kernel_checks as kc  # noqa: E402
from kdtree_verify.kernel.reference import causal_mask, verify_attention_reference  # noqa: E402
from kdtree_verify.telemetry.validate import FP8_REL_TOL, ValidateStats, rel_tol_for  # noqa: E402
from kernel_cases import CaseSpec, make_case  # noqa: E402

TILE = 16
SPLIT = 32 * TILE  # keys per split in the needle case


def _tile_keys(total: int, tile: int) -> list[int]:
    return list(range(tile * TILE, min(total, (tile + 1) * TILE)))


@pytest.fixture(scope="module")
def needle_case():
    spec = CaseSpec(prefix_lens=[2000], ns=[4], heads=8, seed=5)
    case = make_case(spec, "cpu")
    total = 2004
    # 4 splits of 32 tiles (SPLIT keys): the positions a real launch with these splits would cut at.
    positions = kc.boundary_positions(total, TILE, [32, 64, 96])
    cols = kc.add_needles(case, positions)
    return case, positions, cols, verify_attention_reference(**case)


def test_needle_positions_cover_the_ends_and_every_split_boundary():
    pos = kc.boundary_positions(2004, TILE, [32, 64, 96])
    splits = {b + d for b in (SPLIT, 2 * SPLIT, 3 * SPLIT) for d in (-1, 0)}
    assert {0, 2003, 15, 16, 1983, 1984} | splits <= set(pos)
    assert len(pos) <= kc.HEAD_DIM_V


def test_the_reference_passes_its_own_needle_check(needle_case):
    case, positions, cols, ref = needle_case
    assert kc.check_needles(ref, ref, case, cols) is None
    # every prefix needle really carries weight (draft needles only for the rows that see them):
    # about 1 / len(needles) of NEEDLE_V in its column, the same for every needle
    prefix_cols = [c for p, c in zip(positions, cols, strict=True) if p < 2000]
    weights = ref[0:4, :, prefix_cols] / kc.NEEDLE_V
    assert float(weights.min()) > 0.5 / len(cols)
    assert float((weights.amax(-1) / weights.amin(-1)).max()) < 1.01  # per row: equal needles


@pytest.mark.parametrize(
    "fault",
    ["first key", "last key", "last tile", "split 1", "tile at a split boundary", "one prefix key mid tile"],
)
def test_a_dropped_key_tile_or_split_fails_the_needle_check(needle_case, fault):
    case, _, cols, ref = needle_case
    total = 2004
    drop = {
        "first key": [0],
        "last key": [total - 1],
        "last tile": _tile_keys(total, (total - 1) // TILE),
        "split 1": list(range(SPLIT, 2 * SPLIT)),
        "tile at a split boundary": _tile_keys(total, 64),
        "one prefix key mid tile": [1536],
    }[fault]
    faulty = kc.reference_dropping(case, {0: drop})
    assert kc.check_needles(faulty, ref, case, cols) is not None
    assert kc.check_rows(faulty, ref) is not None


def test_reference_dropping_nothing_is_the_reference(needle_case):
    case, _, _, ref = needle_case
    assert torch.allclose(kc.reference_dropping(case, {}), ref, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("prefix", [0, 17, 4096])
def test_the_q0_bucket_case_has_the_exact_answer_and_catches_a_dropped_tile(prefix, causal):
    case = make_case(CaseSpec(prefix_lens=[prefix, 3], ns=[4, 2], heads=2, causal=causal, seed=prefix), "cpu")
    exact = kc.make_bucket_case(case)
    ref = verify_attention_reference(**case)
    assert kc.check_exact(ref, exact) is None
    assert kc.check_exact(ref.to(torch.bfloat16).float(), exact) is None  # bf16 output rounding passes
    total = prefix + 4
    faulty = kc.reference_dropping(case, {0: _tile_keys(total, (total - 1) // TILE)})
    assert kc.check_exact(faulty, exact) is not None


def test_the_causal_reference_is_the_tree_reference_with_a_chain_mask():
    spec = CaseSpec(prefix_lens=[9, 0, 30], ns=[5, 3, 1], heads=4, seed=8)
    tree = make_case(spec, "cpu")
    causal = make_case(CaseSpec(**{**spec.__dict__, "causal": True}), "cpu")
    assert causal["custom_mask"] is None
    blocks, mptr = [], tree["mask_indptr"].tolist()
    for p, n in zip(spec.prefix_lens, spec.ns, strict=True):
        blocks.append(torch.cat([torch.ones((n, p), dtype=torch.bool), causal_mask(n)], dim=1).reshape(-1))
    chain = {**tree, "custom_mask": torch.cat(blocks)}
    assert mptr[-1] == chain["custom_mask"].numel()
    assert torch.equal(verify_attention_reference(**causal), verify_attention_reference(**chain))
    assert not torch.allclose(verify_attention_reference(**causal), verify_attention_reference(**tree))


def test_row_rel_l2_separates_bf16_noise_from_a_dropped_prefix_tile():
    case = make_case(CaseSpec(prefix_lens=[4096], ns=[4], heads=8, seed=1), "cpu")
    ref = verify_attention_reference(**case)
    assert float(kc.row_rel_l2(ref.to(torch.bfloat16).float(), ref).max()) < kc.ROW_REL_L2_TOL / 2
    faulty = kc.reference_dropping(case, {0: list(range(4096 - TILE, 4096))})
    assert float(kc.row_rel_l2(faulty, ref).max()) > 2 * kc.ROW_REL_L2_TOL


@pytest.mark.parametrize("prefix", [64, 2048])
def test_triton_fp8_arithmetic_stays_inside_the_validate_tolerance(prefix):
    spec = CaseSpec(prefix_lens=[prefix], ns=[4], heads=8, kv_dtype=torch.float8_e4m3fn, k_scale=0.5, seed=2)
    case = make_case(spec, "cpu")
    exact = verify_attention_reference(**case)
    triton = kc.triton_fp8_model(case)
    rel = float((triton - exact).abs().max() / exact.abs().max())
    assert 1e-3 < rel < FP8_REL_TOL / 2  # Triton's e4m3 error is real, and well inside the bound
    stats = ValidateStats("cpu", tol=1e-3)
    shape = (exact.shape[0], -1)
    stats.record(
        exact.to(torch.bfloat16).view(shape),
        triton.to(torch.bfloat16).view(shape),
        rel_tol_for("float8_e4m3fn"),
    )
    stats.record(
        exact.to(torch.bfloat16).view(shape), triton.to(torch.bfloat16).view(shape), rel_tol_for("bfloat16")
    )
    got = stats.read()
    assert got["calls"] == 2 and got["mismatches"] == 1  # fp8 bound: no mismatch; bf16 bound: one


def test_fp8_validate_still_counts_a_dropped_needle():
    spec = CaseSpec(prefix_lens=[600], ns=[4], heads=8, kv_dtype=torch.float8_e4m3fn, seed=3)
    case = make_case(spec, "cpu")
    positions = kc.boundary_positions(604, TILE, [29])
    kc.add_needles(case, positions)
    triton = kc.triton_fp8_model(case)
    faulty = kc.reference_dropping(case, {0: [positions[-1]]})
    stats = ValidateStats("cpu", tol=1e-2)
    shape = (triton.shape[0], -1)
    stats.record(faulty.to(torch.bfloat16).view(shape), triton.to(torch.bfloat16).view(shape), FP8_REL_TOL)
    assert stats.read()["mismatches"] == 1


def test_build_sh_builds_faults_only_when_asked():
    import subprocess

    from conftest import ARCHS, BUILD_SH

    def flags(*extra):
        cmd = ["bash", str(BUILD_SH), "--print-flags", "--arch", ARCHS[0], *extra]
        return subprocess.run(cmd, capture_output=True, text=True, check=False)

    assert "KDTREE_FAULT" not in flags().stdout
    assert "-DKDTREE_FAULT=1" in flags("--fault", "last-tile").stdout
    assert "-DKDTREE_FAULT=2" in flags("--fault", "one-split").stdout
    assert flags("--fault", "everything").returncode == 2
