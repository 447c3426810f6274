"""Every release of the supported window (kdtree_verify/target.py SGLANG_RELEASES), checked against
its own published wheel: the files scripts/sglang-wheels.sh extracts into .cache/sglang-wheels/<X>/.

What dispatch.py mirrors of `TritonAttnBackend.forward_extend` must hold in each release: the
signature, the conditions of every branch (each one the dispatch refuses or knows to be off the
served path), the KV write of the `save_kv_cache` branch (in the form target.py names for that
release), the descales, the verify metadata (qo_indptr, kv_indptr, custom_mask, mask_indptr,
max_extend_len) and the kernel's mask layout. A release whose source differs fails here, and so does
a window that names a release these tests do not check (or the other way round).
"""

from __future__ import annotations

import ast
import os
import re
from functools import cache
from pathlib import Path

import pytest
from kdtree_verify import dispatch, target

ROOT = Path(__file__).resolve().parents[3]
CACHE = Path(os.environ.get("KDTREE_SGLANG_WHEELS", ROOT / ".cache" / "sglang-wheels"))
RELEASES = target.SGLANG_RELEASES
BACKEND = "sglang/srt/layers/attention/triton_backend.py"
POOL = "sglang/srt/mem_cache/memory_pool.py"
RADIX = "sglang/srt/layers/radix_attention.py"
KERNEL = "sglang/kernels/ops/attention/extend_attention.py"

# The KVWriteLoc each form builds, as the release's forward_extend spells it (ast.unparse).
KV_WRITE_SOURCE = {
    target.KV_WRITE_FOR_BATCH: (
        "KVWriteLoc.for_batch(forward_batch, swa_loc=self.forward_metadata.swa_out_cache_loc)"
    ),
    target.KV_WRITE_FULL_LOC: (
        "KVWriteLoc(forward_batch.out_cache_loc, self.forward_metadata.swa_out_cache_loc, "
        "full_loc=self.forward_metadata.out_cache_loc_full_physical)"
    ),
}
# Every name a condition of forward_extend may test, and how the dispatch stands to it: a refusal in
# dispatch.unsupported_reason, or why the branch never changes a call the kernel serves. A new name
# in a release fails test_every_branch_condition_is_one_the_dispatch_knows.
CONDITIONS = {
    "k": "k is None: refused (no k/v, read-back path)",
    "v": "v is None: refused (no k/v, read-back path)",
    "sinks": "refused (sinks/score_mod/aux_tensors)",
    "score_mod": "refused (sinks/score_mod/aux_tensors)",
    "aux_tensors": "refused (sinks/score_mod/aux_tensors)",
    "self._can_run_dense_fp8_chunked_mha": "refused (use_dense_fp8_chunked_prefill)",
    "attn_out": "the output buffer: the dispatch uses forward_batch._attn_output the same way",
    "layer.qk_head_dim": "output shape: refused unless absorbed MLA (kernel.shapes head dims)",
    "layer.v_head_dim": "output shape: refused unless absorbed MLA (kernel.shapes head dims)",
    "pool": "read-back path only (k is None): refused",
    "SWAKVPool": "read-back path only (k is None): refused",
    "pool.layers_mapping": "read-back path only (k is None): refused",
    "self._translate_kv_loc": "read-back path only (k is None): refused",
    "layer.layer_id": "read-back path only (k is None): refused",
    "self.forward_metadata.swa_out_cache_loc": "read-back path only (k is None): refused",
    "save_kv_cache": "the KV write: mirrored (_write_kv_like_original)",
    "layer.k_scale": "the KV write and the descales: mirrored",
    "layer.v_scale": "the descales: mirrored (descales())",
    "self.use_mla": "refused unless MLA",
    "layer.is_cross_attention": "refused (not causal decoder attention)",
    "layer.attn_type": "refused unless decoder (not causal decoder attention)",
    "AttentionType.ENCODER_ONLY": "refused unless decoder",
    "AttentionType.DECODER_BIDIRECTIONAL": "refused unless decoder",
    "self.allow_bidirectional_attention_in_extend": "bidirectional only: refused unless decoder",
    "forward_batch.forward_mode.is_dllm_extend": "bidirectional only: refused unless decoder",
    "forward_batch.mha_one_shot": "refused (mha one-shot)",
    "forward_batch.attn_attend_prefix_cache": "mha one-shot only: refused",
    "k.shape": "mha one-shot only: refused",
    "q.shape": "mha one-shot only: refused",
    "self.dcp_size": "refused (decode context parallel)",
    "self.enable_deterministic": "refused (deterministic inference)",
    "layer.sliding_window_size": "refused (sliding window)",
    "self.use_verify_shared_kv": "ROCm split-KV verify path: replaced in mode on, like the Triton call",
    "self.use_verify_splitkv": "ROCm split-KV verify path: replaced in mode on, like the Triton call",
    "verify_fwd": "ROCm split-KV verify path: replaced in mode on, like the Triton call",
    "forward_batch.forward_mode.is_target_verify": "the dispatch serves target-verify only",
    "self.verify_splitkv_fwd": "ROCm split-KV verify path: replaced in mode on, like the Triton call",
    "self.verify_shared_kv_fwd": "ROCm split-KV verify path: replaced in mode on, like the Triton call",
    "self.dllm_attention": "refused (dllm)",
    "kv_indices": "sliding-window assertion only: refused",
    "bidirectional_extend": "sliding-window only (attn_type): refused",
}
# What the dispatch reads on the backend, the layer and the metadata, and must find in each release.
BACKEND_ATTRS = (
    "is_draft_runner",
    "use_mla",
    "dcp_size",
    "enable_deterministic",
    "page_size",
    "token_to_kv_pool",
)
LAYER_ATTRS = (
    "qk_head_dim",
    "v_head_dim",
    "tp_k_head_num",
    "tp_q_head_num",
    "logit_cap",
    "sliding_window_size",
    "is_cross_attention",
    "attn_type",
    "xai_temperature_len",
    "k_scale",
    "v_scale",
    "k_scale_float",
    "v_scale_float",
    "scaling",
    "layer_id",
)
METADATA_FIELDS = (
    "qo_indptr",
    "kv_indptr",
    "kv_indices",
    "custom_mask",
    "mask_indptr",
    "max_extend_len",
    "swa_out_cache_loc",
)


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def release_dir(version: str) -> Path:
    path = CACHE / version
    if not (path / ".kdtree-stamp").is_file():
        # make test-sglang-wheels fetches first and sets this: there a missing release is a failure
        (pytest.fail if os.environ.get("KDTREE_REQUIRE_SGLANG_WHEELS") else pytest.skip)(
            f"no extracted wheel of sglang {version} under {CACHE}: `make sglang-wheels` fetches the "
            "window's wheels (make test-sglang-wheels and make test do it first)"
        )
    return path


@cache
def _source(version: str, name: str) -> str:
    return (release_dir(version) / name).read_text()


@cache
def _tree(version: str, name: str) -> ast.Module:
    return ast.parse(_source(version, name))


def _class(version: str, name: str, cls: str) -> ast.ClassDef:
    (node,) = [n for n in _tree(version, name).body if isinstance(n, ast.ClassDef) and n.name == cls]
    return node


def _method(version: str, name: str, cls: str, method: str) -> ast.FunctionDef:
    (node,) = [
        n for n in _class(version, name, cls).body if isinstance(n, ast.FunctionDef) and n.name == method
    ]
    return node


def _forward_extend(version: str) -> ast.FunctionDef:
    return _method(version, BACKEND, target.TARGET_CLASS, target.TARGET_ATTR)


def _self_assigned(func: ast.FunctionDef) -> set[str]:
    return {
        t.attr
        for node in ast.walk(func)
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    }


def _names_tested(test: ast.expr) -> set[str]:
    """The outermost names and attribute chains a condition reads (a call by its function, not its
    arguments: the split-KV verify call's arguments are the kernel's, not a condition)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.Attribute, ast.Name)):
            found.add(ast.unparse(node))
            return
        if isinstance(node, ast.Call):  # a method by its name; isinstance() by what it tests
            if isinstance(node.func, ast.Name) and node.func.id == "isinstance":
                for arg in node.args:
                    visit(arg)
            else:
                visit(node.func)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(test)
    return found


def test_the_window_is_what_these_tests_check_and_the_cache_holds():
    versions = list(RELEASES)
    assert tuple(versions) == target.SUPPORTED_SGLANG_VERSIONS
    assert versions == sorted(versions, key=_key), "SGLANG_RELEASES is listed oldest first"
    assert set(RELEASES.values()) <= set(KV_WRITE_SOURCE), RELEASES
    assert target.window_text() == f"{versions[0]} to {versions[-1]}"
    if CACHE.is_dir():  # a release left in the cache but out of the window (or the other way round)
        held = {p.name for p in CACHE.iterdir() if p.is_dir() and (p / ".kdtree-stamp").is_file()}
        assert held == set(versions), f"{CACHE} holds {sorted(held)}; run make sglang-wheels"


@pytest.mark.parametrize("version", list(RELEASES))
def test_the_wheel_is_that_release(version):
    (meta,) = release_dir(version).glob("sglang-*.dist-info/METADATA")
    assert re.search(rf"^Version: {re.escape(version)}$", meta.read_text(), re.M)


@pytest.mark.parametrize("version", list(RELEASES))
def test_forward_extend_has_the_signature_the_patch_binds(version):
    args = _forward_extend(version).args
    assert tuple(a.arg for a in args.args) == target.EXPECTED_PARAMS
    assert not args.kwonlyargs and args.vararg is None and args.kwarg is None
    defaults = dict(zip(target.EXPECTED_PARAMS[-len(args.defaults) :], args.defaults, strict=True))
    assert {k: ast.literal_eval(v) for k, v in defaults.items()} == dispatch._DEFAULTS


@pytest.mark.parametrize("version", list(RELEASES))
def test_the_kv_write_has_the_form_the_window_names(version):
    func = _forward_extend(version)
    (write,) = [n for n in ast.walk(func) if isinstance(n, ast.If) and ast.unparse(n.test) == "save_kv_cache"]
    (loc,) = [n for n in write.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "loc_info"]
    assert ast.unparse(loc.value) == KV_WRITE_SOURCE[RELEASES[version]], version
    chain = ast.unparse(write.body[1])
    assert chain.startswith(
        "if layer.k_scale is None:\n    self._set_kv_buffer(forward_batch, layer, loc_info, k, v)\n"
    )
    assert "elif self.use_mla:\n    k_scaled = k.clone().div_(layer.k_scale)\n" in chain
    assert "self.token_to_kv_pool.set_kv_buffer(layer, loc_info, k_scaled, v)" in chain
    pool = _class(version, POOL, "KVWriteLoc")
    fields = [ast.unparse(n.target) for n in pool.body if isinstance(n, ast.AnnAssign)]
    assert fields[:3] == ["loc", "swa_loc", "full_loc"]
    methods = {n.name for n in pool.body if isinstance(n, ast.FunctionDef)}
    assert ("for_batch" in methods) == (RELEASES[version] == target.KV_WRITE_FOR_BATCH)
    if RELEASES[version] == target.KV_WRITE_FULL_LOC:
        md = _class(version, BACKEND, "ForwardMetadata")
        assert "out_cache_loc_full_physical" in {
            ast.unparse(n.target) for n in md.body if isinstance(n, ast.AnnAssign)
        }


@pytest.mark.parametrize("version", list(RELEASES))
def test_the_descales_are_the_ones_the_dispatch_passes(version):
    text = ast.unparse(_forward_extend(version))
    assert (
        "if layer.k_scale is not None and layer.v_scale is not None:\n"
        "        k_descale = layer.k_scale_float\n        v_descale = layer.v_scale_float\n"
        "    else:\n        k_descale = 1.0\n        v_descale = 1.0\n"
    ) in text


@pytest.mark.parametrize("version", list(RELEASES))
def test_every_branch_condition_is_one_the_dispatch_knows(version):
    func = _forward_extend(version)
    tested: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, (ast.If, ast.IfExp, ast.Assert)):
            tested |= _names_tested(node.test)
    unknown = sorted(n for n in tested if n not in CONDITIONS and not n.startswith(("torch.", "None")))
    assert not unknown, (
        f"sglang {version}: forward_extend tests {unknown}: review dispatch.unsupported_reason"
    )


@pytest.mark.parametrize("version", list(RELEASES))
def test_what_the_dispatch_reads_exists_in_the_release(version):
    init = _method(version, BACKEND, target.TARGET_CLASS, "__init__")
    assigned = _self_assigned(init)
    assert set(BACKEND_ATTRS) <= assigned | {"token_to_kv_pool"}, sorted(set(BACKEND_ATTRS) - assigned)
    # the optional branches the dispatch reads with a default: absent exactly where the branch is
    text = ast.unparse(_forward_extend(version))
    assert ("use_dense_fp8_chunked_prefill" in assigned) == ("_can_run_dense_fp8_chunked_mha" in text)
    if "self.dllm_attention" in text:
        assert "dllm_attention" in assigned
    layer = _method(version, RADIX, "RadixAttention", "__init__")
    assert set(LAYER_ATTRS) <= _self_assigned(layer), sorted(set(LAYER_ATTRS) - _self_assigned(layer))
    md = _class(version, BACKEND, "ForwardMetadata")
    fields = {ast.unparse(n.target) for n in md.body if isinstance(n, ast.AnnAssign)}
    assert set(METADATA_FIELDS) <= fields, sorted(set(METADATA_FIELDS) - fields)
    assert "_set_kv_buffer" in {
        n.name for n in _class(version, BACKEND, target.TARGET_CLASS).body if isinstance(n, ast.FunctionDef)
    }


@pytest.mark.parametrize("version", list(RELEASES))
def test_the_verify_metadata_has_the_layout_the_kernel_reads(version):
    """init_forward_metadata's target-verify branch: n tokens per request (spec_info.draft_token_num
    up to 0.5.20, spec_info.num_tokens_per_req from 0.5.21: the same n), qo_indptr every n, the
    custom mask of the spec info, mask_indptr over n x (prefix + n), max_extend_len n."""
    func = _method(version, BACKEND, target.TARGET_CLASS, "init_forward_metadata")
    (branch,) = [
        n
        for n in ast.walk(func)
        if isinstance(n, ast.If) and ast.unparse(n.test) == "forward_batch.forward_mode.is_target_verify()"
    ]
    text = "\n".join(ast.unparse(s) for s in branch.body)
    n = re.search(r"qo_indptr = torch\.arange\(0, \(1 \+ bs\) \* (\w+), step=\1, dtype=torch\.int32", text)
    assert n, text[:400]
    n = re.escape(n.group(1))
    assert "custom_mask = spec_info.custom_mask" in text
    assert re.search(rf"seq_mask_len = {n} \* \(forward_batch\.seq_lens \+ {n}\)", text)
    assert "mask_indptr[1:bs + 1] = torch.cumsum(seq_mask_len[:bs], dim=0)" in text
    assert re.search(rf"^max_extend_len = {n}$", text, re.M)


@pytest.mark.parametrize("version", list(RELEASES))
def test_the_kernel_reads_the_draft_mask_as_the_kdtree_kernel_does(version):
    """extend_attention_fwd with its default skip_prefix_custom_mask=True (forward_extend never
    passes it): the prefix fully visible, the mask read for the draft x draft block only."""
    (fwd,) = [
        n
        for n in _tree(version, KERNEL).body
        if isinstance(n, ast.FunctionDef) and n.name == "extend_attention_fwd"
    ]
    names = [a.arg for a in fwd.args.args]
    defaults = dict(zip(names[-len(fwd.args.defaults) :], fwd.args.defaults, strict=True))
    assert ast.literal_eval(defaults["skip_prefix_custom_mask"]) is True
    assert "skip_prefix_custom_mask" not in ast.unparse(_forward_extend(version))
    compact = re.sub(r"\s+", "", _source(version, KERNEL))
    assert (
        "custom_mask=tl.load(mask_ptr+cur_seq_mask_start_idx+(cur_block_m*BLOCK_M+offs_m[:,None])"
        "*(cur_seq_len+window_kv_offset)+window_kv_offset+cur_seq_len_prefix+start_n+offs_n[None,:]"
    ) in compact


def test_the_operations_doc_lists_the_window_release_by_release():
    """docs/operations.md "SGLang releases": one row per release of the window, in order, and the KV
    write form each names is the one target.py holds (full_loc before for_batch)."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("## SGLang releases (the supported window)", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+\.\d+\.\d+) \| ([^|]+) \|", section, re.M)
    assert [v for v, _pins in rows] == list(RELEASES)
    first_for_batch = next(v for v, f in RELEASES.items() if f == target.KV_WRITE_FOR_BATCH)
    assert re.search(rf"^\| {re.escape(first_for_batch)} \|.*KVWriteLoc\.for_batch", section, re.M)
    assert f"window stops at {next(iter(RELEASES))}" in section


@pytest.mark.parametrize("version", list(RELEASES))
def test_the_venv_script_has_a_stack_for_the_torch_the_release_pins(version):
    """scripts/sglang-venv.sh builds a release's venv on the torch its wheel pins (torch_stack): a
    release of the window pinning a torch the script has no stack for fails here, before any build."""
    (meta,) = release_dir(version).glob("sglang-*.dist-info/METADATA")
    (torch,) = re.findall(r"^Requires-Dist: torch==([\w.]+)$", meta.read_text(), re.M)
    script = (ROOT / "scripts" / "sglang-venv.sh").read_text()
    body = script.split("torch_stack() {", 1)[1].split("\n}\n", 1)[0]
    assert torch in re.findall(r"^\s+([\w.]+)\) echo ", body, re.M), f"sglang {version} pins torch {torch}"
