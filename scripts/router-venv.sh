#!/usr/bin/env bash
# Build (once) the venv of one of SGLang's routers, a Rust binary with a Python launcher installed from
# the package index: sglang-router==0.3.2 (`make router-venv`) or its successor smg==1.13.0
# (`make smg-venv`); both start with `<name> launch`. The drain tests (tests/drain) run the router in
# front of the SGLang test double. Why these routers and what was seen of their worker API: docs/drain.md.
# A stamp holding the hash of this script, the requirement and the base interpreter makes a second run a
# no-op.
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
base=$("$python" -c 'import os, sys; print(os.path.realpath(sys.executable), sys.version.split()[0])')
want="$(sha256sum "$here/router-venv.sh" | cut -d' ' -f1) $requirement $base"
stamp="$venv/.kdtree-stamp"
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "router venv: reusing $venv ($requirement, $base)"
  exit 0
fi

echo "router venv: building $venv ($requirement) from $base"
start=$(date +%s)
rm -rf "$venv"
"$python" -m venv "$venv"
timeout 600 "$venv/bin/pip" install -q --no-input "$requirement"
timeout 60 "$venv/bin/$name" launch --help >/dev/null
"$venv/bin/python" -c 'import importlib.metadata as md, sys; print(sys.argv[1], md.version(sys.argv[1]))' "$name"
echo "router venv: $venv built in $(($(date +%s) - start)) s"
echo "$want" > "$stamp"
