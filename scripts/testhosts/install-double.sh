#!/usr/bin/env bash
# Runs INSIDE a test host (as root). Installs the SGLang TEST DOUBLE the way an operator had the
# real engine: a venv made from Debian's /usr/bin/python3 at /opt/sglang/venv, the `sglang`
# package in that venv's site-packages (with a dist-info, so importlib.metadata sees
# sglang 0.5.23+testdouble), a tiny model directory /models/tiny-test, and the stock unit
# /etc/systemd/system/sglang.service, enabled and started; and the nvidia-smi TEST DOUBLE
# (tests/doubles/nvidia_smi, in /usr/lib/kdtree-testhost) linked at /usr/bin/nvidia-smi, with its state file
# /etc/kdtree-testhost/nvidia-smi.json (eight healthy GPUs; written only when absent, so a test's
# bad GPUs stay until the test puts the file back).
#
# Usage: install-double.sh [--src DIR] [--no-start] [--wait SECONDS]
#   DIR (default: this script's directory) holds sglang/ (the package), sglang.service and
#   optionally wheels/*.whl (setproctitle, installed offline: hosts cannot reach PyPI).
#   --wait: after starting, wait up to SECONDS (default 60; 0 = do not wait) for /health == 200.
# Idempotent: a second run with the same files changes nothing and leaves a running unit alone.
set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
START=1
WAIT=60
while (($#)); do
  case "$1" in
    --src) SRC="$2"; shift 2 ;;
    --no-start) START=0; shift ;;
    --wait) WAIT="$2"; shift 2 ;;
    *) echo "install-double: unknown argument $1" >&2; exit 2 ;;
  esac
done

VENV=/opt/sglang/venv
UNIT=/etc/systemd/system/sglang.service
MODEL=/models/tiny-test
VERSION=0.5.23+testdouble
changed=0
log() { echo "install-double: $*"; }
die() { echo "install-double: $*" >&2; exit 1; }
# shellcheck source=host-unit.sh
source "$(dirname "${BASH_SOURCE[0]}")/host-unit.sh"

if [[ ! -x "$VENV/bin/python" ]]; then
  /usr/bin/python3 -m venv "$VENV"
  log "created $VENV from /usr/bin/python3"
  changed=1
fi
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"

shopt -s nullglob
for whl in "$SRC"/wheels/*.whl; do
  name="$(basename "$whl" | cut -d- -f1)"
  if ! "$VENV/bin/python" -m pip show -q "$name" >/dev/null 2>&1; then
    "$VENV/bin/python" -m pip install -q --no-index --no-deps --disable-pip-version-check "$whl"
    log "installed $(basename "$whl")"
    changed=1
  fi
done
shopt -u nullglob

# The package: replace it when its content differs.
want="$(cd "$SRC" && find sglang -name '*.py' -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)"
have="$(cat "$SITE/sglang/.double-hash" 2>/dev/null || true)"
if [[ "$want" != "$have" ]]; then
  rm -rf "$SITE/sglang" "$SITE"/sglang-*.dist-info
  (cd "$SRC" && find sglang -name '*.py' -type f -print0 | xargs -0 cp --parents -t "$SITE")
  echo "$want" >"$SITE/sglang/.double-hash"
  dist="$SITE/sglang-$VERSION.dist-info"
  mkdir -p "$dist"
  printf 'Metadata-Version: 2.1\nName: sglang\nVersion: %s\nSummary: TEST DOUBLE of SGLang (kdtree-fleet), not the real engine\n' \
    "$VERSION" >"$dist/METADATA"
  echo kdtree-install-double >"$dist/INSTALLER"
  echo sglang >"$dist/top_level.txt"
  (cd "$SITE" && find sglang "${dist##*/}" -type f ! -name RECORD | LC_ALL=C sort | sed 's/$/,,/') >"$dist/RECORD"
  echo "${dist##*/}/RECORD,," >>"$dist/RECORD"
  "$VENV/bin/python" -m compileall -q "$SITE/sglang" >/dev/null
  log "installed sglang test double ($want) into $SITE"
  changed=1
fi

if [[ ! -f "$MODEL/config.json" ]]; then
  mkdir -p "$MODEL"
  cat >"$MODEL/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
 "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
 "num_hidden_layers": 2, "vocab_size": 256, "max_position_embeddings": 2048,
 "torch_dtype": "bfloat16"}
JSON
  log "created $MODEL"
fi

SMI=/usr/lib/kdtree-testhost
if [[ -f "$SRC/nvidia-smi" ]]; then
  for file in nvidia-smi nvidia_smi.py; do
    if ! cmp -s "$SRC/$file" "$SMI/$file"; then
      install -D -m "$([[ $file == nvidia-smi ]] && echo 0755 || echo 0644)" "$SRC/$file" "$SMI/$file"
      log "installed the nvidia-smi test double's $file in $SMI"
    fi
  done
  [[ "$(readlink /usr/bin/nvidia-smi 2>/dev/null)" == "$SMI/nvidia-smi" ]] || ln -sfn "$SMI/nvidia-smi" /usr/bin/nvidia-smi
fi
if [[ -f "$SRC/nvidia-smi" && ! -f /etc/kdtree-testhost/nvidia-smi.json ]]; then
  mkdir -p /etc/kdtree-testhost
  echo '{"count": 8}' >/etc/kdtree-testhost/nvidia-smi.json
  log "wrote /etc/kdtree-testhost/nvidia-smi.json (eight healthy GPUs)"
fi

unit_put "$SRC/sglang.service" "$UNIT"
((START)) || exit 0
unit_up http://127.0.0.1:30000/health "$WAIT"
