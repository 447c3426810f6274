#!/usr/bin/env bash
# Build the CPU-emulated libkdtree_verify.so: files/csrc/verify_attn_flash_paged.cu, unchanged, compiled
# by g++ with -DKDTREE_CPU_EMULATION and the emulator (kdtree_cpu_emu.h, force-included) -> the same C ABI,
# host memory, build info `emulator=cpu` (tests/kernel/cpu_emu/README.md). A test tool, never deployed.
#   build.sh --out <dir> [--fault last-tile|one-split] [--sanitize address|thread] [--lib-only] [--cxx g++]
#            [--src <csrc dir>]
# -> <dir>/libkdtree_verify.so, <dir>/emu_run (reads a case from files, runs it, writes `out`: the
#    sanitizer runs use it, so that the buffers are exactly the tensors' sizes and no Python is instrumented)
#    and <dir>/conv_check (the kernel's bf16 / fp8 conversion helpers, for a bit-exact comparison with torch).
# --fault: the CUDA build's --fault (files/csrc/build.sh --fault-code owns the -DKDTREE_FAULT values). --lib-only: the library
# only; a sanitizer build makes no conv_check (the conversions are checked once, on the plain build).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
src="$root/files/csrc"
out="" cxx="${CXX:-g++}" fault=0 sanitize="" lib_only=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="${2:-}"; shift 2 ;;
    --cxx) cxx="${2:-}"; shift 2 ;;
    --src) src="${2:-}"; shift 2 ;;
    --lib-only) lib_only=1; shift ;;
    --fault) fault="$(bash "$root/files/csrc/build.sh" --fault-code "${2:-}")" || exit 2; shift 2 ;;
    --sanitize)
      case "${2:-}" in
        address) sanitize="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" ;;
        thread) sanitize="-fsanitize=thread" ;;
        *) echo "unknown --sanitize '${2:-}' (address | thread)" >&2; exit 2 ;;
      esac
      shift 2 ;;
    *) echo "usage: $0 --out <dir> [--fault last-tile|one-split] [--sanitize address|thread] [--cxx g++] [--src dir]" >&2
       exit 2 ;;
  esac
done
[[ -n "$out" ]] || { echo "--out is required" >&2; exit 2; }

# The CUDA headers (their host code: bf16 / fp8 conversions) of the toolkit the kernel build uses, found
# the way build.sh finds nvcc (KDTREE_NVCC, else its search) and named by that nvcc itself.
cuda_inc="$(bash "$root/files/csrc/build.sh" ${KDTREE_NVCC:+--nvcc "$KDTREE_NVCC"} --cuda-include)" || {
  echo "the CPU emulator needs the CUDA toolkit's headers (cuda_bf16.h, cuda_fp8.h): install the CUDA toolkit" \
       "or set KDTREE_NVCC to its nvcc" >&2
  exit 1
}

# -O1 for a short compile; -fno-strict-aliasing: the kernel reinterprets shared memory as uint4 / uint32 /
# float, which nvcc allows and g++ -O2 may reorder.
flags=(-std=c++17 -O1 -g -fPIC -fvisibility=hidden -pthread -fno-strict-aliasing -Wall -Wno-unknown-pragmas -Wno-unused-variable
       -Wno-unused-function "-DKDTREE_FAULT=${fault}" -I"$src" -I"$here" -isystem "$cuda_inc")
# shellcheck disable=SC2206
[[ -z "$sanitize" ]] || flags+=($sanitize)
# The kernel source, unchanged: its own capabilities / build info renamed away (emu_abi.cpp's are exported).
kernel_flags=(-DKDTREE_CPU_EMULATION -include "$here/kdtree_cpu_emu.h"
              -Dkdtree_verify_capabilities=kdtree_verify_capabilities_cuda
              -Dkdtree_verify_build_info=kdtree_verify_build_info_cuda)

mkdir -p "$out"
obj="$(mktemp -d "$out/.obj.XXXXXX")"
trap 'rm -rf "$obj"' EXIT
"$cxx" "${flags[@]}" "${kernel_flags[@]}" -x c++ -c "$src/verify_attn_flash_paged.cu" -o "$obj/kernel.o" &
kpid=$!
"$cxx" "${flags[@]}" -c "$here/emu_runtime.cpp" -o "$obj/runtime.o"
"$cxx" "${flags[@]}" -c "$here/emu_abi.cpp" -o "$obj/abi.o"
[[ $lib_only -eq 1 ]] || "$cxx" "${flags[@]}" -c "$here/emu_run.cpp" -o "$obj/run.o"
conv=0
[[ $lib_only -eq 1 || -n "$sanitize" ]] || conv=1
[[ $conv -eq 0 ]] || "$cxx" "${flags[@]}" "${kernel_flags[@]}" -c "$here/conv_check.cpp" -o "$obj/conv.o"
wait "$kpid"
objs=("$obj/kernel.o" "$obj/runtime.o" "$obj/abi.o")
"$cxx" "${flags[@]}" -shared -Wl,--no-undefined -Wl,--version-script="$here/exports.map" "${objs[@]}" -o "$obj/libkdtree_verify.so"
built=("$obj/libkdtree_verify.so")
if [[ $lib_only -eq 0 ]]; then
  "$cxx" "${flags[@]}" "${objs[@]}" "$obj/run.o" -o "$obj/emu_run"
  built+=("$obj/emu_run")
fi
if [[ $conv -eq 1 ]]; then
  "$cxx" "${flags[@]}" "$obj/conv.o" "$obj/runtime.o" -o "$obj/conv_check"
  built+=("$obj/conv_check")
fi
mv -f "${built[@]}" "$out/"
echo "built ${built[*]##*/} into $out (CPU emulator, fault=$fault${sanitize:+, $sanitize})"
