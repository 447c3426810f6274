#!/usr/bin/env bash
# Make pytest importable for a python that lacks it, with no network and no pip:
#   wheelhouse-site.sh <python> <dir>   then PYTHONPATH=<dir> <python> -m pytest ...
# scripts/wheelhouse holds pure-Python wheels (pytest 8.3.5, pluggy, iniconfig, packaging; ~520 KB,
# checked against SHA256SUMS). A pure wheel is a zip of importable packages plus *.dist-info, so
# extracting it into <dir> is what pip would install (pytest finds its plugins via the dist-info).
set -euo pipefail
py="${1:?python}" dir="${2:?target dir}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/wheelhouse"
(cd "$here" && sha256sum --check --quiet SHA256SUMS)
mkdir -p "$dir"
for whl in "$here"/*.whl; do
  "$py" -m zipfile -e "$whl" "$dir"
done
PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}" "$py" -m pytest --version
