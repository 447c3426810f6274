"""The library's device call counter (ABI 4, ``kdtree_verify_args.call_counter``): every run that launches
work bumps one uint64 once, so CUDA graph replays (which run no Python) are counted too; the status
publisher reads it into ``counters.kernel_calls_device`` (docs/CONTRACTS.md section 3b).

CPU: the host test double does the same increment on a host uint64. GPU (make gpu-check): a captured
verify call replayed K times bumps the device counter by K while the Python count stays put."""

from __future__ import annotations

import ctypes
import os

import pytest

torch = pytest.importorskip("torch")

from conftest import ARCHS, BUILD_DIR, build_library  # noqa: E402
from kdtree_verify.kernel import binding as kernel  # noqa: E402
from kdtree_verify.kernel.shapes import HEAD_DIM_V  # noqa: E402
from kdtree_verify.state import STATE  # noqa: E402
from kdtree_verify.telemetry import counters, metrics, publish  # noqa: E402
from kernel_cases import CaseSpec, make_case  # noqa: E402
from test_binding_cpu import _args, _run  # noqa: E402
from test_hostlib_cpu import fp32_case, run_host  # noqa: E402

SPEC = CaseSpec(prefix_lens=[5, 17], ns=[3, 2], heads=4, kv_dtype=torch.float32)


@pytest.fixture
def fresh_host(host_library):
    """A VerifyKernel of its own (the counters live in the VerifyKernel, not in the library)."""
    return kernel.load(str(host_library))


def test_n_calls_through_the_binding_count_n_on_the_host_double(fresh_host):
    assert fresh_host.device_calls() == 0  # nothing allocated, nothing counted
    case = fp32_case(SPEC)
    for _ in range(5):
        run_host(fresh_host, case, 3)
    assert fresh_host.device_calls() == 5
    counter = fresh_host._call_counter[-1]
    assert counter.device.type == "cpu" and counter.dtype == torch.int64 and int(counter[0]) == 5


def test_calls_with_nothing_to_do_or_count_calls_off_are_not_counted(fresh_host):
    case = fp32_case(SPEC)
    run_host(fresh_host, case, 3)
    run_host(fresh_host, {**case, "batch_size": 0}, 3)  # returns before the library
    fresh_host.count_calls = False  # NULL pointer: the library runs, counts nothing
    out = run_host(fresh_host, case, 3)
    assert not torch.isnan(out[:5]).any()
    assert fresh_host.device_calls() == 1


def test_the_c_run_counts_on_a_host_uint64_and_a_null_counter_is_fine(host_library):
    vk = kernel.load(str(host_library))
    fp32 = {"io_dtype": kernel.DTYPE_FP32, "kv_dtype": kernel.DTYPE_FP32}
    case = fp32_case(SPEC)
    out = torch.zeros(case["q"].shape[0], case["q"].shape[1], HEAD_DIM_V)
    ptrs = {
        name: case[name].data_ptr()
        for name in ("q", "k_extend", "v_extend", "kv_buffer", "qo_indptr", "kv_indptr", "kv_indices")
    }
    ptrs.update(mask_indptr=case["mask_indptr"].data_ptr(), custom_mask=case["custom_mask"].data_ptr())
    strides = {
        "q_stride_t": case["q"].stride(0),
        "q_stride_h": case["q"].stride(1),
        "k_extend_stride_t": case["k_extend"].stride(0),
        "v_extend_stride_t": case["v_extend"].stride(0),
        "kv_stride_t": case["kv_buffer"].stride(0),
        "out_stride_t": out.stride(0),
        "out_stride_h": out.stride(1),
        "qo_indptr_i64": int(case["qo_indptr"].dtype == torch.int64),
        "kv_indptr_i64": int(case["kv_indptr"].dtype == torch.int64),
        "kv_indices_i64": int(case["kv_indices"].dtype == torch.int64),
        "mask_indptr_i64": int(case["mask_indptr"].dtype == torch.int64),
    }
    shape = {"batch_size": 2, "num_heads": 4, "max_extend_len": 3, "num_tokens": int(case["q"].shape[0])}
    count = ctypes.c_uint64(41)
    base = {**fp32, **ptrs, **strides, **shape, "out": out.data_ptr()}
    assert _run(vk.lib, _args(**base, call_counter=ctypes.addressof(count))) == 0
    assert count.value == 42
    assert _run(vk.lib, _args(**base, call_counter=None)) == 0  # NULL: not counted, no crash
    assert _run(vk.lib, _args(**{**base, "batch_size": 0}, call_counter=ctypes.addressof(count))) == 0
    assert _run(vk.lib, _args(**base, block_m=48, call_counter=ctypes.addressof(count))) == 1
    assert count.value == 42  # neither the empty call nor the refused one counted


def test_the_status_counters_and_the_prom_show_the_device_count(fresh_host, monkeypatch):
    monkeypatch.setattr(STATE, "kernel", fresh_host)
    monkeypatch.setattr(STATE, "counts", {"kernel": 1})  # Python saw one call (say, the capture)
    case = fp32_case(SPEC)
    for _ in range(3):
        run_host(fresh_host, case, 3)
    pub = publish.Publisher(interval=60.0, since=0.0)
    got = pub.extra()["counters"]
    assert got["kernel_calls"] == 1 and got["kernel_calls_device"] == 3
    text = metrics.render([{"pid": 7, "counters": got}])
    assert 'kdtree_verify_kernel_launches_total{pid="7"} 3' in text.splitlines()
    assert 'kdtree_verify_calls_total{pid="7",path="kernel"} 1' in text.splitlines()
    # while a CUDA graph is being captured the publisher keeps its last read
    run_host(fresh_host, case, 3)
    monkeypatch.setattr(publish, "_capturing_cuda_graph", lambda: True)
    assert pub.extra()["counters"]["kernel_calls_device"] == 3
    monkeypatch.setattr(publish, "_capturing_cuda_graph", lambda: False)
    assert pub.extra()["counters"]["kernel_calls_device"] == 4


def test_no_library_loaded_reads_zero_and_a_failing_read_keeps_the_last_value(monkeypatch):
    monkeypatch.setattr(STATE, "kernel", None)
    assert counters.read_device_calls(None) == 0
    pub = publish.Publisher(interval=60.0, since=0.0)
    assert pub.extra()["counters"]["kernel_calls_device"] == 0

    class Broken:
        def device_calls(self) -> int:
            raise RuntimeError("no")

    pub._device_calls = 9
    monkeypatch.setattr(STATE, "kernel", Broken())
    assert pub.extra()["counters"]["kernel_calls_device"] == 9
    assert "kernel_calls_device" not in counters.from_counts({"kernel": 2})


# -- GPU (make gpu-check) -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cuda_vk():
    path = os.environ.get("KDTREE_LIB")
    if not path:
        major, minor = torch.cuda.get_device_capability()
        arch = kernel.arch_of_capability(major, minor)
        if arch not in ARCHS:
            pytest.skip(f"no build of the kernel for {arch}")
        path = str(build_library(arch, BUILD_DIR / arch))
    vk = kernel.load(path)
    reason = vk.unsupported_reason(torch.device("cuda"))
    assert reason is None, reason
    return vk


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("splits", ["one split", "split-KV + combine"])
def test_graph_replays_bump_the_device_counter_not_the_python_count(cuda_vk, splits):
    prefix = [40, 20000] if splits != "one split" else [40, 9]
    spec = CaseSpec(prefix_lens=prefix, ns=[4, 4], heads=8)
    case = make_case(spec, "cuda")
    out = torch.empty(case["q"].shape[0], case["q"].shape[1], HEAD_DIM_V, dtype=torch.bfloat16, device="cuda")
    python_calls = [0]

    def call() -> None:
        python_calls[0] += 1
        cuda_vk.run(**case, max_extend_len=4, out=out)

    call()  # eager: prepares the device, allocates the workspace and the counter
    index = torch.cuda.current_device()
    n_splits = cuda_vk.lib.kdtree_verify_num_splits(
        cuda_vk._num_sms[index], 2, 8, 4, int(case["kv_indices"].numel()), kernel.KV_BF16
    )
    assert (n_splits > 1) == (splits != "one split"), n_splits
    torch.cuda.synchronize()
    before = cuda_vk.device_calls()
    assert before >= 1
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()  # warm-up on a side stream, as torch.cuda.graph recommends
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()  # captured: the counter's pointer is baked in, nothing runs
    torch.cuda.synchronize()
    after_capture = cuda_vk.device_calls()
    assert after_capture == before + 1  # the side-stream warm-up; the capture ran nothing
    replays = 7
    for _ in range(replays):
        graph.replay()
    torch.cuda.synchronize()
    assert cuda_vk.device_calls() == after_capture + replays
    assert python_calls[0] == 3  # eager, warm-up, capture: the replays ran no Python
