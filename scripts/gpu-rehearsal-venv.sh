#!/usr/bin/env bash
# Build (once) the venv that rehearses the GPU machine's software on a CPU: Python 3.12, torch 2.11 and
# triton 3.6 from the package index (the CUDA wheel: it imports and runs on a CPU; torch.cuda is simply
# unavailable). No pytest: the rehearsal takes it from scripts/wheelhouse as the GPU machine must.
# A stamp holding the hash of this script (and venv-once.sh) and the base interpreter makes a second run
# a no-op.
# Usage: scripts/gpu-rehearsal-venv.sh <venv-dir> [python3.12]
set -euo pipefail

venv=${1:?usage: gpu-rehearsal-venv.sh <venv-dir> [python3.12]}
python=${2:-}
if [[ -z "$python" ]]; then
  for cand in /root/.pyenv/versions/3.12*/bin/python "$(command -v python3.12 2>/dev/null)"; do
    if [[ -n "$cand" && -x "$cand" ]]; then python=$cand; break; fi
  done
fi
[[ -n "$python" ]] || { echo "gpu-rehearsal venv: no python3.12 found (pass one)" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=venv-once.sh
source "$here/venv-once.sh"
base=$(venv_base "$python")
case "$base" in
  *" 3.12."*) ;;
  *) echo "gpu-rehearsal venv: $python is not Python 3.12 ($base)" >&2; exit 2 ;;
esac
want="$(venv_hash "$here/gpu-rehearsal-venv.sh" "$here/venv-once.sh") $base"
venv_reuse_or_remake "gpu-rehearsal venv" "$venv" "$want" "$python" "$base"
start=$(date +%s)
# The GPU machine's versions (docs/gpu-check.md): torch 2.11 pins its triton (3.6 on Linux x86_64).
# numpy < 2.4: Triton 3.6's interpreter (TRITON_INTERPRET=1, the rehearsal's CPU run of SGLang's
# kernel) converts 1-element arrays with int(), which numpy 2.4 refuses (Triton 3.8 no longer does);
# compiled Triton on the GPU needs no numpy.
timeout 3600 "$venv/bin/pip" install -q --no-input --progress-bar off "torch==2.11.*" "triton==3.6.*" "numpy<2.4"
"$venv/bin/python" - <<'PY'
import sys

import numpy
import torch
import triton

assert sys.version_info[:2] == (3, 12), sys.version
assert torch.__version__.startswith("2.11."), torch.__version__
assert triton.__version__.startswith("3.6."), triton.__version__
print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__,
      "numpy", numpy.__version__, "cuda available:", torch.cuda.is_available())
PY
venv_stamp "$venv" "$want"
echo "gpu-rehearsal venv: built in $(( $(date +%s) - start )) s"
