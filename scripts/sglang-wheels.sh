#!/usr/bin/env bash
# Fetch (once) the published wheel of every SGLang release in the patch's supported window
# (files/sglang_ext/kdtree_verify/target.py SUPPORTED_SGLANG_VERSIONS, its one owner) and extract only
# the files the per-release tests read (tests/ext/wheels): `pip download --no-deps sglang==X`, then
# <cache>/<X>/ holds the listed files and <cache>/<X>/.kdtree-stamp the hash of this script. A release
# already extracted is not fetched again; a release that leaves the window is removed. The wheels
# themselves are kept in <cache>/whl (the torch-2.13 venv installs from there without the network).
# Usage: scripts/sglang-wheels.sh <cache-dir> [python]
set -euo pipefail

cache=${1:?usage: sglang-wheels.sh <cache-dir> [python]}
python=${2:-python3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
target="$here/../files/sglang_ext/kdtree_verify/target.py"
# the wheel's own paths, under sglang/ (what tests/ext/wheels reads)
files=(
  sglang/srt/layers/attention/triton_backend.py
  sglang/srt/layers/attention/base_attn_backend.py
  sglang/srt/mem_cache/memory_pool.py
  sglang/srt/layers/radix_attention.py
  sglang/kernels/ops/attention/extend_attention.py
)
want=$(sha256sum "$here/sglang-wheels.sh" | cut -d' ' -f1)
mapfile -t versions < <("$python" -c 'import runpy, sys
print("\n".join(runpy.run_path(sys.argv[1])["SUPPORTED_SGLANG_VERSIONS"]))' "$target")
# the machine-level cache's entry for this script and window (scripts/devcache.py); the clone's path links to it
cache=$(python3 "$here/devcache.py" link "$cache" sglang-wheels \
  "$(printf '%s\n' "$want" "${versions[@]}" | sha256sum | cut -c1-16)")
mkdir -p "$cache/whl"
exec 9>"$cache/.lock"
flock 9

for dir in "$cache"/*/; do
  name=$(basename "$dir")
  [[ $name == whl ]] && continue
  # a word match, not printf | grep -q: under pipefail grep's early exit can fail printf with SIGPIPE
  if [[ " ${versions[*]} " != *" $name "* ]]; then
    echo "sglang wheels: $name left the window, removing it"
    rm -rf "$dir" "$cache/whl/sglang-$name-"*.whl
  fi
done

fresh() { [[ -f "$cache/$1/.kdtree-stamp" && "$(cat "$cache/$1/.kdtree-stamp")" == "$want" ]]; }
# the missing wheels side by side (the download is the slow part: ~25-34 MB each), each into its own
# directory so that a failed one leaves no partial file behind
pids=()
for v in "${versions[@]}"; do
  if fresh "$v" || compgen -G "$cache/whl/sglang-$v-*.whl" >/dev/null; then
    continue
  fi
  echo "sglang wheels: fetching sglang==$v"
  rm -rf "$cache/whl/.$v"
  "$python" -m pip download -q --no-deps --no-input --disable-pip-version-check \
    --only-binary=:all: --python-version 3.11 -d "$cache/whl/.$v" "sglang==$v" &
  pids+=($!)
done
for pid in "${pids[@]}"; do
  wait "$pid"
done
for v in "${versions[@]}"; do
  if [[ -d "$cache/whl/.$v" ]]; then
    mv "$cache/whl/.$v"/sglang-"$v"-*.whl "$cache/whl/"
    rmdir "$cache/whl/.$v"
  fi
done

for v in "${versions[@]}"; do
  out="$cache/$v"
  if fresh "$v"; then
    continue
  fi
  mapfile -t found < <(compgen -G "$cache/whl/sglang-$v-*.whl")
  wheel=${found[0]:-}
  rm -rf "$out.tmp"
  mkdir -p "$out.tmp"
  "$python" - "$wheel" "$out.tmp" "${files[@]}" <<'PY'
import sys, zipfile
wheel, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(wheel) as zf:
    members = set(zf.namelist())
    metadata = [m for m in members if m.endswith(".dist-info/METADATA")]
    missing = [n for n in names if n not in members]
    if missing or len(metadata) != 1:
        sys.exit(f"{wheel}: lacks {missing or 'one dist-info/METADATA'}")
    for name in [*names, *metadata]:
        zf.extract(name, out)
PY
  echo "$want" > "$out.tmp/.kdtree-stamp"
  rm -rf "$out"
  mv "$out.tmp" "$out"
  echo "sglang wheels: $v extracted"
done
