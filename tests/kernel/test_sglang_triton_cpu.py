"""The vendored SGLang Triton kernel (bench/third_party/sglang_triton): byte-identical to the pinned
wheel's file, and importable and correct without SGLang (Triton's CPU interpreter, float32: bf16 is
wrong there)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sglang_triton
from conftest import ROOT

torch = pytest.importorskip("torch")
pytest.importorskip("triton")


def test_the_vendored_file_is_the_pinned_wheels_file():
    data = sglang_triton.VENDORED.read_bytes()
    assert hashlib.sha256(data).hexdigest() == sglang_triton.WHEEL_SHA256
    assert len(data) < 100_000  # what travels with the working tree
    # The installed wheel's version, not `import sglang`: tests/ext/sglang (no __init__.py) is on the
    # pythonpath and imports as an empty namespace package where no wheel is installed (the GPU machine).
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("no sglang wheel installed to compare with")
    if version != sglang_triton.WHEEL_VERSION:
        pytest.skip(f"installed sglang is {version}")
    import sglang

    wheel_file = Path(sglang.__file__).parent / "kernels" / "ops" / "attention" / "extend_attention.py"
    assert wheel_file.read_bytes() == data


CHILD = r"""
import json, sys
sys.path[:0] = sys.argv[1:]
import torch
assert "sglang" not in sys.modules
import sglang_triton
mod = sglang_triton.load()
assert "sglang" not in sys.modules, "the stand-in modules must not stay behind"
from kernel_cases import CaseSpec, make_case
from kdtree_verify.kernel.reference import verify_attention_reference
from kdtree_verify.kernel.shapes import HEAD_DIM_V
errs = {}
for causal, k_scale, v_scale in ((False, 1.0, 1.0), (True, 1.0, 1.0), (True, 0.5, 0.25), (False, 2.0, 0.5)):
    spec = CaseSpec(
        prefix_lens=[5, 0, 9], ns=[4, 4, 4], heads=2, causal=causal, k_scale=k_scale, v_scale=v_scale, seed=4
    )
    c = make_case(spec, "cpu")
    f = {k: (v.float() if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in c.items()}
    o = torch.empty((12, 2, HEAD_DIM_V))
    mod.extend_attention_fwd(
        f["q"], f["k_extend"], f["v_extend"], o, f["kv_buffer"], f["kv_buffer"][..., :HEAD_DIM_V],
        c["qo_indptr"], c["kv_indptr"], c["kv_indices"], c["custom_mask"], causal, c["mask_indptr"], 4,
        k_scale, v_scale, sm_scale=c["sm_scale"],
    )
    ref = verify_attention_reference(**f)
    errs[f"{causal} {k_scale} {v_scale}"] = float((o - ref).abs().max())
print(json.dumps(errs))
"""


def test_the_vendored_kernel_runs_without_sglang_and_matches_the_reference_causal_and_scaled():
    """Also the ground truth of the scale decision: SGLang's Triton multiplies prefix scores by k_scale
    and prefix P.V by v_scale, exactly as kdtree_verify.kernel.reference (and the kernel) do."""
    paths = [str(ROOT / "bench"), str(ROOT / "bench" / "third_party"), str(ROOT / "files" / "sglang_ext")]
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, *paths], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    errs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(errs) == 4 and max(errs.values()) < 1e-4, errs
