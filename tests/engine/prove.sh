#!/usr/bin/env bash
# End to end on one real-engine test host, with the time of each step: bring the host up (image,
# venv and model cached), show the unit and /generate, compare 3 greedy answers with the transformers
# reference, put the kdtree patch on by hand (patch_check.sh, validate mode; with a built
# libkdtree_verify.so when one is found under build/kernel, so that verify calls are routed and
# counted), take it off again, and remove the host (also on failure).
#
# Usage: tests/engine/prove.sh [NAME]     (NAME default kdtree-engine1; one real-engine host at a time)
# Environment: KDTREE_ENGINE_VENV (default .cache/engine-venv), KDTREE_ENGINE_KEEP=1 keeps the host.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
NAME="${1:-kdtree-engine1}"
VENV="${KDTREE_ENGINE_VENV:-$ROOT/.cache/engine-venv}"
PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)
# shellcheck source=engine.env
source "$HERE/engine.env"
GENERATE_URL="${ENGINE_HEALTH_URL%/health}/generate"
T0=$SECONDS
step_t0=$SECONDS

step() {
  echo "== [$((SECONDS - step_t0)) s for the last step, $((SECONDS - T0)) s total] $*"
  step_t0=$SECONDS
}
cleanup() {
  local rc=$?
  if [[ "${KDTREE_ENGINE_KEEP:-0}" != 1 ]]; then
    KDTREE_ENGINE_VENV="$VENV" bash "$ROOT/scripts/testhosts/engine-host.sh" down "$NAME" || true
  fi
  echo "== prove.sh: rc=$rc, wall time $((SECONDS - T0)) s"
}
trap cleanup EXIT

step "up"
KDTREE_ENGINE_VENV="$VENV" bash "$ROOT/scripts/testhosts/engine-host.sh" up "$NAME"
model="$("$VENV/bin/python" "$HERE/make_tiny_model.py" 2>/dev/null)"

step "systemctl status"
"${PODMAN[@]}" exec "$NAME" systemctl status --no-pager --lines 0 sglang.service || true

step "one /generate (text in)"
"${PODMAN[@]}" exec "$NAME" curl -s -H Content-Type:application/json "$GENERATE_URL" \
  -d '{"text": "one two three four", "sampling_params": {"temperature": 0, "max_new_tokens": 16}}'
echo

step "greedy equality with transformers (3 prompts, 16 tokens)"
"$VENV/bin/python" "$HERE/reference_generate.py" --model "$model" \
  --server-cmd "${PODMAN[*]} exec $NAME curl -s -H Content-Type:application/json $GENERATE_URL -d" 2>/dev/null

step "kdtree patch by hand (validate)"
lib_args=()
lib="$(find "$ROOT/build/kernel" -name libkdtree_verify.so 2>/dev/null | sort | tail -n 1 || true)"
[[ -z "$lib" ]] || lib_args=(--lib "$lib")
bash "$HERE/patch_check.sh" "$NAME" --mode validate "${lib_args[@]}"

step "patch removed again"
bash "$HERE/patch_check.sh" "$NAME" --remove
KDTREE_ENGINE_VENV="$VENV" bash "$ROOT/scripts/testhosts/engine-host.sh" status "$NAME"
step "done"
