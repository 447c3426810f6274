"""Every role's public interface is declared once and consistently."""

from __future__ import annotations

import re

import pytest
import yaml
from conftest import ROLE_NAMES, ROLES, ROOT, load_yaml


def test_every_role_is_found():
    assert ROLE_NAMES == [
        "kdtree_build",
        "kdtree_common",
        "kdtree_deploy",
        "kdtree_drain",
        "kdtree_patch",
        "kdtree_promote",
        "kdtree_report",
        "kdtree_rollback",
        "kdtree_service",
        "kdtree_smoke",
    ]


def _main_options(role: str) -> dict:
    return load_yaml(ROLES / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]


def _private_options(role: str, with_default_only: bool = False) -> dict:
    """The underscored options of a role's other entry points (a private entry point's hand-over from
    another role of this collection, prometheus-community's `_common` style): never in `main`. One without a
    default (a fact the calling role derived, required or derived by the role itself) is not in defaults."""
    specs = load_yaml(ROLES / role / "meta" / "argument_specs.yml")["argument_specs"]
    return {
        name: spec
        for entry, body in specs.items()
        if entry != "main"
        for name, spec in (body.get("options") or {}).items()
        if name.startswith("_") and not (with_default_only and "default" not in spec)
    }


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_argument_specs_list_the_defaults_plus_the_required_inputs(role):
    defaults = load_yaml(ROLES / role / "defaults" / "main.yml")
    options = _main_options(role)
    optional = sorted(name for name, spec in options.items() if not spec.get("required"))
    assert sorted(defaults) == sorted([*optional, *_private_options(role, with_default_only=True)])


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_main_publishes_no_private_option(role):
    assert [name for name in _main_options(role) if name.startswith("_")] == []


def test_the_rollback_role_publishes_only_what_a_user_sets():
    """The rescue's hand-over lives on the private `restore` entry point, underscored."""
    assert sorted(_main_options("kdtree_rollback")) == [
        "kdtree_rollback_defer_failures",
        "kdtree_rollback_fail_on_unhealthy",
        "kdtree_rollback_group_timeout_s",
        "kdtree_rollback_lock_break",
        "kdtree_rollback_to",
    ]
    assert sorted(_private_options("kdtree_rollback")) == [
        "_kdtree_rollback_agree",
        "_kdtree_rollback_failed_dropin_digest",
        "_kdtree_rollback_force_restart",
        "_kdtree_rollback_kill",
        "_kdtree_rollback_restarted",
        "_kdtree_rollback_restarted_dropin",
        "_kdtree_rollback_unit_untouched",
    ]


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_required_inputs_have_no_default(role):
    for name, spec in _main_options(role).items():
        if spec.get("required"):
            assert "default" not in spec, name


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_argument_spec_defaults_equal_the_defaults(role):
    defaults = load_yaml(ROLES / role / "defaults" / "main.yml")
    options = {**_main_options(role), **_private_options(role)}
    for name, value in defaults.items():
        assert options[name].get("default") == value, name


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_defaults_files_hold_values_not_documentation(role):
    """Each variable is documented once: in meta/argument_specs.yml, next to its default."""
    text = (ROLES / role / "defaults" / "main.yml").read_text(encoding="utf-8")
    comments = [line for line in text.splitlines() if line.lstrip().startswith("#")]
    assert len(comments) <= 3, comments


def test_service_facts_entry_point_documents_the_same_options_as_main():
    specs = load_yaml(ROLES / "kdtree_service" / "meta" / "argument_specs.yml")["argument_specs"]
    main = specs["main"]["options"]
    for name, spec in specs["facts"]["options"].items():
        assert spec == main[name], name


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_argument_specs_describe_every_option(role):
    options = load_yaml(ROLES / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    for name, spec in options.items():
        assert spec.get("description"), name
        assert spec.get("type"), name


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_role_variables_carry_the_role_prefix(role):
    defaults = load_yaml(ROLES / role / "defaults" / "main.yml")
    assert all(name.startswith((f"{role}_", f"_{role}_")) for name in defaults), sorted(defaults)


def _all_role_variables() -> set[str]:
    names: set[str] = set()
    for role in ROLE_NAMES:
        names |= {
            name for name in load_yaml(ROLES / role / "defaults" / "main.yml") if not name.startswith("_")
        }
    return names


GROUP_VARS = sorted((ROOT / "inventory").glob("*/group_vars/*.yml"))


@pytest.mark.parametrize("path", GROUP_VARS, ids=lambda p: str(p.relative_to(ROOT)))
def test_inventory_sets_only_variables_a_role_knows(path):
    known = _all_role_variables()
    unknown = [k for k in load_yaml(path) if k.startswith("kdtree_") and k not in known]
    assert unknown == []


@pytest.mark.parametrize("path", GROUP_VARS, ids=lambda p: str(p.relative_to(ROOT)))
def test_inventories_do_not_restate_role_defaults(path):
    defaults: dict = {}
    for role in ROLE_NAMES:
        defaults.update(load_yaml(ROLES / role / "defaults" / "main.yml"))
    same = [k for k, v in load_yaml(path).items() if k in defaults and defaults[k] == v]
    # the production example names its mode on purpose (docs/operations.md, "Modes")
    assert [k for k in same if k != "kdtree_service_verify_mode"] == []


def test_local_flavour_group_vars_do_not_repeat_the_common_ones():
    """A flavour group and gpu-hosts are siblings of the same depth for a host (molecule's platform
    groups); a key in both would be decided by the groups' names. The flavours set disjoint keys."""
    group_vars = ROOT / "inventory" / "local" / "group_vars"
    common = set(load_yaml(group_vars / "gpu-hosts.yml"))
    for path in sorted(group_vars.glob("*.yml")):
        if path.name != "gpu-hosts.yml":
            assert common & set(load_yaml(path)) == set(), path.name


def test_production_example_starts_in_validate():
    group_vars = load_yaml(ROOT / "inventory" / "production" / "group_vars" / "gpu-hosts.yml")
    assert group_vars["kdtree_service_verify_mode"] == "validate"


def test_playbooks_call_roles_and_modules_by_fully_qualified_name():
    bare = re.compile(r"^\s*(?:-\s+)?(?:name|role):\s+(kdtree_[a-z_]+)\s*$", re.M)
    for path in [*(ROOT / "playbooks").glob("*.yml"), *ROLES.glob("*/tasks/*.yml")]:
        assert bare.findall(path.read_text(encoding="utf-8")) == [], path


def test_production_nccl_defaults_are_the_documented_pcie_blackwell_set():
    group_vars = load_yaml(ROOT / "inventory" / "production" / "group_vars" / "gpu-hosts.yml")
    # the operator's unit owns the command line (model, --tp-size 8, EAGLE3): no ExecStart opt-in here
    opt_in = ("kdtree_service_replace_exec_start", "kdtree_service_model_path")
    assert not any(k in group_vars for k in opt_in)
    assert group_vars["kdtree_service_nccl_env"]["NCCL_P2P_LEVEL"] == "SYS"
    assert group_vars["kdtree_service_nccl_env"]["NCCL_ALGO"] == "Ring"
    doc = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    for key in group_vars["kdtree_service_nccl_env"]:
        assert key in doc, f"{key} is not explained in docs/operations.md"


def test_production_turns_the_stall_timeout_on_where_it_sets_nccl_p2p():
    """NCCL P2P over PCIe can hang without a traceback: the stall timeout fails it before the overall one."""
    group_vars = load_yaml(ROOT / "inventory" / "production" / "group_vars" / "gpu-hosts.yml")
    smoke = load_yaml(ROLES / "kdtree_smoke" / "defaults" / "main.yml")
    assert "NCCL_P2P_LEVEL" in group_vars["kdtree_service_nccl_env"]
    overall = group_vars.get("kdtree_smoke_timeout_s", smoke["kdtree_smoke_timeout_s"])
    assert 0 < group_vars["kdtree_smoke_stall_timeout_s"] < overall


def _unsafe_regex(path: str) -> re.Pattern[str]:
    text = (ROOT / path).read_text(encoding="utf-8")
    match = re.search(r"select\('match', '(\^\(.*?\) )'\)", text)
    assert match, path
    return re.compile(match.group(1))


def _handler_task_files(role: str) -> list[str]:
    path = ROLES / role / "handlers" / "main.yml"
    return [
        t["ansible.builtin.include_tasks"]
        for t in load_yaml(path) or []
        if "ansible.builtin.include_tasks" in t
    ]


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_task_files_that_handlers_include_import_no_role(role):
    """A handler cannot import a role (ansible refuses it when the handler runs, not at parse time)."""
    for name in _handler_task_files(role) if (ROLES / role / "handlers" / "main.yml").exists() else []:
        for task in load_yaml(ROLES / role / "tasks" / name):
            assert "ansible.builtin.import_role" not in task, (role, name, task.get("name"))


def test_the_directory_safety_check_and_the_pruning_are_written_once():
    """kdtree_common's safe_dirs and prune entry points; the build and patch roles call them."""
    loops = sorted(
        str(p.relative_to(ROOT)) for p in ROLES.rglob("*.yml") if '[ "$p" = / ] && break' in p.read_text()
    )
    assert loops == ["roles/kdtree_common/tasks/safe_dirs.yml"]
    prunes = sorted(
        str(p.relative_to(ROOT)) for p in ROLES.rglob("*.yml") if "sort(attribute='mtime'" in p.read_text()
    )
    assert prunes == ["roles/kdtree_common/tasks/prune.yml"]
    for role, entry, called in [
        ("kdtree_build", "check.yml", "safe_dirs"),
        ("kdtree_patch", "check.yml", "safe_dirs"),
        ("kdtree_build", "apply.yml", "prune"),
        ("kdtree_patch", "prune.yml", "prune"),
    ]:
        tasks = load_yaml(ROLES / role / "tasks" / entry)
        calls = [
            t.get("ansible.builtin.import_role") or t.get("ansible.builtin.include_role") or {} for t in tasks
        ]
        calls = [(c.get("name"), c.get("tasks_from")) for c in calls]
        assert ("kdtree.fleet.kdtree_common", called) in calls, (role, entry)


@pytest.mark.parametrize("path", ["roles/kdtree_common/tasks/safe_dirs.yml"])
@pytest.mark.parametrize(
    ("line", "unsafe"),
    [
        ("755 0 /opt", False),
        ("750 0 /opt/kdtree", False),
        ("700 0 /var/lib/kdtree", False),
        ("775 0 /opt", True),
        ("757 0 /opt", True),
        ("1777 0 /tmp", True),
        ("722 0 /opt", True),
        ("755 1000 /opt", True),
    ],
)
def test_directory_safety_check_flags_group_or_world_writable_or_foreign_owned(path, line, unsafe):
    assert bool(_unsafe_regex(path).match(line)) is unsafe


HOST_COMMANDS = {"ansible.builtin.shell", "ansible.builtin.command", "ansible.builtin.systemd_service"}


def _tasks_without_timeout(tasks) -> list[str]:
    missing = []
    for task in tasks or []:
        for key in ("block", "rescue", "always"):
            missing += _tasks_without_timeout(task.get(key))
        if HOST_COMMANDS & set(task) and "timeout" not in task:
            missing.append(task.get("name", "?"))
    return missing


def test_every_host_command_of_the_roles_and_playbooks_has_a_timeout():
    missing = []
    for path in [*ROLES.glob("*/tasks/*.yml"), *ROLES.glob("*/handlers/*.yml")]:
        missing += [f"{path.relative_to(ROOT)}: {name}" for name in _tasks_without_timeout(load_yaml(path))]
    for path in (ROOT / "playbooks").glob("*.yml"):
        for play in load_yaml(path):
            missing += [f"{path.relative_to(ROOT)}: {n}" for n in _tasks_without_timeout(play.get("tasks"))]
    assert missing == []


@pytest.mark.parametrize("module", sorted(p.name for p in (ROOT / "plugins" / "modules").glob("*.py")))
def test_every_module_documents_itself_in_yaml_ansible_doc_can_read(module):
    import ast

    tree = ast.parse((ROOT / "plugins" / "modules" / module).read_text(encoding="utf-8"))
    docs = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name) and target.id in ("DOCUMENTATION", "EXAMPLES", "RETURN")
    }
    assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}
    parsed = {name: yaml.safe_load(text) for name, text in docs.items()}
    assert parsed["DOCUMENTATION"]["module"] == module.removesuffix(".py")
    # check_mode, diff_mode and platform: the shared fragment (tests/roles/test_module_docs.py checks
    # the rendered attributes)
    assert "kdtree.fleet.attributes" in parsed["DOCUMENTATION"]["extends_documentation_fragment"]


CONDITION_KEYS = ("that", "when", "failed_when", "changed_when", "until")


def _non_string_conditions(node, where: str) -> list[str]:
    """Conditions YAML parsed as something else (an unquoted `a: b` in a condition becomes a mapping)."""
    bad: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in CONDITION_KEYS:
                values = value if isinstance(value, list) else [value]
                bad += [f"{where}: {key}: {v!r}" for v in values if not isinstance(v, (str, bool))]
            bad += _non_string_conditions(value, where)
    elif isinstance(node, list):
        for item in node:
            bad += _non_string_conditions(item, where)
    return bad


def test_every_condition_in_roles_playbooks_and_molecule_is_a_string():
    files = [
        *ROLES.glob("*/tasks/*.yml"),
        *(ROOT / "playbooks").glob("*.yml"),
        *(ROOT / "molecule").rglob("*.yml"),
    ]
    bad = [b for path in files for b in _non_string_conditions(load_yaml(path), str(path.relative_to(ROOT)))]
    assert bad == []
