"""A venv as its files say it is, read without running its Python (stdlib only; no Ansible imports).

The deploy runs as root: running the unit's interpreter to ask it anything would run code from the
venv (site-packages, .pth files, sitecustomize) as root. So the venv is read: <venv>/pyvenv.cfg next to
bin/, lib/python3.*/site-packages, and the sglang dist-info's METADATA.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

from ansible_collections.kdtree.fleet.plugins.module_utils._small_file import (
    SmallFileRefused,
    read_small_text,
)


class VenvError(ValueError):
    """The interpreter's venv cannot be read unambiguously."""


@dataclass
class Venv:
    root: str
    site_packages: str
    home: str  # pyvenv.cfg's home (the base interpreter's directory), "" when not given


def venv_of(python: str) -> Venv:
    """The venv whose bin/ holds `python` (the path as written: a venv's python is often a link out of
    it). Refuses a relative path, a python not in a venv, and zero or several site-packages."""
    if not os.path.isabs(python):
        raise VenvError(f"{python} is not an absolute path; write the venv's python in full in ExecStart")
    bindir = os.path.dirname(python)
    root = os.path.dirname(bindir)
    cfg = os.path.join(root, "pyvenv.cfg")
    if os.path.basename(bindir) != "bin" or not os.path.isfile(cfg):
        raise VenvError(
            f"{python} is not a venv's interpreter (no {cfg}); kdtree reads SGLang from a venv's "
            "site-packages without running Python - run SGLang from a venv"
        )
    home = ""
    try:
        text = read_small_text(cfg)
    except (OSError, SmallFileRefused) as exc:
        raise VenvError(f"cannot read {cfg}: {exc}") from exc
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "home":
            home = value.strip()
    sites = sorted(glob.glob(os.path.join(root, "lib", "python3.*", "site-packages")))
    if len(sites) != 1:
        found = ", ".join(sites) or "none"
        raise VenvError(f"{root} has {len(sites)} lib/python3.*/site-packages ({found}), not exactly one")
    return Venv(root, sites[0], home)


def installed_version(venv: Venv, distribution: str) -> str:
    """The Version: of <site-packages>/<distribution>-*.dist-info/METADATA; refuses none or several."""
    pattern = os.path.join(venv.site_packages, f"{distribution}-*.dist-info")
    infos = [p for p in sorted(glob.glob(pattern)) if os.path.basename(p).split("-", 1)[0] == distribution]
    if len(infos) != 1:
        found = ", ".join(os.path.basename(p) for p in infos) or "none"
        raise VenvError(
            f"{venv.site_packages} has {len(infos)} {distribution}-*.dist-info ({found}), not exactly one"
        )
    metadata = os.path.join(infos[0], "METADATA")
    headers: dict[str, list[str]] = {"Name": [], "Version": []}
    try:
        text = read_small_text(metadata)
    except SmallFileRefused as exc:
        raise VenvError(f"cannot read {exc}") from exc
    except OSError as exc:
        raise VenvError(f"cannot read {metadata}: {exc.strerror}") from exc
    for line in text.splitlines():
        if not line.strip():
            break  # the headers end at the first empty line
        key, _sep, value = line.partition(":")
        if key in headers:
            headers[key].append(value.strip())
    # Python's email parser (importlib.metadata) takes the first of two headers, a reader taking the last
    # would name another release: a METADATA that says two things is refused, never read one way.
    twice = {key: values for key, values in headers.items() if len(values) > 1}
    if twice:
        said = "; ".join(f"{key}: {', '.join(values)}" for key, values in twice.items())
        raise VenvError(f"{metadata} has a header more than once ({said}): refused as ambiguous")
    name = headers["Name"][0] if headers["Name"] else ""
    version = headers["Version"][0] if headers["Version"] else ""
    if name.lower().replace("_", "-") != distribution or not version:
        raise VenvError(f"{metadata} names {name or '?'} {version or '?'}, not a {distribution} release")
    return version


def pth_paths(venv: Venv) -> list[str]:
    """The .pth files of site-packages and the directories their path lines add (what Python's site
    module would read and import at start). A .pth that is not a small regular file (a FIFO, a link, a
    device, a huge file) is refused: Python would read it at every start."""
    paths: list[str] = []
    for pth in sorted(glob.glob(os.path.join(venv.site_packages, "*.pth"))):
        paths.append(pth)
        try:
            text = read_small_text(pth)
        except SmallFileRefused as exc:
            raise VenvError(f"refused {exc}") from exc
        except OSError:
            continue
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith(("#", "import ", "import\t")):
                paths.append(os.path.join(venv.site_packages, line))
    return paths
