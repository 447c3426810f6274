"""The environment a systemd unit's own files give its service (stdlib only; no Ansible imports).

systemd merges `Environment=` lines of the unit file and its drop-ins in order (a later assignment of
a variable wins, an empty `Environment=` clears the list, `UnsetEnvironment=` removes names).
`unit_environment()` does the same for the files it is given, so a caller can ask "what would the
service see without my drop-in" - which `systemctl show -p Environment` cannot answer once that
drop-in is installed.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass, field

SHOW_TIMEOUT_S = 15


@dataclass
class UnitEnvironment:
    """What the files say: the merged variables, in order, and the EnvironmentFile= entries."""

    environment: dict[str, str] = field(default_factory=dict)
    environment_files: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


@dataclass
class Setting:
    """One `Key=value` line of a unit file's [Service] section, with where it is."""

    key: str
    value: str
    path: str
    line: int


def service_settings(text: str, path: str) -> list[Setting]:
    """The [Service] settings of one unit file, in order, with systemd's backslash continuation
    joined (a setting's line is where it starts); comments dropped."""
    settings: list[Setting] = []
    section = ""
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not pending and line.startswith(("#", ";")):
            continue
        if line.endswith("\\"):
            if not pending:
                start = number
            pending += line[:-1] + " "
            continue
        full, first = pending + line, (start if pending else number)
        pending = ""
        if full.startswith("[") and full.endswith("]"):
            section = full[1:-1]
            continue
        if section == "Service" and "=" in full:
            key, _sep, value = full.partition("=")
            settings.append(Setting(key.strip(), value.strip(), path, first))
    if pending and section == "Service" and "=" in pending:
        key, _sep, value = pending.partition("=")
        settings.append(Setting(key.strip(), value.strip(), path, start))
    return settings


def _words(value: str) -> list[str]:
    """systemd's quoting for Environment=: whitespace-separated words, "..." and '...' quotes,
    backslash escapes; %% is a literal %."""
    return [word.replace("%%", "%") for word in shlex.split(value, posix=True)]


def apply_unit_file(env: UnitEnvironment, text: str, source: str) -> None:
    """Apply the [Service] Environment=, UnsetEnvironment= and EnvironmentFile= lines of one file."""
    env.sources.append(source)
    apply_settings(env, service_settings(text, source))


def apply_settings(env: UnitEnvironment, settings: list[Setting]) -> None:
    """Apply Environment=, UnsetEnvironment= and EnvironmentFile= settings in order, as systemd does."""
    for setting in settings:
        key, value = setting.key, setting.value
        if key == "Environment":
            if not value:
                env.environment.clear()
                continue
            for word in _words(value):
                name, sep, val = word.partition("=")
                if sep:
                    env.environment.pop(name, None)  # a later assignment moves to the end
                    env.environment[name] = val
        elif key == "UnsetEnvironment":
            for word in _words(value):
                name, sep, val = word.partition("=")
                if not sep or env.environment.get(name) == val:
                    env.environment.pop(name, None)
        elif key == "EnvironmentFile":
            if not value:
                env.environment_files.clear()
            else:
                env.environment_files.append(value)


def systemctl_show(unit: str, *props: str) -> dict[str, str]:
    """`systemctl show -p ...` of `unit` as {property: value} (bounded by SHOW_TIMEOUT_S)."""
    out = subprocess.run(
        ["systemctl", "show", *[arg for prop in props for arg in ("-p", prop)], unit],
        capture_output=True,
        text=True,
        check=True,
        timeout=SHOW_TIMEOUT_S,
    ).stdout
    return dict(line.partition("=")[::2] for line in out.splitlines())


def unit_files(unit: str) -> tuple[str, list[str]]:
    """(FragmentPath, DropInPaths) as systemd reports them for `unit` (e.g. sglang.service)."""
    props = systemctl_show(unit, "FragmentPath", "DropInPaths")
    return props.get("FragmentPath", ""), props.get("DropInPaths", "").split()


def unit_environment(fragment: str, dropins: list[str], exclude: list[str]) -> UnitEnvironment:
    """The merged environment of the unit file and its drop-ins, leaving out drop-ins named in `exclude`
    (file names, e.g. 50-kdtree.conf)."""
    env = UnitEnvironment()
    for path in [fragment, *dropins]:
        if not path or (path != fragment and path.rsplit("/", 1)[-1] in exclude):
            continue
        with open(path, encoding="utf-8", errors="replace") as handle:
            apply_unit_file(env, handle.read(), path)
    return env
