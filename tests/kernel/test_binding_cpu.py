"""The ctypes binding without a GPU: load(), argument validation, the C helpers' bounds and error codes."""

from __future__ import annotations

import ctypes
import re
import subprocess

import pytest

torch = pytest.importorskip("torch")

from conftest import ANY_ARCH  # noqa: E402
from kdtree_verify.kernel import binding as kernel  # noqa: E402
from kdtree_verify.kernel.shapes import HEAD_DIM_QK, HEAD_DIM_V  # noqa: E402
from kernel_cases import CaseSpec, make_case  # noqa: E402


@pytest.fixture(scope="module")
def vk(any_library):
    return kernel.load(str(any_library))


@pytest.fixture
def good():
    case = make_case(CaseSpec(prefix_lens=[5, 0, 33], ns=[4, 4, 4], heads=8), "cpu")
    out = torch.empty((12, 8, HEAD_DIM_V), dtype=torch.bfloat16)
    return {**case, "out": out, "max_extend_len": 4}


def _validate(args):
    kw = {k: v for k, v in args.items() if k not in ("sm_scale", "k_scale", "v_scale")}
    kernel.validate_args(torch, **kw)


def test_load_returns_a_kernel_with_the_library_metadata(vk, any_library):
    assert vk.path == str(any_library)
    assert vk.archs == [ANY_ARCH]


def test_load_rejects_a_library_missing_any_launch_symbol(tmp_path):
    # Right ABI, every launch symbol but kdtree_verify_max_workspace_bytes: must be KernelUnavailable
    # (the binding binds that symbol in VerifyKernel.__init__), not an AttributeError.
    src = tmp_path / "fake.c"
    src.write_text(
        f"int kdtree_verify_abi_version(void) {{ return {kernel.ABI_VERSION}; }}\n"
        f'const char* kdtree_verify_build_info(void) {{ return "archs={ANY_ARCH}"; }}\n'
        "int kdtree_verify_capabilities(void) { return 0; }\n"
        "int kdtree_verify_run(void) { return 0; }\n"
        "int kdtree_verify_prepare(void) { return 0; }\n"
        "int kdtree_verify_num_splits(void) { return 1; }\n"
        "int kdtree_verify_min_split_tiles(void) { return 4; }\n"
        "long kdtree_verify_workspace_bytes(void) { return 0; }\n"
    )
    lib = tmp_path / "libfake.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    with pytest.raises(kernel.KernelUnavailable, match="kdtree_verify_max_workspace_bytes"):
        kernel.load(str(lib))


def test_unsupported_reason_names_a_non_cuda_device(vk):
    reason = vk.unsupported_reason("cpu")
    assert reason is not None
    assert "CUDA" in reason or "not a CUDA device" in reason


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_run_without_a_gpu_raises_kernel_unavailable(vk, good):
    with pytest.raises(kernel.KernelUnavailable, match="not on a CUDA device"):
        vk.run(**good)


def test_validate_accepts_contract_shapes_in_every_index_and_mask_dtype(good):
    _validate(good)
    for idx in (torch.int32, torch.int64):
        variant = dict(good)
        for name in ("qo_indptr", "kv_indptr", "kv_indices", "mask_indptr"):
            variant[name] = good[name].to(idx)
        variant["custom_mask"] = good["custom_mask"].to(torch.uint8)
        variant["kv_buffer"] = good["kv_buffer"].to(torch.float8_e4m3fn)
        _validate(variant)


def test_validate_accepts_graph_sized_buffers_larger_than_the_batch(good):
    variant = dict(good)
    variant["kv_indices"] = torch.cat([good["kv_indices"], torch.zeros(100, dtype=good["kv_indices"].dtype)])
    variant["qo_indptr"] = torch.cat([good["qo_indptr"], good["qo_indptr"][-1:].repeat(3)])
    variant["custom_mask"] = torch.cat([good["custom_mask"], torch.zeros(64, dtype=torch.bool)])
    _validate(variant)


def test_validate_accepts_v_extend_as_a_view_of_k_extend(good):
    variant = dict(good)
    variant["v_extend"] = good["k_extend"][..., :HEAD_DIM_V]
    _validate(variant)


BAD_CASES = {
    "q without the rope dims": (lambda a: {"q": a["q"][..., :HEAD_DIM_V]}, "q must be"),
    "q in float16": (lambda a: {"q": a["q"].half()}, "q must be bfloat16"),
    "k_extend in float32": (lambda a: {"k_extend": a["k_extend"].float()}, "k_extend must be bfloat16"),
    "v_extend with the q/k dims": (lambda a: {"v_extend": a["k_extend"]}, "v_extend must be"),
    "kv cache in float16": (lambda a: {"kv_buffer": a["kv_buffer"].half()}, "kv_buffer must be bfloat16 or"),
    "kv cache with two heads": (lambda a: {"kv_buffer": a["kv_buffer"].repeat(1, 2, 1)}, "kv_buffer must be"),
    "out with the wrong head count": (lambda a: {"out": a["out"][:, :4]}, "out must be"),
    "out in float32": (lambda a: {"out": a["out"].float()}, "out must be bfloat16"),
    "int16 kv_indices": (
        lambda a: {"kv_indices": a["kv_indices"].to(torch.int16)},
        "kv_indices must be int32",
    ),
    "strided kv_indices": (
        lambda a: {"kv_indices": a["kv_indices"].repeat_interleave(2)[::2]},
        "kv_indices must be a contiguous",
    ),
    "float mask": (lambda a: {"custom_mask": a["custom_mask"].float()}, "custom_mask must be bool or uint8"),
    "qo_indptr too short": (lambda a: {"qo_indptr": a["qo_indptr"][:2]}, "qo_indptr needs >= batch_size+1"),
    "q not 16-byte aligned": (
        lambda a: {"q": torch.empty(a["q"].numel() + 1, dtype=torch.bfloat16)[1:].view(a["q"].shape)},
        "q must be 16-byte aligned",
    ),
    "q head stride not a multiple of 16 bytes": (
        lambda a: {"q": torch.empty(12, 8, HEAD_DIM_QK + 4, dtype=torch.bfloat16)[..., :HEAD_DIM_QK]},
        "q row strides must be multiples of 16 bytes",
    ),
    "negative max_extend_len": (lambda a: {"max_extend_len": -1}, "max_extend_len must be >= 0"),
}


@pytest.mark.parametrize("name", sorted(BAD_CASES))
def test_validate_rejects(name, good):
    change, message = BAD_CASES[name]
    args = {**good, **change(good)}
    with pytest.raises(ValueError, match=re.escape(message)):
        _validate(args)


# --- the C helpers, called through ctypes (no GPU needed) ---------------------------------------


@pytest.fixture(scope="module")
def lib(vk):
    return vk.lib


BF16, FP8 = kernel.KV_BF16, kernel.KV_FP8_E4M3


def test_num_splits_is_one_when_one_unit_fills_the_gpu(lib):
    # H=64, n=148: 148 m-blocks of 64 rows, more than 132 SMs: one unit runs every request.
    assert lib.kdtree_verify_num_splits(132, 32, 64, 148, 1 << 22, BF16) == 1
    assert lib.kdtree_verify_num_splits(132, 1, 128, 66, 1 << 22, BF16) == 1


def test_num_splits_fills_one_whole_wave_whatever_the_batch(lib):
    # ABI 6: floor(SMs / m_blocks) units for every batch size (b = 67 or 133 no longer idles half the GPU),
    # never ceil: a second, partial wave would double the time.
    for batch in (1, 2, 8, 67, 100, 133, 200, 256):
        assert lib.kdtree_verify_num_splits(132, batch, 8, 4, 1 << 20, BF16) == 132
        assert lib.kdtree_verify_num_splits(188, batch, 8, 4, 1 << 20, BF16) == 188
        assert lib.kdtree_verify_num_splits(132, batch, 64, 2, 1 << 20, BF16) == 66
        assert lib.kdtree_verify_num_splits(132, batch, 64, 16, 1 << 20, BF16) == 8
    assert lib.kdtree_verify_num_splits(400, 1, 8, 8, 1 << 22, BF16) == 256
    for sms in (46, 132, 148, 188):
        for batch in (1, 7, sms - 1, sms + 1, 2 * sms):
            for heads, n in ((8, 4), (16, 4), (128, 4), (64, 1)):
                units = lib.kdtree_verify_num_splits(sms, batch, heads, n, 1 << 24, BF16)
                m_blocks = -(-heads * n // 64)
                assert units * m_blocks <= sms < (units + 1) * m_blocks, (sms, batch, heads, n, units)


def test_min_split_tiles_is_the_one_tile_minimum_whatever_the_shape(lib):
    # ABI 6: no partial-bytes floor (ABI 5 gave 57 tiles at 64 rows, 29 at H=8, n=4).
    for heads, n, dtype in ((8, 4, BF16), (16, 4, BF16), (8, 4, FP8), (128, 1, FP8), (1, 1, BF16)):
        assert lib.kdtree_verify_min_split_tiles(heads, n, dtype) == 1, (heads, n, dtype)


def test_num_splits_does_not_depend_on_the_prefix_length(lib):
    assert lib.kdtree_verify_num_splits(132, 1, 8, 4, 1000, BF16) == 132
    assert lib.kdtree_verify_num_splits(132, 1, 8, 4, 1000, FP8) == 132
    assert lib.kdtree_verify_num_splits(132, 1, 8, 8, 0, BF16) == 132


def test_workspace_never_exceeds_the_per_gpu_bound(lib):
    for num_sms in (1, 46, 132, 148, 188):
        bound = lib.kdtree_verify_max_workspace_bytes(num_sms)
        for batch in (1, 2, 3, 5, 8, 17, 32, 64, 160, 300, 65535):
            for heads in (8, 16, 64, 128):
                for n in (1, 4, 8, 16, 64):
                    for kv_len in (0, 1, 17, 4096, 1 << 17, 1 << 24):
                        for dtype in (BF16, FP8):
                            splits = lib.kdtree_verify_num_splits(num_sms, batch, heads, n, kv_len, dtype)
                            assert 1 <= splits <= 256
                            need = lib.kdtree_verify_workspace_bytes(batch, heads, n, splits)
                            assert need <= bound, (num_sms, batch, heads, n, kv_len, splits)


def test_workspace_is_zero_without_splits(lib):
    assert lib.kdtree_verify_workspace_bytes(8, 8, 8, 1) == 0


def _args(**overrides) -> kernel._Args:
    fields = {
        "struct_size": ctypes.sizeof(kernel._Args),
        "kv_dtype": 0,
        "batch_size": 1,
        "num_heads": 8,
        "max_extend_len": 4,
        "num_tokens": 4,
        "num_splits": 1,
        "sm_scale": 0.04,
        "k_scale": 1.0,
        "v_scale": 1.0,
    }
    for name in ("q", "k_extend", "v_extend", "kv_buffer", "qo_indptr", "kv_indptr", "kv_indices"):
        fields[name] = 4096
    for name in ("mask_indptr", "custom_mask", "out"):
        fields[name] = 4096
    fields.update(overrides)
    return kernel._Args(**fields)


def _run(lib, args) -> int:
    return lib.kdtree_verify_run(ctypes.byref(args), None)


def test_the_capability_query_says_bf16_on_cuda_and_refuses_null_pointers(lib):
    io, kv, dev = ctypes.c_uint32(), ctypes.c_uint32(), ctypes.c_uint32()
    assert lib.kdtree_verify_capabilities(ctypes.byref(io), ctypes.byref(kv), ctypes.byref(dev)) == 0
    assert io.value == 1 << kernel.DTYPE_BF16
    assert kv.value == (1 << kernel.DTYPE_BF16) | (1 << kernel.DTYPE_FP8_E4M3)
    assert dev.value == kernel.DEVICE_CUDA
    assert lib.kdtree_verify_capabilities(None, ctypes.byref(kv), ctypes.byref(dev)) == 1


def test_run_rejects_a_struct_of_another_size(lib):
    assert _run(lib, _args(struct_size=ctypes.sizeof(kernel._Args) - 8)) == 5


def test_run_rejects_bad_sizes_and_dtypes(lib):
    assert _run(lib, _args(kv_dtype=7)) == 1
    assert _run(lib, _args(kv_dtype=kernel.DTYPE_FP32)) == 1
    assert _run(lib, _args(io_dtype=kernel.DTYPE_FP32)) == 1  # q/k/v/out: bf16 only
    assert _run(lib, _args(io_dtype=kernel.DTYPE_FP16)) == 1
    assert _run(lib, _args(num_heads=0)) == 1
    assert _run(lib, _args(num_splits=0)) == 1
    assert _run(lib, _args(num_splits=257)) == 1
    assert _run(lib, _args(batch_size=70000)) == 1


def test_run_rejects_null_pointers(lib):
    assert _run(lib, _args(kv_indices=None)) == 1
    assert _run(lib, _args(out=None)) == 1
    assert _run(lib, _args(custom_mask=None)) == 1  # a tree mask needs its bytes
    assert _run(lib, _args(mask_indptr=None)) == 1


def test_run_rejects_an_unknown_mask_mode(lib):
    assert _run(lib, _args(mask_mode=2)) == 1


def test_the_32_row_layout_serves_h_times_n_up_to_32_only(lib):
    assert lib.kdtree_verify_block_m(8, 4, 0) == 32  # EAGLE3 top-k 1 at TP8: the production shape
    assert lib.kdtree_verify_block_m(16, 2, 0) == 32 and lib.kdtree_verify_block_m(32, 1, 0) == 32
    assert lib.kdtree_verify_block_m(16, 4, 0) == 64 and lib.kdtree_verify_block_m(64, 1, 0) == 64
    assert lib.kdtree_verify_block_m(8, 4, 64) == 64  # forced
    assert lib.kdtree_verify_block_m(16, 4, 32) == -1 and lib.kdtree_verify_block_m(8, 4, 48) == -1
    assert (lib.kdtree_verify_block_n(32), lib.kdtree_verify_block_n(64), lib.kdtree_verify_block_n(48)) == (
        32,
        16,
        -1,
    )


def test_run_rejects_a_layout_it_cannot_honour(lib):
    assert _run(lib, _args(block_m=48)) == 1
    assert _run(lib, _args(block_m=32, num_heads=16)) == 1  # 16 x 4 rows do not fit 32


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_every_layout_hint_it_can_honour_gets_past_the_argument_checks(lib):
    for hint in (0, 32, 64):
        assert _run(lib, _args(block_m=hint)) == 3  # launch error: no GPU here, but not 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_a_causal_call_needs_no_mask_pointers(lib):
    # Past argument checks (3 = launch error, there is no GPU here), not 1 = bad argument.
    assert _run(lib, _args(mask_mode=kernel.MASK_CAUSAL, custom_mask=None, mask_indptr=None)) == 3


def test_validate_accepts_a_causal_call_without_mask_tensors(good):
    _validate({**good, "custom_mask": None, "mask_indptr": None})
    with pytest.raises(ValueError, match="mask_indptr is required"):
        _validate({**good, "mask_indptr": None})


def test_run_rejects_a_too_small_workspace(lib):
    need = lib.kdtree_verify_workspace_bytes(1, 8, 4, 4)
    assert need > 0
    assert _run(lib, _args(num_splits=4, workspace=4096, workspace_bytes=need - 4)) == 2
    assert _run(lib, _args(num_splits=4, workspace=None, workspace_bytes=need)) == 2


def test_run_with_an_empty_batch_is_a_no_op(lib):
    assert _run(lib, _args(batch_size=0)) == 0
    assert _run(lib, _args(max_extend_len=0)) == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_run_without_a_gpu_reports_a_launch_error_instead_of_crashing(lib):
    assert _run(lib, _args()) == 3
