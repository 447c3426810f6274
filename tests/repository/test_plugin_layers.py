"""What travels to a host imports nothing that stays on the controller.

Ansible ships a module with the module_utils it imports (AnsiballZ); plugin_utils, filters and action
plugins run on the controller only. So module_utils and modules import neither, while plugin_utils and
filters may import module_utils.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import ROOT

PLUGINS = ROOT / "plugins"
HOST_SIDE = sorted([*(PLUGINS / "module_utils").rglob("*.py"), *(PLUGINS / "modules").glob("*.py")])
SMOKE_WING = re.compile(r"(\bmodule_utils\.|^\.+)_smoke(\.|$)")
# the smoke check's wing (module_utils/_smoke/) serves the kdtree_smoke module and its action only
SMOKE_USERS = {PLUGINS / "modules" / "kdtree_smoke.py", PLUGINS / "action" / "kdtree_smoke.py"}
CONTROLLER = re.compile(r"(\bplugins\.|^\.+)(plugin_utils|filter|action)(\.|$)")


def imported_modules(path: Path) -> list[str]:
    """Every module an `import` or `from ... import` of the file names (relative ones included)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names += [base, *(f"{base}.{alias.name}" for alias in node.names)]
    return names


def imports_matching(path: Path, pattern: re.Pattern[str]) -> list[str]:
    """The modules the file imports whose name `pattern` finds."""
    return [name for name in imported_modules(path) if pattern.search(name)]


def controller_imports(path: Path) -> list[str]:
    """The imported modules that are controller code: plugins.<plugin_utils|filter|action>..., or a
    relative import of a sibling package of those names."""
    return imports_matching(path, CONTROLLER)


@pytest.mark.parametrize("path", HOST_SIDE, ids=lambda p: str(p.relative_to(ROOT)))
def test_module_utils_and_modules_never_import_controller_code(path):
    assert controller_imports(path) == []


def test_the_controller_code_lives_in_plugin_utils():
    """The report's table and the promotion's rules are controller code (issue 18)."""
    assert (PLUGINS / "plugin_utils" / "_report_table.py").is_file()
    assert (PLUGINS / "plugin_utils" / "_promote.py").is_file()
    assert not (PLUGINS / "module_utils" / "_promote.py").exists()


def smoke_wing_imports(path: Path) -> list[str]:
    """The imported modules that are the smoke check's wing (module_utils._smoke...)."""
    return imports_matching(path, SMOKE_WING)


@pytest.mark.parametrize(
    "path",
    [
        p
        for p in sorted(PLUGINS.rglob("*.py"))
        if "_smoke" not in p.relative_to(PLUGINS).parts and p not in SMOKE_USERS
    ],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_nothing_outside_the_smoke_wing_imports_it_but_the_smoke_module_and_action(path):
    assert smoke_wing_imports(path) == []


@pytest.mark.parametrize(
    ("check", "source", "found"),
    [
        pytest.param(
            controller_imports,
            "from ansible_collections.kdtree.fleet.plugins.plugin_utils import _report_table\n"
            "import ansible_collections.kdtree.fleet.plugins.filter.report\n"
            "from ..plugin_utils import _promote\n"
            "from ansible_collections.kdtree.fleet.plugins.module_utils import _report\n",
            [
                "ansible_collections.kdtree.fleet.plugins.plugin_utils",
                "ansible_collections.kdtree.fleet.plugins.plugin_utils._report_table",
                "ansible_collections.kdtree.fleet.plugins.filter.report",
                "..plugin_utils",
                "..plugin_utils._promote",
            ],
            id="controller",
        ),
        pytest.param(
            smoke_wing_imports,
            "from ansible_collections.kdtree.fleet.plugins.module_utils._smoke import host as smoke_host\n"
            "from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.check import execute\n"
            "from ansible_collections.kdtree.fleet.plugins.module_utils import _smoke_like\n",
            [
                "ansible_collections.kdtree.fleet.plugins.module_utils._smoke",
                "ansible_collections.kdtree.fleet.plugins.module_utils._smoke.host",
                "ansible_collections.kdtree.fleet.plugins.module_utils._smoke.check",
                "ansible_collections.kdtree.fleet.plugins.module_utils._smoke.check.execute",
            ],
            id="smoke-wing",
        ),
    ],
)
def test_each_check_sees_the_imports_it_is_there_to_catch_and_no_other(tmp_path, check, source, found):
    bad = tmp_path / "x.py"
    bad.write_text(source)
    assert check(bad) == found
