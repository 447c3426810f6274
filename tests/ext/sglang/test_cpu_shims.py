"""The engine test hosts' stand-in for sgl_kernel's NGRAM op
(tests/engine/cpu_shims/sgl_kernel/speculative.py) on the release this venv holds: its torch version of
`reconstruct_indices_from_tree_mask` (what releases before 0.5.21 run, having no Triton version of their
own) against the release's own references.

- every release: NGRAM's host-side `_derive_tree_links` (srt/speculative/ngram_worker.py, "matching
  what reconstruct_indices_from_tree_mask produces on device") for the two link outputs;
- releases with `kernels/ops/speculative/reconstruct_tree.py` (0.5.21 on): SGLang's Triton kernel
  (interpreted) for all four outputs, and the shim forwards to that kernel rather than its own.
"""

from __future__ import annotations

import importlib
import importlib.util
import random
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # the optional suites skip where torch is absent

ROOT = Path(__file__).resolve().parents[3]
SHIM = ROOT / "tests" / "engine" / "cpu_shims" / "sgl_kernel" / "speculative.py"
N = 8  # draft tokens (the engine's ngram.conf)


@pytest.fixture
def shim(monkeypatch):
    """The shims' `sgl_kernel` package as `sgl_kernel` in this process for the test (as on the engine
    hosts, where SGLang's NGRAM modules import it at module level), its `speculative` module returned."""
    package = SHIM.parent
    spec = importlib.util.spec_from_file_location(
        "sgl_kernel", package / "__init__.py", submodule_search_locations=[str(package)]
    )
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "sgl_kernel", module)
    spec.loader.exec_module(module)
    monkeypatch.delitem(sys.modules, "sgl_kernel.speculative", raising=False)
    return importlib.import_module("sgl_kernel.speculative")


def _triton():
    try:
        from sglang.kernels.ops.speculative.reconstruct_tree import reconstruct_indices_from_tree_mask_triton
    except ModuleNotFoundError:
        return None
    return reconstruct_indices_from_tree_mask_triton


def _trees(bs: int, seed: int) -> torch.Tensor:
    """bs random trees of N nodes in NGRAM's mask layout: [bs*N*N] bool, node i's row marks its
    ancestors and itself; node 0 is the root, some nodes start a second root (no parent)."""
    rng = random.Random(seed)
    mask = torch.zeros(bs, N, N, dtype=torch.bool)
    for b in range(bs):
        for i in range(N):
            mask[b, i, i] = True
            if i and rng.random() > 0.1:
                mask[b, i] |= mask[b, rng.randrange(i)]
    return mask.reshape(-1)


def _run(op, mask: torch.Tensor, seq_lens: torch.Tensor, bs: int, spare: int = 3) -> list[torch.Tensor]:
    # outputs larger than bs*N (the worker's preallocated buffers); the spare tail must stay untouched
    outs = [torch.full((bs * N + spare,), -7, dtype=torch.int64) for _ in range(4)]
    op(mask, seq_lens, *outs, bs, N)
    return outs


@pytest.mark.parametrize("seed", range(6))
def test_torch_op_links_equal_the_releases_host_side_derivation(shim, seed):
    from sglang.srt.speculative.ngram_worker import _derive_tree_links

    bs = 1 + seed % 4
    mask = _trees(bs, seed)
    seq_lens = torch.tensor([5 + 3 * b for b in range(bs)], dtype=torch.int32)
    positions, index, next_token, next_sibling = _run(shim.reconstruct_indices_torch, mask, seq_lens, bs)
    want_token, want_sibling = _derive_tree_links(mask.numpy(), bs, N)
    assert next_token[: bs * N].tolist() == want_token.reshape(-1).tolist()
    assert next_sibling[: bs * N].tolist() == want_sibling.reshape(-1).tolist()
    tree = mask.reshape(bs, N, N)
    depth = [[int(tree[b, i, :i].sum()) for i in range(N)] for b in range(bs)]
    assert positions[: bs * N].tolist() == [d + int(seq_lens[b]) for b in range(bs) for d in depth[b]]
    assert index[: bs * N].tolist() == list(range(bs * N))
    assert all(t[bs * N :].tolist() == [-7] * 3 for t in (positions, index, next_token, next_sibling))


@pytest.mark.parametrize("seed", range(4))
def test_torch_op_equals_sglangs_triton_kernel_where_the_release_has_one(shim, seed):
    triton_op = _triton()
    if triton_op is None:
        pytest.skip("this release ships no Triton reconstruct_indices_from_tree_mask (before 0.5.21)")
    bs = 2 + seed
    mask = _trees(bs, 100 + seed)
    seq_lens = torch.tensor([9 * b + 1 for b in range(bs)], dtype=torch.int64)
    got = _run(shim.reconstruct_indices_torch, mask, seq_lens, bs)
    want = _run(triton_op, mask, seq_lens, bs)
    assert [t.tolist() for t in got] == [t.tolist() for t in want]


def test_the_shim_forwards_to_sglangs_kernel_when_there_is_one_else_runs_its_own(shim, monkeypatch):
    used = []
    monkeypatch.setattr(shim, "reconstruct_indices_torch", lambda *a: used.append("torch"))
    if _triton() is not None:
        import sglang.kernels.ops.speculative.reconstruct_tree as tree

        monkeypatch.setattr(
            tree, "reconstruct_indices_from_tree_mask_triton", lambda *a: used.append("triton")
        )
    outs = [torch.zeros(N, dtype=torch.int64) for _ in range(4)]
    shim.reconstruct_indices_from_tree_mask(_trees(1, 0), torch.tensor([3]), *outs, 1, N)
    assert used == ["triton" if _triton() is not None else "torch"]
