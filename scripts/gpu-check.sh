#!/usr/bin/env bash
# The kernel's whole GPU picture in one command (make gpu-check / make bench-kernel), on a machine with
# Python, torch (CUDA), triton and nvcc but no network and no SGLang: everything else travels with the
# working tree (scripts/wheelhouse: pytest and its three dependencies, pure-Python wheels;
# bench/sglang_triton: SGLang 0.5.23's Triton verify kernel file).
#   1. driver vs toolkit: nvcc 13 links a static cudart that needs driver >= 580 (12.9: 575, 12.8: 570);
#      an older driver fails every launch, so this is checked first and said plainly (exit 4);
#   2. the GPU's arch (build.sh --arch-for-cc owns the map), the build and its ptxas report;
#   3. the GPU tests (tests/kernel/test_*_gpu.py, test_call_counter.py + the CPU halves); any failure makes the exit non-zero;
#   4. the benchmark (CUDA-graph timing): every goal printed PASS/FAIL with its figure (they do not
#      change the exit status: a correct, slow kernel is a performance finding, not a broken check).
# Results in ${OUT:-./out}/gpu-check/: env.txt, nvidia-smi.txt, build.log, pytest-kernel.{txt,xml},
# bench-kernel.{txt,json}, summary.txt.
#   scripts/gpu-check.sh [--skip-tests] [--skip-bench] [--quick-bench]
#   scripts/gpu-check.sh --print-arch       only detect: print the GPU's arch; exit 3 without one
#   scripts/gpu-check.sh --check-driver V   only the driver check, against driver version V (for tests)
# Environment: KDTREE_PYTHON (python with torch+CUDA; default .cache/sglang-venv/bin/python if it has
#   torch, else python3), KDTREE_NVCC, KDTREE_BENCH_ARGS, KDTREE_TEST_TIMEOUT / KDTREE_BENCH_TIMEOUT (s).
# Exit: 0 all correctness checks passed; 1 build or a test failed; 3 no usable GPU; 4 driver too old;
#   5 no python with torch.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_sh="$root/files/csrc/build.sh"
dest="${OUT:-$root/out}/gpu-check"
run_tests=1 run_bench=1 print_arch=0 bench_extra=() driver_override=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --skip-tests) run_tests=0 ;;
    --skip-bench) run_bench=0 ;;
    --quick-bench) bench_extra+=(--quick) ;;
    --print-arch) print_arch=1 ;;
    --check-driver) driver_override="${2:-}"; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done

# --- the toolkit and the driver it needs ---------------------------------------------------------
find_nvcc() {
  local cand
  for cand in "${KDTREE_NVCC:-}" /usr/local/cuda-13.0/bin/nvcc /usr/local/cuda/bin/nvcc "$(command -v nvcc 2>/dev/null)"; do
    if [[ -n "$cand" && -x "$cand" ]]; then echo "$cand"; return 0; fi
  done
  return 1
}
# Minimum driver branch for a CUDA toolkit's static runtime (CUDA release notes, "minor version
# compatibility" does not cover a static cudart newer than the driver): major.minor -> driver major.
min_driver_for() {
  case "$1" in
    13.*) echo 580 ;;
    12.9) echo 575 ;;
    12.8) echo 570 ;;
    *) echo 0 ;;
  esac
}
# check_driver <driver version> <nvcc release>: 0 when the driver can run what this nvcc builds.
check_driver() {
  local driver="$1" release="$2" need have
  need="$(min_driver_for "$release")"
  have="${driver%%.*}"
  if [[ -z "$have" || ! "$have" =~ ^[0-9]+$ ]]; then
    echo "gpu-check: cannot read the driver version ('$driver')"
    return 1
  fi
  if (( have < need )); then
    echo "gpu-check: driver $driver is older than CUDA $release needs (>= $need): every kernel launch would fail."
    echo "  fix: install an NVIDIA driver >= $need, or build with a toolkit this driver supports"
    echo "  (KDTREE_NVCC=/usr/local/cuda-12.8/bin/nvcc for a 570 driver; build.sh's arches need CUDA >= 12.8)."
    return 1
  fi
  echo "gpu-check: driver $driver, nvcc $release (needs driver >= $need): ok"
}

nvcc="$(find_nvcc || true)"
release=""
[[ -z "$nvcc" ]] || release="$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p' | head -n1)"
if [[ -n "$driver_override" ]]; then
  check_driver "$driver_override" "${release:-13.0}"
  exit $(( $? == 0 ? 0 : 4 ))
fi

if [[ $print_arch -eq 1 ]]; then
  summary=/dev/null
  note() { echo "$*" >&2; }
else
  mkdir -p "$dest"
  summary="$dest/summary.txt"
  : > "$summary"
  note() { echo "$*" | tee -a "$summary"; }
fi

if ! command -v nvidia-smi >/dev/null 2>&1; then
  note "gpu-check: nvidia-smi not found: no NVIDIA GPU on this machine; nothing to check"
  exit 3
fi
[[ $print_arch -eq 1 ]] || timeout 60 nvidia-smi > "$dest/nvidia-smi.txt" 2>&1 || true
cap="$(timeout 60 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' ')"
name="$(timeout 60 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)"
driver="$(timeout 60 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' ')"

if [[ $print_arch -eq 0 ]]; then
  if [[ -z "$nvcc" ]]; then
    note "gpu-check: nvcc not found (set KDTREE_NVCC or install the CUDA toolkit >= 12.8)"
    exit 1
  fi
  if ! msg="$(check_driver "$driver" "$release")"; then
    note "$msg"
    exit 4
  fi
  note "$msg"
fi

if ! arch="$(bash "$build_sh" --arch-for-cc "$cap" 2>&1)"; then
  note "gpu-check: GPU '$name': ${arch:-build.sh --arch-for-cc '$cap' failed}"
  exit 3
fi
note "gpu-check: GPU '$name' compute capability $cap -> $arch"
if [[ $print_arch -eq 1 ]]; then
  echo "$arch"
  exit 0
fi

# --- python, torch, pytest (from the wheelhouse when missing), triton -----------------------------
py="${KDTREE_PYTHON:-}"
if [[ -z "$py" ]]; then
  py=python3
  if "$root/.cache/sglang-venv/bin/python" -c 'import torch' >/dev/null 2>&1; then py="$root/.cache/sglang-venv/bin/python"; fi
fi
if ! "$py" -c 'import torch; assert torch.cuda.is_available()' >> "$dest/env.txt" 2>&1; then
  note "gpu-check: $py has no torch with CUDA (set KDTREE_PYTHON); see env.txt"
  exit 5
fi
if ! "$py" -c 'import pytest' >/dev/null 2>&1; then
  site="$dest/.pytest-site"
  if bash "$root/scripts/wheelhouse-site.sh" "$py" "$site" >> "$dest/env.txt" 2>&1; then
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    note "gpu-check: pytest from scripts/wheelhouse ($("$py" -m pytest --version 2>&1 | head -n1))"
  else
    note "gpu-check: cannot set up pytest from scripts/wheelhouse (see env.txt)"
    exit 5
  fi
fi
{
  echo "python: $py"
  "$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  "$py" -c 'import triton; print("triton", triton.__version__)' 2>&1 | tail -n1
  "$py" -c 'import sglang; print("sglang", sglang.__version__)' 2>&1 | tail -n1
  echo "driver $driver nvcc $nvcc ($release)"
} >> "$dest/env.txt"

# --- build ---------------------------------------------------------------------------------------
lib="$dest/build/$arch/libkdtree_verify.so"
start=$(date +%s)
if bash "$build_sh" --arch "$arch" --out "$dest/build/$arch" --nvcc "$nvcc" > "$dest/build.log" 2>&1; then
  cp "$dest/build.log" "$dest/build/$arch/build.log"
  note "build: ok in $(( $(date +%s) - start )) s -> $lib"
  grep -E "Used [0-9]+ registers|spill" "$dest/build.log" | tee -a "$summary"
  build_rc=0
else
  build_rc=1
  note "build: FAILED (see build.log)"; tail -n 30 "$dest/build.log" | tee -a "$summary"
fi

# --- GPU tests (and the kernel tests' CPU halves, which need no GPU but run here too) -------------
tests_rc=skipped
if [[ $run_tests -eq 1 && $build_rc -eq 0 ]]; then
  KDTREE_LIB="$lib" KDTREE_KERNEL_BUILD_DIR="$dest/build" timeout "${KDTREE_TEST_TIMEOUT:-1500}" \
    "$py" -m pytest -v -p no:cacheprovider -rs -c "$root/pyproject.toml" --rootdir "$root" \
    "$root/tests/kernel/test_kernel_gpu.py" "$root/tests/kernel/test_teeth_gpu.py" \
    "$root/tests/kernel/test_call_counter.py" \
    "$root/tests/kernel/test_checks_cpu.py" --junitxml="$dest/pytest-kernel.xml" \
    > "$dest/pytest-kernel.txt" 2>&1
  tests_rc=$?
  note "tests: rc=$tests_rc ($(tail -n1 "$dest/pytest-kernel.txt"))"
  grep -E "^(FAILED|ERROR)" "$dest/pytest-kernel.txt" | head -n 20 | tee -a "$summary"
fi

# --- benchmark ------------------------------------------------------------------------------------
bench_rc=skipped
if [[ $run_bench -eq 1 && $build_rc -eq 0 ]]; then
  # shellcheck disable=SC2086
  KDTREE_LIB="$lib" timeout "${KDTREE_BENCH_TIMEOUT:-900}" "$py" "$root/bench/kernel_bench.py" --lib "$lib" \
    --json "$dest/bench-kernel.json" "${bench_extra[@]}" ${KDTREE_BENCH_ARGS:-} 2>&1 | tee "$dest/bench-kernel.txt"
  bench_rc=${PIPESTATUS[0]}
  note "bench: rc=$bench_rc"
  sed -n '/^goals/,$p' "$dest/bench-kernel.txt" >> "$summary"
fi

note "gpu-check: results in $dest"
ok=1
[[ $build_rc -eq 0 ]] || ok=0
[[ $tests_rc == skipped || $tests_rc -eq 0 ]] || ok=0
[[ $bench_rc == skipped || $bench_rc -eq 0 ]] || ok=0
if [[ $ok -eq 1 ]]; then note "gpu-check: correctness PASS"; exit 0; fi
note "gpu-check: correctness FAIL (build rc=$build_rc, tests rc=$tests_rc, bench rc=$bench_rc)"
exit 1
