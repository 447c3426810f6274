#!/usr/bin/env bash
# kdtree_build's check, on the controller (a pipe lookup: no module run, which costs the controller about
# a CPU-second a host). The inputs that name a build, for one compute capability:
#   driver <toolkit> <min driver>   the toolkit -> driver rule, from its one owner (DRIVER_MAP_BUILD_SH
#                                   --list-driver-map: files/csrc/build.sh)
#   arch=<arch>                     SOURCE_DIR/build.sh --arch-for-cc (it owns the map)
#   <sha256>  ./<path>              every file of SOURCE_DIR but *.pyc and __pycache__, in byte order
#   flags: <flags>                  SOURCE_DIR/build.sh --print-flags
#   end                             (the lookup strips trailing blanks; this keeps the inputs exact)
# The lines from arch= to flags: are the build's inputs, byte for byte as the build id has always hashed
# them. When build.sh has no arch for the compute capability (its exit code 3) the lines after the
# driver map are "no-arch" and build.sh's message; any other failure exits non-zero with its message on
# stderr.
# Usage: build_inputs.sh SOURCE_DIR COMPUTE_CAPABILITY DRIVER_MAP_BUILD_SH
set -euo pipefail
src=$1 cc=$2 driver_map=$3
t=()
if command -v timeout >/dev/null 2>&1; then t=(timeout 120); fi
"${t[@]}" bash "$driver_map" --list-driver-map | sed 's/^/driver /'
cd "$src"
err=$(mktemp)
trap 'rm -f "$err"' EXIT
rc=0
arch=$("${t[@]}" bash ./build.sh --arch-for-cc "$cc" 2>"$err") || rc=$?
if [ "$rc" -eq 3 ]; then
  echo no-arch
  cat "$err"
  exit 0
elif [ "$rc" -ne 0 ]; then
  cat "$err" >&2
  exit "$rc"
fi
echo "arch=$arch"
find . -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
echo "flags: $("${t[@]}" bash ./build.sh --print-flags --arch "$arch")"
echo end
