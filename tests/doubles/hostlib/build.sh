#!/usr/bin/env bash
# Build the host-memory TEST DOUBLE of libkdtree_verify.so (tests/doubles/hostlib/README.md):
#   build.sh --out <dir> [--cxx <g++>] [--fault drop-prefix-key]
# -> <dir>/libkdtree_verify.so (fp32 on host, the C ABI of roles/kdtree_build/files/csrc/kdtree_verify.h).
# Never for a GPU host: the patch accepts it only for CPU tensors (it declares itself double=host).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
csrc="$(cd "$here/../../../roles/kdtree_build/files/csrc" && pwd)"
out="" cxx="${CXX:-g++}" fault=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="${2:-}"; shift 2 ;;
    --cxx) cxx="${2:-}"; shift 2 ;;
    --fault)
      [[ "${2:-}" == drop-prefix-key ]] || { echo "unknown --fault '${2:-}' (drop-prefix-key)" >&2; exit 2; }
      fault=1; shift 2 ;;
    *) echo "usage: $0 --out <dir> [--cxx <g++>] [--fault drop-prefix-key]" >&2; exit 2 ;;
  esac
done
[[ -n "$out" ]] || { echo "--out is required" >&2; exit 2; }
mkdir -p "$out"
tmp="$out/.libkdtree_verify.so.tmp.$$"
trap 'rm -f "$tmp"' EXIT
cmd=("$cxx" -O2 -std=c++17 -shared -fPIC -fvisibility=hidden -Wall -Werror "-DKDTREE_HOST_FAULT=$fault"
     -I"$csrc" "$here/kdtree_verify_host.cpp" -o "$tmp")
printf '%q ' "${cmd[@]}"; echo
"${cmd[@]}"
mv -f "$tmp" "$out/libkdtree_verify.so"
trap - EXIT
echo "built $out/libkdtree_verify.so (host test double)"
