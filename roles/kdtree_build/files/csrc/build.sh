#!/usr/bin/env bash
# Build libkdtree_verify.so for one GPU arch with the project's one set of flags.
#   build.sh --arch <sm_120a|sm_100a|sm_90a> --out <dir> [--nvcc <path>]
#   build.sh --print-flags --arch <arch>
# Needs only the CUDA toolkit (nvcc >= 12.8 for sm_120a/sm_100a) and a host C++ compiler; no torch.
# The CUDA runtime is linked statically, so the library depends on libcuda (the driver) only at run time.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
arch="" out="" nvcc="" print_flags=0

usage() { echo "usage: $0 --arch <sm_120a|sm_100a|sm_90a> (--out <dir> [--nvcc <path>] | --print-flags)" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --arch) arch="${2:-}"; shift 2 ;;
    --out) out="${2:-}"; shift 2 ;;
    --nvcc) nvcc="${2:-}"; shift 2 ;;
    --print-flags) print_flags=1; shift ;;
    -h|--help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done

case "$arch" in
  sm_120a|sm_100a|sm_90a) ;;
  "") echo "--arch is required" >&2; usage ;;
  *) echo "unsupported arch '$arch' (sm_120a, sm_100a or sm_90a)" >&2; exit 2 ;;
esac
num="${arch#sm_}"   # 90a

flags=(
  -O3 -std=c++17 -shared -Xcompiler=-fPIC,-fvisibility=hidden,-Wall
  -cudart=static
  "-gencode=arch=compute_${num},code=[sm_${num},compute_${num}]"
  -Xptxas=-v,-warn-spills,-warn-lmem-usage
  -lineinfo
  "-DKDTREE_ARCHS=\"${arch}\""
)

if [[ $print_flags -eq 1 ]]; then
  printf '%s\n' "${flags[*]}"
  exit 0
fi
[[ -n "$out" ]] || { echo "--out is required" >&2; usage; }

if [[ -z "$nvcc" ]]; then
  if command -v nvcc >/dev/null 2>&1; then nvcc="$(command -v nvcc)"
  elif [[ -x /usr/local/cuda/bin/nvcc ]]; then nvcc=/usr/local/cuda/bin/nvcc
  elif [[ -x /usr/local/cuda-13.0/bin/nvcc ]]; then nvcc=/usr/local/cuda-13.0/bin/nvcc
  else echo "nvcc not found (pass --nvcc)" >&2; exit 1
  fi
fi
[[ -x "$nvcc" ]] || { echo "nvcc not executable: $nvcc" >&2; exit 1; }

mkdir -p "$out"
tmp="$out/.libkdtree_verify.so.tmp.$$"
trap 'rm -f "$tmp"' EXIT
cmd=("$nvcc" "${flags[@]}" -I"$here" "$here/verify_attn_flash_paged.cu" -o "$tmp")
printf '%q ' "${cmd[@]}"; echo
"${cmd[@]}"
mv -f "$tmp" "$out/libkdtree_verify.so"
trap - EXIT
echo "built $out/libkdtree_verify.so ($arch)"
