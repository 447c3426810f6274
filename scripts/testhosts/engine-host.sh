#!/usr/bin/env bash
# One test host that runs the REAL SGLang engine (sglang==0.5.23 on the CPU, tests/engine) under
# systemd: a podman container of localhost/kdtree-testhost:bookworm like the fleet's hosts, plus the
# engine venv and the tiny MLA model bind-mounted READ-ONLY at /opt/sglang/venv and /models/tiny-mla
# (tests/engine/engine.env).
#
#   engine-host.sh up [NAME]      build what is missing (image, venv, model; all cached), start the
#                                 host, wait for systemd, install the CPU shims and the stock unit
#                                 (engine-install.sh inside), start it and wait until it is healthy
#   engine-host.sh install [NAME] only the install step, into a running host made elsewhere (molecule)
#   engine-host.sh down [NAME]    remove the host
#   engine-host.sh status [NAME]  container, systemd, unit state, health, RSS of the unit's processes
#   engine-host.sh print-run-args [NAME]   the `podman run` flags (no image, no command)
#
# NAME defaults to kdtree-engine1. The host carries the label kdtree.fleet=engine, so `fleet.sh down`
# (label kdtree.fleet=testhost) leaves it alone. One real-engine host at a time on a 2-core machine:
# its server takes about 3 GiB and both cores while it starts.
# Environment: KDTREE_ENGINE_VENV (default .cache/sglang-venv; must be made from /usr/bin/python3.11,
# which the hosts have too), KDTREE_ENGINE_RELEASE (the SGLang release of that venv; default the
# window's newest), KDTREE_ENGINE_MODEL (default: the tiny model made by
# tests/engine/make_tiny_model.py), KDTREE_ENGINE_SPEC (the stock unit's speculative configuration,
# tests/engine/spec/NAME.conf, default dflash), KDTREE_ENGINE_NO_START=1 (install: write the stock unit
# only, a later restart starts it), KDTREE_ENGINE_WAIT (seconds to wait until healthy, default 240),
# KDTREE_TESTHOST_IMAGE, KDTREE_CUDA_HOME (as fleet.sh).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
IMAGE="${KDTREE_TESTHOST_IMAGE:-localhost/kdtree-testhost:bookworm}"
VENV="${KDTREE_ENGINE_VENV:-$ROOT/.cache/sglang-venv}"
WAIT="${KDTREE_ENGINE_WAIT:-240}"
ENGINE_PYTHON=/usr/bin/python3.11
PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)
DEFAULT_NAME=kdtree-engine1
# shellcheck source=../../tests/engine/engine.env
source "$ROOT/tests/engine/engine.env"

log() { echo "engine-host: $*" >&2; }
die() {
  log "$*"
  exit 1
}

# The model directory (built once, cached by the recipe's hash); prints its path.
model_dir() {
  if [[ -n "${KDTREE_ENGINE_MODEL:-}" ]]; then
    echo "$KDTREE_ENGINE_MODEL"
    return
  fi
  "$VENV/bin/python" "$ROOT/tests/engine/make_tiny_model.py"
}

# The engine venv: scripts/sglang-venv.sh (cached by its stamp) with Debian's python, which the hosts
# also have at the same path; a venv made from another python cannot run inside a host.
ensure_venv() {
  [[ -x "$ENGINE_PYTHON" ]] || die "$ENGINE_PYTHON not found (Debian's python3.11; the hosts run it)"
  bash "$ROOT/scripts/sglang-venv.sh" "$VENV" "$ENGINE_PYTHON" ${KDTREE_ENGINE_RELEASE:+"$KDTREE_ENGINE_RELEASE"} >&2
  local home
  home="$(sed -n 's/^home = //p' "$VENV/pyvenv.cfg")"
  [[ "$home" == "$(dirname "$ENGINE_PYTHON")" ]] ||
    die "$VENV was made from a python in $home, not $ENGINE_PYTHON: a host cannot run it"
}

run_args() {
  local name="$1" model="$2"
  # The fleet's flags (systemd, runc/cgroupfs, ulimits, the CUDA toolkit read-only), our label.
  KDTREE_FLEET_LABEL=engine bash "$HERE/fleet.sh" print-run-args "$name"
  printf '%s\n' -v "$VENV:$ENGINE_VENV_MOUNT:ro" -v "$model:$ENGINE_MODEL_MOUNT:ro"
}

wait_systemd() {
  bash "$HERE/fleet.sh" wait-systemd "$1" || die "$1: systemd did not come up"
}

remove() {
  local name="$1" try
  for try in 1 2 3 4 5; do
    "${PODMAN[@]}" rm -f -t 10 "$name" >/dev/null 2>&1 || true
    "${PODMAN[@]}" container exists "$name" || return 0
    sleep "$try"
  done
  die "could not remove $name; remove by hand: podman rm -f $name"
}

# Starts the container unless it runs already with the same mounts; a stale one (no exec possible,
# see fleet.sh) or one with other mounts is created afresh.
start_host() {
  local name="$1" model="$2" state mounts
  state="$("${PODMAN[@]}" container inspect -f '{{.State.Status}}' "$name" 2>/dev/null || echo absent)"
  if [[ "$state" == running ]] && "${PODMAN[@]}" exec "$name" true 2>/dev/null; then
    mounts="$("${PODMAN[@]}" container inspect -f '{{range .Mounts}}{{.Source}} {{end}}' "$name")"
    if [[ " $mounts " == *" $VENV "* && " $mounts " == *" $model "* ]]; then
      return 0
    fi
    log "$name runs with other mounts ($mounts): creating it again"
  fi
  [[ "$state" == absent ]] || remove "$name"
  local args
  mapfile -t args < <(run_args "$name" "$model")
  "${PODMAN[@]}" run "${args[@]}" "$IMAGE" /sbin/init >/dev/null
  log "$name: container started"
}

# Copies the CPU shims, the stock unit and engine-install.sh into a running host and runs it there
# (shims to /opt/cpu-shims, the stock unit, start, wait for health). Also used by molecule's engine
# scenario for the host molecule created with the same mounts.
install() {
  local name="$1" stage
  stage="$(mktemp -d)"
  cp "$HERE/engine-install.sh" "$HERE/host-unit.sh" "$ROOT/tests/engine/sglang.service" "$ROOT/tests/engine/engine.env" "$stage/"
  (cd "$ROOT/tests/engine" && find cpu_shims spec release -type f ! -path '*/__pycache__/*' -print0 | xargs -0 cp --parents -t "$stage")
  local start=()
  [[ "${KDTREE_ENGINE_NO_START:-0}" != 1 ]] || start=(--no-start)
  "${PODMAN[@]}" exec "$name" rm -rf /tmp/kdtree-engine
  "${PODMAN[@]}" cp "$stage" "$name:/tmp/kdtree-engine"
  rm -rf "$stage"
  "${PODMAN[@]}" exec "$name" bash /tmp/kdtree-engine/engine-install.sh --venv "$ENGINE_VENV_MOUNT" \
    --model "$ENGINE_MODEL_MOUNT" --spec "${KDTREE_ENGINE_SPEC:-dflash}" "${start[@]}" --wait "$WAIT" | sed "s/^/[$name] /" >&2
}

up() {
  local name="$1" t0=$SECONDS
  bash "$HERE/build-image.sh"
  ensure_venv
  # the venv's own directory (the machine-level cache's entry .cache/sglang-venv links to): a venv of
  # another recipe is another directory, so a host that mounts an older one is created again
  VENV=$(realpath "$VENV")
  local model
  model="$(model_dir)"
  [[ -f "$model/config.json" ]] || die "no model at $model"
  log "venv $VENV, model $model"
  start_host "$name" "$model"
  wait_systemd "$name"
  log "$name: systemd up after $((SECONDS - t0)) s"
  install "$name"
  log "$name up in $((SECONDS - t0)) s"
  status "$name"
}

# Sum of VmRSS over the processes in the unit's cgroup (launcher, scheduler, detokenizer, ...), MiB.
RSS_SCRIPT='for d in /proc/[0-9]*; do grep -qs "/sglang.service" "$d/cgroup" && sed -n "s/^VmRSS: *//p" "$d/status"; done |
  awk "{ s += \$1 } END { printf \"%d\", s / 1024 }"'

status() {
  local name="$1" state sys=- unit=- health=- rss=-
  state="$("${PODMAN[@]}" container inspect -f '{{.State.Status}}' "$name" 2>/dev/null || echo absent)"
  if [[ "$state" == running ]]; then
    sys="$("${PODMAN[@]}" exec "$name" systemctl is-system-running 2>/dev/null || true)"
    unit="$("${PODMAN[@]}" exec "$name" systemctl show -p ActiveState --value sglang.service 2>/dev/null || true)"
    health="$("${PODMAN[@]}" exec "$name" curl -s -o /dev/null -w '%{http_code}' "$ENGINE_HEALTH_URL" 2>/dev/null || true)"
    rss="$("${PODMAN[@]}" exec "$name" bash -c "$RSS_SCRIPT" 2>/dev/null || true)"
  fi
  printf '%-16s %-8s %-9s %-8s %-7s %s\n' HOST STATE SYSTEMD SGLANG HEALTH RSS_MIB
  printf '%-16s %-8s %-9s %-8s %-7s %s\n' "$name" "$state" "${sys:--}" "${unit:--}" "${health:--}" "${rss:--}"
}

down() {
  local name="$1"
  if "${PODMAN[@]}" container exists "$name"; then
    remove "$name"
    log "removed $name"
  fi
}

name="${2:-$DEFAULT_NAME}"
case "${1:-}" in
  up) up "$name" ;;
  install) install "$name" ;;
  down) down "$name" ;;
  status) status "$name" ;;
  print-run-args) run_args "$name" "$(model_dir)" ;;
  *)
    echo "usage: $0 up [NAME] | install [NAME] | down [NAME] | status [NAME] | print-run-args [NAME]" >&2
    exit 2
    ;;
esac
