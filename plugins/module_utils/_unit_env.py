"""The environment a systemd unit's own files give its service (stdlib only; no Ansible imports).

systemd merges `Environment=` lines of the unit file and its drop-ins in order (a later assignment of
a variable wins, an empty `Environment=` clears the list, `UnsetEnvironment=` removes names).
`unit_environment()` does the same for the files it is given, so a caller can ask "what would the
service see without my drop-in" - which `systemctl show -p Environment` cannot answer once that
drop-in is installed.

The reading follows systemd.syntax(7) and systemd.exec(5) (systemd 252, the corpus in
tests/unit/plugins/module_utils/data/unit_corpus records what a real systemd made of each case):
- a line ending in an unescaped backslash continues on the next line (the backslash becomes a space);
  comment lines inside a continued setting are skipped; `\\\\` at the end is an escaped backslash;
- values are split into words with "..." / '...' quotes and C escapes; a setting whose quoting is
  broken is ignored, as systemd ignores it (`ignored` names it);
- specifiers (%h, %n, ...) are KEPT as written in `environment` (the drop-in copies the unit's
  PYTHONPATH back into unit syntax, where systemd expands them for the service); `resolve_specifiers`
  turns them into what systemd would give the service, for the few that kdtree can know.
"""

from __future__ import annotations

import pwd
import socket
import subprocess
from dataclasses import dataclass, field

from ansible_collections.kdtree.fleet.plugins.module_utils._small_file import read_small_text

SHOW_TIMEOUT_S = 15


class UnitSyntaxError(ValueError):
    """A value systemd would not accept (it logs and ignores the setting)."""


class UnknownSpecifier(ValueError):
    """A %-specifier kdtree cannot resolve the way systemd would."""


@dataclass
class UnitEnvironment:
    """What the files say: the merged variables, in order, and the EnvironmentFile= entries.
    Values are in unit syntax: specifiers as written (see resolve_specifiers)."""

    environment: dict[str, str] = field(default_factory=dict)
    environment_files: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)


@dataclass
class Setting:
    """One `Key=value` line of a unit file's [Service] section, with where it is."""

    key: str
    value: str
    path: str
    line: int


def _continues(line: str) -> bool:
    """Whether a line ends in a backslash that is not itself escaped (systemd's conf-parser)."""
    escaped = False
    for char in line:
        escaped = not escaped if char == "\\" else False
    return escaped


def service_settings(text: str, path: str) -> list[Setting]:
    """The [Service] settings of one unit file, in order, with systemd's backslash continuation
    joined (a setting's line is where it starts); comments dropped, inside a continuation too."""
    settings: list[Setting] = []
    section = ""
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith(("#", ";")):
            continue
        if _continues(line):
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


_C_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "s": " "}
_C_ESCAPES.update({c: c for c in "\\\"'"})
_WHITESPACE = " \t\n\r"


def _unescape(value: str, i: int, separators: bool = False) -> tuple[str, int]:
    """One C escape at value[i] (just after the backslash): (the character, the next index);
    `separators`: a backslash before whitespace is that whitespace (ExecStart's command lines)."""
    if i >= len(value):
        raise UnitSyntaxError("a backslash at the end of the value")
    char = value[i]
    if separators and char in _WHITESPACE:
        return char, i + 1
    if char in _C_ESCAPES:
        return _C_ESCAPES[char], i + 1
    hexdigits = "0123456789abcdefABCDEF"
    if char == "x" and len(value) >= i + 3 and all(c in hexdigits for c in value[i + 1 : i + 3]):
        return chr(int(value[i + 1 : i + 3], 16)), i + 3
    if char in "01234567" and len(value) >= i + 3 and all(c in "01234567" for c in value[i : i + 3]):
        return chr(int(value[i : i + 3], 8)), i + 3
    if char in "uU":
        width = 4 if char == "u" else 8
        digits = value[i + 1 : i + 1 + width]
        if len(digits) == width and all(c in hexdigits for c in digits) and int(digits, 16) <= 0x10FFFF:
            return chr(int(digits, 16)), i + 1 + width
    raise UnitSyntaxError(f"an unknown escape \\{char}")


def next_char(value: str, i: int, separators: bool = False) -> tuple[str, int]:
    """The text of the character at value[i] inside a word (a C escape unescaped) and the index after it.
    Raises UnitSyntaxError on an escape systemd refuses. `separators`: see _unescape."""
    if value[i] == "\\":
        return _unescape(value, i + 1, separators)
    return value[i], i + 1


def split_words(value: str, separators: bool = False) -> list[str]:
    """systemd's extract_first_word(UNQUOTE|CUNESCAPE) over a whole value: whitespace-separated words,
    "..." and '...' quotes (anywhere in a word), C escapes. Specifiers are left alone. Raises
    UnitSyntaxError where systemd would refuse the value. `separators`: see _unescape."""
    words: list[str] = []
    i, n = 0, len(value)
    while True:
        while i < n and value[i] in _WHITESPACE:
            i += 1
        if i >= n:
            return words
        word, quote, started = [], "", False
        while i < n:
            char = value[i]
            if quote:
                if char == quote:
                    quote, i = "", i + 1
                else:
                    text, i = next_char(value, i, separators)
                    word.append(text)
                continue
            if char in _WHITESPACE:
                break
            if char in "\"'":
                quote, started, i = char, True, i + 1
            else:
                text, i = next_char(value, i, separators)
                word.append(text)
        if quote:
            raise UnitSyntaxError(f"an unterminated {quote} quote")
        if word or started:
            words.append("".join(word))


def _words(value: str) -> list[str]:
    return split_words(value)


def _valid_name(name: str) -> bool:
    return bool(name) and not name[0].isdigit() and all(c.isalnum() or c == "_" for c in name)


def apply_unit_file(env: UnitEnvironment, text: str, source: str) -> None:
    """Apply the [Service] Environment=, UnsetEnvironment= and EnvironmentFile= lines of one file."""
    env.sources.append(source)
    apply_settings(env, service_settings(text, source))


def apply_settings(env: UnitEnvironment, settings: list[Setting]) -> None:
    """Apply Environment=, UnsetEnvironment= and EnvironmentFile= settings in order, as systemd does
    (a setting systemd would reject is ignored and named in env.ignored)."""
    for setting in settings:
        key, value = setting.key, setting.value
        if key not in ("Environment", "UnsetEnvironment", "EnvironmentFile"):
            continue
        try:
            words = split_words(value) if key != "EnvironmentFile" else []
        except UnitSyntaxError as exc:
            env.ignored.append(f"{setting.path}:{setting.line} {key}= ignored by systemd: {exc}")
            continue
        if key == "Environment":
            if not value:
                env.environment.clear()
                continue
            for word in words:
                name, sep, val = word.partition("=")
                if sep and _valid_name(name):
                    env.environment.pop(name, None)  # a later assignment moves to the end
                    env.environment[name] = val
        elif key == "UnsetEnvironment":
            for word in words:
                name, sep, val = word.partition("=")
                if not sep or env.environment.get(name) == val:
                    env.environment.pop(name, None)
        elif not value:
            env.environment_files.clear()
        else:
            env.environment_files.append(value)


# Specifiers systemd resolves the same way for every system service, from the unit's name and the
# host (systemd.unit(5) "Specifiers"; %h/%u/%U are the MANAGER's user for system units, not User=).
def specifier_context(unit: str) -> dict[str, str]:
    """What kdtree knows of the specifiers of system unit `unit` (e.g. sglang.service)."""
    prefix_full = unit.rpartition(".")[0] or unit
    prefix, at, instance = prefix_full.partition("@")
    root = pwd.getpwuid(0)
    return {
        "n": unit,
        "N": prefix_full,
        "p": prefix,
        "P": prefix,
        "i": instance if at else "",
        "I": instance if at else "",
        "f": "/" + (instance if at else prefix).replace("-", "/"),
        "j": prefix.rsplit("-", 1)[-1],
        "J": prefix.rsplit("-", 1)[-1],
        "H": socket.gethostname(),
        "l": socket.gethostname().split(".", 1)[0],
        "h": root.pw_dir,
        "u": root.pw_name,
        "U": "0",
        "g": "root",
        "G": "0",
        "s": "/bin/sh",
        "t": "/run",
        "S": "/var/lib",
        "C": "/var/cache",
        "L": "/var/log",
        "E": "/etc",
        "T": "/tmp",
        "V": "/var/tmp",
        "y": "",
        "Y": "",
    }


def resolve_specifiers(text: str, context: dict[str, str]) -> str:
    """`text` with its %-specifiers as systemd resolves them (context: specifier_context); raises
    UnknownSpecifier for one kdtree cannot know (e.g. %m, %b, %a), and for a lone % at the end."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "%":
            out.append(char)
            i += 1
            continue
        if i + 1 >= len(text):
            raise UnknownSpecifier(f"{text!r} ends in a lone %")
        spec = text[i + 1]
        if spec == "%":
            out.append("%")
        elif spec in context and spec.isalpha():
            out.append(context[spec])
        else:
            raise UnknownSpecifier(f"%{spec} in {text!r} is a specifier kdtree cannot resolve")
        i += 2
    return "".join(out)


def expand_exec_words(argv: list[str], env: dict[str, str]) -> list[str]:
    """systemd's $ expansion in ExecStart (systemd.service(5) "Command lines"): a word that is exactly
    $NAME becomes the value split at whitespace (zero or more words); ${NAME} anywhere in a word is the
    value as one piece; $$ is a literal $; an unset variable is empty."""
    out: list[str] = []
    for word in argv:
        if len(word) > 1 and word[0] == "$" and _valid_name(word[1:]):
            out.extend(env.get(word[1:], "").split())
            continue
        pieces: list[str] = []
        i = 0
        while i < len(word):
            if word.startswith("$$", i):
                pieces.append("$")
                i += 2
            elif word.startswith("${", i) and "}" in word[i + 2 :]:
                end = word.index("}", i + 2)
                pieces.append(env.get(word[i + 2 : end], ""))
                i = end + 1
            else:
                pieces.append(word[i])
                i += 1
        out.append("".join(pieces))
    return out


def systemctl_show(unit: str, *props: str) -> dict[str, str]:
    """`systemctl show -p ...` of `unit` as {property: value} (bounded by SHOW_TIMEOUT_S); a property
    systemd lists more than once (EnvironmentFiles) has its values joined by newlines."""
    out = subprocess.run(
        ["systemctl", "show", *[arg for prop in props for arg in ("-p", prop)], unit],
        capture_output=True,
        text=True,
        check=True,
        timeout=SHOW_TIMEOUT_S,
    ).stdout
    result: dict[str, str] = {}
    for line in out.splitlines():
        key, _sep, value = line.partition("=")
        result[key] = f"{result[key]}\n{value}" if key in result else value
    return result


def show_environment_files(value: str) -> list[tuple[str, bool]]:
    """systemctl show's EnvironmentFiles (one `PATH (ignore_errors=yes|no)` a line): [(path, optional)],
    specifiers resolved by systemd, globs as written."""
    files: list[tuple[str, bool]] = []
    for line in value.splitlines():
        path, sep, flag = line.rpartition(" (ignore_errors=")
        if sep:
            files.append((path, flag.startswith("yes")))
        elif line.strip():
            files.append((line.strip(), False))
    return files


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
        apply_unit_file(env, read_small_text(path, follow=True), path)
    return env
