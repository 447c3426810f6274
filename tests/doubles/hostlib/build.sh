#!/usr/bin/env bash
# Build the host-memory TEST DOUBLE of libkdtree_verify.so (tests/doubles/hostlib/README.md):
#   build.sh --out <dir> [--cxx <g++>] [--fault drop-prefix-key|fail-launch|slow]
# -> <dir>/libkdtree_verify.so (fp32 on host, the C ABI of files/csrc/kdtree_verify.h).
# Never for a GPU host: the patch accepts it only for CPU tensors (it declares itself double=host).
# It also speaks the build role's interface (roles/kdtree_build: --arch-for-cc, --print-flags,
# --arch <a> --out <dir> --nvcc <ignored>), so the real-engine TEST host's inventory can point
# kdtree_build_source_dir here and the deploy builds and serves it like the CUDA library.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="" cxx="${CXX:-g++}" fault=0 print_flags=0
# the injected faults (tests only): 1 computes a wrong answer, 2 fails every launch (a runtime fallback),
# 3 computes the right answer slowly (KDTREE_HOST_SLOW_MS per launch: promotion on speed refuses it)
fault_code() {
  case "$1" in
    drop-prefix-key) echo 1 ;;
    fail-launch) echo 2 ;;
    slow) echo 3 ;;
    *) echo "unknown fault '$1' (drop-prefix-key, fail-launch, slow)" >&2; exit 2 ;;
  esac
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="${2:-}"; shift 2 ;;
    --cxx) cxx="${2:-}"; shift 2 ;;
    --fault) fault=$(fault_code "${2:-}"); shift 2 ;;
    # the build role's interface: every compute capability maps to the one "arch" of the host double
    --arch-for-cc) echo host; exit 0 ;;
    --list-arches) echo host; exit 0 ;;
    --arch) [[ "${2:-}" == host ]] || { echo "the host double builds --arch host only" >&2; exit 3; }; shift 2 ;;
    --nvcc) shift 2 ;;
    --print-flags) print_flags=1; shift ;;
    *) echo "usage: $0 --out <dir> [--cxx <g++>] [--fault drop-prefix-key|fail-launch|slow]" >&2; exit 2 ;;
  esac
done
# a FAULT file beside this script (a test's copy of this directory) builds the broken copy too, through
# the build role, whose interface has no place for the option
if [[ -f "$here/FAULT" ]]; then fault=$(fault_code "$(cat "$here/FAULT")"); fi
# the ABI header: beside this script (a link into csrc in the repository, a copy on a host)
flags=(-O2 -std=c++17 -shared -fPIC -fvisibility=hidden -Wall -Werror "-DKDTREE_HOST_FAULT=$fault" -I"$here")
if [[ "$print_flags" == 1 ]]; then echo "${flags[*]}"; exit 0; fi
[[ -n "$out" ]] || { echo "--out is required" >&2; exit 2; }
mkdir -p "$out"
tmp="$out/.libkdtree_verify.so.tmp.$$"
trap 'rm -f "$tmp"' EXIT
cmd=("$cxx" "${flags[@]}" "$here/kdtree_verify_host.cpp" -o "$tmp")
printf '%q ' "${cmd[@]}"; echo
"${cmd[@]}"
mv -f "$tmp" "$out/libkdtree_verify.so"
trap - EXIT
echo "built $out/libkdtree_verify.so (host test double)"
