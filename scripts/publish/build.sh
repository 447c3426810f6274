#!/usr/bin/env bash
# Build the collection tarball a user installs (or Galaxy imports) into <out-dir>, with <venv>'s
# ansible-galaxy: the one build of the project (make collection, make release and the publish checks
# call it). Galaxy's importer requires galaxy.yml's `repository`; the URL is this clone's
# (scripts/publish/repository.sh: COLLECTION_REPOSITORY, else the origin remote, else a refusal before
# anything is built), written into a staged copy of the shipped files (a fresh directory under
# build/publish, removed afterwards), never into galaxy.yml itself.
# Usage: scripts/publish/build.sh <venv> <out-dir>
set -euo pipefail

venv=$(realpath "${1:?usage: build.sh <venv> <out-dir>}")
out=${2:?usage: build.sh <venv> <out-dir>}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
repo=$("$here/repository.sh")
mkdir -p "$root/build/publish" "$out"
src=$(mktemp -d "$root/build/publish/src.XXXXXX")
trap 'rm -rf "$src"' EXIT
(cd "$root" && git ls-files -co --exclude-standard -z | tar -c --null -T - -f -) | tar -x -C "$src"
if grep -q '^repository:' "$src/galaxy.yml"; then
  echo "build.sh: galaxy.yml names a repository itself; the build writes it (COLLECTION_REPOSITORY)" >&2
  exit 2
fi
printf 'repository: %s\n' "$repo" >> "$src/galaxy.yml"
"$venv/bin/ansible-galaxy" collection build --force --output-path "$out" "$src"
