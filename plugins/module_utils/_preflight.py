"""Preflight of an SGLang unit before kdtree touches it (stdlib only; no Ansible imports).

execute(params) is the kdtree_preflight module's whole work; the module only wraps it.

Reads the unit as systemd merges it (the unit file and every drop-in `systemctl show` lists, in
order; `systemctl show` for the effective stdout/stderr) and answers, check by check, whether the
kdtree drop-in would work there. Each failed check names the file and line to change and how.

Checks (names are stable; kdtree_service_preflight_skip takes them):
    command      ExecStart runs python (directly or through a python shebang) with SGLang's launcher
    interpreter  that python honours PYTHONPATH: no -I, -E or -S
    backend      --attention-backend is the one the patch serves (or absent where it is the default)
    stderr       stderr reaches the journal (the smoke check reads the markers there)
    overrides    no later drop-in, EnvironmentFile= or UnsetEnvironment= overrides a variable kdtree sets
    sglang       the venv's SGLang version is one the patch supports (read from its dist-info METADATA:
                 the deploy runs as root and never runs the unit's Python to ask)
    probe        `python -m kdtree_verify.probe` as systemd would start the unit (systemd-run with its
                 User=, Group=, WorkingDirectory= and merged environment): a spawned child is patched.
                 A unit without User= runs as root, and so would the probe: then the interpreter, the
                 venv, its .pth files, the working directory and every PYTHONPATH entry must be owned
                 by root and writable by nobody else, or the probe refuses naming the path.
    gpu          the node's GPUs, read with nvidia-smi, would not fail a restart (module_utils/_gpu_health.py:
                 enough GPUs for this node's share of the schedulers, no uncorrectable ECC error, no memory
                 repair pending, persistence mode on, enough memory free once the unit stops); a node
                 nvidia-smi cannot read is refused too
"""

from __future__ import annotations

import glob
import json
import os
import stat
import subprocess
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.kdtree.fleet.plugins.module_utils import _gpu_health as gpu_health
from ansible_collections.kdtree.fleet.plugins.module_utils import _patch_files as patch_files
from ansible_collections.kdtree.fleet.plugins.module_utils import _path_safety as path_safety
from ansible_collections.kdtree.fleet.plugins.module_utils import _venv as venv
from ansible_collections.kdtree.fleet.plugins.module_utils._modes import marker_state
from ansible_collections.kdtree.fleet.plugins.module_utils._small_file import read_head, read_small_text
from ansible_collections.kdtree.fleet.plugins.module_utils._unit_env import (
    Setting,
    UnitEnvironment,
    UnitSyntaxError,
    UnknownSpecifier,
    apply_settings,
    expand_exec_words,
    resolve_specifiers,
    service_settings,
    specifier_context,
    split_words,
    systemctl_show,
)
from ansible_collections.kdtree.fleet.plugins.module_utils._unit_procs import cgroup_pids

CHECKS = ("command", "interpreter", "backend", "stderr", "overrides", "sglang", "probe", "gpu")
# stdout/stderr destinations that end in the journal
JOURNAL_OUTPUTS = ("journal", "journal+console", "kmsg", "kmsg+console")
# systemd's ExecStart prefixes (systemd.service "Table 1")
EXEC_PREFIXES = "-@:+!|"
LAUNCHERS = ("sglang.launch_server",)
# what the preflight asks systemd about the unit (systemd's own answer wins over re-reading files)
SHOW_PROPS = (
    "FragmentPath",
    "DropInPaths",
    "StandardOutput",
    "StandardError",
    "WorkingDirectory",
    "User",
    "Group",
    "DynamicUser",
    "NeedDaemonReload",
    "EnvironmentFiles",
    "ControlGroup",
)
SYSTEMD_RUN = "systemd-run"
# env(1) options that clear the environment, and those that take an argument
ENV_CLEARS = ("-i", "--ignore-environment", "-")
ENV_ARG_OPTIONS = ("-u", "--unset", "-C", "--chdir", "-S", "--split-string")


@dataclass
class Check:
    name: str
    ok: bool
    message: str
    where: str = ""

    def line(self) -> str:
        where = f" {self.where}:" if self.where else ""
        return f"[{self.name}]{where} {self.message}"


@dataclass
class Unit:
    """The unit as its files and systemd say it is (without kdtree's drop-in)."""

    name: str
    fragment: str
    dropins: list[str]
    settings: list[Setting] = field(default_factory=list)
    show: dict[str, str] = field(default_factory=dict)
    ours: str = ""  # the file name of kdtree's drop-in


def read_unit(unit: str, ours: str) -> Unit:
    """systemctl show + the files it names (kdtree's own drop-in is left out of `settings`)."""
    show = systemctl_show(unit, *SHOW_PROPS)
    fragment = show.get("FragmentPath", "")
    dropins = show.get("DropInPaths", "").split()
    result = Unit(unit, fragment, dropins, show=show, ours=ours)
    for path in [fragment, *dropins]:
        if not path or (os.path.basename(path) == ours and path != fragment):
            continue
        # systemd's own paths (a unit may be a link into /lib/systemd): its target must be a small,
        # regular file
        result.settings.extend(service_settings(read_small_text(path, follow=True), path))
    return result


def later_than_ours(unit: Unit, path: str) -> bool:
    """Whether drop-in `path` is applied after kdtree's (systemd orders drop-ins by file name)."""
    return path != unit.fragment and os.path.basename(path) > unit.ours


def exec_start(settings: list[Setting], unit_name: str = "") -> tuple[list[str], Setting | None]:
    """The effective ExecStart argv (after `ExecStart=` resets; specifiers resolved as systemd does,
    $VARIABLES left for expand_exec_words) and the line that set it. Raises UnitSyntaxError or
    UnknownSpecifier for a line kdtree cannot read as systemd would."""
    current: Setting | None = None
    for s in settings:
        if s.key == "ExecStart":
            current = s if s.value else None
    if current is None:
        return [], None
    context = specifier_context(unit_name or "unit.service")
    try:
        argv = [resolve_specifiers(word, context) for word in split_words(current.value)]
    except UnitSyntaxError as exc:  # say where: the operator fixes a line, not "the unit"
        raise UnitSyntaxError(f"{current.path}:{current.line} ExecStart=: {exc}") from exc
    except UnknownSpecifier as exc:
        raise UnknownSpecifier(f"{current.path}:{current.line} ExecStart=: {exc}") from exc
    if argv:
        prefixes = argv[0][: len(argv[0]) - len(argv[0].lstrip(EXEC_PREFIXES))]
        argv[0] = argv[0][len(prefixes) :]
        if "@" in prefixes and len(argv) > 1:  # "@": the second word is argv[0], not an argument
            del argv[1]
    return argv, current


def _is_python(path: str) -> bool:
    return os.path.basename(path).startswith("python")


def python_flags(args: list[str]) -> tuple[set[str], list[str]]:
    """Python's one-letter options before the script/-m/-c, and the rest of the command."""
    flags: set[str] = set()
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--" or not arg.startswith("-") or arg == "-":
            return flags, args[i:]
        if arg.startswith("--"):
            i += 1
            continue
        for pos, letter in enumerate(arg[1:], start=1):
            if letter in "cm":
                rest = arg[pos + 1 :]
                return flags, ([f"-{letter}", rest] if rest else [f"-{letter}"]) + args[i + 1 :]
            if letter in "WX":
                if not arg[pos + 1 :]:
                    i += 1
                break
            flags.add(letter)
        i += 1
    return flags, []


def shebang(path: str) -> list[str]:
    """The interpreter line of a script, split (the kernel passes one optional argument)."""
    try:
        first = read_head(path, 512).split(b"\n", 1)[0]
    except (OSError, ValueError):  # not a regular file (SmallFileRefused), or a NUL in the path
        return []
    if not first.startswith(b"#!"):
        return []
    words = first[2:].decode("utf-8", "replace").strip().split(None, 1)
    if words and os.path.basename(words[0]) == "env" and len(words) > 1:
        words = words[1].split()
    return words


@dataclass
class Launch:
    """What the command line says: the python, its flags, SGLang's arguments."""

    python: str = ""
    flags: set[str] = field(default_factory=set)
    launcher: str = ""
    args: list[str] = field(default_factory=list)
    # what an env(1) wrapper does to the environment: clears it, unsets or sets names
    env_clears: bool = False
    env_unsets: list[str] = field(default_factory=list)
    env_sets: dict[str, str] = field(default_factory=dict)
    env_unknown: str = ""  # an env option kdtree does not know (the launch cannot be judged)

    def option(self, *names: str) -> str | None:
        value = None
        for i, arg in enumerate(self.args):
            for name in names:
                if arg == name and i + 1 < len(self.args):
                    value = self.args[i + 1]
                elif arg.startswith(name + "="):
                    value = arg.split("=", 1)[1]
        return value


def parse_launch(argv: list[str]) -> Launch:
    launch = Launch()
    if len(argv) > 1 and os.path.basename(argv[0]) == "env":  # /usr/bin/env [-opts] [NAME=value] python3 ...
        i = 1
        while i < len(argv) and (argv[i].startswith("-") or "=" in argv[i]):
            arg = argv[i]
            if arg in ENV_CLEARS:
                launch.env_clears, launch.env_sets = True, {}
            elif arg in ENV_ARG_OPTIONS and i + 1 < len(argv):
                if arg in ("-u", "--unset"):
                    launch.env_unsets.append(argv[i + 1])
                elif arg in ("-S", "--split-string"):
                    launch.env_unknown = arg
                i += 1
            elif arg.startswith("--unset="):
                launch.env_unsets.append(arg.split("=", 1)[1])
            elif arg.startswith("-u") and len(arg) > 2:
                launch.env_unsets.append(arg[2:])
            elif arg.startswith("-"):
                if arg not in ("-0", "--null", "-v", "--debug", "--"):
                    launch.env_unknown = arg
                if arg == "--":
                    i += 1
                    break
            else:
                name, _sep, value = arg.partition("=")
                launch.env_sets[name] = value
            i += 1
        argv = argv[i:]
    if not argv:
        return launch
    if _is_python(argv[0]):
        launch.python = argv[0]
        launch.flags, rest = python_flags(argv[1:])
    else:
        interp = shebang(argv[0])
        if not interp or not _is_python(interp[0]):
            return launch
        launch.python = interp[0]
        launch.flags, _rest = python_flags(interp[1:])
        # a console script (e.g. venv/bin/sglang) runs SGLang itself
        launch.launcher = os.path.basename(argv[0])
        launch.args = argv[1:]
        return launch
    if len(rest) >= 2 and rest[0] == "-m":
        launch.launcher, launch.args = rest[1], rest[2:]
    elif rest:
        launch.launcher, launch.args = rest[0], rest[1:]
    return launch


def _where(s: Setting | None) -> str:
    return f"{s.path}:{s.line}" if s else ""


def check_command(launch: Launch, line: Setting | None, replaced: bool) -> Check:
    source = "kdtree_service_exec_start_args (the drop-in's ExecStart)" if replaced else "ExecStart"
    if line is None and not replaced:
        return Check("command", False, "the unit has no ExecStart; install SGLang's unit first")
    if not launch.python:
        return Check(
            "command",
            False,
            f"{source} does not run python directly or through a python shebang, so kdtree cannot check "
            "the interpreter and the backend; run `<venv>/bin/python -m sglang.launch_server ...` in "
            "ExecStart, or skip the checks with "
            "kdtree_service_preflight_skip: [command, interpreter, backend].",
            _where(line),
        )
    if not (launch.launcher in LAUNCHERS or launch.launcher.startswith("sglang")):
        return Check(
            "command",
            False,
            f"{source} runs {launch.python} {launch.launcher!r}, not SGLang's launcher "
            f"({' or '.join(LAUNCHERS)}); point ExecStart at `python -m sglang.launch_server`.",
            _where(line),
        )
    return Check("command", True, f"{launch.python} runs {launch.launcher}", _where(line))


def check_interpreter(launch: Launch, line: Setting | None) -> Check:
    if launch.env_clears or launch.env_unknown:
        what = (
            "`env -i` clears the environment"
            if launch.env_clears
            else f"env option {launch.env_unknown} is not one kdtree can follow"
        )
        return Check(
            "interpreter",
            False,
            f"ExecStart starts python through env(1), and {what}: PYTHONPATH and kdtree's variables "
            "would never reach python and the patch would never load; start python directly (set "
            "variables with Environment=).",
            _where(line),
        )
    bad = sorted(launch.flags & {"I", "E", "S"})
    if bad:
        what = {
            "I": "-I (isolated: ignores PYTHONPATH)",
            "E": "-E (ignores PYTHON* variables)",
            "S": "-S (no site)",
        }
        return Check(
            "interpreter",
            False,
            f"python runs with {', '.join(what[b] for b in bad)}: PYTHONPATH would never reach it and the "
            f"patch would never load; remove {' '.join('-' + b for b in bad)} from the command.",
            _where(line),
        )
    return Check("interpreter", True, f"{launch.python} honours PYTHONPATH", _where(line))


def check_backend(launch: Launch, line: Setting | None, served: str, compute_capability: str) -> Check:
    backend = launch.option("--attention-backend")
    if backend is None:
        # SGLang 0.5.23's default for MLA models: triton on sm_120, fa3 on Hopper,
        # trtllm_mla/flashinfer on sm_100
        if compute_capability.split(".")[0] == "12":
            return Check(
                "backend", True, f"no --attention-backend: {served} is the default on sm_120", _where(line)
            )
        return Check(
            "backend",
            False,
            f"no --attention-backend, and on compute capability {compute_capability or '?'} SGLang's default "
            f"is not {served}: the patch would never be called; add `--attention-backend {served}`.",
            _where(line),
        )
    if backend != served:
        return Check(
            "backend",
            False,
            f"--attention-backend {backend}: the patch serves {served} only; "
            f"change it to `--attention-backend {served}`.",
            _where(line),
        )
    return Check("backend", True, f"--attention-backend {served}", _where(line))


def check_stderr(unit: Unit) -> Check:
    err = unit.show.get("StandardError", "")
    out = unit.show.get("StandardOutput", "")
    effective = out if err == "inherit" else err
    line = None
    for s in unit.settings:
        if s.key in ("StandardError", "StandardOutput") and (s.key == "StandardError" or err == "inherit"):
            line = s
    if effective in JOURNAL_OUTPUTS:
        return Check("stderr", True, f"stderr goes to {effective}", _where(line))
    setting = f"{line.key}={line.value}" if line else f"StandardError={err}, StandardOutput={out}"
    return Check(
        "stderr",
        False,
        f"stderr goes to {effective or '?'} ({setting}), not the journal: "
        "the deploy reads every scheduler's marker and any traceback there; set StandardError=journal "
        "(or remove the setting).",
        _where(line),
    )


def environment_file_paths(spec: str, unit_name: str) -> list[str]:
    """The files an EnvironmentFile= entry names, as systemd reads them: the "-" prefix dropped,
    specifiers resolved, a glob expanded in sorted order (systemd.exec(5))."""
    path = resolve_specifiers(spec.removeprefix("-"), specifier_context(unit_name or "unit.service"))
    if glob.has_magic(path):
        return sorted(glob.glob(path))
    return [path]


def env_file_entries(path: str) -> tuple[str, list[tuple[int, str, str]]]:
    """(path, [(line, name, value)]) of one environment file (a file that cannot be read has no
    entries: systemd refuses to start then unless "-", which the smoke check sees). Comments and lines
    without "=" are skipped."""
    path = path.removeprefix("-")
    entries: list[tuple[int, str, str]] = []
    try:
        # the operator's path: a FIFO, a device, a directory or a huge file is not read (no entries, as a
        # file that is not there; the unit's start then fails and the smoke check says so), never hangs
        text = read_small_text(path, follow=True)
    except (OSError, ValueError):  # SmallFileRefused, or ValueError: a NUL in the path
        return path, entries
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line and not line.startswith(("#", ";")) and "=" in line:
            name, _sep, value = line.partition("=")
            entries.append((number, name.strip(), value.strip()))
    return path, entries


def env_file_assignments(path: str) -> tuple[str, dict[str, int]]:
    """(path, {NAME: line}) of one environment file; an `export ` prefix is not part of the name."""
    path, entries = env_file_entries(path)
    return path, {name.removeprefix("export ").strip(): number for number, name, _value in entries}


def check_overrides(
    unit: Unit,
    managed: list[str],
    env_file: str = "",
    launch: Launch | None = None,
    line: Setting | None = None,
) -> Check:
    """What would override kdtree's variables (systemd.exec): Environment= in a later drop-in (an empty
    one clears all), UnsetEnvironment= in any file (applied last), EnvironmentFile= anywhere (its values
    win over Environment=), and an empty EnvironmentFile= in a later drop-in (resets kdtree's `env_file`)."""
    wanted = set(managed)
    found: list[str] = []
    for s in unit.settings:
        names: list[str] = []
        later = later_than_ours(unit, s.path)
        if (s.key == "Environment" and later) or s.key == "UnsetEnvironment":
            try:
                words = split_words(s.value)
            except UnitSyntaxError:
                words = []  # systemd ignores the line: it overrides nothing
            for word in words:
                names.append(word.split("=", 1)[0])
            if s.key == "Environment" and not s.value:
                names = sorted(wanted)  # an empty Environment= clears ours too
        hit = sorted(wanted & set(names))
        if hit:
            verb = "unsets" if s.key == "UnsetEnvironment" else "sets"
            found.append(f"{s.path}:{s.line} {s.key}= {verb} {', '.join(hit)}")
        if s.key == "EnvironmentFile" and not s.value and later and env_file:
            found.append(f"{s.path}:{s.line} an empty EnvironmentFile= drops kdtree's {env_file}")
        if s.key == "EnvironmentFile" and s.value:
            try:
                files = environment_file_paths(s.value, unit.name)
            except UnknownSpecifier as exc:
                found.append(f"{s.path}:{s.line} EnvironmentFile= cannot be read as systemd does ({exc})")
                files = []
            for file in files:
                path, assigned = env_file_assignments(file)
                for name in sorted(wanted & set(assigned)):
                    where = f"EnvironmentFile= at {s.path}:{s.line}"
                    found.append(f"{path}:{assigned[name]} ({where}) sets {name}")
    if launch is not None:
        for name in sorted(wanted & set(launch.env_unsets)):
            found.append(f"{_where(line) or 'ExecStart'} env -u {name} unsets {name}")
        for name in sorted(wanted & set(launch.env_sets)):
            found.append(f"{_where(line) or 'ExecStart'} env {name}=... sets {name}")
    if found:
        return Check(
            "overrides",
            False,
            "these settings would override what kdtree's drop-in "
            f"({unit.ours}) sets; EnvironmentFile= always wins over Environment=, UnsetEnvironment= is "
            f"applied last, and a drop-in whose name sorts after {unit.ours} wins over it: "
            f"{'; '.join(found)}. Move those variables into the unit file or an earlier drop-in (kdtree "
            "keeps the unit's PYTHONPATH after its own), or drop them.",
            found[0].split(" ", 1)[0],
        )
    return Check("overrides", True, f"nothing overrides the {len(wanted)} variables kdtree sets")


def unit_environment(unit: Unit) -> dict[str, str]:
    """The variables the unit's files and EnvironmentFile= entries give the service (no kdtree),
    specifiers resolved; EnvironmentFile= values win over Environment= ones, as in systemd. Raises
    UnknownSpecifier for a value kdtree cannot resolve."""
    merged = UnitEnvironment()
    apply_settings(merged, unit.settings)
    context = specifier_context(unit.name or "unit.service")
    env = {name: resolve_specifiers(value, context) for name, value in merged.environment.items()}
    for spec in merged.environment_files:
        for file in environment_file_paths(spec, unit.name):
            for _number, name, value in env_file_entries(file)[1]:
                env[name.removeprefix("export ").strip()] = value.strip("\"'")
    return env


# The role variable that opts in to an SGLang release outside the window (mode validate only).
ALLOW_UNTESTED_VAR = "kdtree_service_allow_untested_sglang"


def check_sglang(
    python: str, supported: tuple[str, ...], allow_untested: bool = False, mode: str = ""
) -> Check:
    """The venv's SGLang version from its dist-info METADATA: no Python runs (the deploy is root, and
    the venv may be writable by the unit's user). `supported` is the installed patch's window (its
    target.py, oldest first). A release outside it is refused, unless `allow_untested` and the drop-in's
    mode (KDTREE_VERIFY) is validate: then the original's result is what the service serves."""
    try:
        version = venv.installed_version(venv.venv_of(python), "sglang")
    except venv.VenvError as exc:
        return Check("sglang", False, f"cannot read the SGLang version of {python}: {exc}.")
    # a local build label (PEP 440 "+...", e.g. a distro rebuild) keeps the release it was built from
    if version.split("+", 1)[0] in supported:
        return Check("sglang", True, f"sglang {version}")
    window = f"{supported[0]} to {supported[-1]} ({', '.join(supported)})" if supported else "none"
    outside = (
        f"{python} has sglang {version}, outside the window this patch supports: {window} (it mirrors "
        "those releases' TritonAttnBackend.forward_extend, each checked against its wheel)"
    )
    if allow_untested and mode == "validate":
        return Check(
            "sglang",
            True,
            f"{outside}; allowed by {ALLOW_UNTESTED_VAR} in mode validate only: the original's result "
            "is served, and the promotion keeps this host in validate.",
        )
    if allow_untested:
        return Check(
            "sglang",
            False,
            f"{outside}. {ALLOW_UNTESTED_VAR} allows it in mode validate only, and the mode is "
            f"{mode or 'unset'}: deploy with kdtree_service_verify_mode validate, or pin the venv to a "
            "release of the window.",
        )
    return Check(
        "sglang",
        False,
        f"{outside}. Pin the venv to a release of the window, deploy a kdtree-fleet release for this "
        f"one, or set {ALLOW_UNTESTED_VAR}: true to run it in mode validate only.",
    )


IMPORTABLE_SUFFIXES = (".py", ".pyc", ".pyw", ".so", ".pth", ".zip", ".egg")


def importable_entries(directory: str) -> list[str]:
    """What Python could import from `directory` on sys.path, so what must be root's when root imports
    from it: its files with an importable suffix, its __pycache__ and what that holds, and its
    subdirectories (packages, namespace packages), except root-owned sticky ones such as /tmp under /
    (only their owners can rename what is in them, and nothing imports a package named after them)."""
    try:
        with os.scandir(directory) as listing:
            entries = list(listing)
    except (OSError, ValueError):
        return []  # not there (Python skips it) or unreadable: the directory's own check names it
    found: list[str] = []
    for entry in sorted(entries, key=lambda e: e.name):
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if entry.name == "__pycache__":
            found.append(entry.path)
            found += importable_entries(entry.path)
        elif stat.S_ISDIR(info.st_mode):
            if not (info.st_mode & stat.S_ISVTX and info.st_uid == 0):
                found.append(entry.path)
        elif entry.name.endswith(IMPORTABLE_SUFFIXES) or stat.S_ISLNK(info.st_mode):
            found.append(entry.path)
    return found


def probe_root_paths(python: str, env: dict[str, str], cwd: str) -> list[str]:
    """What a probe run as root would run or import from: the interpreter, its venv (pyvenv.cfg, the
    base interpreter's home, site-packages, every .pth file and the directories they add), the working
    directory and every PYTHONPATH entry, and what each of those two holds that Python could import
    (importable_entries: a directory's owner and mode do not vouch for its files). Raises
    venv.VenvError when the venv cannot be read."""
    found = venv.venv_of(python)
    paths = [python, os.path.join(found.root, "pyvenv.cfg"), found.site_packages]
    if found.home:
        paths.append(found.home)
    paths += venv.pth_paths(found)
    workdir = working_directory(cwd, "")
    paths.append(workdir)
    paths += importable_entries(workdir)  # `python -m` puts the working directory first on sys.path
    for entry in (entry for entry in env.get("PYTHONPATH", "").split(":") if entry):
        paths.append(entry)
        paths += importable_entries(entry)
    return paths


def working_directory(value: str, user: str) -> str:
    """systemd's WorkingDirectory= ("-" prefix, "!" in systemctl show: optional; "~": the User='s home;
    empty: /)."""
    value = value.removeprefix("-").removeprefix("!")
    if value == "~":
        import pwd

        try:
            return pwd.getpwnam(user).pw_dir if user else pwd.getpwuid(0).pw_dir
        except KeyError:
            return "/"
    return value or "/"


def probe_argv(
    python: str, env: dict[str, str], cwd: str, timeout_s: float, user: str = "", group: str = ""
) -> list[str]:
    """The probe as systemd would start the unit's python: a transient service with the unit's User=,
    Group=, WorkingDirectory= and environment (systemd-run; its manager adds PATH as for the unit)."""
    argv = [SYSTEMD_RUN, "--pipe", "--wait", "--quiet", "--collect", "--service-type=exec"]
    argv += ["-p", f"RuntimeMaxSec={max(10, int(timeout_s))}"]
    if user:
        argv += ["-p", f"User={user}"]
    if group:
        argv += ["-p", f"Group={group}"]
    if cwd:
        # systemctl show writes an optional directory as "!/path"; the unit file's syntax is "-/path"
        argv += ["-p", f"WorkingDirectory=-{cwd[1:]}" if cwd.startswith("!") else f"WorkingDirectory={cwd}"]
    for name, value in env.items():
        argv += ["-E", f"{name}={value}"]
    budget = str(max(10, int(timeout_s) - 10))
    return [*argv, "--", python, "-m", "kdtree_verify.probe", "--json", "--timeout", budget]


def check_probe(
    python: str,
    env: dict[str, str],
    cwd: str,
    timeout_s: float,
    library_pending: str = "",
    *,
    user: str = "",
    group: str = "",
    dynamic_user: bool = False,
) -> Check:
    """Run the probe with `env` as the unit's `user`/`group` in `cwd` (see probe_argv). With no user the
    unit, and so the probe, runs as root: every path it runs or imports from must be root's alone
    (probe_root_paths) or it refuses. `library_pending`: the reason a child reports when KDTREE_LIB is
    empty (target.NO_LIBRARY_REASON); set when the library is not built yet (env has KDTREE_LIB empty),
    and then a child patched up to the library passes."""
    if dynamic_user:
        return Check(
            "probe",
            False,
            "the unit runs with DynamicUser=yes: its user exists only while it runs, so kdtree cannot run "
            "the probe as that user; skip it with kdtree_service_preflight_skip: [probe] (the smoke "
            "check still proves every scheduler is patched) or give the unit a User=.",
        )
    if not user or user in ("root", "0"):
        try:
            reason = path_safety.first_unsafe(probe_root_paths(python, env, cwd))
        except venv.VenvError as exc:
            reason = str(exc)
        if reason:
            return Check(
                "probe",
                False,
                f"the unit runs as root (no User=), and so would the probe, but {reason}: a user who can "
                "write there could run code as root. Make it owned by root and not group/world-writable, "
                "or give the unit a User= (the probe then runs as that user).",
            )
    argv = probe_argv(python, env, cwd, timeout_s, user, group)
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout_s + 5,
            env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Check("probe", False, f"the probe did not finish within {timeout_s:.0f} s")
    except OSError as exc:
        return Check("probe", False, f"cannot run the probe: {exc}")
    try:
        report: dict[str, Any] = json.loads(proc.stdout)
    except ValueError:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        return Check("probe", False, f"the probe failed (exit {proc.returncode}): {tail}")
    patch = report.get("patch", {})
    site = report.get("sitecustomize", {})
    # mode off: the hook runs and reports state=off (the patch installed, every call goes to Triton)
    wanted = marker_state(env.get("KDTREE_VERIFY", "").strip().lower())
    if patch.get("state") == wanted and (wanted == "off" or (proc.returncode == 0 and report.get("active"))):
        return Check(
            "probe",
            True,
            f"a spawned child is patched (state {patch.get('state')}, mode {patch.get('mode')})",
        )
    if library_pending and patch.get("state") == "fallback" and patch.get("reason") == library_pending:
        return Check(
            "probe",
            True,
            f"a spawned child is patched up to the library, which is not built yet (state fallback: "
            f"{library_pending}); the smoke check proves it loads",
        )
    return Check(
        "probe",
        False,
        "a spawned child would NOT be patched: "
        f"state={patch.get('state', '-')} reason={patch.get('reason', '-')}; "
        f"sitecustomize={site.get('module')} ran={site.get('ran')}; "
        f"backend import={report.get('import', {})}; {report.get('error', '')}".rstrip("; ")
        + ". Run `python -m kdtree_verify.probe` with the unit's environment to see the whole report.",
    )


def run_checks(
    unit: Unit,
    *,
    managed_vars: list[str],
    exec_start_override: list[str],
    compute_capability: str,
    served_backend: str,
    supported_versions: tuple[str, ...],
    probe_env: dict[str, str] | None,
    skip: list[str],
    timeout_s: float,
    env_file: str = "",
    library_pending: str = "",
    allow_untested_sglang: bool = False,
) -> list[Check]:
    """Every check not in `skip`, in CHECKS order; `probe_env` None skips the probe. `library_pending`:
    see check_probe; `allow_untested_sglang`: see check_sglang (the mode is probe_env's KDTREE_VERIFY,
    what the drop-in sets)."""
    checks: list[Check] = []
    if unit.show.get("NeedDaemonReload") == "yes":
        return [
            Check(
                "unit",
                False,
                f"{unit.name}'s files changed since systemd last read them (NeedDaemonReload=yes): what "
                "runs is not what the files say; run `systemctl daemon-reload` (and restart the unit if "
                "its change is wanted), then deploy again.",
                unit.fragment,
            )
        ]
    try:
        argv, line = exec_start(unit.settings, unit.name)
        env = unit_environment(unit)
    except (UnitSyntaxError, UnknownSpecifier) as exc:
        return [Check("command", False, f"kdtree cannot read the unit as systemd does: {exc}.")]
    replaced = bool(exec_start_override)
    if replaced:
        argv, line = exec_start_override, None
    else:
        argv = expand_exec_words(argv, env)
    launch = parse_launch(argv)
    todo = [c for c in CHECKS if c not in skip]
    if "command" in todo:
        checks.append(check_command(launch, line, replaced))
        unparsed = launch_facts(unit, exec_start_override)["unparsed"]
        if unparsed:
            checks.append(
                Check(
                    "command",
                    False,
                    f"cannot read {', '.join(unparsed)} from the command line (the smoke check counts one "
                    "scheduler per tp x pp (x dp) rank); write the sizes as numbers.",
                    _where(line),
                )
            )
    if "interpreter" in todo and launch.python:
        checks.append(check_interpreter(launch, line))
    if "backend" in todo and launch.python:
        checks.append(check_backend(launch, line, served_backend, compute_capability))
    if "stderr" in todo:
        checks.append(check_stderr(unit))
    if "overrides" in todo:
        checks.append(check_overrides(unit, managed_vars, env_file, launch, line))
    python = launch.python
    if "sglang" in todo and python:
        mode = str((probe_env or {}).get("KDTREE_VERIFY", ""))
        checks.append(check_sglang(python, supported_versions, allow_untested_sglang, mode))
    if "probe" in todo and python and probe_env is not None and all(c.ok for c in checks):
        context = specifier_context(unit.name or "unit.service")
        try:
            # kdtree's PYTHONPATH keeps the unit's own in unit syntax (specifiers as written)
            probe = {
                k: resolve_specifiers(v, context) if k == "PYTHONPATH" else v for k, v in probe_env.items()
            }
        except UnknownSpecifier as exc:
            return [*checks, Check("probe", False, f"kdtree cannot read the unit as systemd does: {exc}.")]
        checks.append(
            check_probe(
                python,
                {**env, **launch.env_sets, **probe},
                unit.show.get("WorkingDirectory", ""),
                timeout_s,
                library_pending,
                user=unit.show.get("User", ""),
                group=unit.show.get("Group", ""),
                dynamic_user=unit.show.get("DynamicUser") == "yes",
            )
        )
    return checks


def launch_facts(unit: Unit, exec_start_override: list[str]) -> dict[str, Any]:
    """The command line's facts the roles use: python, backend, port and the scheduler count.

    SGLang 0.5.23 starts tp x pp scheduler processes per data-parallel rank, and dp ranks of them unless
    --enable-dp-attention (then the dp ranks live inside the tp group); with --nnodes N this node runs
    its share (--node-rank decides nothing about the count, only that rank > 0 has no tokenizer).
    Sizes that do not parse are named in `unparsed` (the preflight refuses them) instead of being
    taken as 1. The argv itself is not returned: an operator's command line may hold secrets (--api-key).
    """
    unparsed: list[str] = []
    try:
        argv, _line = exec_start(unit.settings, unit.name)
        argv = exec_start_override or expand_exec_words(argv, unit_environment(unit))
    except (UnitSyntaxError, UnknownSpecifier) as exc:
        argv = exec_start_override
        unparsed.append(f"ExecStart ({exc})")
    launch = parse_launch(argv)

    def size(*names: str) -> int:
        value = launch.option(*names)
        if value is None:
            return 1
        if not value.isdigit() or int(value) < 1:
            unparsed.append(f"{names[0]} {value}")
            return 1
        return int(value)

    tp = size("--tp-size", "--tensor-parallel-size", "--tp")
    pp = size("--pp-size", "--pipeline-parallel-size", "--pp")
    dp = size("--dp-size", "--data-parallel-size", "--dp")
    nnodes = size("--nnodes")
    rank_value = launch.option("--node-rank")
    node_rank = int(rank_value) if rank_value is not None and rank_value.isdigit() else 0
    if rank_value is not None and (not rank_value.isdigit() or node_rank >= nnodes):
        unparsed.append(f"--node-rank {rank_value}")
    dp_attention = "--enable-dp-attention" in launch.args
    # SGLang 0.5.23 spreads pp, then tp, over the nodes (engine._calculate_rank_ranges): this node runs
    # max(pp // nnodes, 1) pipeline ranks of tp // max(nnodes // pp, 1) tensor ranks each
    pp_here = max(pp // nnodes, 1)
    tp_here = tp // max(nnodes // pp, 1)
    if nnodes > 1 and tp_here < 1:
        unparsed.append(f"--nnodes {nnodes} with --tp-size {tp} --pp-size {pp}")
        tp_here = 1
    port = launch.option("--port")
    if port is not None and not port.isdigit():
        unparsed.append(f"--port {port}")
    return {
        "python": launch.python,
        "attention_backend": launch.option("--attention-backend") or "",
        "tp_size": tp,
        "pp_size": pp,
        "dp_size": dp,
        "dp_attention": dp_attention,
        "nnodes": nnodes,
        # > 0: no tokenizer on this node, /health is SGLang's dummy server: judged by its schedulers
        "node_rank": node_rank,
        # where rank 0 meets its peers (--dist-init-addr HOST:PORT; '' when unset): one per serving group
        "dist_init_addr": launch.option("--dist-init-addr") or "",
        "schedulers": tp_here * pp_here * (1 if dp_attention else dp),
        "unparsed": unparsed,
        # None: the command line leaves SGLang's default
        "port": int(port) if port is not None and port.isdigit() else None,
    }


def load_target(patch_dir: str) -> Any:
    """<patch_dir>/<patch_files.TARGET_FILE> (constants only), loaded by path."""
    return patch_files.load_installed(
        patch_dir,
        patch_files.TARGET_FILE,
        "kdtree_preflight_target",
        ("SERVED_BACKEND", "SUPPORTED_SGLANG_VERSIONS"),
    )


def execute(params: dict[str, Any], check_mode: bool = False) -> dict[str, Any]:
    """The kdtree_preflight module's work, apart from AnsibleModule. In check mode on a host where
    the patch is not installed yet, the checks that need it (backend, sglang, probe) are left out
    and named."""
    skip = list(params["skip"])
    note = ""
    try:
        target = load_target(params["patch_dir"])
        served, supported = target.SERVED_BACKEND, tuple(target.SUPPORTED_SGLANG_VERSIONS)
    except patch_files.PatchFileMissing:
        if not check_mode:
            raise
        target = None
        served, supported = "", ()
        skip += ["backend", "sglang", "probe"]
        note = " (check mode: backend, sglang and probe need the installed patch; not run)"
    probe_env = dict(params["probe_env"] or {})
    lib = probe_env.get("KDTREE_LIB", "")
    library_pending = ""
    if "probe" not in skip and lib and not os.path.exists(lib):
        # the deploy builds the library after its preflight: probe without it, and accept a child
        # patched up to the library (the smoke check proves the library loads)
        probe_env["KDTREE_LIB"] = ""
        library_pending = getattr(target, "NO_LIBRARY_REASON", "")
        note = f" (the library {lib} is built after the preflight: the probe ran without it)"
    unit = read_unit(params["unit"], params["dropin_name"])
    if not unit.fragment:
        return {"failed": True, "checks": [], "launch": {}, "msg": f"{params['unit']} has no unit file"}
    checks = run_checks(
        unit,
        managed_vars=params["managed_vars"],
        exec_start_override=params["exec_start"],
        compute_capability=params["compute_capability"],
        served_backend=served,
        supported_versions=supported,
        probe_env=probe_env,
        skip=skip,
        timeout_s=float(params["timeout_s"]),
        env_file=params["secret_env_file"],
        library_pending=library_pending,
        allow_untested_sglang=bool(params.get("allow_untested_sglang", False)),
    )
    launch = launch_facts(unit, params["exec_start"])
    gpu = gpu_check(unit, launch, skip, params)
    if gpu["checked"]:
        checks.append(Check("gpu", bool(gpu["ok"]), "" if gpu["ok"] else gpu_health.refusal(gpu)))
    failed = [c for c in checks if not c.ok]
    if failed:
        msg = (
            f"kdtree preflight refused {params['unit']} ({len(failed)} of {len(checks)} checks failed; "
            "nothing on the host was changed):\n" + "\n".join(c.line() for c in failed)
        )
    else:
        msg = f"preflight ok: {', '.join(c.name for c in checks)}{note}"
    return {
        "failed": bool(failed),
        "checks": [{"name": c.name, "ok": c.ok, "message": c.message, "where": c.where} for c in checks],
        "launch": launch,
        "gpu_health": gpu,
        "msg": msg,
    }


def gpu_check(unit: Unit, launch: dict[str, Any], skip: list[str], params: dict[str, Any]) -> dict[str, Any]:
    """The `gpu` check's result (module_utils/_gpu_health.py): this node's share of the schedulers needs
    as many GPUs; the memory the unit's own processes hold counts as free (the restart stops them)."""
    if "gpu" in skip:
        return gpu_health.not_checked("skipped (kdtree_service_preflight_skip, or nothing restarts)")
    return gpu_health.check(
        expected=int(launch.get("schedulers") or 1),
        min_free_mib=int(params.get("gpu_min_free_mib") or 0),
        unit_pids=cgroup_pids(unit.show.get("ControlGroup", "")),
        timeout_s=float(params["timeout_s"]),
        binary=str(params.get("nvidia_smi") or gpu_health.NVIDIA_SMI),
    )
