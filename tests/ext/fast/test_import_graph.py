"""The kdtree_verify package: no import cycle between its modules (imports inside functions count),
and no module uses another module's private names or HookRegistry's private attributes."""

from __future__ import annotations

import ast
from pathlib import Path

from extlib import EXT_DIR

PACKAGE = "kdtree_verify"


def module_names(package_dir: Path) -> dict[str, Path]:
    """{dotted module name: file} for every module of the package and of its subpackages."""
    names: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = [package_dir.name, *path.relative_to(package_dir).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _resolve(node: ast.ImportFrom, current: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = current.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules `name` imports anywhere in its body (functions and branches included)."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, name, path.name == "__init__.py")
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:  # `from pkg import module`
                    found.add(f"{base}.{alias.name}")
                elif base in modules:  # `from pkg.module import name` or `from pkg import name`
                    found.add(base)
    found.discard(name)
    return found


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    modules = module_names(package_dir)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per back edge of a depth-first search, each as [a, b, ..., a]."""
    cycles: list[list[str]] = []
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_the_kdtree_verify_package_has_no_import_cycle():
    graph = import_graph(EXT_DIR / PACKAGE)
    # the parse sees the modules of the subpackages and their imports
    assert graph[f"{PACKAGE}.inject.plugin"] >= {f"{PACKAGE}.inject.lifecycle", f"{PACKAGE}.dispatch"}, graph
    assert f"{PACKAGE}.kernel.binding" in graph[f"{PACKAGE}.inject.lifecycle"], graph
    cycles = find_cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in cycles)


def test_the_cycle_check_names_a_loop_made_by_an_import_inside_a_function(tmp_path):
    pkg = tmp_path / "loopy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from loopy import b\n")
    (pkg / "b.py").write_text("def later():\n    from loopy.c import thing\n")
    (pkg / "c.py").write_text("import loopy.a\nthing = 1\n")
    (pkg / "d.py").write_text("from . import a\n")
    (pkg / "sub").mkdir()
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "e.py").write_text("from loopy.sub import f as g\n")
    (pkg / "sub" / "f.py").write_text("def later():\n    from ..sub.e import x\n")
    graph = import_graph(pkg)
    assert graph["loopy.d"] == {"loopy.a"}
    assert graph["loopy.sub.e"] == {"loopy.sub.f"} and graph["loopy.sub.f"] == {"loopy.sub.e"}
    assert find_cycles(graph) == [
        ["loopy.a", "loopy.b", "loopy.c", "loopy.a"],
        ["loopy.sub.e", "loopy.sub.f", "loopy.sub.e"],
    ]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(path: Path, modules: dict[str, Path]) -> list[str]:
    """`from pkg.mod import _x`, `mod._x` on a package module, and `HookRegistry._x`, with line numbers."""
    tree = ast.parse(path.read_text(), filename=str(path))
    module_aliases = {"HookRegistry"}
    problems: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == PACKAGE:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in modules:
                    module_aliases.add(alias.asname or alias.name)
                elif _private(alias.name):
                    problems.append(f"{path.name}:{node.lineno} imports {node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            module_aliases.update(a.asname for a in node.names if a.asname and a.name in modules)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in module_aliases
            and _private(node.attr)
        ):
            problems.append(f"{path.name}:{node.lineno} uses {node.value.id}.{node.attr}")
    return problems


def test_no_module_uses_private_names_of_another_module_or_of_hook_registry():
    modules = module_names(EXT_DIR / PACKAGE)
    problems = [p for path in modules.values() for p in private_uses(path, modules)]
    assert not problems, problems
