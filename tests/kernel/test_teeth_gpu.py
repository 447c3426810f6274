"""GPU tests that catch a dropped key, tile or split (bench/kernel_checks.py; their CPU halves are in
test_checks_cpu.py), a comparison with SGLang's own Triton extend_attention_fwd, and proof that the
checks fail on libraries built with a fault (build.sh --fault last-tile | one-split). Needs a GPU."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

import kernel_checks as kc  # noqa: E402
import kernel_plan  # noqa: E402
from conftest import ARCHS, BUILD_DIR, CSRC, build_library  # noqa: E402
from kdtree_verify.kernel import binding as kernel  # noqa: E402
from kdtree_verify.kernel.reference import verify_attention_reference  # noqa: E402
from kdtree_verify.kernel.shapes import HEAD_DIM_V  # noqa: E402
from kdtree_verify.telemetry.validate import FP8_REL_TOL  # noqa: E402
from kernel_cases import CaseSpec, kernel_kwargs, make_case  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _arch() -> str:
    major, minor = torch.cuda.get_device_capability()
    arch = kernel.arch_of_capability(major, minor)
    if arch not in ARCHS:
        pytest.skip(f"no build of the kernel for {arch}")
    return arch


def _load(path) -> kernel.VerifyKernel:
    vk = kernel.load(str(path))
    reason = vk.unsupported_reason(torch.device("cuda"))
    assert reason is None, reason
    return vk


@pytest.fixture(scope="module")
def vk():
    path = os.environ.get("KDTREE_LIB") or build_library(_arch(), BUILD_DIR / _arch())
    return _load(path)


def _build_faulty(fault: str):
    import subprocess

    arch = _arch()
    out = BUILD_DIR / f"fault-{fault}" / arch
    lib = out / "libkdtree_verify.so"
    if not lib.exists():
        cmd = ["bash", str(CSRC / "build.sh"), "--arch", arch, "--out", str(out), "--fault", fault]
        subprocess.run(cmd, check=True, capture_output=True)
    vk = _load(lib)
    assert f"fault={'1' if fault == 'last-tile' else '2'}" in vk.meta["build_info"]
    return vk


@pytest.fixture(scope="module", params=["last-tile", "one-split"])
def faulty(request):
    return request.param, _build_faulty(request.param)


def _unit_edges(vk, case, heads: int, n: int, block_m: int = 0, request: int = 0) -> tuple[int, list, int]:
    """(num_splits, the request's tiles where a work unit's range ends, keys per tile) as the library
    launches this case (its own plan: kdtree_verify_partition, kernel_plan.unit_edges)."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    dtype = "float8_e4m3fn" if case["kv_buffer"].dtype == torch.float8_e4m3fn else "bfloat16"
    splits = vk.lib.kdtree_verify_num_splits(
        sms, case["batch_size"], heads, n, int(case["kv_indices"].numel()), kernel.dtype_code(dtype)
    )
    kv = case["kv_indptr"].tolist()
    qo = case["qo_indptr"].tolist()
    prefixes = [kv[r + 1] - kv[r] for r in range(case["batch_size"])]
    drafts = [qo[r + 1] - qo[r] for r in range(case["batch_size"])]
    part = vk.partition(
        prefixes,
        drafts,
        num_heads=heads,
        max_extend_len=n,
        num_splits=splits,
        kv_dtype=dtype,
        block_m=block_m,
    )
    bn = part.block_n
    first = sum(-(-(p + m) // bn) for p, m in zip(prefixes[:request], drafts[:request], strict=True))
    tiles = -(-(prefixes[request] + drafts[request]) // bn)
    return splits, kernel_plan.unit_edges(part, first, tiles), bn


def _run(vk, case, n, block_m: int = 0):
    tokens, heads = case["q"].shape[:2]
    out = torch.full((tokens, heads, HEAD_DIM_V), 7.0, dtype=torch.bfloat16, device="cuda")
    vk.run(**kernel_kwargs(case, out, n), block_m=block_m)
    torch.cuda.synchronize()
    return out.float().cpu()


def _needle_case(vk, prefix, heads, n, kv_dtype, causal, block_m=0):
    spec = CaseSpec(
        prefix_lens=[prefix], ns=[n], heads=heads, kv_dtype=kv_dtype, causal=causal, seed=prefix + n
    )
    case = make_case(spec, "cpu")
    splits, edges, bn = _unit_edges(vk, case, heads, n, block_m)
    positions = kc.boundary_positions(prefix + n, bn, edges)
    cols = kc.add_needles(case, positions)
    ref = verify_attention_reference(**case)
    return {k: (v.cuda() if torch.is_tensor(v) else v) for k, v in case.items()}, case, cols, ref, splits


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float8_e4m3fn], ids=["bf16", "fp8"])
@pytest.mark.parametrize("causal", [False, True], ids=["tree", "causal"])
@pytest.mark.parametrize(
    ("prefix", "heads", "n"), [(4096, 8, 4), (65536, 8, 4), (131072, 16, 4), (65536, 64, 1)]
)
def test_every_needle_at_the_ends_and_at_split_and_tile_boundaries_is_seen(
    vk, prefix, heads, n, kv_dtype, causal
):
    gpu_case, case, cols, ref, _splits_used = _needle_case(vk, prefix, heads, n, kv_dtype, causal)
    got = _run(vk, gpu_case, n)
    assert kc.check_needles(got, ref, case, cols) is None, kc.check_needles(got, ref, case, cols)
    assert kc.check_rows(got, ref) is None, kc.check_rows(got, ref)


@pytest.mark.parametrize(("causal", "kv_dtype"), [(False, torch.bfloat16), (True, torch.float8_e4m3fn)])
def test_needles_on_the_middle_request_of_a_mixed_batch_are_seen(vk, causal, kv_dtype):
    """A long request between two short ones: its split and tile boundaries are its own (request 1's
    keys start mid-pool), and its neighbours stay right."""
    n, heads = 4, 8
    spec = CaseSpec(
        prefix_lens=[300, 65536, 17], ns=[n, n, n], heads=heads, kv_dtype=kv_dtype, causal=causal, seed=77
    )
    case = make_case(spec, "cpu")
    splits, edges, bn = _unit_edges(vk, case, heads, n, request=1)
    assert splits > 1 and edges, "the case must cut the middle request between work units"
    cols = kc.add_needles(case, kc.boundary_positions(65536 + n, bn, edges), request=1)
    ref = verify_attention_reference(**case)
    got = _run(vk, {k: (v.cuda() if torch.is_tensor(v) else v) for k, v in case.items()}, n)
    problem = kc.check_needles(got, ref, case, cols, request=1)
    assert problem is None, problem
    assert kc.check_rows(got, ref) is None, kc.check_rows(got, ref)


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float8_e4m3fn], ids=["bf16", "fp8"])
def test_every_request_of_a_mixed_batch_gives_its_exact_bucket_answer(vk, kv_dtype):
    spec = CaseSpec(
        prefix_lens=[5, 65536, 0, 4099],
        ns=[16, 16, 16, 16],
        heads=8,
        kv_dtype=kv_dtype,
        k_scale=0.5 if kv_dtype == torch.float8_e4m3fn else 1.0,
        seed=88,
    )
    case = make_case(spec, "cpu")
    exact = kc.make_bucket_case(case)
    got = _run(vk, {k: (v.cuda() if torch.is_tensor(v) else v) for k, v in case.items()}, 16)
    assert kc.check_exact(got, exact) is None, kc.check_exact(got, exact)


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float8_e4m3fn], ids=["bf16", "fp8"])
@pytest.mark.parametrize("causal", [False, True], ids=["tree", "causal"])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("prefix", [0, 17, 65536, 131072])
def test_q0_gives_the_exact_bucket_answer(vk, prefix, causal, kv_dtype, index_dtype):
    spec = CaseSpec(
        prefix_lens=[prefix, 5],
        ns=[16, 16],
        heads=8,
        kv_dtype=kv_dtype,
        causal=causal,
        index_dtype=index_dtype,
        k_scale=0.5 if kv_dtype == torch.float8_e4m3fn else 1.0,
        seed=prefix,
    )
    case = make_case(spec, "cpu")
    exact = kc.make_bucket_case(case)
    got = _run(vk, {k: (v.cuda() if torch.is_tensor(v) else v) for k, v in case.items()}, 16)
    assert kc.check_exact(got, exact) is None, kc.check_exact(got, exact)


@pytest.mark.parametrize("block_m", [32, 64])
@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float8_e4m3fn], ids=["bf16", "fp8"])
@pytest.mark.parametrize("prefix", [0, 17, 31, 32, 33, 4096, 65536])
def test_both_layouts_serve_the_production_shape(vk, prefix, kv_dtype, block_m):
    """H = 8, n = 4 (EAGLE3 top-k 1 at TP8) through the 32-row layout (the default) and the 64-row one."""
    gpu_case, case, cols, ref, _ = _needle_case(vk, prefix + 1, 8, 4, kv_dtype, False, block_m)
    got = _run(vk, gpu_case, 4, block_m)
    assert kc.check_needles(got, ref, case, cols) is None, kc.check_needles(got, ref, case, cols)
    spec = CaseSpec(
        prefix_lens=[prefix, 3, prefix // 2], ns=[4, 4, 4], heads=8, kv_dtype=kv_dtype, seed=prefix
    )
    plain = make_case(spec, "cpu")
    ref = verify_attention_reference(**plain)
    got = _run(vk, {k: (v.cuda() if torch.is_tensor(v) else v) for k, v in plain.items()}, 4, block_m)
    assert kc.check_rows(got, ref) is None, kc.check_rows(got, ref)


@pytest.mark.parametrize("block_m", [32, 64])
def test_the_checks_fail_on_a_kernel_built_with_a_fault(faulty, block_m):
    """The teeth: a library that drops its last tile, or work unit 1's keys, fails the needle and
    exact checks."""
    fault, bad = faulty
    gpu_case, case, cols, ref, splits = _needle_case(bad, 65536, 8, 4, torch.bfloat16, False, block_m)
    assert splits > 1, "the case must be split for the one-split fault to bite"
    got = _run(bad, gpu_case, 4, block_m)
    assert kc.check_needles(got, ref, case, cols) is not None, f"{fault}: needle check passed a broken kernel"
    spec = CaseSpec(prefix_lens=[65536], ns=[4], heads=8, seed=3)
    bucket = make_case(spec, "cpu")
    exact = kc.make_bucket_case(bucket)
    got = _run(bad, {k: (v.cuda() if torch.is_tensor(v) else v) for k, v in bucket.items()}, 4, block_m)
    assert kc.check_exact(got, exact) is not None, f"{fault}: exact check passed a broken kernel"


@pytest.fixture(scope="module")
def triton_fwd():
    import sglang_triton

    fwd, _where = sglang_triton.extend_attention_fwd()
    return fwd


def _triton(fwd, case, n, causal):
    tokens, heads = case["q"].shape[:2]
    o = torch.empty((tokens, heads, HEAD_DIM_V), dtype=torch.bfloat16, device="cuda")
    kvb = case["kv_buffer"]
    fwd(
        case["q"], case["k_extend"], case["v_extend"], o, kvb, kvb[..., :HEAD_DIM_V],
        case["qo_indptr"], case["kv_indptr"], case["kv_indices"], case["custom_mask"], causal,
        case["mask_indptr"], n, case["k_scale"], case["v_scale"], sm_scale=case["sm_scale"],
    )  # fmt: skip
    torch.cuda.synchronize()
    return o.float().cpu()


@pytest.mark.parametrize("causal", [False, True], ids=["tree", "causal"])
@pytest.mark.parametrize(("prefix", "heads", "n"), [(17, 8, 4), (8192, 8, 4), (65536, 16, 4), (4096, 64, 16)])
def test_agrees_with_sglangs_own_triton_kernel_in_bf16(vk, triton_fwd, prefix, heads, n, causal):
    spec = CaseSpec(prefix_lens=[prefix, 300], ns=[n, n], heads=heads, causal=causal, seed=prefix)
    case = make_case(spec, "cuda")
    ours = _run(vk, case, n)
    theirs = _triton(triton_fwd, case, n, causal)
    ref = verify_attention_reference(**{k: (v.cpu() if torch.is_tensor(v) else v) for k, v in case.items()})
    # Both round P to bf16: each within the tolerance of the fp32 reference, and of each other.
    assert kc.check_rows(theirs, ref) is None, f"Triton itself: {kc.check_rows(theirs, ref)}"
    assert kc.check_rows(ours, theirs, 2 * kc.ROW_REL_L2_TOL) is None, kc.check_rows(ours, theirs)


@pytest.mark.parametrize(("k_scale", "v_scale"), [(1.0, 1.0), (0.5, 0.25)])
@pytest.mark.parametrize("prefix", [64, 8192, 65536])
def test_agrees_with_sglangs_triton_on_an_fp8_cache_within_the_validate_bound(
    vk, triton_fwd, prefix, k_scale, v_scale
):
    spec = CaseSpec(
        prefix_lens=[prefix],
        ns=[4],
        heads=8,
        kv_dtype=torch.float8_e4m3fn,
        k_scale=k_scale,
        v_scale=v_scale,
        seed=1,
    )
    case = make_case(spec, "cuda")
    ours = _run(vk, case, 4)
    theirs = _triton(triton_fwd, case, 4, False)
    rel = float((ours - theirs).abs().max() / theirs.abs().max())
    assert rel < FP8_REL_TOL, f"kernel vs Triton fp8: {rel:.3g} of max|out| (validate bound {FP8_REL_TOL})"
