#!/usr/bin/env bash
# Build (once) the venv that runs the real sglang==0.5.23 wheel on a machine without a GPU:
# torch/torchvision from local disk, sglang with --no-deps, plus the packages the wheel needs at
# import time (listed below; the import check at the end fails when one is missing). The SGLang
# 0.5.23 facts the patch relies on (the forward_extend signature, spawned schedulers, the plugin
# hook) are summarised in files/sglang_ext/README.md.
# A stamp holding the hash of this script and the base interpreter (its real path and version) makes
# a second run a no-op; change the script or the python and the venv is rebuilt.
# The test hosts' real engine (tests/engine) needs the venv made from Debian's /usr/bin/python3.11:
# bind-mounted read-only into a Debian 12 host at the same path, it then runs with the host's python.
# Usage: scripts/sglang-venv.sh <venv-dir> [python]
set -euo pipefail

venv=${1:?usage: sglang-venv.sh <venv-dir> [python]}
python=${2:-python3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
base=$("$python" -c 'import os, sys; print(os.path.realpath(sys.executable), sys.version.split()[0])')
want="$(sha256sum "$here/sglang-venv.sh" | cut -d' ' -f1) $base"
stamp="$venv/.kdtree-stamp"
# One build at a time per venv (make -j may ask for it from several targets).
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "sglang venv: reusing $venv ($base)"
  exit 0
fi

echo "sglang venv: building $venv from $base"
rm -rf "$venv"
"$python" -m venv "$venv"
pip=("$venv/bin/pip" install -q --no-input)
"${pip[@]}" --upgrade pip
"${pip[@]}" torch==2.14.1 torchvision==0.29.1
"${pip[@]}" --no-deps sglang==0.5.23
"${pip[@]}" numpy orjson psutil pybase64 requests packaging pillow starlette msgspec pydantic pyzmq tqdm \
  IPython aiohttp transformers==5.19.0 sentencepiece dill apache-tvm-ffi==0.1.11 compressed-tensors gguf \
  openai partial_json_parser einops pyyaml uvicorn uvloop fastapi setproctitle jsonschema xgrammar \
  soundfile python-multipart pytest prometheus-client
"$venv/bin/python" - <<'PY'
import importlib.metadata as md
import prometheus_client  # --enable-metrics (the engine test host's stock unit runs with it)
import sglang.srt.layers.attention.triton_backend as tb
print("sglang", md.version("sglang"), "torch", md.version("torch"), "triton_backend ok:", tb.__name__)
PY
echo "$want" > "$stamp"
