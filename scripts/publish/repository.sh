#!/usr/bin/env bash
# Print the repository URL the collection is published from: galaxy.yml's `repository` in the tarball
# (Galaxy's importer requires it) and the git source of the execution environment. The project does
# not write a URL it does not own into galaxy.yml, so it is this clone's: COLLECTION_REPOSITORY when
# set, else `git remote get-url origin`. Neither: a refusal that says how to name one (exit 2).
# Usage: scripts/publish/repository.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
repo=${COLLECTION_REPOSITORY:-$(git -C "$root" remote get-url origin 2>/dev/null || true)}
if [[ -z $repo ]]; then
  echo "repository.sh: no repository URL: this clone has no origin remote and COLLECTION_REPOSITORY" \
    "is not set; name the URL users install from, e.g. make collection" \
    "COLLECTION_REPOSITORY=https://git.example.com/kdtree-fleet.git" >&2
  exit 2
fi
printf '%s\n' "$repo"
