#!/usr/bin/env bash
# Runs INSIDE a real-engine test host (as root; engine-host.sh copies this directory in). Installs the
# host's CPU shims and the operator's stock unit for the REAL SGLang engine, enables and starts it,
# and waits until its health URL answers 200. The venv and the model are not installed here:
# engine-host.sh bind-mounts them read-only at the paths given with --venv and --model.
#
# Usage: engine-install.sh --venv DIR --model DIR [--spec NAME] [--src DIR] [--no-start] [--wait SECONDS]
#   DIR of --src (default: this script's directory) holds cpu_shims/, sglang.service (the template,
#   tests/engine/sglang.service), spec/NAME.conf (the speculative configurations, tests/engine/spec),
#   release/X.conf (what the unit needs on SGLang X, tests/engine/release; optional) and engine.env
#   (ENGINE_HEALTH_URL).
#   --spec: which configuration the stock unit serves (default dflash): spec/NAME.conf gives the target
#   (ENGINE_TARGET) and the speculative flags (ENGINE_SPEC_ARGS), both may name @ENGINE_MODEL@, and
#   optionally the tensor-parallel size (ENGINE_TP, default 1) and a line of [Service] (ENGINE_SPEC_ENV).
#   --no-start: install only (a later restart, e.g. a deploy's, starts the new unit).
#   --wait: after starting, wait up to SECONDS (default 240; 0 = do not wait) for ENGINE_HEALTH_URL to
#   answer 200; prints the seconds from `systemctl restart` to healthy.
# Installs:
#   /opt/cpu-shims                        tests/engine/cpu_shims (replaced when its content differs)
#   /etc/systemd/system/sglang.service    the template with @ENGINE_VENV@, @ENGINE_TARGET@ and
#                                         @ENGINE_SPEC_ARGS@ (from spec/NAME.conf) filled in
# Idempotent: a second run with the same files changes nothing and leaves a running unit alone.
set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV=""
MODEL=""
SPEC=dflash
START=1
WAIT=240
while (($#)); do
  case "$1" in
    --src) SRC="$2"; shift 2 ;;
    --venv) VENV="$2"; shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    --spec) SPEC="$2"; shift 2 ;;
    --no-start) START=0; shift ;;
    --wait) WAIT="$2"; shift 2 ;;
    *) echo "engine-install: unknown argument $1" >&2; exit 2 ;;
  esac
done

SHIMS=/opt/cpu-shims
UNIT=/etc/systemd/system/sglang.service
changed=0
log() { echo "engine-install: $*"; }
die() { echo "engine-install: $*" >&2; exit 1; }
# shellcheck source=host-unit.sh
source "$(dirname "${BASH_SOURCE[0]}")/host-unit.sh"

# shellcheck source=../../tests/engine/engine.env
source "$SRC/engine.env"
[[ -n "$VENV" && -n "$MODEL" ]] || die "usage: engine-install.sh --venv DIR --model DIR [--src DIR] [--no-start] [--wait SECONDS]"
[[ -x "$VENV/bin/python" ]] || die "$VENV/bin/python not found (engine-host.sh bind-mounts the venv)"
"$VENV/bin/python" -c 'import sys' 2>/dev/null ||
  die "$VENV/bin/python does not run here (made from a python this host lacks? it must come from /usr/bin/python3.11)"
[[ -f "$MODEL/config.json" ]] || die "$MODEL/config.json not found (engine-host.sh bind-mounts the model)"
[[ "$SPEC" =~ ^[a-z0-9]+$ && -f "$SRC/spec/$SPEC.conf" ]] ||
  die "unknown --spec $SPEC (one of: $(cd "$SRC/spec" && ls -- *.conf | sed 's/\.conf$//' | tr '\n' ' '))"
ENGINE_TARGET=""
ENGINE_SPEC_ARGS=""
ENGINE_TP=1
ENGINE_SPEC_ENV=""
# shellcheck source=/dev/null
source "$SRC/spec/$SPEC.conf"
ENGINE_TARGET="${ENGINE_TARGET//@ENGINE_MODEL@/$MODEL}"
ENGINE_SPEC_ARGS="${ENGINE_SPEC_ARGS//@ENGINE_MODEL@/$MODEL}"
[[ "$ENGINE_TP" =~ ^[1-9]$ ]] || die "spec $SPEC: ENGINE_TP must be 1 to 9, not '$ENGINE_TP'"
[[ -f "$ENGINE_TARGET/config.json" ]] || die "$ENGINE_TARGET/config.json not found (spec $SPEC; remake the model: make engine-model)"
command -v ninja >/dev/null || die "ninja not found: SGLang JIT-compiles NGRAM's corpus with it (rebuild the image: make testhost-image)"
command -v g++ >/dev/null || die "g++ not found (rebuild the image: make testhost-image)"

# The shims: replace the directory when its content differs (caches of compiled files ignored).
content_hash() {
  (cd "$1" && find . -type f ! -path '*/__pycache__/*' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
}
want="$(content_hash "$SRC/cpu_shims")"
have="$(cat "$SHIMS/.kdtree-shims-hash" 2>/dev/null || true)"
if [[ "$want" != "$have" ]]; then
  rm -rf "$SHIMS"
  mkdir -p "$SHIMS"
  (cd "$SRC/cpu_shims" && find . -type f ! -path '*/__pycache__/*' -print0 | xargs -0 cp --parents -t "$SHIMS")
  echo "$want" >"$SHIMS/.kdtree-shims-hash"
  "$VENV/bin/python" -m compileall -q "$SHIMS" >/dev/null
  log "installed CPU shims ($want) into $SHIMS"
  changed=1
fi

# What the unit needs on the venv's SGLang release (release/X.conf, when there is one).
RELEASE="$(timeout 60 "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))')" ||
  die "cannot read the sglang version of $VENV"
ENGINE_RELEASE_ENV=""
ENGINE_RELEASE_ARGS=""
if [[ -f "$SRC/release/$RELEASE.conf" ]]; then
  # shellcheck source=/dev/null
  source "$SRC/release/$RELEASE.conf"
  ENGINE_SPEC_ARGS="$ENGINE_SPEC_ARGS${ENGINE_RELEASE_ARGS:+ $ENGINE_RELEASE_ARGS}"
fi
# The stock unit: the template with the venv, the target, the configuration's flags and the release's
# environment filled in; put back when the file differs.
rendered="$(mktemp)"
trap 'rm -f "$rendered"' EXIT
# sed's replacement text with its delimiter, & and \ escaped (a CPU binding such as "0|1" has a |)
lit() { printf '%s' "$1" | sed -e 's/[\\|&]/\\&/g'; }
sed -e "s|@ENGINE_VENV@|$(lit "$VENV")|g" -e "s|@ENGINE_TARGET@|$(lit "$ENGINE_TARGET")|g" \
  -e "s|@ENGINE_SPEC_ARGS@|$(lit "$ENGINE_SPEC_ARGS")|g" -e "s|@ENGINE_SPEC@|$(lit "$SPEC")|g" \
  -e "s|@ENGINE_TP@|$ENGINE_TP|g" -e "s|@ENGINE_SPEC_ENV@|$(lit "$ENGINE_SPEC_ENV")|g" \
  -e "s|@ENGINE_RELEASE_ENV@|$(lit "$ENGINE_RELEASE_ENV")|g" "$SRC/sglang.service" >"$rendered"
if grep -q '@ENGINE_' "$rendered"; then
  die "unfilled placeholder in the unit: $(grep -o '@ENGINE_[A-Z_]*@' "$rendered" | sort -u | tr '\n' ' ')"
fi
unit_put "$rendered" "$UNIT"
((START)) || exit 0
unit_up "$ENGINE_HEALTH_URL" "$WAIT"
