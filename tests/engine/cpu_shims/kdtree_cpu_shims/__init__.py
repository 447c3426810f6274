"""CPU shims (test hosts only, not product code): SGLang plugin that fills two generic-platform gaps.

Loaded through SGLang's public plugin API: the entry point `kdtree_cpu_shims` in group
`sglang.srt.plugins` (declared by `../kdtree_cpu_shims-1.dist-info/entry_points.txt`, found by
importlib.metadata because this directory is on the unit's PYTHONPATH; nothing is installed into the
venv). `load_plugins()` runs `register()` in the launcher, every scheduler and the detokenizer, then
`HookRegistry.apply_hooks()` wraps the targets (and rebinds `from X import f` copies).

The draft-model algorithms (EAGLE3, NEXTN, DFLASH) need five more, in `drafts.py` (each names the
SGLang file:line it stands in for and the SGLang function it calls instead), and `--tp-size 2` one more,
in `tp.py` (the model-parallel groups without PyNccl).

Why: SGLang (0.5.23; the releases before it where noted) on the generic platform (`--device cpu` without
the official CPU engine, whose sgl-kernel CPU build is not on the package index) has no branch for two
speculative-decoding helpers that NGRAM verify needs:
- `kernels/ops/speculative/cache_locs.py` `assign_extend_cache_locs_func` returns None (then
  `k_cache[indices] = k` crashes). Its CUDA/XPU branch launches SGLang's Triton kernel
  `assign_extend_cache_locs`; the AROUND hook launches that same kernel.
- `kernels/ops/speculative/spec_tree.py` `verify_tree_greedy_func` only calls a no-op and returns
  uninitialised accept counts (IndexError later). Its XPU branch calls SGLang's Triton
  `verify_tree_greedy_triton`; the AROUND hook calls that. Before 0.5.23 both functions live in
  `srt/speculative/eagle_utils.py` with the same arguments and the same XPU branch: the hook wraps the
  one the running release has (`targets()`), and calls the Triton function beside it.
Both kernels run on CPU tensors under TRITON_INTERPRET=1. On any platform SGLang does serve (CUDA, HIP,
MUSA, XPU, NPU, the CPU engine, an out-of-tree platform) the hooks call the original unchanged.
Each hook prints one `kdtree-cpu-shims:` line on stderr at its first generic-platform call.

Diagnostic (opt-in, for tests): with KDTREE_CPU_SHIMS_STATUS_DIR set, every verify step (one
`verify_tree_greedy_func` call) writes `<dir>/<pid>.json` with this plugin's call counts and, when the
kdtree patch (`kdtree_verify`) is loaded in the process, its `status()`: state, reason and the counts of
how each verify call was routed. The scheduler's own state is otherwise invisible from outside.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import json
import os
import sys
from collections.abc import Callable

CACHE_LOCS = "sglang.kernels.ops.speculative.cache_locs.assign_extend_cache_locs_func"
VERIFY_GREEDY = "sglang.kernels.ops.speculative.spec_tree.verify_tree_greedy_func"
# Where releases before 0.5.23 keep it (tests/ext/wheels/test_release_shims.py checks every release).
VERIFY_GREEDY_BEFORE_0_5_23 = "sglang.srt.speculative.eagle_utils.verify_tree_greedy_func"

CALLS = {CACHE_LOCS: 0, VERIFY_GREEDY: 0}


def _say(msg: str) -> None:
    print(f"kdtree-cpu-shims: pid={os.getpid()} {msg}", file=sys.stderr, flush=True)


@functools.lru_cache(maxsize=1)
def generic_platform() -> bool:
    """True when SGLang runs on none of its own platforms (the case the shims exist for)."""
    from sglang.srt.platforms import current_platform
    from sglang.srt.utils import is_cpu, is_cuda, is_hip, is_musa, is_npu, is_xpu

    if current_platform.is_out_of_tree():
        return False
    return not any(f() for f in (is_cuda, is_hip, is_musa, is_xpu, is_npu, is_cpu))


def bind(original, args, kwargs):
    bound = inspect.signature(original).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments


def count(target: str, detail: str) -> None:
    CALLS[target] = CALLS.get(target, 0) + 1
    if CALLS[target] == 1:
        _say(f"first generic-platform call of {target.rsplit('.', 1)[1]} -> {detail}")


def write_status() -> None:
    status_dir = os.environ.get("KDTREE_CPU_SHIMS_STATUS_DIR")
    if not status_dir:
        return
    out: dict = {"pid": os.getpid(), "shim_calls": {k.rsplit(".", 1)[1]: v for k, v in CALLS.items()}}
    kdtree = sys.modules.get("kdtree_verify")
    if kdtree is not None:
        try:
            out["kdtree_verify"] = kdtree.status()
        except Exception as exc:  # a diagnostic never breaks serving
            out["kdtree_verify_error"] = f"{type(exc).__name__}: {exc}"
    try:
        os.makedirs(status_dir, exist_ok=True)
        path = os.path.join(status_dir, f"{os.getpid()}.json")
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            json.dump(out, fh, sort_keys=True, default=str)
        os.replace(path + ".tmp", path)
    except OSError as exc:
        _say(f"cannot write the status file: {exc}")


def assign_extend_cache_locs_around(original, *args, **kwargs):
    if not generic_platform():
        return original(*args, **kwargs)
    import torch
    from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs
    from sglang.srt.utils import next_power_of_2

    a = bind(original, args, kwargs)
    count(CACHE_LOCS, "SGLang Triton assign_extend_cache_locs")
    bs, n = a["batch_size"], a["draft_token_num"]
    out_cache_loc = torch.empty((bs * n,), dtype=torch.int64, device=a["device"])
    # The same launch as the function's own CUDA/XPU branch.
    assign_extend_cache_locs[(bs,)](
        a["req_pool_indices"],
        a["req_to_token"],
        a["start_offset"],
        a["end_offset"],
        out_cache_loc,
        a["req_to_token"].shape[1],
        next_power_of_2(bs),
    )
    return out_cache_loc


def verify_tree_greedy_around(original, *args, **kwargs):
    if not generic_platform():
        return original(*args, **kwargs)
    # The Triton version beside the wrapped function, in the release's own module (spec_tree.py from
    # 0.5.23 on, eagle_utils.py before): its name, BESIDE[VERIFY_GREEDY].
    triton_fn = getattr(sys.modules[original.__module__], BESIDE[VERIFY_GREEDY][0])

    a = bind(original, args, kwargs)
    count(VERIFY_GREEDY, "SGLang Triton verify_tree_greedy_triton")
    # The same call as the function's own XPU branch (topk is not used there either).
    triton_fn(
        predicts=a["predicts"],
        accept_index=a["accept_index"],
        accept_token_num=a["accept_token_num"],
        candidates=a["candidates"],
        retrieve_index=a["retrieve_index"],
        retrieve_next_token=a["retrieve_next_token"],
        retrieve_next_sibling=a["retrieve_next_sibling"],
        target_predict=a["target_predict"],
    )
    write_status()
    return a["predicts"], a["accept_index"], a["accept_token_num"]


# Each hook's targets, the newest release's first, where a release moved the function (the same
# arguments in each); a hook without an entry has its own key as its one target.
MOVED = {VERIFY_GREEDY: (VERIFY_GREEDY, VERIFY_GREEDY_BEFORE_0_5_23)}
# What a hook calls from its target's own module (by name, so the move above carries it).
BESIDE = {VERIFY_GREEDY: ("verify_tree_greedy_triton",)}


def module_source(module: str) -> tuple[str, bool] | None:
    """An SGLang module's source and whether it is a package, found without importing the module (only
    its parent packages, which SGLang imports anyway); None when the release has no such module."""
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        return None
    if spec is None:
        return None
    package = spec.submodule_search_locations is not None
    if not (spec.origin or "").endswith(".py"):  # a namespace package (no __init__.py) or no source
        return ("", True) if package else None
    with open(spec.origin, encoding="utf-8") as fh:
        return fh.read(), package


@functools.lru_cache(maxsize=16)
def _parse(source: str) -> ast.Module:
    return ast.parse(source)


def _defines(source: str, path: list[str]) -> bool:
    node: ast.AST = _parse(source)
    for part in path:
        node = next(
            (
                c
                for c in getattr(node, "body", [])
                if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and c.name == part
            ),
            None,
        )
        if node is None:
            return False
    return True


Source = Callable[[str], "tuple[str, bool] | None"]


def resolve(target: str, source: Source = module_source) -> str | None:
    """`target` (`package.module.[Class.]function`) when this release defines it there, else None. The
    packages are walked down to the module, so no module is imported to find out."""
    parts = target.split(".")
    for cut in range(1, len(parts)):
        found = source(".".join(parts[:cut]))
        if found is None:
            return None
        text, package = found
        if not package:
            return target if _defines(text, parts[cut:]) else None
    return None


def targets(source: Source = module_source) -> tuple[dict[str, Callable], list[str]]:
    """The AROUND hooks for the running release (or the one whose modules `source` reads): {the dotted
    name the hook wraps: the hook}, and the hooks left out because the release has none of their
    targets (registering those would make SGLang log a traceback in every process)."""
    from kdtree_cpu_shims import drafts, tp

    hooks = {
        CACHE_LOCS: assign_extend_cache_locs_around,
        VERIFY_GREEDY: verify_tree_greedy_around,
        **drafts.HOOKS,
        **tp.HOOKS,
    }
    read = functools.cache(source)  # the hooks share modules and their parent packages
    found, missing = {}, []
    for key, hook in hooks.items():
        where = next(filter(None, (resolve(t, read) for t in MOVED.get(key, (key,)))), None)
        if where is None:
            missing.append(key)
        else:
            found[where] = hook
    return found, missing


def register() -> None:
    """The `sglang.srt.plugins` entry point: register the AROUND hooks (public API only): the two
    above (NGRAM and every tree verify) and the draft-model algorithms' (drafts.py), each on the
    target the running release has."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    hooks, missing = targets()
    for target, hook in hooks.items():
        HookRegistry.register(target, hook, HookType.AROUND)
    _say(f"registered AROUND hooks on {', '.join(t.rsplit('.', 1)[1] for t in hooks)}")
    if missing:
        _say(f"not in this SGLang release, no hook: {', '.join(t.rsplit('.', 1)[1] for t in missing)}")
