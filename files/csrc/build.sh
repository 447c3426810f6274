#!/usr/bin/env bash
# Build libkdtree_verify.so for one GPU arch with the project's one set of flags.
#   build.sh --arch <arch> --out <dir> [--nvcc <path>] [--fault <last-tile|one-split>]
#            --fault builds a deliberately broken library for the tests' teeth (tests/kernel): it drops
#            the last key tile of every request, or the keys of work unit 1 of a split call (it reports
#            them empty); build_info says fault=1 / fault=2.
#   build.sh --print-flags --arch <arch>
#   build.sh --arch-for-cc <cc>     the arch a compute capability such as 12.0 needs (exit 3 if none)
#   build.sh --list-arches          the supported arches, one per line
#   build.sh --list-map             "<cc> <arch>" per supported compute capability, one per line
#   build.sh --min-driver-for <rel> the oldest driver branch that runs what nvcc <rel> (e.g. 13.0) builds
#                                   (exit 4 with the known toolkits on stderr for a release not in the map)
#   build.sh --list-driver-map      "<nvcc release> <driver branch>" per known toolkit, one per line
#   build.sh --fault-code <name>    the -DKDTREE_FAULT value of a fault build (last-tile 1, one-split 2)
#   build.sh --find-nvcc [--nvcc P] the nvcc this script would build with (exit 1 if none)
#   build.sh --cuda-include [--nvcc P]  that toolkit's header directory, as nvcc itself reports it (the CPU
#                                   emulator, tests/kernel/cpu_emu, compiles the kernel with its host code)
# This file is the only owner of the compute capability -> arch map (ARCH_MAP below): the build role,
# mk/kernel.mk, scripts/gpu-check.sh and the tests ask build.sh (tests/kernel/test_arch_map.py checks that).
# It is also the only owner of the toolkit -> minimum driver rule (DRIVER_MAP below): scripts/gpu-check.sh
# and the build role (which checks a host's driver before installing a library built elsewhere) ask it.
# Needs only the CUDA toolkit (nvcc >= 12.8 for sm_120a/sm_100a) and a host C++ compiler; no torch.
# The CUDA runtime is linked statically, so the library depends on libcuda (the driver) only at run time.
set -euo pipefail

# Compute capability -> nvcc arch (arch-specific "a" targets: the kernel uses their features).
# A new GPU needs a kernel change (and its own ptxas check) anyway, so it is added here, nowhere else.
ARCH_MAP=(
  "12.0 sm_120a"
  "10.0 sm_100a"
  "9.0 sm_90a"
)

# Minimum driver branch for a CUDA toolkit's static runtime (CUDA release notes, "minor version
# compatibility" does not cover a static cudart newer than the driver): nvcc release -> driver major.
# A release not listed is refused (--min-driver-for exits 4): the driver it needs is unknown, so a library
# it built could fail every launch on a host; a new toolkit is added here, nowhere else.
DRIVER_MAP=(
  "13 580"
  "12.9 575"
  "12.8 570"
)
# Fault builds (the tests' teeth): name -> the -DKDTREE_FAULT value the kernel source reads. The CPU
# emulator's build asks --fault-code, so the map has this one owner.
FAULT_MAP=(
  "last-tile 1"
  "one-split 2"
)
fault_code() {
  local e
  for e in "${FAULT_MAP[@]}"; do
    if [[ "${e% *}" == "$1" ]]; then echo "${e#* }"; return 0; fi
  done
  local names=""; for e in "${FAULT_MAP[@]}"; do names+="${names:+ | }${e% *}"; done
  echo "unknown --fault '$1' ($names)" >&2
  return 2
}
# The nvcc to build with: --nvcc, else the one on PATH, else the usual toolkit paths.
find_nvcc() {
  if [[ -n "$nvcc" ]]; then :
  elif command -v nvcc >/dev/null 2>&1; then nvcc="$(command -v nvcc)"
  elif [[ -x /usr/local/cuda/bin/nvcc ]]; then nvcc=/usr/local/cuda/bin/nvcc
  elif [[ -x /usr/local/cuda-13.0/bin/nvcc ]]; then nvcc=/usr/local/cuda-13.0/bin/nvcc
  else echo "nvcc not found (pass --nvcc)" >&2; return 1
  fi
  [[ -x "$nvcc" ]] || { echo "nvcc not executable: $nvcc" >&2; return 1; }
}

min_driver_for() {
  local e rel="$1"
  for e in "${DRIVER_MAP[@]}"; do
    if [[ "$rel" == "${e% *}" || "${rel%%.*}" == "${e% *}" ]]; then echo "${e#* }"; return 0; fi
  done
  local known=""; for e in "${DRIVER_MAP[@]}"; do known+="${known:+, }${e% *}"; done
  echo "unknown CUDA toolkit release '$rel' (known: $known)" >&2
  return 4
}

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
arch="" out="" nvcc="" print_flags=0 fault=0

supported() { local e s=""; for e in "${ARCH_MAP[@]}"; do s+="${s:+, }${e% *} (${e#* })"; done; echo "$s"; }
usage() {
  local e s=""; for e in "${ARCH_MAP[@]}"; do s+="${s:+|}${e#* }"; done
  echo "usage: $0 --arch <$s> (--out <dir> [--nvcc <path>] | --print-flags) | --arch-for-cc <cc> | --list-arches | --list-map" >&2
  exit 2
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --arch) arch="${2:-}"; shift 2 ;;
    --out) out="${2:-}"; shift 2 ;;
    --nvcc) nvcc="${2:-}"; shift 2 ;;
    --fault) fault="$(fault_code "${2:-}")" || exit 2; shift 2 ;;
    --fault-code) fault_code "${2:-}" || exit 2; exit 0 ;;
    --find-nvcc) find_nvcc || exit 1; echo "$nvcc"; exit 0 ;;
    --cuda-include)
      find_nvcc || exit 1
      inc="$("$nvcc" --dryrun -E -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ INCLUDES="-I\([^"]*\)".*/\1/p' | head -n1)"
      inc="${inc%% *}"
      [[ -n "$inc" && -f "$inc/cuda_bf16.h" ]] || { echo "$nvcc does not name a header directory with cuda_bf16.h" >&2; exit 1; }
      echo "$inc"; exit 0 ;;
    --print-flags) print_flags=1; shift ;;
    --arch-for-cc)
      cc="${2:-}"
      for e in "${ARCH_MAP[@]}"; do
        if [[ "${e% *}" == "$cc" ]]; then echo "${e#* }"; exit 0; fi
      done
      echo "unsupported compute capability '$cc': the kernel is built for $(supported) only" >&2
      exit 3 ;;
    --list-arches) for e in "${ARCH_MAP[@]}"; do echo "${e#* }"; done; exit 0 ;;
    --list-map) printf '%s\n' "${ARCH_MAP[@]}"; exit 0 ;;
    --min-driver-for) min_driver_for "${2:-}" || exit 4; exit 0 ;;
    --list-driver-map) printf '%s\n' "${DRIVER_MAP[@]}"; exit 0 ;;
    -h|--help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done

[[ -n "$arch" ]] || { echo "--arch is required" >&2; usage; }
known=0
for e in "${ARCH_MAP[@]}"; do if [[ "${e#* }" == "$arch" ]]; then known=1; fi; done
[[ $known -eq 1 ]] || { echo "unsupported arch '$arch': the kernel is built for $(supported) only" >&2; exit 2; }
num="${arch#sm_}"   # 90a

flags=(
  -O3 -std=c++17 -shared -Xcompiler=-fPIC,-fvisibility=hidden,-Wall
  -cudart=static
  "-gencode=arch=compute_${num},code=[sm_${num},compute_${num}]"
  -Xptxas=-v,-warn-spills,-warn-lmem-usage
  -lineinfo
  "-DKDTREE_ARCHS=\"${arch}\""
)
[[ $fault -eq 0 ]] || flags+=("-DKDTREE_FAULT=${fault}")

if [[ $print_flags -eq 1 ]]; then
  printf '%s\n' "${flags[*]}"
  exit 0
fi
[[ -n "$out" ]] || { echo "--out is required" >&2; usage; }

find_nvcc || exit 1

mkdir -p "$out"
tmp="$out/.libkdtree_verify.so.tmp.$$"
trap 'rm -f "$tmp"' EXIT
cmd=("$nvcc" "${flags[@]}" -I"$here" "$here/verify_attn_flash_paged.cu" -o "$tmp")
printf '%q ' "${cmd[@]}"; echo
"${cmd[@]}"
mv -f "$tmp" "$out/libkdtree_verify.so"
trap - EXIT
echo "built $out/libkdtree_verify.so ($arch)"
