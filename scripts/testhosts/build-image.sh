#!/usr/bin/env bash
# Builds the kdtree-fleet test-host image: a Debian 12 (bookworm) minbase root file system with
# systemd as init, Debian's python3 + venv, g++ (host compiler for nvcc), ninja-build (the real SGLang
# engine JIT-compiles its NGRAM corpus with ninja + g++: tests/engine) and a few tools, imported
# into podman as localhost/kdtree-testhost:bookworm. No container registry is needed.
#
# Cached: the image carries the label kdtree.recipe=<sha256 of the recipe, see recipe_hash>; when an image with that
# label exists nothing is rebuilt (pass --force to rebuild). Downloaded .debs are kept under
# .cache/testhost/debs so a rebuild does not fetch them again.
#
# The Debian mirror is read from this machine's apt sources (deb822 or one-line format), never
# written into the repo. Override with KDTREE_DEBIAN_MIRROR=<uri> if needed.
set -euo pipefail

IMAGE="${KDTREE_TESTHOST_IMAGE:-localhost/kdtree-testhost:bookworm}"
SUITE=bookworm
PACKAGES=systemd,systemd-sysv,python3,python3-venv,dbus,iproute2,procps,g++,curl,ca-certificates,ninja-build
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="$ROOT/.cache/testhost"

log() { echo "build-image: $*" >&2; }

# The recipe: what ends up in the image (suite, variant, packages, the customize step). Edits to the
# rest of this script do not force a rebuild.
recipe_hash() {
  { echo "$SUITE minbase $PACKAGES"; declare -f customize; } | sha256sum | cut -c1-16
}

# Prints the first Debian archive URI (the one serving "$SUITE ... main") from the apt sources.
debian_mirror() {
  if [[ -n "${KDTREE_DEBIAN_MIRROR:-}" ]]; then
    echo "$KDTREE_DEBIAN_MIRROR"
    return
  fi
  local f uri
  # deb822: paragraphs with Types/URIs/Suites/Components.
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -e "$f" ]] || continue
    uri="$(awk -v suite="$SUITE" '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && comps ~ /(^| )main( |$)/ && uris != "") {
          split(uris, u, " "); print u[1]; found = 1; exit
        }
        types = ""; uris = ""; suites = ""; comps = ""
      }
      /^[[:space:]]*$/ { flush(); next }
      /^#/ { next }
      tolower($1) == "types:" { $1 = ""; types = $0 }
      tolower($1) == "uris:" { $1 = ""; uris = $0; sub(/^ +/, "", uris) }
      tolower($1) == "suites:" { $1 = ""; suites = $0; sub(/^ +/, "", suites) }
      tolower($1) == "components:" { $1 = ""; comps = $0 }
      END { if (!found) flush() }
    ' "$f")"
    if [[ -n "$uri" ]]; then
      echo "$uri"
      return
    fi
  done
  # One-line format: deb [options] URI SUITE COMPONENTS...
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -e "$f" ]] || continue
    uri="$(awk -v suite="$SUITE" '
      $1 == "deb" {
        i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
        if ($(i + 1) == suite) { for (j = i + 2; j <= NF; j++) if ($j == "main") { print $i; exit } }
      }' "$f")"
    if [[ -n "$uri" ]]; then
      echo "$uri"
      return
    fi
  done
  return 1
}

main() {
  local force=0
  [[ "${1:-}" == "--force" ]] && force=1
  local want have
  want="$(recipe_hash)"
  # One build at a time (parallel make targets may all ask for the image).
  mkdir -p "$CACHE"
  exec 9>"$CACHE/build.lock"
  flock 9
  have="$(podman image inspect --format '{{ index .Labels "kdtree.recipe" }}' "$IMAGE" 2>/dev/null || true)"
  if ((force == 0)) && [[ "$have" == "$want" ]]; then
    log "$IMAGE is up to date (recipe $want), nothing to do"
    return 0
  fi
  local mirror
  mirror="$(debian_mirror)" || { log "no Debian $SUITE main source found in /etc/apt; set KDTREE_DEBIAN_MIRROR"; exit 1; }
  log "building $IMAGE (recipe $want) from mirror $mirror"
  mkdir -p "$CACHE/debs"
  WORK="$(mktemp -d "${TMPDIR:-/var/tmp}/kdtree-testhost.XXXXXX")"
  trap 'rm -rf --one-file-system "$WORK"' EXIT
  local work="$WORK"
  local rootfs="$work/rootfs"
  local t0=$SECONDS
  debootstrap --variant=minbase --include="$PACKAGES" --cache-dir="$CACHE/debs" \
    "$SUITE" "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
    tail -n 30 "$work/debootstrap.log" >&2
    log "debootstrap failed"
    exit 1
  }
  log "debootstrap done in $((SECONDS - t0)) s"
  customize "$rootfs"
  local old_id
  old_id="$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
  tar -C "$rootfs" --numeric-owner -c . | podman import \
    --change 'CMD ["/sbin/init"]' \
    --change 'STOPSIGNAL SIGRTMIN+3' \
    --change "LABEL kdtree.recipe=$want" \
    --message "kdtree-fleet test host, recipe $want" \
    - "$IMAGE" >/dev/null
  log "imported $IMAGE in $((SECONDS - t0)) s total"
  # Drop the image this one replaced, unless a container still uses it.
  [[ -z "$old_id" ]] || podman rmi "$old_id" >/dev/null 2>&1 || true
}

# Container-friendly tweaks inside the root file system.
customize() {
  local r="$1"
  # Units that cannot work (or only add noise) in a container; masking them lets
  # `systemctl is-system-running` answer "running".
  local u
  for u in getty@tty1.service console-getty.service systemd-udevd.service systemd-udev-trigger.service \
    systemd-remount-fs.service systemd-firstboot.service systemd-networkd-wait-online.service \
    sys-kernel-debug.mount sys-kernel-tracing.mount dev-hugepages.mount; do
    ln -sf /dev/null "$r/etc/systemd/system/$u"
  done
  echo "kdtree-testhost" >"$r/etc/hostname"
  # An empty machine-id makes systemd create a fresh one per container at boot.
  : >"$r/etc/machine-id"
  # Keep the journal in memory (no persistent storage needed) and readable at once.
  mkdir -p "$r/etc/systemd/journald.conf.d"
  printf '[Journal]\nStorage=volatile\nRateLimitBurst=0\n' >"$r/etc/systemd/journald.conf.d/kdtree.conf"
  rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/*_Packages
}

main "$@"
