#!/usr/bin/env bash
# Build (once) the controller's tools venv (requirements-dev.txt: Ansible, ansible-lint, molecule,
# pytest, ruff, yamllint) in the machine-level cache's entry for its recipe (scripts/devcache.py: this
# script, venv-once.sh, requirements-dev.txt, the base interpreter), and link the clone's .venv to it.
# Usage: scripts/tools-venv.sh <venv-link> [python]
set -euo pipefail

link=${1:?usage: tools-venv.sh <venv-link> [python]}
python=${2:-python3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
req="$here/../requirements-dev.txt"
# shellcheck source=venv-once.sh
source "$here/venv-once.sh"
base=$(venv_base "$python")
want="$(venv_hash "$here/tools-venv.sh" "$here/venv-once.sh" "$req") $base"
venv=$(devcache_entry "$link" tools-venv "$want")
start=$(date +%s)
venv_reuse_or_remake "tools venv" "$venv" "$want" "$python" "$base"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q -r "$req"
echo "tools venv: $venv built in $(($(date +%s) - start)) s"
venv_stamp "$venv" "$want"
