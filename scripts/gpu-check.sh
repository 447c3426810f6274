#!/usr/bin/env bash
# The kernel's whole GPU picture in one command (make gpu-check / make bench-kernel):
# detect the GPU's arch, build libkdtree_verify.so for it, run the GPU tests, run the benchmark.
# Everything goes to ${OUT:-./out}/gpu-check/: env.txt, nvidia-smi.txt, build.log (nvcc command and the
# ptxas register/spill report), pytest-kernel.{txt,xml}, bench-kernel.{txt,json}, summary.txt.
#   scripts/gpu-check.sh [--skip-tests] [--skip-bench] [--quick-bench]
#   scripts/gpu-check.sh --print-arch    only detect: print the GPU's arch (stdout), write nothing; exit 3 if
#                                        there is no GPU or build.sh has no arch for its compute capability
# The compute capability -> arch map is build.sh's (--arch-for-cc); this script keeps no copy.
# Environment: KDTREE_PYTHON (python with torch+CUDA; default .cache/sglang-venv or python3),
#   KDTREE_NVCC, KDTREE_SGLANG_WHEEL (sglang wheel installed --no-deps into the output folder when
#   sglang is not importable, for the Triton column), KDTREE_BENCH_ARGS (extra benchmark arguments),
#   KDTREE_TEST_TIMEOUT / KDTREE_BENCH_TIMEOUT (seconds, default 900 each).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_sh="$root/roles/kdtree_build/files/csrc/build.sh"
dest="${OUT:-$root/out}/gpu-check"
run_tests=1 run_bench=1 print_arch=0 bench_extra=()
for arg in "$@"; do
  case "$arg" in
    --skip-tests) run_tests=0 ;;
    --skip-bench) run_bench=0 ;;
    --quick-bench) bench_extra+=(--quick) ;;
    --print-arch) print_arch=1 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done
if [[ $print_arch -eq 1 ]]; then
  summary=/dev/null
  note() { echo "$*" >&2; }
else
  mkdir -p "$dest"
  summary="$dest/summary.txt"
  : > "$summary"
  note() { echo "$*" | tee -a "$summary"; }
fi

# --- the GPU and its arch -------------------------------------------------------------------
if ! command -v nvidia-smi >/dev/null 2>&1; then
  note "gpu-check: nvidia-smi not found: no NVIDIA GPU on this machine; nothing to check"
  exit 3
fi
[[ $print_arch -eq 1 ]] || timeout 60 nvidia-smi > "$dest/nvidia-smi.txt" 2>&1 || true
cap="$(timeout 60 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' ')"
name="$(timeout 60 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)"

py="${KDTREE_PYTHON:-}"
if [[ -z "$py" ]]; then
  if [[ -x "$root/.cache/sglang-venv/bin/python" ]]; then py="$root/.cache/sglang-venv/bin/python"; else py=python3; fi
fi
if [[ $print_arch -eq 0 ]] && ! "$py" -c 'import torch' >/dev/null 2>&1; then
  note "gpu-check: $py has no torch; building the cached venv (scripts/sglang-venv.sh)"
  if bash "$root/scripts/sglang-venv.sh" "$root/.cache/sglang-venv" >> "$dest/env.txt" 2>&1; then
    py="$root/.cache/sglang-venv/bin/python"
  fi
fi
if [[ -z "$cap" ]]; then
  cap="$("$py" -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability())' 2>/dev/null || true)"
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

# sglang for the Triton column of the benchmark
site="$dest/.sglang-site"
if ! "$py" -c 'import sglang' >/dev/null 2>&1 && [[ -n "${KDTREE_SGLANG_WHEEL:-}" ]]; then
  "$py" -m pip install -q --no-deps --target "$site" "$KDTREE_SGLANG_WHEEL" >> "$dest/env.txt" 2>&1 \
    && export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
{
  echo "python: $py"
  "$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1
  "$py" -c 'import triton; print("triton", triton.__version__)' 2>&1 | tail -n1
  "$py" -c 'import sglang; print("sglang", sglang.__version__)' 2>&1 | tail -n1
} >> "$dest/env.txt"

# --- build ----------------------------------------------------------------------------------
nvcc="${KDTREE_NVCC:-}"
for cand in "$nvcc" /usr/local/cuda-13.0/bin/nvcc /usr/local/cuda/bin/nvcc "$(command -v nvcc 2>/dev/null)"; do
  if [[ -n "$cand" && -x "$cand" ]]; then nvcc="$cand"; break; fi
done
lib="$dest/build/$arch/libkdtree_verify.so"
start=$(date +%s)
if bash "$build_sh" --arch "$arch" --out "$dest/build/$arch" ${nvcc:+--nvcc "$nvcc"} \
     > "$dest/build.log" 2>&1; then
  cp "$dest/build.log" "$dest/build/$arch/build.log"
  note "build: ok in $(( $(date +%s) - start )) s -> $lib"
  grep -E "Used [0-9]+ registers|spill" "$dest/build.log" | tee -a "$summary"
  build_rc=0
else
  build_rc=1
  note "build: FAILED (see build.log)"; tail -n 30 "$dest/build.log" | tee -a "$summary"
fi

# --- GPU tests ------------------------------------------------------------------------------
tests_rc=skipped
if [[ $run_tests -eq 1 && $build_rc -eq 0 ]]; then
  KDTREE_LIB="$lib" KDTREE_KERNEL_BUILD_DIR="$dest/build" timeout "${KDTREE_TEST_TIMEOUT:-900}" \
    "$py" -m pytest -v -p no:cacheprovider -rs "$root/tests/kernel/test_kernel_gpu.py" --junitxml="$dest/pytest-kernel.xml" \
    > "$dest/pytest-kernel.txt" 2>&1
  tests_rc=$?
  note "tests: rc=$tests_rc ($(tail -n1 "$dest/pytest-kernel.txt"))"
fi

# --- benchmark ------------------------------------------------------------------------------
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
[[ $build_rc -eq 0 && ( $tests_rc == skipped || $tests_rc -eq 0 ) && ( $bench_rc == skipped || $bench_rc -eq 0 ) ]]
