#!/usr/bin/env bash
# Installs the Debian packages the test fleet needs (podman, runc, debootstrap) and those the real
# SGLang engine needs here: python3.11-venv (the engine venv is made from Debian's /usr/bin/python3.11
# so that test hosts can run it) and ninja-build (SGLang JIT-compiles NGRAM's corpus with ninja).
# prometheus (its promtool too): the monitoring tests start it as a process of their own
# (tests/helpers/prometheus.py); the package's service is never started (see below).
# Idempotent: does nothing when they are already there.
set -euo pipefail
need=()
for pkg in podman runc debootstrap python3.11-venv ninja-build; do
  [[ $(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null) == "install ok installed" ]] || need+=("$pkg")
done
# without their recommends: prometheus would bring node-exporter, another service
bare=()
for pkg in prometheus; do
  [[ $(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null) == "install ok installed" ]] || bare+=("$pkg")
done
if ((${#need[@]} + ${#bare[@]})); then
  echo "install-system-deps: installing ${need[*]} ${bare[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # No service starts at install: CI has no systemd and prometheus's postinst would start its daemon
  # (invoke-rc.d asks policy-rc.d; 101: not allowed). One already there (a container's) is left alone.
  policy=/usr/sbin/policy-rc.d
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\n# kdtree-fleet install-system-deps: no service starts during the install\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  apt-get update -qq
  if ((${#need[@]})); then apt-get install -y -qq "${need[@]}" >/dev/null; fi
  if ((${#bare[@]})); then apt-get install -y -qq --no-install-recommends "${bare[@]}" >/dev/null; fi
fi
# podman on this kind of machine: crun refuses the hybrid cgroup layout and the default
# RLIMIT_NOFILE cannot be raised, so use runc + cgroupfs and modest ulimits.
conf=/etc/containers/containers.conf
if ! grep -q 'kdtree-fleet' "$conf" 2>/dev/null; then
  mkdir -p /etc/containers
  cat > "$conf" <<'CONF'
# written by kdtree-fleet scripts/install-system-deps.sh
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"

[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
CONF
fi
echo "install-system-deps: ok"
