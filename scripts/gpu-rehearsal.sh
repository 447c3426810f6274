#!/usr/bin/env bash
# Rehearse `scripts/gpu-check.sh` on a CPU in the GPU machine's software (Python 3.12, torch 2.11,
# triton 3.6, pytest only from scripts/wheelhouse): every step up to the first CUDA call, so that the
# GPU run (15 minutes of device time in all) is not spent on an import error. Not part of make test.
#   scripts/gpu-rehearsal.sh [venv-dir]     (make gpu-rehearsal; default .cache/gpu-rehearsal-venv)
# Steps: the venv (built once, scripts/gpu-rehearsal-venv.sh), gpu-check.sh's argument handling, the
# wheelhouse's pytest on 3.12, collection of every GPU test and the quick tier's selection, the
# vendored SGLang Triton kernel against the reference (TRITON_INTERPRET=1), the benchmark's CPU path
# and its tests, then `gpu-check.sh --budget-s 360`, which must list every tier SKIPPED (no GPU)
# within the budget. Results in ${OUT:-./out}/gpu-rehearsal/ (summary.txt, one log per step).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$root/.cache/gpu-rehearsal-venv}"
dest="${OUT:-$root/out}/gpu-rehearsal"
rm -rf "$dest"
mkdir -p "$dest"
summary="$dest/summary.txt"
failed=0
say() { echo "$*" | tee -a "$summary"; }

# step <name> <command...>: run it, its output in <name>.log, one line in the summary.
step() {
  local name="$1" start rc
  shift
  start=$(date +%s)
  "$@" > "$dest/$name.log" 2>&1
  rc=$?
  if [[ $rc -eq 0 ]]; then
    say "rehearsal: $name: ok ($(( $(date +%s) - start )) s) $(tail -n1 "$dest/$name.log")"
  else
    failed=1
    say "rehearsal: $name: FAILED rc=$rc ($(( $(date +%s) - start )) s), see $dest/$name.log"
    tail -n 15 "$dest/$name.log" | sed 's/^/    /' | tee -a "$summary"
  fi
  return $rc
}

step venv bash "$root/scripts/gpu-rehearsal-venv.sh" "$venv" || { say "rehearsal: FAILED (no venv)"; exit 1; }
py="$venv/bin/python"
say "rehearsal: $("$py" -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__, "cuda available:", torch.cuda.is_available())' 2>&1 | tail -n1)"

# gpu-check.sh's own arguments: refused before anything runs (exit 2), the driver check alone.
check_args() {
  local rc
  for bad in "--budget-s abc" "--budget-s 0" "--no-such-flag"; do
    # shellcheck disable=SC2086
    OUT="$dest/args" bash "$root/scripts/gpu-check.sh" $bad; rc=$?
    echo "gpu-check.sh $bad -> exit $rc"
    [[ $rc -eq 2 ]] || return 1
  done
  if [[ -x /usr/local/cuda-13.0/bin/nvcc ]]; then
    OUT="$dest/args" bash "$root/scripts/gpu-check.sh" --check-driver 575.57.08; rc=$?
    echo "gpu-check.sh --check-driver 575.57.08 -> exit $rc (nvcc 13 needs >= 580)"
    [[ $rc -eq 4 ]] || return 1
  fi
  echo "arguments: ok"
}
step arguments check_args

# pytest from the wheelhouse (the GPU machine has no pytest and no network): pure py3 wheels only.
site="$dest/pytest-site"
wheelhouse() {
  local whl
  for whl in "$root"/scripts/wheelhouse/*.whl; do
    case "$(basename "$whl")" in
      *-py3-none-any.whl | *-cp312-*.whl) echo "wheel for 3.12: $(basename "$whl")" ;;
      *) echo "not installable on 3.12: $(basename "$whl")"; return 1 ;;
    esac
  done
  bash "$root/scripts/wheelhouse-site.sh" "$py" "$site"
}
step wheelhouse wheelhouse
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
pytest_cmd=("$py" -m pytest -p no:cacheprovider -c "$root/pyproject.toml" --rootdir "$root")

# Every GPU test file collects (no import error under torch 2.11 / triton 3.6), and the quick tier's
# selection is exactly bench/gpu_check.py QUICK and covers every kernel variant.
step collect "${pytest_cmd[@]}" --collect-only -q "$root/tests/kernel"
step tiers "${pytest_cmd[@]}" -q "$root/tests/kernel/test_gpu_tiers.py"

# SGLang's vendored Triton kernel against the reference on Triton 3.6's interpreter; the benchmark's
# roofline and goal logic; its plan (imports, shapes, SGLang's kernel found).
step sglang-triton env TRITON_INTERPRET=1 "${pytest_cmd[@]}" -q "$root/tests/kernel/test_sglang_triton_cpu.py"
step bench-cpu "${pytest_cmd[@]}" -q "$root/tests/kernel/test_bench_cpu.py"
step bench-plan "$py" "$root/bench/kernel_bench.py" --quick --plan

# The check itself on this venv: no GPU here, so every tier must say SKIPPED within the budget.
gpu_check_no_gpu() {
  local start rc took
  start=$(date +%s)
  OUT="$dest/check" KDTREE_PYTHON="$py" timeout 420 bash "$root/scripts/gpu-check.sh" --budget-s 360
  rc=$?
  took=$(( $(date +%s) - start ))
  echo "gpu-check.sh --budget-s 360 -> exit $rc in $took s"
  [[ $rc -eq 3 && $took -le 360 ]] || return 1
  [[ $(grep -c '^  tier [0-9] .* SKIPPED ' "$dest/check/gpu-check/summary.txt") -eq 5 ]] || return 1
  if grep -q 'rc=' "$dest/check/gpu-check/summary.txt"; then return 1; fi  # a collection or plan failed
  echo "gpu-check.sh: every tier SKIPPED (no GPU), collection and plan clean, within the budget"
}
step gpu-check gpu_check_no_gpu
sed 's/^/    /' "$dest/check/gpu-check/summary.txt" | tee -a "$summary"

if [[ $failed -eq 0 ]]; then say "rehearsal: PASS (results in $dest)"; exit 0; fi
say "rehearsal: FAIL (results in $dest)"
exit 1
