"""The host-memory test double of the library (tests/doubles/hostlib): same C ABI, fp32 on the CPU.

It must be a faithful stand-in (same exported symbols, same argument meanings: tree and causal draft
blocks, scales, index dtypes, strides, graph-sized buffers) and be accepted for a CPU device only
because it declares itself the host double; the real library keeps its CUDA checks."""

from __future__ import annotations

import subprocess

import pytest

torch = pytest.importorskip("torch")

from conftest import build_host_double  # noqa: E402
from kdtree_verify.kernel import binding as kernel  # noqa: E402
from kdtree_verify.kernel.reference import verify_attention_reference  # noqa: E402
from kdtree_verify.kernel.shapes import HEAD_DIM_QK, HEAD_DIM_V  # noqa: E402
from kernel_cases import CaseSpec, make_case  # noqa: E402
from test_binding_cpu import _args, _run  # noqa: E402
from test_library import EXPORTED, _dynamic_symbols  # noqa: E402

TOL = 2e-5  # fp32 on both sides; only the summation order differs


@pytest.fixture(scope="module")
def host(host_library):
    return kernel.load(str(host_library))


def fp32_case(spec: CaseSpec) -> dict:
    """A kernel_cases case in float32 everywhere (q/k/v and the KV cache), on the CPU."""
    case = make_case(spec, "cpu")
    for name in ("q", "k_extend", "v_extend", "kv_buffer"):
        case[name] = case[name].float()
    return case


def run_host(vk, case: dict, max_extend_len: int, **extra) -> torch.Tensor:
    out = torch.full((case["q"].shape[0], case["q"].shape[1], HEAD_DIM_V), float("nan"))
    vk.run(**case, out=out, max_extend_len=max_extend_len, **extra)
    return out


def test_the_double_exports_exactly_the_c_abi_and_needs_only_libc(host_library):
    symbols = _dynamic_symbols(host_library)
    assert {name for name, kind in symbols.items() if kind == "T"} == EXPORTED
    assert not [name for name in symbols if name.startswith("_Z")]
    needed = subprocess.run(["readelf", "-d", str(host_library)], capture_output=True, text=True, check=True)
    assert "libstdc++" not in needed.stdout and "torch" not in needed.stdout


def test_probe_and_load_accept_the_double_and_it_says_fp32_on_host(host, host_library):
    info = kernel.probe_library(str(host_library))
    assert info["abi"] == kernel.ABI_VERSION and info["archs"] == []
    assert host.serves.io_dtypes == {"float32"} and host.serves.kv_dtypes == {"float32"}
    assert host.serves.devices == {"host"}
    assert host.host_double and "double=host" in host.meta["build_info"].split()
    assert host.serves.describe() == "q/k/v fp32, kv cache fp32, on host"


def test_the_double_serves_the_cpu_and_refuses_a_cuda_device(host):
    assert host.unsupported_reason("cpu") is None
    reason = host.unsupported_reason("cuda:0")
    assert reason and "q/k/v fp32, kv cache fp32, on host" in reason


def test_the_real_library_says_bf16_on_cuda_and_keeps_refusing_the_cpu(any_library):
    vk = kernel.load(str(any_library))
    assert vk.serves.io_dtypes == {"bfloat16"}
    assert vk.serves.kv_dtypes == {"bfloat16", "float8_e4m3fn"}
    assert vk.serves.devices == {"cuda"} and not vk.host_double
    assert vk.serves.describe() == "q/k/v bf16, kv cache bf16/fp8_e4m3, on cuda"
    reason = vk.unsupported_reason("cpu")
    assert reason and "on cuda" in reason
    assert vk.serves.dtype_problem(["float32"] * 3, "float32").startswith(
        "q/k/v fp32, not bf16 (library serves"
    )


def _fake_library(tmp_path, build_info: str):
    """Every symbol of the ABI; the capabilities claim fp32 on host; `build_info` as given."""
    src = tmp_path / "claims_host.c"
    src.write_text(
        "#include <stdint.h>\n"
        f"int kdtree_verify_abi_version(void) {{ return {kernel.ABI_VERSION}; }}\n"
        f'const char* kdtree_verify_build_info(void) {{ return "{build_info}"; }}\n'
        "int kdtree_verify_capabilities(uint32_t* io, uint32_t* kv, uint32_t* dev) {\n"
        f"  *io = 1u << {kernel.DTYPE_FP32}; *kv = 1u << {kernel.DTYPE_FP32};\n"
        f"  *dev = {kernel.DEVICE_HOST}; return 0;\n"
        "}\n"
        "int kdtree_verify_run(void) { return 0; }\n"
        "int kdtree_verify_prepare(void) { return 0; }\n"
        "int kdtree_verify_num_splits(void) { return 1; }\n"
        "int kdtree_verify_min_split_tiles(void) { return 4; }\n"
        "long kdtree_verify_workspace_bytes(void) { return 0; }\n"
        "long kdtree_verify_max_workspace_bytes(void) { return 0; }\n"
        "long kdtree_verify_partition(void) { return -1; }\n"
    )
    lib = tmp_path / "libclaimshost.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return kernel.load(str(lib))


def test_host_memory_is_accepted_only_from_a_library_that_declares_itself_the_double(tmp_path):
    pretender = _fake_library(tmp_path, "archs=sm_90a nvcc=13.0")
    assert "double=host" in pretender.unsupported_reason("cpu")
    case = fp32_case(CaseSpec(prefix_lens=[3], ns=[2], heads=4, kv_dtype=torch.float32))
    with pytest.raises(kernel.KernelUnavailable, match="not on a CUDA device"):
        run_host(pretender, case, 2)


CASES = {
    # The tiny engine model: 4 heads, NGRAM's 8 draft tokens in a tree, int64 indices.
    "engine: 4 heads, tree of 8": CaseSpec(
        prefix_lens=[37, 0, 120], ns=[8, 8, 8], heads=4, kv_dtype=torch.float32
    ),
    "16 heads, uneven drafts, int32 indices": CaseSpec(
        prefix_lens=[5, 64, 1], ns=[4, 1, 7], heads=16, kv_dtype=torch.float32, index_dtype=torch.int32
    ),
    "causal draft block (DFlash)": CaseSpec(
        prefix_lens=[9, 0, 40], ns=[6, 6, 6], heads=8, kv_dtype=torch.float32, causal=True
    ),
    "k/v descales": CaseSpec(
        prefix_lens=[17, 33], ns=[4, 4], heads=4, kv_dtype=torch.float32, k_scale=0.5, v_scale=2.0
    ),
    "uint8 mask, int64 qo_indptr": CaseSpec(
        prefix_lens=[2, 11],
        ns=[3, 5],
        heads=2,
        kv_dtype=torch.float32,
        mask_dtype=torch.uint8,
        qo_dtype=torch.int64,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_double_equals_the_reference_in_fp32(host, name):
    spec = CASES[name]
    case = fp32_case(spec)
    got = run_host(host, case, max(spec.ns))
    want = verify_attention_reference(**case)
    assert not got.isnan().any()
    assert (got - want).abs().max().item() < TOL


def test_graph_sized_buffers_and_strided_views_read_only_what_the_indptrs_cover(host):
    spec = CaseSpec(prefix_lens=[7, 21], ns=[4, 3], heads=4, kv_dtype=torch.float32)
    case = fp32_case(spec)
    want = verify_attention_reference(**case)
    padded = dict(case)
    # q a view into a wider buffer (head stride != HEAD_DIM_QK); kv_indices / mask longer than needed,
    # as under CUDA graphs.
    wide = torch.zeros(case["q"].shape[0], case["q"].shape[1], HEAD_DIM_QK + 64)
    wide[..., :HEAD_DIM_QK] = case["q"]
    padded["q"] = wide[..., :HEAD_DIM_QK]
    padded["v_extend"] = case["k_extend"][..., :HEAD_DIM_V]  # SGLang's v is a view of k for absorbed MLA
    padded["kv_indices"] = torch.cat([case["kv_indices"], torch.zeros(50, dtype=case["kv_indices"].dtype)])
    padded["custom_mask"] = torch.cat([case["custom_mask"], torch.zeros(99, dtype=torch.bool)])
    want_view = verify_attention_reference(**(case | {"v_extend": padded["v_extend"]}))
    got = run_host(host, padded, 4)
    assert (got - want_view).abs().max().item() < TOL
    assert (want_view - want).abs().max().item() > 0.01  # the view really changed the values


def test_rows_beyond_max_extend_len_are_left_alone_like_the_cuda_grid(host):
    spec = CaseSpec(prefix_lens=[3], ns=[4], heads=2, kv_dtype=torch.float32)
    out = run_host(host, fp32_case(spec), 2)
    assert not out[:2].isnan().any() and out[2:].isnan().all()


def test_the_double_refuses_bf16_through_the_binding_and_the_c_check(host):
    case = make_case(CaseSpec(prefix_lens=[3], ns=[2], heads=4), "cpu")  # bf16
    out = torch.empty((2, 4, HEAD_DIM_V), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="q must be float32"):
        host.run(**case, out=out, max_extend_len=2)


def test_a_double_that_drops_a_prefix_key_is_caught(tmp_path):
    broken = kernel.load(str(build_host_double(tmp_path, "--fault", "drop-prefix-key")))
    spec = CASES["engine: 4 heads, tree of 8"]
    case = fp32_case(spec)
    diff = (run_host(broken, case, 8) - verify_attention_reference(**case)).abs().max().item()
    assert diff > 100 * TOL


def test_the_doubles_c_checks_are_the_librarys(host):
    fp32 = {"io_dtype": kernel.DTYPE_FP32, "kv_dtype": kernel.DTYPE_FP32}
    assert _run(host.lib, _args(**fp32, struct_size=8)) == 5
    assert _run(host.lib, _args(io_dtype=kernel.DTYPE_BF16, kv_dtype=kernel.DTYPE_FP32)) == 1
    assert _run(host.lib, _args(io_dtype=kernel.DTYPE_FP32, kv_dtype=kernel.DTYPE_BF16)) == 1
    assert _run(host.lib, _args(**fp32, mask_mode=2)) == 1
    assert _run(host.lib, _args(**fp32, custom_mask=None)) == 1
    assert _run(host.lib, _args(**fp32, block_m=48)) == 1
    assert _run(host.lib, _args(**fp32, batch_size=0)) == 0


def test_a_slow_double_is_right_but_slower_than_its_sleep(tmp_path, host):
    import time

    slow = kernel.load(str(build_host_double(tmp_path, "--fault", "slow")))
    spec = CASES["engine: 4 heads, tree of 8"]
    case = fp32_case(spec)
    started = time.perf_counter()
    got = run_host(slow, case, 8)
    slow_s = time.perf_counter() - started
    started = time.perf_counter()
    run_host(host, case, 8)
    fast_s = time.perf_counter() - started
    # the same answer (validate finds 0 mismatches), at least KDTREE_HOST_SLOW_MS (600 ms) per launch
    assert (got - verify_attention_reference(**case)).abs().max().item() < TOL
    assert slow_s >= 0.6 > fast_s, (slow_s, fast_s)


def test_a_batch_without_prefix_keys_runs_with_an_empty_kv_indices(host):
    # torch gives an empty tensor a null data pointer; the library refuses null, so the binding passes
    # a stand-in (the kernel never reads kv_indices when no request has a prefix key)
    spec = CaseSpec(prefix_lens=[0, 0], ns=[4, 1], heads=2, kv_dtype=torch.float32)
    case = fp32_case(spec)
    assert case["kv_indices"].numel() == 0 and case["kv_indices"].data_ptr() == 0
    got = run_host(host, case, 4)
    assert (got - verify_attention_reference(**case)).abs().max().item() < TOL
