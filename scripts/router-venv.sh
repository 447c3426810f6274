#!/usr/bin/env bash
# Build (once) the venv of SGLang's router, sglang-router==0.3.2 (a Rust binary with a Python
# launcher: `sglang-router launch`), used by the drain tests (tests/drain) in front of the SGLang
# test double. Why this router and what was seen of its worker API: docs/drain.md.
# A stamp holding the hash of this script (and venv-once.sh) and the base interpreter makes a second run
# a no-op.
# Usage: scripts/router-venv.sh <venv-dir> [python]
set -euo pipefail

venv=${1:?usage: router-venv.sh <venv-dir> [python]}
python=${2:-python3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=venv-once.sh
source "$here/venv-once.sh"
base=$(venv_base "$python")
want="$(venv_hash "$here/router-venv.sh" "$here/venv-once.sh") $base"
venv_reuse_or_remake "router venv" "$venv" "$want" "$python" "$base"
timeout 600 "$venv/bin/pip" install -q --no-input sglang-router==0.3.2
"$venv/bin/sglang-router" launch --help >/dev/null
"$venv/bin/python" -c 'import importlib.metadata as md; print("sglang-router", md.version("sglang-router"))'
venv_stamp "$venv" "$want"
