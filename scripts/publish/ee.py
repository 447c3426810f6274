"""Write the execution environment definition for one source of the collection and its build context.

meta/execution-environment.yml is the base (image, Python, ansible-core, ansible-runner); it names no
source of kdtree.fleet, which is not on Galaxy. This adds one, then runs `ansible-builder create` (or
`build`) on the result:

- ``--tarball PATH``: the tarball (make collection) is copied beside the definition and into the
  context (additional_build_files, ``_build/collections/``) and installed from there (type file);
- ``--git-ref REF --repository URL``: ansible-galaxy installs the repository at that ref (type git);
  the ref must be one this clone has (a release tag: make release), and git is installed in the
  image's galaxy stage first.

Output under --out: execution-environment.yml, the tarball (tarball source) and context/ (ansible-builder's
build context: ``podman build -t kdtree-fleet-ee <out>/context``). Run it with the Python of a venv that
has ansible-builder 3 (mk/publish.mk: the core-2.21 publish venv); make ee-context calls it.
Usage: ee.py --out DIR (--tarball PATH | --git-ref REF --repository URL) [--build TAG]
"""

from __future__ import annotations

import argparse
import copy
import logging
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "meta" / "execution-environment.yml"
TARBALL_DIR = "collections"  # under the context's _build/, the galaxy stage's working directory /build
INSTALL_GIT = "RUN $PKGMGR install -y git && $PKGMGR clean all"
CREATE_TIMEOUT_S = 300
BUILD_TIMEOUT_S = 3600

log = logging.getLogger("ee")


class Refusal(Exception):
    """Input the definition cannot be written from; nothing is written."""


def tarball_source(tarball: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The galaxy requirement and the definition's additions for a local tarball."""
    if not tarball.is_file() or not tarball.name.endswith(".tar.gz"):
        raise Refusal(f"no collection tarball at {tarball} (make collection builds one)")
    requirement = {"name": f"{TARBALL_DIR}/{tarball.name}", "type": "file"}
    extra = {"additional_build_files": [{"src": tarball.name, "dest": TARBALL_DIR}]}
    return requirement, extra


def git_source(repository: str, ref: str, root: Path = ROOT) -> tuple[dict[str, Any], dict[str, Any]]:
    """The galaxy requirement and the definition's additions for the repository at a git ref."""
    if not repository.strip():
        raise Refusal("no repository URL for the git source (scripts/publish/repository.sh)")
    found = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "-q", "--verify", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if not ref.strip() or found.returncode != 0:
        raise Refusal(
            f"git ref '{ref}' is not in this clone (git tag lists the releases; make release tags one)"
        )
    requirement = {"name": repository, "type": "git", "version": ref}
    extra = {"additional_build_steps": {"prepend_galaxy": [INSTALL_GIT]}}
    return requirement, extra


def definition(base: dict[str, Any], requirement: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """The base definition with the collection's source added; the base names none of its own."""
    deps = base.get("dependencies") or {}
    if base.get("version") != 3 or "galaxy" in deps or set(extra) & set(base):
        raise Refusal(f"{BASE} is not a version 3 definition without a galaxy source and {sorted(extra)}")
    out = copy.deepcopy(base)
    out["dependencies"]["galaxy"] = {"collections": [requirement]}
    out.update(copy.deepcopy(extra))
    return out


def write(out: Path, args: argparse.Namespace) -> Path:
    """Write <out>/execution-environment.yml (and the tarball beside it); its path."""
    if args.tarball:
        requirement, extra = tarball_source(args.tarball)
    else:
        requirement, extra = git_source(args.repository or "", args.git_ref)
    text = definition(yaml.safe_load(BASE.read_text()), requirement, extra)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if args.tarball:
        shutil.copy2(args.tarball, out / args.tarball.name)
    path = out / "execution-environment.yml"
    path.write_text("---\n" + yaml.safe_dump(text, sort_keys=False))
    log.info("definition %s: kdtree.fleet from %s", path, requirement["name"])
    return path


def builder_command(path: Path, out: Path, tag: str | None) -> list[str]:
    """ansible-builder create (or build with tag) on the definition, the context in <out>/context."""
    exe = Path(sys.executable).parent / "ansible-builder"
    if not exe.exists():
        raise Refusal(f"no ansible-builder beside {sys.executable} (make publish-venv-core-2.21)")
    cmd = [str(exe), "build" if tag else "create", "-f", str(path), "-c", str(out / "context")]
    return [*cmd, "-t", tag] if tag else cmd


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="ee: %(message)s")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--tarball", type=Path)
    source.add_argument("--git-ref")
    parser.add_argument("--repository", help="the repository URL of the git source")
    parser.add_argument("--build", metavar="TAG", help="build the image (ansible-builder build -t TAG)")
    args = parser.parse_args(argv)
    try:
        if args.repository and args.tarball:
            raise Refusal("--repository names the git source; a tarball needs none")
        path = args.out / "execution-environment.yml"
        cmd = builder_command(path, args.out, args.build)  # refuses before anything is written
        write(args.out, args)
        subprocess.run(cmd, check=True, timeout=BUILD_TIMEOUT_S if args.build else CREATE_TIMEOUT_S)
    except Refusal as err:
        log.error("%s; nothing written", err)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
