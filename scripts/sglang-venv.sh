#!/usr/bin/env bash
# Build (once) a venv that runs one real SGLang release's wheel on a machine without a GPU: sglang
# with --no-deps, the torch stack that release pins (read from the wheel's own METADATA: torch,
# transformers, apache-tvm-ffi), plus the packages the wheel needs at import time (listed below; the
# import check at the end fails when one is missing). The release is one of the patch's supported
# window (files/sglang_ext/kdtree_verify/target.py SUPPORTED_SGLANG_VERSIONS, its one owner): the
# newest unless told. The SGLang facts the patch relies on (the forward_extend signature, spawned
# schedulers, the plugin hook) are summarised in files/sglang_ext/README.md.
#
# One venv serves every release that pins the same stack: asked for another such release, it swaps
# sglang only (seconds); a release pinning another stack rebuilds it. The stamp holds the hash of this
# script, the base interpreter (its real path and version) and the stack; change any and the venv is
# rebuilt.
# The test hosts' real engine (tests/engine) needs the venv made from Debian's /usr/bin/python3.11:
# bind-mounted read-only into a Debian 12 host at the same path, it then runs with the host's python.
# --no-compile: no .pyc at install (pip compiles ~17k files, ~45 s of CPU); for a venv that only the
# tests run from a writable directory (Python writes the .pyc of what it imports); the engine's venv,
# mounted read-only into the hosts, is compiled.
# Usage: scripts/sglang-venv.sh [--no-compile] <venv-dir> [python] [release]
set -euo pipefail

compile=--compile
if [[ ${1:-} == --no-compile ]]; then
  compile=--no-compile
  shift
fi
venv=${1:?usage: sglang-venv.sh [--no-compile] <venv-dir> [python] [release]}
python=${2:-python3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
target="$here/../files/sglang_ext/kdtree_verify/target.py"
mapfile -t window < <("$python" -c 'import runpy, sys
print("\n".join(runpy.run_path(sys.argv[1])["SUPPORTED_SGLANG_VERSIONS"]))' "$target")
release=${3:-${window[-1]}}
# a word match, not printf | grep -q: under pipefail grep's early exit can fail printf with SIGPIPE
if [[ " ${window[*]} " != *" $release "* ]]; then
  echo "sglang venv: sglang $release is outside the supported window (${window[*]}, $target)" >&2
  exit 2
fi
base=$("$python" -c 'import os, sys; print(os.path.realpath(sys.executable), sys.version.split()[0])')
stamp="$venv/.kdtree-stamp"
pip=("$venv/bin/pip" install -q --no-input --disable-pip-version-check "$compile")

# The pins of the installed sglang that make its stack (its Requires-Dist, not an extra), one a line.
stack_pins() {
  "$venv/bin/python" - <<'PY'
import importlib.metadata as md
import re

pins = {}
for req in md.requires("sglang") or []:
    m = re.fullmatch(r"(torch|transformers|apache-tvm-ffi)==([\w.]+)", req.strip())
    if m:
        pins[m.group(1)] = m.group(2)
missing = {"torch", "transformers", "apache-tvm-ffi"} - set(pins)
if missing:
    raise SystemExit(f"sglang {md.version('sglang')} pins no {sorted(missing)} exactly")
print("\n".join(f"{k}=={v}" for k, v in sorted(pins.items())))
PY
}

# What this machine installs for a release's torch pin. PyPI's torch 2.14.1/torchvision 0.29.1 (CUDA
# builds, local disk) run on the CPU. For torch 2.13.0 only the CPU build is on disk (/opt/wheels) and
# PyPI's torchvision 0.28.0 (torch 2.13.0's own pin) is a CUDA build whose C ops cannot load there:
# torchvision falls back to Python (extension._has_ops() False) except for its unguarded
# register_fake("torchvision::nms"/"qnms"), which guard_torchvision guards like its other meta kernels.
# Triton: the version torch's CUDA build pins (the CPU build pins none).
torch_stack() {
  case $1 in
    2.14.1) echo "torch==2.14.1 torchvision==0.29.1" ;;
    2.13.0) echo "torch==2.13.0+cpu triton==3.7.1 torchvision==0.28.0" ;;
    *)
      echo "sglang venv: no torch stack for torch==$1 here (scripts/sglang-venv.sh torch_stack)" >&2
      return 2
      ;;
  esac
}

guard_torchvision() {
  "$venv/bin/python" - <<'PY'
import importlib.util
import re
import sys
from pathlib import Path

spec = importlib.util.find_spec("torchvision")
path = Path(spec.submodule_search_locations[0]) / "_meta_registrations.py"
text = path.read_text()
unguarded = re.compile(r'^@torch\.library\.register_fake\(("torchvision::\w+")\)$', re.M)
if not unguarded.search(text):
    sys.exit(f"{path}: no unguarded register_fake of a torchvision op to guard")
guarded = r"@(torch.library.register_fake(\1) if torchvision.extension._has_ops() else (lambda fn: fn))"
path.write_text(unguarded.sub(guarded, text))
PY
}

# The machine-level cache's entry for this recipe (scripts/devcache.py); the clone's path links to it.
venv=$(python3 "$here/devcache.py" link "$venv" "$(basename "$venv")" \
  "$(printf '%s\n' "$(sha256sum <"$here/sglang-venv.sh")" "$compile" "$base" "$release" | sha256sum | cut -c1-16)")
# One build at a time per venv (make -j may ask for it from several targets).
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9

script_hash="$(sha256sum "$here/sglang-venv.sh" | cut -d' ' -f1) $compile"
installed() { "$venv/bin/python" -c 'import importlib.metadata as md; print(md.version("sglang"))' 2>/dev/null; }
if [[ -f "$stamp" ]]; then
  if [[ "$(installed || true)" != "$release" ]]; then
    echo "sglang venv: swapping sglang in $venv for sglang==$release"
    "${pip[@]}" --no-deps --force-reinstall "sglang==$release" || echo "sglang venv: the swap failed"
  fi
  if [[ "$(cat "$stamp")" == "$script_hash $base $(stack_pins 2>/dev/null | tr '\n' ' ')" ]]; then
    echo "sglang venv: reusing $venv (sglang $release, $base)"
    exit 0
  fi
fi

echo "sglang venv: building $venv for sglang==$release from $base"
rm -rf "$venv"
"$python" -m venv "$venv"
"${pip[@]}" --upgrade pip
"${pip[@]}" --no-deps "sglang==$release"
pins_text=$(stack_pins)
mapfile -t pins <<<"$pins_text"
torch=$(sed -n 's/^torch==//p' <<<"$pins_text")
stack_text=$(torch_stack "$torch")
read -ra stack <<<"$stack_text"
"${pip[@]}" "${stack[@]}"
if [[ "${stack[*]}" == *+cpu* ]]; then
  guard_torchvision
fi
# transformers and apache-tvm-ffi as the release pins them
others=()
for pin in "${pins[@]}"; do
  [[ $pin == torch==* ]] || others+=("$pin")
done
"${pip[@]}" "${others[@]}" numpy orjson psutil pybase64 requests packaging pillow starlette msgspec \
  pydantic pyzmq tqdm IPython aiohttp sentencepiece dill compressed-tensors gguf openai partial_json_parser \
  einops pyyaml uvicorn uvloop fastapi setproctitle jsonschema xgrammar soundfile python-multipart pytest \
  prometheus-client
"$venv/bin/python" - "$release" <<'PY'
import importlib.metadata as md
import sys

import prometheus_client  # noqa: F401 --enable-metrics (the engine test host's stock unit runs with it)
import torchvision.io  # noqa: F401 sglang.srt.utils.common imports decode_jpeg from it
import sglang.srt.layers.attention.triton_backend as tb

assert md.version("sglang") == sys.argv[1], (md.version("sglang"), sys.argv[1])
print("sglang", md.version("sglang"), "torch", md.version("torch"), "triton_backend ok:", tb.__name__)
PY
echo "$script_hash $base $(stack_pins | tr '\n' ' ')" > "$stamp"
