#!/usr/bin/env bash
# The local test fleet: N podman containers (kdtree-host1..N) from localhost/kdtree-testhost:bookworm,
# each a real systemd host running the stock sglang.service with the SGLang TEST DOUBLE.
#
#   fleet.sh up [N]      build the image if needed (cached), start N hosts (default 3), wait for
#                        systemd, install the double + stock unit in each (install-double.sh)
#   fleet.sh down        remove every fleet host (label kdtree.fleet=$KDTREE_FLEET_LABEL, default testhost)
#   fleet.sh status      print the table
#
# Idempotent: `up` twice leaves running hosts as they are (install-double.sh changes nothing).
# Hosts get this machine's CUDA toolkit read-only at /usr/local/cuda (KDTREE_CUDA_HOME, default
# /usr/local/cuda-13.0; skipped with a warning when absent).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
IMAGE="${KDTREE_TESTHOST_IMAGE:-localhost/kdtree-testhost:bookworm}"
PREFIX="${KDTREE_FLEET_PREFIX:-kdtree-host}"
CUDA_HOME_HOST="${KDTREE_CUDA_HOME:-/usr/local/cuda-13.0}"
LABEL="kdtree.fleet=${KDTREE_FLEET_LABEL:-testhost}"
PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)

log() { echo "fleet: $*" >&2; }

# Arguments for `podman run` that make a systemd test host; shared with tests (print-run-args).
run_args() {
  local name="$1"
  local args=(--detach --name "$name" --hostname "$name" --label "$LABEL" --privileged --systemd=always
    --ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
  if [[ -d "$CUDA_HOME_HOST" ]]; then
    args+=(-v "$CUDA_HOME_HOST:/usr/local/cuda:ro")
  else
    log "WARNING: $CUDA_HOME_HOST not found, hosts get no CUDA toolkit"
  fi
  printf '%s\n' "${args[@]}"
}

wait_systemd() {
  local name="$1" state=""
  for _ in $(seq 1 120); do
    state="$("${PODMAN[@]}" exec "$name" systemctl is-system-running 2>/dev/null || true)"
    case "$state" in
      running | degraded) return 0 ;;
    esac
    sleep 0.5
  done
  log "$name: systemd not up after 60 s (state: ${state:-none}; container:" \
    "$("${PODMAN[@]}" container inspect -f '{{.State.Status}} exit={{.State.ExitCode}} {{.State.Error}}' "$name" 2>&1))"
  "${PODMAN[@]}" logs --tail 20 "$name" 2>&1 | sed "s/^/fleet: $name log: /" >&2 || true
  return 1
}

# podman rm -f with a stop timeout, retried: the first rm of a stale container (see start_host) may
# only notice that it is stopped ("container state improper: stopped") and fail; a later one removes it.
remove_containers() {
  local timeout="$1"
  shift
  local try name left=("$@")
  for try in 1 2 3 4 5; do
    "${PODMAN[@]}" rm -f -t "$timeout" "${left[@]}" >/dev/null 2>&1 || true
    mapfile -t left < <(for name in "${left[@]}"; do "${PODMAN[@]}" container exists "$name" && echo "$name"; done)
    ((${#left[@]} == 0)) && return 0
    sleep "$try"
  done
  log "could not remove ${left[*]}; remove by hand: podman rm -f ${left[*]}"
  return 1
}

# A host counts as running only when podman can exec in it. After a machine restore (or a crash of
# conmon) podman's state can still say "running" for a container whose processes are gone
# ("cannot exec in a stopped container"); such a host, and any stopped one, is removed and created
# afresh: install_double puts the double back, so nothing of value is lost.
start_host() {
  local name="$1"
  local state
  state="$("${PODMAN[@]}" container inspect -f '{{.State.Status}}' "$name" 2>/dev/null || echo absent)"
  if [[ "$state" == running ]] && "${PODMAN[@]}" exec "$name" true 2>/dev/null; then
    return 0
  fi
  if [[ "$state" != absent ]]; then
    log "$name: state '$state' and no exec possible: removing the stale container and creating it again"
    remove_containers 0 "$name" || return 1
  fi
  local args
  mapfile -t args < <(run_args "$name")
  "${PODMAN[@]}" run "${args[@]}" "$IMAGE" /sbin/init >/dev/null
}

install_double() {
  local name="$1" bundle="$2"
  "${PODMAN[@]}" exec "$name" rm -rf /tmp/kdtree-double
  "${PODMAN[@]}" cp "$bundle" "$name:/tmp/kdtree-double"
  "${PODMAN[@]}" exec "$name" bash /tmp/kdtree-double/install-double.sh --wait 60 |
    sed "s/^/[$name] /" >&2
}

hosts() {
  "${PODMAN[@]}" ps -a --filter "label=$LABEL" --format '{{.Names}}' | sort -V
}

status() {
  printf '%-14s %-8s %-9s %-8s %-7s %s\n' HOST STATE SYSTEMD SGLANG HEALTH IP
  local name state sys unit health ip
  for name in $(hosts); do
    state="$("${PODMAN[@]}" container inspect -f '{{.State.Status}}' "$name")"
    sys=- unit=- health=- ip=-
    if [[ "$state" == running ]]; then
      sys="$("${PODMAN[@]}" exec "$name" systemctl is-system-running 2>/dev/null || true)"
      unit="$("${PODMAN[@]}" exec "$name" systemctl show -p ActiveState --value sglang.service 2>/dev/null || true)"
      health="$("${PODMAN[@]}" exec "$name" curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:30000/health 2>/dev/null || true)"
      ip="$("${PODMAN[@]}" container inspect -f '{{.NetworkSettings.IPAddress}}' "$name")"
    fi
    printf '%-14s %-8s %-9s %-8s %-7s %s\n' "$name" "$state" "${sys:--}" "${unit:--}" "${health:--}" "${ip:--}"
  done
}

up() {
  local n="${1:-3}"
  local t0=$SECONDS
  bash "$HERE/build-image.sh"
  local bundle
  bundle="$(bash "$HERE/make-bundle.sh")"
  local i pids=()
  for i in $(seq 1 "$n"); do
    start_host "$PREFIX$i"
  done
  for i in $(seq 1 "$n"); do
    wait_systemd "$PREFIX$i"
  done
  log "$n hosts booted in $((SECONDS - t0)) s"
  for i in $(seq 1 "$n"); do
    install_double "$PREFIX$i" "$bundle" &
    pids+=($!)
  done
  local rc=0 pid
  for pid in "${pids[@]}"; do
    wait "$pid" || rc=1
  done
  log "fleet up ($n hosts) in $((SECONDS - t0)) s"
  status
  return "$rc"
}

down() {
  local names
  mapfile -t names < <(hosts)
  if ((${#names[@]} > 0)); then
    remove_containers 5 "${names[@]}" || return 1
    log "removed: ${names[*]}"
  fi
}

case "${1:-}" in
  up) up "${2:-${N:-3}}" ;;
  down) down ;;
  status) status ;;
  print-run-args) run_args "${2:?name}" ;;
  wait-systemd) wait_systemd "${2:?name}" ;;
  *)
    echo "usage: $0 up [N] | down | status | print-run-args NAME | wait-systemd NAME" >&2
    exit 2
    ;;
esac
