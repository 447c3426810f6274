"""The real engine's CPU shims (tests/engine/cpu_shims) and the smoke check's known-benign tracebacks
(module_utils/_journal.py DEFAULT_BENIGN_TRACEBACKS) against every release of the window, each read
from its own published wheel (.cache/sglang-wheels/whl, scripts/sglang-wheels.sh).

Both were written for the window's newest release, the one the engine scenario runs: there every
`file.py:line` the shims name must hold the line it names, every function a shim hooks or calls must
exist with the parameters the shim reads, and every benign pattern must match a message its file logs.
For the older releases, DIFFERS says what does not hold, one entry per shim or pattern, and why; a
release that differs otherwise (or no longer differs where DIFFERS says so) fails here.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import re
import sys
import textwrap
import zipfile
from functools import cache
from pathlib import Path

import pytest
from kdtree_verify import target

ROOT = Path(__file__).resolve().parents[3]
CACHE = Path(os.environ.get("KDTREE_SGLANG_WHEELS", ROOT / ".cache" / "sglang-wheels"))
SHIMS = ROOT / "tests" / "engine" / "cpu_shims"
JOURNAL = ROOT / "plugins" / "module_utils" / "_journal.py"
RELEASES = list(target.SGLANG_RELEASES)
NEWEST = RELEASES[-1]
# A file SGLang's wheel holds (under sglang/), as the shims and the benign list name it, with a line
# (`file.py:123`); a bare `:123` later in the same text is a line of the file named last.
SGLANG_PATH = re.compile(r"\b((?:srt|kernels)/[\w/]+\.py)(?::(\d+))?")
LINE_REF = re.compile(r"\b((?:srt|kernels)/[\w/]+\.py)(?::(\d+))?|(?<![\w/.:]):(\d+)\b")

# Every `file.py:line` the shims name, and the line (stripped, its start) it names in the newest release.
LINES = {
    "kernels/ops/speculative/spec_tree.py:431": "sgl_build_tree_kernel_efficient(",
    "kernels/ops/speculative/spec_tree.py:396": "elif _is_xpu:",
    "srt/models/deepseek_v2.py:3442": "def set_embed_and_head(self, embed, head):",
    "srt/speculative/eagle_worker_v2.py:378": "self.draft_runner.model.set_embed_and_head(embed, head)",
    "srt/arg_groups/speculative_hook.py:287": "def _handle_dflash(server_args: ServerArgs) -> None:",
    "srt/arg_groups/speculative_hook.py:299": 'f"{algorithm} speculative decoding is not supported by "',
    "srt/speculative/dflash_worker_v2.py:2481": "batch.seq_lens.record_stream(",
    "srt/model_executor/model_runner.py:1764": "def _extend_forward_kwargs(",
    "srt/model_executor/model_runner.py:1772": (
        'kwargs["input_embeds"] = forward_batch.input_embeds.bfloat16()'
    ),
}

# What a hook's comment says the function it hooks does (the premise the hook stands on): a line of
# that function's source, stripped, in every release where the hook applies.
ASSUMES = {
    # drafts.py HANDLE_DFLASH: the device is read through resolving_view(), where the hook's declaration wins
    "sglang.srt.arg_groups.speculative_hook._handle_dflash": ("cfg = resolving_view(server_args)",),
    # drafts.py SET_EMBED_AND_HEAD: the two CUDA calls the hook makes no-ops
    "sglang.srt.models.deepseek_v2.DeepseekV2ForCausalLM.set_embed_and_head": (
        "torch.cuda.empty_cache()",
        "torch.cuda.synchronize()",
    ),
}

_SPEC_TREE_MOVED = (
    "before 0.5.23 the tree helpers live in srt/speculative/eagle_utils.py (with a sgl-kernel CPU branch, "
    "is_cpu): there build_tree_kernel_efficient_func is build_tree_kernel_efficient with other arguments, "
    "so the EAGLE3/NEXTN tree-building shim does not apply (verify_tree_greedy_func has the same "
    "arguments there: the shims wrap it in its old place, NGRAM's verify runs)"
)
_NO_RECONSTRUCT = (
    "no kernels/ops/speculative/reconstruct_tree.py before 0.5.21: ngram_worker.py imports "
    "sgl_kernel.speculative.reconstruct_indices_from_tree_mask and SGLang ships no Triton version of it "
    "to forward to, so the sgl_kernel.speculative shim computes the op's contract in torch itself "
    "(reconstruct_indices_torch; tests/ext/sglang/test_cpu_shims.py checks it against the release's "
    "own _derive_tree_links)"
)
_DFLASH_MESSAGE = (
    "_handle_dflash words its device refusal otherwise before 0.5.21: the shim's hook target is "
    "there, the line it names is not"
)
_DFLASH_DEVICE = (
    "0.5.18's _handle_dflash reads server_args.device itself, not through resolving_view(): the shim's "
    "declared device would not reach it (DFLASH on the generic CPU platform would be refused)"
)
_NO_LOAD_PUBLISHER = (
    "no load_publisher.py in 0.5.18 (the load publisher came in 0.5.19): the pattern matches nothing, "
    "harmless"
)
_SPEC_TREE_ITEMS = {
    "hook sglang.kernels.ops.speculative.spec_tree.build_tree_kernel_efficient_func": _SPEC_TREE_MOVED,
    "calls sglang.kernels.ops.speculative.spec_tree.sgl_build_tree_kernel_triton": _SPEC_TREE_MOVED,
    "line kernels/ops/speculative/spec_tree.py:431": _SPEC_TREE_MOVED,
    "line kernels/ops/speculative/spec_tree.py:396": _SPEC_TREE_MOVED,
}
_OLD_ITEMS = {
    **_SPEC_TREE_ITEMS,
    "calls sglang.kernels.ops.speculative.reconstruct_tree.reconstruct_indices_from_tree_mask_triton": (
        _NO_RECONSTRUCT
    ),
    "file kernels/ops/speculative/reconstruct_tree.py": _NO_RECONSTRUCT,
    "line srt/arg_groups/speculative_hook.py:299": _DFLASH_MESSAGE,
}
# What does not hold, per release older than the newest (the newest: nothing).
DIFFERS: dict[str, dict[str, str]] = {
    "0.5.18": {
        **_OLD_ITEMS,
        "benign srt/managers/scheduler_components/load_publisher.py": _NO_LOAD_PUBLISHER,
        "hook sglang.srt.arg_groups.speculative_hook._handle_dflash premise": _DFLASH_DEVICE,
    },
    "0.5.19": _OLD_ITEMS,
    "0.5.20": _OLD_ITEMS,
    "0.5.21": _SPEC_TREE_ITEMS,
    "0.5.22": _SPEC_TREE_ITEMS,
}


def wheel(version: str) -> zipfile.ZipFile:
    found = sorted(CACHE.glob(f"whl/sglang-{version}-*.whl"))
    if not found:
        (pytest.fail if os.environ.get("KDTREE_REQUIRE_SGLANG_WHEELS") else pytest.skip)(
            f"no wheel of sglang {version} under {CACHE}/whl: `make sglang-wheels` fetches the window's"
        )
    return _open(found[0])


@cache
def _open(path: Path) -> zipfile.ZipFile:
    return zipfile.ZipFile(path)


@cache
def _source(version: str, name: str) -> str | None:
    """A file of the release's wheel by its path under sglang/ (None when the release has none)."""
    try:
        return wheel(version).read(f"sglang/{name}").decode()
    except KeyError:
        return None


def _module_file(version: str, dotted: str) -> tuple[str | None, list[str]]:
    """The wheel file of the longest module prefix of `dotted` (sglang.a.b.C.f), and the rest."""
    parts = dotted.split(".")[1:]
    for cut in range(len(parts), 0, -1):
        base = "/".join(parts[:cut])
        for name in (f"{base}.py", f"{base}/__init__.py"):
            if _source(version, name) is not None:
                return name, parts[cut:]
    return None, parts


@cache
def _tree(version: str, name: str) -> ast.Module:
    return ast.parse(_source(version, name))


def _definition(version: str, dotted: str) -> ast.AST | None:
    """The def, class or top-level name `dotted` resolves to in the release's source, or None (a
    package's `from X import *` followed)."""
    name, rest = _module_file(version, dotted)
    if name is None or not rest:
        return None
    node: ast.AST = _tree(version, name)
    for depth, part in enumerate(rest):
        found = None
        for child in getattr(node, "body", []):
            if (
                isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and child.name == part
            ):
                found = child
            elif isinstance(child, (ast.Assign, ast.AnnAssign)) and part in {
                t.id
                for t in (child.targets if isinstance(child, ast.Assign) else [child.target])
                if isinstance(t, ast.Name)
            }:
                found = child
            elif isinstance(child, (ast.Import, ast.ImportFrom)) and part in {
                (a.asname or a.name) for a in child.names
            }:
                found = child
        if found is None and depth == 0:  # a module's star imports (sglang.srt.utils: utils.common)
            for child in node.body:
                if isinstance(child, ast.ImportFrom) and [a.name for a in child.names] == ["*"]:
                    found = _definition(version, ".".join([child.module, *rest]))
                    if found is not None:
                        return found
        if found is None:
            return None
        node = found
    return node


def _shim_files() -> list[Path]:
    return sorted(SHIMS.rglob("*.py"))


@cache
def _shims():
    """kdtree_cpu_shims loaded by path (this process must not see the shims' sgl_kernel or vllm)."""
    package = SHIMS / "kdtree_cpu_shims"
    spec = importlib.util.spec_from_file_location(
        "kdtree_cpu_shims", package / "__init__.py", submodule_search_locations=[str(package)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["kdtree_cpu_shims"] = module
    spec.loader.exec_module(module)
    return module


def _module_reader(version: str):
    """kdtree_cpu_shims.module_source for the release's wheel: (source, is a package) or None."""
    names = wheel(version).namelist()
    dirs = {n.rsplit("/", 1)[0] for n in names}

    def read(module: str):
        base = "/".join(["sglang", *module.split(".")[1:]])
        under = base.removeprefix("sglang").lstrip("/")
        if base + ".py" in names:
            return _source(version, f"{under}.py"), False
        if base + "/__init__.py" in names:
            return _source(version, f"{under}/__init__.py" if under else "__init__.py"), True
        if any(d == base or d.startswith(base + "/") for d in dirs):
            return "", True
        return None

    return read


def _module_of(version: str, dotted: str) -> str:
    """The dotted module that defines `dotted` in the release (sglang.a.b for sglang.a.b.C.f)."""
    name, _rest = _module_file(version, dotted)
    return "sglang." + name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _reads(hook) -> set[str]:
    """The arguments a hook reads by name (`a["..."]`)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(hook)))
    return {
        s.slice.value
        for s in ast.walk(tree)
        if isinstance(s, ast.Subscript)
        and isinstance(s.value, ast.Name)
        and s.value.id == "a"
        and isinstance(s.slice, ast.Constant)
    }


def _hooks(version: str) -> tuple[dict[str, tuple[str, set[str]]], list[str]]:
    """What the shims register on the release (kdtree_cpu_shims.targets() over its wheel): {the
    hook's own key: (the target it wraps there, the arguments it reads)}, and the keys left out."""
    shims = _shims()
    found, missing = shims.targets(_module_reader(version))
    keys = {where: key for key, places in shims.MOVED.items() for where in places}
    return {keys.get(t, t): (t, _reads(hook)) for t, hook in found.items()}, missing


def _calls() -> set[str]:
    """Each SGLang name a shim imports to call instead (`from sglang.X import Y`)."""
    return {
        f"{n.module}.{a.name}"
        for path in _shim_files()
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("sglang.")
        for a in n.names
    }


def _named_files() -> set[str]:
    """Every SGLang file the shims' texts name."""
    return {m.group(1) for path in _shim_files() for m in SGLANG_PATH.finditer(path.read_text())}


def _named_lines() -> set[str]:
    """Every `file.py:line` the shims' texts name (a bare `:line`: of the file named before it)."""
    found = set()
    for path in _shim_files():
        last = None
        for m in LINE_REF.finditer(path.read_text()):
            last = m.group(1) or last
            line = m.group(2) or m.group(3)
            if line and last:
                found.add(f"{last}:{line}")
    return found


def _benign() -> list[tuple[str, str]]:
    """(the file the comment above it names, the pattern) for every default benign traceback."""
    lines = JOURNAL.read_text().split("DEFAULT_BENIGN_TRACEBACKS = (", 1)[1].split("\n)", 1)[0].splitlines()
    out, named = [], None
    for line in (s.strip() for s in lines):
        if line.startswith("#") and SGLANG_PATH.search(line):
            named = SGLANG_PATH.search(line).group(1)
        elif line.startswith('r"'):
            out.append((named, ast.literal_eval(line.rstrip(","))))
            named = None
    return out


def _strings(source: str) -> list[str]:
    """The string constants of a source file (f-strings by their literal parts)."""
    return [
        n.value
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def problems(version: str) -> set[str]:
    """What of the shims and the benign list does not hold in `version`."""
    out = set()
    hooks, missing = _hooks(version)
    out |= {f"hook {key}" for key in missing}
    for key, (dotted, reads) in hooks.items():
        node = _definition(version, dotted)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(f"hook {dotted}")
            continue
        for name in _shims().BESIDE.get(key, ()):
            if _definition(version, f"{_module_of(version, dotted)}.{name}") is None:
                out.add(f"hook {key} beside {name}")
        params = {a.arg for a in node.args.args + node.args.kwonlyargs}
        if reads - params:
            out.add(f"hook {dotted} arguments {sorted(reads - params)}")
        body = {line.strip() for line in ast.unparse(node).splitlines()}
        if not set(ASSUMES.get(key, ())) <= body:
            out.add(f"hook {key} premise")
    for dotted in _calls():
        if _definition(version, dotted) is None:
            out.add(f"calls {dotted}")
    for name in _named_files():
        if _source(version, name) is None:
            out.add(f"file {name}")
    for ref in _named_lines():
        name, line = ref.split(":")
        source = _source(version, name)
        lines = [s.strip() for s in (source or "").splitlines()]
        at = [i + 1 for i, s in enumerate(lines) if s.startswith(LINES[ref])]
        if (version == NEWEST and int(line) not in at) or not at:
            out.add(f"line {ref}")
    for name, pattern in _benign():
        source = _source(version, name)
        if source is None or not any(re.search(pattern, s) for s in _strings(source)):
            out.add(f"benign {name}")
    return out


def test_every_line_the_shims_name_is_listed_here():
    assert _named_lines() == set(LINES)


def test_the_benign_list_names_a_file_for_every_pattern():
    found = _benign()
    assert len(found) == 4 and all(name for name, _ in found), found


def test_differs_covers_the_window_and_nothing_else():
    assert set(DIFFERS) == set(RELEASES[:-1])


def test_every_premise_is_of_a_function_a_shim_hooks():
    assert set(ASSUMES) <= set(_hooks(NEWEST)[0])


@pytest.mark.parametrize("version", RELEASES)
def test_ngrams_two_hooks_apply_on_every_release(version):
    """NGRAM's verify on the generic platform needs both (the engine runs the window's oldest and
    newest releases): a release where one is left out is not served by the engine scenarios."""
    shims = _shims()
    hooks, _ = _hooks(version)
    assert {shims.CACHE_LOCS, shims.VERIFY_GREEDY} <= set(hooks)


@pytest.mark.parametrize("version", RELEASES)
def test_the_shims_and_benign_tracebacks_hold_or_differ_as_declared(version):
    declared = DIFFERS.get(version, {})
    found = problems(version)
    assert found == set(declared), (
        f"sglang {version}: not declared {sorted(found - set(declared))}; "
        f"declared but holds {sorted(set(declared) - found)}"
    )
