#!/usr/bin/env bash
# Build (once) the venv of one of SGLang's routers, a Rust binary with a Python launcher installed from
# the package index: sglang-router==0.3.2 (`make router-venv`) or its successor smg==1.13.0
# (`make smg-venv`); both start with `<name> launch`. The drain tests (tests/drain) run the router in
# front of the SGLang test double. Why these routers and what was seen of their worker API: docs/drain.md.
# A stamp holding the hash of this script (and venv-once.sh), the requirement and the base interpreter
# makes a second run a no-op.
# Usage: scripts/router-venv.sh <venv-dir> <name>==<version> [python]
set -euo pipefail

usage="usage: router-venv.sh <venv-dir> <name>==<version> [python]"
venv=${1:?$usage}
requirement=${2:?$usage}
python=${3:-python3}
name=${requirement%%==*}
if [[ "$name" == "$requirement" || -z "$name" ]]; then
  echo "router venv: pin the router as <name>==<version>, got '$requirement'" >&2
  exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=venv-once.sh
source "$here/venv-once.sh"
base=$(venv_base "$python")
want="$(venv_hash "$here/router-venv.sh" "$here/venv-once.sh") $requirement $base"
venv=$(devcache_entry "$venv" "$(basename "$venv")" "$want")
start=$(date +%s)
venv_reuse_or_remake "router venv ($requirement)" "$venv" "$want" "$python" "$base"
timeout 600 "$venv/bin/pip" install -q --no-input "$requirement"
timeout 60 "$venv/bin/$name" launch --help >/dev/null
"$venv/bin/python" -c 'import importlib.metadata as md, sys; print(sys.argv[1], md.version(sys.argv[1]))' "$name"
echo "router venv: $venv built in $(($(date +%s) - start)) s"
venv_stamp "$venv" "$want"
