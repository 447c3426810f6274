#!/usr/bin/env bash
# Assembles what a test host needs to install the SGLang TEST DOUBLE, for copying into a host:
#   .cache/testhost/double-bundle/        install-double.sh, sglang.service, sglang/, wheels/
#   .cache/testhost/double-bundle.tar.gz  the same directory as a tarball (for Ansible unarchive)
# In a host: extract it anywhere and run `bash <dir>/install-double.sh`.
# The setproctitle wheel (the real engine's process-title module) is downloaded once on this
# machine into .cache/testhost/wheels: test hosts cannot reach PyPI themselves.
# Prints the bundle directory on stdout.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="$ROOT/.cache/testhost"
OUT="$CACHE/double-bundle"
PIP="${KDTREE_PIP:-$ROOT/.venv/bin/pip}"
[[ -x "$PIP" ]] || PIP="python3 -m pip"

mkdir -p "$CACHE/wheels"
if ! compgen -G "$CACHE/wheels/setproctitle-*.whl" >/dev/null; then
  $PIP download -q --disable-pip-version-check --only-binary=:all: --no-deps \
    --python-version 3.11 --implementation cp --platform manylinux2014_x86_64 \
    -d "$CACHE/wheels" 'setproctitle>=1.3,<2' >&2 ||
    echo "make-bundle: WARNING: setproctitle wheel not available; titles will only set /proc/PID/comm" >&2
fi

rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp/wheels"
cp "$HERE/install-double.sh" "$ROOT/tests/doubles/sglang.service" "$OUT.tmp/"
(cd "$ROOT/tests/doubles/sglang_double" && find sglang -name '*.py' -type f -print0 | xargs -0 cp --parents -t "$OUT.tmp")
cp "$CACHE"/wheels/*.whl "$OUT.tmp/wheels/" 2>/dev/null || true
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
tar -C "$OUT" -czf "$OUT.tar.gz.tmp" .
mv "$OUT.tar.gz.tmp" "$OUT.tar.gz"
echo "$OUT"
