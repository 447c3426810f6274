#!/usr/bin/env bash
# By hand, without Ansible: put the kdtree verify patch (files/sglang_ext) on a
# real-engine test host (scripts/testhosts/engine-host.sh up) and check that the REAL scheduler loads it.
#
#   tests/engine/patch_check.sh [NAME] [--mode MODE] [--lib FILE]
#                       NAME default kdtree-engine1, MODE default validate; --lib copies a built
#                       libkdtree_verify.so (e.g. build/kernel/sm_120a/) to /opt/kdtree/lib and sets
#                       KDTREE_LIB (without it the marker says state=fallback reason=KDTREE_LIB is not set)
#   tests/engine/patch_check.sh [NAME] --remove       drop-in and /opt/kdtree removed, stock unit restarted
#
# Copies the patch directory to /opt/kdtree/sglang_ext, writes the drop-in
# /etc/systemd/system/sglang.service.d/50-kdtree-manual.conf (PYTHONPATH=/opt/kdtree/sglang_ext
# PREPENDED to the stock unit's /opt/cpu-shims, KDTREE_VERIFY=MODE, SPT_NOENV=1, and the shims' status
# directory), restarts the unit and waits for /health 200, then prints: the seconds to healthy, the
# `kdtree-verify:` marker lines of this invocation (title, state, reason), the live scheduler PIDs,
# four concurrent greedy /generate answers, and the scheduler's routing of verify calls as the CPU
# shims' status file reports it (kdtree_verify.status(): state, reason, counts).
# Exit status 1 when no marker from a live `sglang::scheduler` appeared or the server stopped answering.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=engine.env
source "$HERE/engine.env"
PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)
NAME=kdtree-engine1
MODE=validate
LIB=""
REMOVE=0
while (($#)); do
  case "$1" in
    --mode) MODE="$2"; shift 2 ;;
    --lib) LIB="$(realpath "$2")"; shift 2 ;;
    --remove) REMOVE=1; shift ;;
    -*) echo "usage: $0 [NAME] [--mode MODE] [--lib FILE] | [NAME] --remove" >&2; exit 2 ;;
    *) NAME="$1"; shift ;;
  esac
done
DROPIN=/etc/systemd/system/sglang.service.d/50-kdtree-manual.conf
STATUS_DIR=/run/kdtree-cpu-shims

log() { echo "patch_check: $*" >&2; }
hx() { "${PODMAN[@]}" exec "$NAME" "$@"; }
hxi() { "${PODMAN[@]}" exec -i "$NAME" "$@"; } # with stdin

# Restart the unit and wait for /health 200; prints the seconds it took.
restart_and_wait() {
  hx env URL="$ENGINE_HEALTH_URL" bash -c '
    t0=$(date +%s.%N); systemctl restart sglang.service
    for ((i = 0; i < 1200; i++)); do
      [[ "$(curl -s -o /dev/null -w "%{http_code}" "$URL")" == 200 ]] &&
        { awk -v a="$t0" -v b="$(date +%s.%N)" "BEGIN { printf \"%.1f\\n\", b - a }"; exit 0; }
      [[ "$(systemctl show -p ActiveState --value sglang.service)" == failed ]] && break
      sleep 0.2
    done
    journalctl -o cat --no-pager _SYSTEMD_INVOCATION_ID=$(systemctl show -p InvocationID --value sglang.service) | tail -n 40 >&2
    exit 1'
}

if ((REMOVE)); then
  hx rm -rf "$DROPIN" /opt/kdtree "$STATUS_DIR"
  hx systemctl daemon-reload
  log "removed the drop-in and /opt/kdtree; stock unit healthy after $(restart_and_wait) s"
  exit 0
fi

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
(cd "$ROOT/files" && find sglang_ext -type f ! -path '*/__pycache__/*' -print0 |
  xargs -0 cp --parents -t "$stage")
hx rm -rf /opt/kdtree/sglang_ext "$STATUS_DIR"
hx mkdir -p /opt/kdtree /etc/systemd/system/sglang.service.d
"${PODMAN[@]}" cp "$stage/sglang_ext" "$NAME:/opt/kdtree/sglang_ext"
lib_env=""
hx rm -rf /opt/kdtree/lib
if [[ -n "$LIB" ]]; then
  cp "$LIB" "$stage/libkdtree_verify.so"
  hx mkdir -p /opt/kdtree/lib
  "${PODMAN[@]}" cp "$stage/libkdtree_verify.so" "$NAME:/opt/kdtree/lib/libkdtree_verify.so"
  lib_env="Environment=KDTREE_LIB=/opt/kdtree/lib/libkdtree_verify.so"
fi
hxi bash -c "cat > $DROPIN" <<EOF
# Manual kdtree patch drop-in (tests/engine/patch_check.sh), not the role's drop-in.
# PYTHONPATH replaces the stock unit's value: keep the host's CPU shims after the patch directory.
[Service]
Environment=PYTHONPATH=/opt/kdtree/sglang_ext:/opt/cpu-shims
Environment=KDTREE_VERIFY=$MODE
Environment=SPT_NOENV=1
Environment=PYTHONUNBUFFERED=1
Environment=KDTREE_CPU_SHIMS_STATUS_DIR=$STATUS_DIR
$lib_env
EOF
hx systemctl daemon-reload
secs="$(restart_and_wait)" || {
  log "sglang.service did not become healthy with the patch"
  exit 1
}
log "healthy with the patch (KDTREE_VERIFY=$MODE) after $secs s"

inv="$(hx systemctl show -p InvocationID --value sglang.service)"
markers="$(hx journalctl -o cat --no-pager _SYSTEMD_INVOCATION_ID="$inv" | grep -E '^kdtree-verify(-fallback)?: ' || true)"
sched="$(hx bash -c 'for d in /proc/[0-9]*; do [[ "$(tr "\0" " " < $d/cmdline 2>/dev/null)" == sglang::scheduler* ]] && basename $d; done' || true)"
echo "markers of this invocation:"
echo "${markers:-  (none)}" | sed 's/^/  /'
echo "live scheduler pids: ${sched:-none}"

# Four concurrent requests (verify batches > 1), greedy.
hx env URL="${ENGINE_HEALTH_URL%/health}/generate" bash -c '
  for p in "[3,40,50,60,70,80]" "[10,11,12,13,14,15]" "[100,200,300,400,500,100,200,300]" "[7,7,7,7,7,7,7]"; do
    curl -s -H Content-Type:application/json "$URL" \
      -d "{\"input_ids\": $p, \"sampling_params\": {\"temperature\": 0, \"max_new_tokens\": 12, \"ignore_eos\": true}}" |
      python3 -c "import json, sys; r = json.load(sys.stdin); m = r[\"meta_info\"]; print(\"  generate:\", r[\"output_ids\"], \"e2e %.2f s\" % m[\"e2e_latency\"], \"verify_ct\", m.get(\"spec_verify_ct\"))" &
  done; wait'
health="$(hx curl -s -o /dev/null -w '%{http_code}' "$ENGINE_HEALTH_URL" || true)"
echo "health after the requests: $health"
echo "routing (CPU shims' status files, one per scheduler):"
hxi python3 - "$STATUS_DIR" <<'PY' | sed 's/^/  /'
import glob, json, sys
files = sorted(glob.glob(sys.argv[1] + "/*.json"))
for f in files:
    print(json.dumps(json.load(open(f)), indent=1, sort_keys=True))
if not files:
    print("(no status file)")
PY

ok=0
for pid in $sched; do
  if grep -qE "^kdtree-verify: pid=$pid .*title=sglang::scheduler " <<<"$markers"; then
    ok=1
  fi
done
if ((ok == 0)); then
  log "FAIL: no kdtree-verify marker from a live sglang::scheduler"
  exit 1
fi
[[ "$health" == 200 ]] || {
  log "FAIL: /health $health after the requests"
  exit 1
}
log "OK: marker from the real scheduler, server still answering"
