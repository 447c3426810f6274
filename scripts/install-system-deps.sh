#!/usr/bin/env bash
# Installs the Debian packages the test fleet needs (podman, runc, debootstrap) and those the real
# SGLang engine needs here: python3.11-venv (the engine venv is made from Debian's /usr/bin/python3.11
# so that test hosts can run it) and ninja-build (SGLang JIT-compiles NGRAM's corpus with ninja).
# Idempotent: does nothing when they are already there.
set -euo pipefail
need=()
for pkg in podman runc debootstrap python3.11-venv ninja-build; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if ((${#need[@]})); then
  echo "install-system-deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
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
