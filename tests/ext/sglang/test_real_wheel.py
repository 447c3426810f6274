"""Against a real SGLang wheel of the window: signature, the real scheduler child, the real Triton kernel."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # the optional suites skip where torch is absent
from extlib import EXT_DIR, clean_env  # noqa: E402
from kdtree_verify import target  # noqa: E402
from kdtree_verify.inject import lifecycle  # noqa: E402
from kdtree_verify.kernel import binding as kernel  # noqa: E402
from kdtree_verify.kernel.reference import verify_attention_reference  # noqa: E402
from kdtree_verify.telemetry import marker  # noqa: E402
from verify_cases import VD, make_case  # noqa: E402
from wheel_release import INSTALLED, KV_WRITE_FORM, RELEASE  # noqa: E402

tb = pytest.importorskip("sglang.srt.layers.attention.triton_backend")
MARKER = re.compile(r"^kdtree-verify: pid=(\d+) .* state=(\w+) ", re.M)


def test_the_venv_runs_the_release_asked_for_and_the_window_holds_it():
    assert INSTALLED == RELEASE, f"the venv has sglang {INSTALLED}, the tests were asked for {RELEASE}"
    assert RELEASE in target.SGLANG_RELEASES, f"sglang {RELEASE} is not in the window {target.window_text()}"


def test_the_patch_binds_to_the_real_forward_extend_signature(libs, monkeypatch):
    import sglang

    assert not getattr(sglang, "IS_TEST_DOUBLE", False)
    original = tb.TritonAttnBackend.__dict__["forward_extend"]
    monkeypatch.setenv("KDTREE_VERIFY", "validate")
    monkeypatch.setenv("KDTREE_LIB", str(libs["good"]))
    st = lifecycle.install(tb)  # the real kernel binding, a real .so with the right ABI
    assert st["state"] == "active" and st["sglang"] == RELEASE, st
    assert tb.TritonAttnBackend.forward_extend.__wrapped__ is original
    assert lifecycle.uninstall()["state"] == "not-installed"
    assert tb.TritonAttnBackend.__dict__["forward_extend"] is original


def test_the_real_backend_has_every_attribute_the_dispatch_reads():
    import inspect

    init = inspect.getsource(tb.TritonAttnBackend.__init__)
    for name in (
        "is_draft_runner",
        "page_size",
        "use_mla",
        "dcp_size",
        "enable_deterministic",
        "forward_metadata",
        "token_to_kv_pool",
    ):
        assert re.search(rf"self\.{name}\b[^=\n]*= ", init), name
    # read with a default (off): set exactly in the releases whose forward_extend has that branch
    forward_extend = inspect.getsource(tb.TritonAttnBackend.forward_extend)
    fp8_branch = "_can_run_dense_fp8_chunked_mha" in forward_extend
    assert bool(re.search(r"self\.use_dense_fp8_chunked_prefill\b[^=\n]*= ", init)) == fp8_branch, RELEASE
    assert ("dllm_attention" in dir(tb.TritonAttnBackend)) == ("self.dllm_attention" in forward_extend), (
        RELEASE
    )
    assert {
        "qo_indptr",
        "kv_indptr",
        "kv_indices",
        "custom_mask",
        "mask_indptr",
        "max_extend_len",
        "swa_out_cache_loc",
    } <= set(tb.ForwardMetadata.__dataclass_fields__)
    # what dispatch._write_kv_like_original builds the KVWriteLoc from, in this release's form
    if KV_WRITE_FORM == target.KV_WRITE_FOR_BATCH:
        assert tb.KVWriteLoc.for_batch
    else:
        assert KV_WRITE_FORM == target.KV_WRITE_FULL_LOC, RELEASE
        assert "out_cache_loc_full_physical" in tb.ForwardMetadata.__dataclass_fields__
        assert not hasattr(tb.KVWriteLoc, "for_batch")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("tiny-llama")
    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        max_position_embeddings=256,
    )
    LlamaForCausalLM(cfg).save_pretrained(path)
    return path


@pytest.mark.launcher
def test_real_launch_server_scheduler_child_reports_the_patch_active_before_it_dies(
    libs, tiny_llama, tmp_path
):
    env = clean_env(
        PYTHONPATH=str(EXT_DIR),
        KDTREE_VERIFY="on",
        KDTREE_LIB=str(libs["good"]),
        SGLANG_CPU_OMP_THREADS_BIND="0-1",
        KDTREE_STATUS_DIR=str(tmp_path / "status"),
    )
    cmd = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(tiny_llama),
        "--device",
        "cpu",
        "--tp-size",
        "1",
        "--attention-backend",
        "triton",
        "--skip-tokenizer-init",
        "--port",
        str(_free_port()),
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail("launch_server neither died nor came up within 240 s:\n" + out[-3000:])
    # Expected: the scheduler dies on the CPU (it imports vllm for rotary embeddings) and the parent
    # kills its tree. Before that, the scheduler child must have said the patch is active.
    assert proc.returncode != 0
    assert "Scheduler hit an exception" in out
    lines = [line for line in out.splitlines() if MARKER.match(line)]
    assert len(lines) == 1, out[-3000:]
    fields = marker.parse_line(lines[0])
    assert fields["state"] == "active" and fields["mode"] == "on" and fields["sglang"] == RELEASE
    assert fields["title"] == "sglang::scheduler"
    assert int(fields["pid"]) != proc.pid and int(fields["ppid"]) == proc.pid
    assert (tmp_path / "status" / f"{fields['pid']}.json").is_file()


def _triton(case, o):
    from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd

    extend_attention_fwd(
        case.q,
        case.k_extend,
        case.v_extend,
        o,
        case.kv_buffer,
        case.kv_buffer[..., :VD],
        case.qo_indptr,
        case.kv_indptr,
        case.kv_indices,
        case.custom_mask,
        True,
        case.mask_indptr,
        case.n,
        1.0,
        1.0,
        sm_scale=case.sm_scale,
    )


CASES = [
    ([5, 9], "binary", torch.int64),
    ([0, 7, 3], "chain", torch.int32),
    ([12], "star", torch.int64),
    ([0, 0], "binary", torch.int32),
    ([3, 0, 11], "star", torch.int32),
]


@pytest.mark.parametrize(("prefixes", "tree", "index_dtype"), CASES)
def test_reference_matches_sglangs_real_triton_extend_attention_in_float32(prefixes, tree, index_dtype):
    case = make_case(prefixes, tree, index_dtype=index_dtype, seed=len(prefixes))
    o = torch.empty(case.q.shape[0], case.q.shape[1], VD, dtype=torch.float32)
    _triton(case, o)
    ref = verify_attention_reference(**case.ref_kwargs())
    assert (ref - o).abs().max().item() < 1e-4
    # and the tree mask matters: a chain-free (all-visible) mask gives a different answer
    if tree != "chain" or any(prefixes):
        all_visible = case.ref_kwargs() | {"custom_mask": torch.ones_like(case.custom_mask)}
        assert (verify_attention_reference(**all_visible) - o).abs().max().item() > 1e-2


def test_reference_is_accurate_to_fp32_against_float64():
    case = make_case([6, 0, 13], "binary", heads=8, seed=7)
    ref = verify_attention_reference(**case.ref_kwargs())
    as64 = {
        k: (v.double() if torch.is_tensor(v) and v.is_floating_point() else v)
        for k, v in case.ref_kwargs().items()
    }
    exact = verify_attention_reference(**as64)
    assert ref.dtype == torch.float32
    assert (ref.double() - exact).abs().max().item() < 2e-5


def test_reference_scales_an_fp8_cache_by_k_scale_and_v_scale():
    case = make_case([4, 6], "chain", seed=3)
    fp8 = (case.kv_buffer / 0.5).to(torch.float8_e4m3fn)
    scaled = verify_attention_reference(
        **(case.ref_kwargs() | {"kv_buffer": fp8, "k_scale": 0.5, "v_scale": 0.5})
    )
    dequant = verify_attention_reference(**(case.ref_kwargs() | {"kv_buffer": fp8.float() * 0.5}))
    assert torch.equal(scaled, dequant)
    # v_scale reaches only the values: a different v_scale changes the output, k_scale alone too.
    v_only = verify_attention_reference(
        **(case.ref_kwargs() | {"kv_buffer": fp8, "k_scale": 0.5, "v_scale": 0.25})
    )
    assert not torch.allclose(v_only, scaled)


def test_kernel_binding_contract_symbols_exist():
    assert isinstance(kernel.ABI_VERSION, int) and issubclass(kernel.KernelUnavailable, Exception)
