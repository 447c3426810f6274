#!/usr/bin/env bash
# Assembles what a test host needs to install the SGLang TEST DOUBLE, for copying into a host:
#   .cache/testhost/double-bundle-<content hash>/  install-double.sh, host-unit.sh, sglang.service, sglang/,
#                                                  nvidia-smi, nvidia_smi.py, wheels/
#   .cache/testhost/double-bundle                  a link to the newest of them
# In a host: copy the directory anywhere and run `bash <dir>/install-double.sh`.
# A bundle directory is never changed once made (a new content makes a new directory, renamed into
# place whole), so molecule scenarios running side by side can each make and copy one.
# The setproctitle wheel (the real engine's process-title module) is downloaded once on this
# machine into the machine-level cache (.cache/testhost/wheels links to it): test hosts cannot reach
# PyPI themselves.
# Prints the bundle directory on stdout.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="$ROOT/.cache/testhost"
OUT="$CACHE/double-bundle"
PIP="${KDTREE_PIP:-$ROOT/.venv/bin/pip}"
[[ -x "$PIP" ]] || PIP="python3 -m pip"

# the wheel lives in the machine-level cache (scripts/devcache.py), keyed by what is asked for
SETPROCTITLE='setproctitle>=1.3,<2'
python3 "$ROOT/scripts/devcache.py" link "$CACHE/wheels" testhost-wheels \
  "$(printf '%s\n' "$SETPROCTITLE" 3.11 cp manylinux2014_x86_64 | sha256sum | cut -c1-16)" >/dev/null
if ! compgen -G "$CACHE/wheels/setproctitle-*.whl" >/dev/null; then
  $PIP download -q --disable-pip-version-check --only-binary=:all: --no-deps \
    --python-version 3.11 --implementation cp --platform manylinux2014_x86_64 \
    -d "$CACHE/wheels" "$SETPROCTITLE" >&2 ||
    echo "make-bundle: WARNING: setproctitle wheel not available; titles will only set /proc/PID/comm" >&2
fi

TMP="$(mktemp -d "$CACHE/.double-bundle.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/wheels"
cp "$HERE/install-double.sh" "$HERE/host-unit.sh" "$ROOT/tests/doubles/sglang.service" \
  "$ROOT/tests/doubles/nvidia_smi/nvidia-smi" "$ROOT/tests/doubles/nvidia_smi/nvidia_smi.py" "$TMP/"
(cd "$ROOT/tests/doubles/sglang_double" && find sglang -name '*.py' -type f -print0 | xargs -0 cp --parents -t "$TMP")
cp "$CACHE"/wheels/*.whl "$TMP/wheels/" 2>/dev/null || true
chmod 0755 "$TMP"
digest="$(cd "$TMP" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
DIR="$OUT-$digest"
# another run may have made the same directory meanwhile: then its copy stands and ours goes
[[ -d "$DIR" ]] || mv -T "$TMP" "$DIR" 2>/dev/null || [[ -d "$DIR" ]]
ln -sfn "$(basename "$DIR")" "$OUT.link.$$" && mv -T "$OUT.link.$$" "$OUT"
echo "$DIR"
