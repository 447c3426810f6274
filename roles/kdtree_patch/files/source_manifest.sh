#!/usr/bin/env bash
# kdtree_patch's check, on the controller (a pipe lookup: no module run). The patch source's manifest:
# "<sha256>  ./<path>" for every file of SOURCE_DIR but *.pyc and __pycache__, in byte order, then
# "end" (the lookup strips trailing blanks; this keeps the manifest exact).
# Usage: source_manifest.sh SOURCE_DIR
set -euo pipefail
cd "$1"
find . -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
echo end
