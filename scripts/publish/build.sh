#!/usr/bin/env bash
# Build the collection tarball a user installs (or Galaxy imports) into <out-dir>, with <venv>'s
# ansible-galaxy. Galaxy's importer requires galaxy.yml's `repository`; the project does not write a
# URL it does not own into galaxy.yml, so the build names the repository this clone came from
# (COLLECTION_REPOSITORY, else `git remote get-url origin`, else the clone's own file:// path, with a
# warning) in a staged copy of the shipped files (build/publish/src).
# Usage: scripts/publish/build.sh <venv> <out-dir>
set -euo pipefail

venv=$(realpath "${1:?usage: build.sh <venv> <out-dir>}")
out=${2:?usage: build.sh <venv> <out-dir>}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
repo=${COLLECTION_REPOSITORY:-$(git -C "$root" remote get-url origin 2>/dev/null || true)}
if [[ -z $repo ]]; then
  repo=file://$root
  echo "build.sh: no origin remote and no COLLECTION_REPOSITORY: repository is $repo" >&2
fi
src=$root/build/publish/src
rm -rf "$src"
mkdir -p "$src" "$out"
(cd "$root" && git ls-files -co --exclude-standard -z | tar -c --null -T - -f -) | tar -x -C "$src"
grep -q '^repository:' "$src/galaxy.yml" || printf 'repository: %s\n' "$repo" >> "$src/galaxy.yml"
"$venv/bin/ansible-galaxy" collection build --force --output-path "$out" "$src"
rm -rf "$src"
