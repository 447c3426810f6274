#!/usr/bin/env bash
# Build (once) the venv of SGLang's router, sglang-router==0.3.2 (a Rust binary with a Python
# launcher: `sglang-router launch`), used by the drain tests (tests/drain) in front of the SGLang
# test double. Why this router and what was seen of its worker API: docs/drain.md.
# A stamp holding the hash of this script and the base interpreter makes a second run a no-op.
# Usage: scripts/router-venv.sh <venv-dir> [python]
set -euo pipefail

venv=${1:?usage: router-venv.sh <venv-dir> [python]}
python=${2:-python3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
base=$("$python" -c 'import os, sys; print(os.path.realpath(sys.executable), sys.version.split()[0])')
want="$(sha256sum "$here/router-venv.sh" | cut -d' ' -f1) $base"
stamp="$venv/.kdtree-stamp"
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "router venv: reusing $venv ($base)"
  exit 0
fi

echo "router venv: building $venv from $base"
rm -rf "$venv"
"$python" -m venv "$venv"
timeout 600 "$venv/bin/pip" install -q --no-input sglang-router==0.3.2
"$venv/bin/sglang-router" launch --help >/dev/null
"$venv/bin/python" -c 'import importlib.metadata as md; print("sglang-router", md.version("sglang-router"))'
echo "$want" > "$stamp"
