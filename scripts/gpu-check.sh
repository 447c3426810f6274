#!/usr/bin/env bash
# The kernel's whole GPU picture in one command (make gpu-check), on a machine with Python, torch (CUDA),
# triton and nvcc but no network and no SGLang: everything else travels with the working tree
# (scripts/wheelhouse: pytest and its three dependencies, pure-Python wheels; bench/third_party/sglang_triton:
# SGLang 0.5.23's Triton verify kernel file). docs/gpu-check.md: the command, durations, the summary.
# This script does the preflight, in this order, each failure said plainly:
#   driver vs toolkit (nvcc 13 links a static cudart that needs driver >= 580; 12.9: 575, 12.8: 570;
#   exit 4), the GPU's arch (build.sh --arch-for-cc owns the map; exit 3 without one), a python with
#   torch + CUDA (exit 5), pytest (from the wheelhouse when missing);
# then bench/gpu_check.py runs the tiers within ONE wall-clock budget (--budget-s, from this script's
# start): 1 build, 2 quick (one test per kernel variant), 3 sanitize (compute-sanitizer's racecheck,
# synccheck, memcheck, initcheck on small shapes; SKIPPED where the toolkit has none), 4 bench-quick,
# 5 full-tests, 6 full-bench.
# Each tier gets what is left of the budget as its timeout and is reported PASSED / FAILED / CUT
# (budget) / SKIPPED; without a GPU every tier is SKIPPED after collecting what it would run. The
# benchmark's goal lines (PASS/FAIL with the figure) do not change the exit status.
# Results in ${OUT:-./out}/gpu-check/: summary.txt, env.txt, nvidia-smi.txt, build*.log,
# pytest-<tier>.{txt,xml}, measures-quick.jsonl, sanitize-<tool>.txt, bench-<tier>.{txt,json}.
#   scripts/gpu-check.sh [--budget-s N] [--skip-tests] [--skip-bench] [--quick-bench]
#   scripts/gpu-check.sh --print-arch       only detect: print the GPU's arch; exit 3 without one
#   scripts/gpu-check.sh --check-driver V   only the driver check, against driver version V (for tests)
# --quick-bench: no full tiers (build, quick, sanitize, bench-quick). Environment: KDTREE_PYTHON (python with
#   torch+CUDA; default .cache/sglang-venv/bin/python if it has torch, else python3), KDTREE_NVCC,
#   KDTREE_BENCH_ARGS (extra kernel_bench.py arguments).
# Exit: 0 build and quick tier passed, nothing failed; 1 a tier failed; 2 bad arguments; 3 no usable
#   GPU; 4 driver too old; 5 no python with torch+CUDA or no pytest; 6 the quick tier did not finish
#   within the budget (correctness not established).
set -uo pipefail

started_at="$(date +%s.%N)"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tiers_py="$root/bench/gpu_check.py"
build_sh="$root/files/csrc/build.sh"
dest="${OUT:-$root/out}/gpu-check"
budget_s="" skip="" print_arch=0 driver_override=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --budget-s)
      budget_s="${2:-}"; shift
      if [[ ! "$budget_s" =~ ^[0-9]+$ || "$budget_s" -lt 1 ]]; then
        echo "gpu-check: --budget-s needs a whole number of seconds >= 1, not '$budget_s'" >&2; exit 2
      fi ;;
    --skip-tests) skip+="quick,sanitize,full-tests," ;;
    --skip-bench) skip+="bench-quick,full-bench," ;;
    --quick-bench) skip+="full-tests,full-bench," ;;
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
# Minimum driver branch for a CUDA toolkit's static runtime: build.sh owns the rule (--min-driver-for).
min_driver_for() { bash "$build_sh" --min-driver-for "$1"; }
# check_driver <driver version> <nvcc release>: 0 when the driver can run what this nvcc builds.
check_driver() {
  local driver="$1" release="$2" need have
  need="$(min_driver_for "$release" 2>&1)" || { echo "gpu-check: $need"; return 1; }  # a toolkit it does not know
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

# --- python, torch, pytest (from the wheelhouse when missing): chosen first, checked where needed -
py="${KDTREE_PYTHON:-}"
if [[ -z "$py" ]]; then
  py=python3
  if "$root/.cache/sglang-venv/bin/python" -c 'import torch' >/dev/null 2>&1; then py="$root/.cache/sglang-venv/bin/python"; fi
fi
# pytest for $py: its own, else the wheelhouse's (extracted under $dest); 1 when neither works.
setup_pytest() {
  "$py" -c 'import pytest' >/dev/null 2>&1 && return 0
  local site="$dest/.pytest-site"
  if bash "$root/scripts/wheelhouse-site.sh" "$py" "$site" >> "$dest/env.txt" 2>&1; then
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    note "gpu-check: pytest from scripts/wheelhouse ($("$py" -m pytest --version 2>&1 | head -n1))"
    return 0
  fi
  note "gpu-check: cannot set up pytest from scripts/wheelhouse for $py (see env.txt)"
  return 1
}
# The tiers' runner and summary; stdlib only, so any python 3 runs it.
run_tiers() {
  local runner="$py"
  "$runner" -c 'import sys; assert sys.version_info >= (3, 10)' >/dev/null 2>&1 || runner=python3
  # No --budget-s: bench/gpu_check.py's DEFAULT_BUDGET_S (the one owner of the default).
  "$runner" "$tiers_py" --root "$root" --dest "$dest" ${budget_s:+--budget-s "$budget_s"} --started-at "$started_at" \
    --python "$py" --skip "$skip" --bench-args "${KDTREE_BENCH_ARGS:-}" "$@"
}
# preflight_failed <exit code> <why>: every tier SKIPPED (after collecting what it would run), then exit.
preflight_failed() {
  local code="$1" why="$2"
  if [[ $print_arch -eq 1 ]]; then exit "$code"; fi
  if "$py" -c 'import torch' >/dev/null 2>&1; then setup_pytest || true; fi
  run_tiers --preflight-failed "$why" --exit-code "$code"
  exit "$code"
}

if ! command -v nvidia-smi >/dev/null 2>&1; then
  note "gpu-check: nvidia-smi not found: no NVIDIA GPU on this machine; nothing to check"
  preflight_failed 3 "no GPU: nvidia-smi not found"
fi
[[ $print_arch -eq 1 ]] || timeout 60 nvidia-smi > "$dest/nvidia-smi.txt" 2>&1 || true
cap="$(timeout 60 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' ')"
name="$(timeout 60 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)"
driver="$(timeout 60 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' ')"

if [[ $print_arch -eq 0 ]]; then
  if [[ -z "$nvcc" ]]; then
    note "gpu-check: nvcc not found (set KDTREE_NVCC or install the CUDA toolkit >= 12.8)"
    preflight_failed 1 "no nvcc"
  fi
  if ! msg="$(check_driver "$driver" "$release")"; then
    note "$msg"
    preflight_failed 4 "driver $driver too old for CUDA $release"
  fi
  note "$msg"
fi

if ! arch="$(bash "$build_sh" --arch-for-cc "$cap" 2>&1)"; then
  note "gpu-check: GPU '$name': ${arch:-build.sh --arch-for-cc '$cap' failed}"
  preflight_failed 3 "no usable GPU: compute capability '$cap' unsupported"
fi
note "gpu-check: GPU '$name' compute capability $cap -> $arch"
if [[ $print_arch -eq 1 ]]; then
  echo "$arch"
  exit 0
fi

if ! "$py" -c 'import torch; assert torch.cuda.is_available()' >> "$dest/env.txt" 2>&1; then
  note "gpu-check: $py has no torch with CUDA (set KDTREE_PYTHON); see env.txt"
  preflight_failed 5 "no torch with CUDA in $py"
fi
setup_pytest || preflight_failed 5 "no pytest for $py"
{
  echo "python: $py"
  "$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  "$py" -c 'import triton; print("triton", triton.__version__)' 2>&1 | tail -n1
  "$py" -c 'import sglang; print("sglang", sglang.__version__)' 2>&1 | tail -n1
  echo "driver $driver nvcc $nvcc ($release)"
} >> "$dest/env.txt"

run_tiers --arch "$arch" --nvcc "$nvcc"
