#!/usr/bin/env bash
# Runs INSIDE a test host (as root), for the drain tests (molecule batch, make bench-drain): the
# operator's stock unit of the SGLang test double listens on the host's own network (--host 0.0.0.0,
# so SGLang's router on the controller reaches it; loopback still answers the health check), each
# POST /generate takes GENERATE_SECONDS and is logged to REQUEST_LOG (the double's knobs). Restarts
# the unit without waiting; prints nothing. Idempotent.
# Usage: serve-on-network.sh GENERATE_SECONDS REQUEST_LOG   (e.g. via podman exec -i HOST bash -s -- 0.2 /var/log/x)
#        serve-on-network.sh --url   wait (60 s) until the unit answers /health, print its worker URL
#                                    (the host's address on its network and the stock unit's port)
set -euo pipefail
port=30000
if [[ "${1:-}" == --url ]]; then
  for _ in $(seq 300); do curl -sf -o /dev/null "http://127.0.0.1:$port/health" && break; sleep 0.2; done
  curl -sf -o /dev/null "http://127.0.0.1:$port/health"
  echo "http://$(ip -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1 | head -n1):$port"
  exit 0
fi
generate=${1:?usage: serve-on-network.sh GENERATE_SECONDS REQUEST_LOG}
log=${2:?usage: serve-on-network.sh GENERATE_SECONDS REQUEST_LOG}
u=/etc/systemd/system/sglang.service
sed -i -e 's|--host 127.0.0.1|--host 0.0.0.0|' -e '/^Environment=SGLANG_DOUBLE_\(GENERATE_SECONDS\|REQUEST_LOG\)=/d' $u
sed -i -e "s|^\[Service\]\$|&\nEnvironment=SGLANG_DOUBLE_GENERATE_SECONDS=$generate\nEnvironment=SGLANG_DOUBLE_REQUEST_LOG=$log|" $u
grep -q -- '--host 0.0.0.0' $u
grep -q "^Environment=SGLANG_DOUBLE_REQUEST_LOG=$log\$" $u
# the stock unit the verify steps compare with is now this one (the operator's edit)
sha256sum $u | cut -d' ' -f1 >/root/stock-unit.sha256
systemctl daemon-reload
systemctl restart --no-block sglang.service
