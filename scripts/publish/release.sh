#!/usr/bin/env bash
# Tag a release: the commit checked out becomes v<galaxy.yml version> (an annotated tag), after its
# tarball is built into <out-dir> (scripts/publish/build.sh, which needs the repository URL). Refuses,
# before anything is tagged, a work tree with changes, a tag that exists already, a version the
# changelog has not released (changelogs/changelog.yaml) and fragments left unreleased
# (changelogs/fragments). The steps around it: docs/release.md.
# Usage: scripts/publish/release.sh <venv> <out-dir>
set -euo pipefail

venv=${1:?usage: release.sh <venv> <out-dir>}
out=${2:?usage: release.sh <venv> <out-dir>}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
refuse() { echo "release.sh: $*; nothing tagged" >&2; exit 2; }

version=$(sed -n 's/^version: *//p' galaxy.yml)
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || refuse "galaxy.yml's version '$version' is not X.Y.Z"
tag=v$version
[[ -z $(git status --porcelain) ]] || refuse "the work tree has changes (git status): commit them first"
! git rev-parse -q --verify "refs/tags/$tag" >/dev/null || refuse "tag $tag exists already: raise galaxy.yml's version"
"$venv/bin/python" - "$version" <<'PY' || refuse "the changelog does not release $version (antsibull-changelog release)"
import sys, yaml
with open("changelogs/changelog.yaml") as f:
    sys.exit(0 if sys.argv[1] in (yaml.safe_load(f).get("releases") or {}) else 1)
PY
fragments=$(find changelogs/fragments -maxdepth 1 -type f \( -name '*.yml' -o -name '*.yaml' \) -printf '%f\n' | sort | tr '\n' ' ')
[[ -z $fragments ]] || refuse "unreleased changelog fragments: ${fragments% } (antsibull-changelog release)"
"$here/build.sh" "$venv" "$out"
git tag -a "$tag" -m "kdtree.fleet $version"
echo "release.sh: tagged $tag at $(git rev-parse --short HEAD); tarball $out/kdtree-fleet-$version.tar.gz" \
  "(next: git push origin $tag; ansible-galaxy collection publish <tarball> to publish on Galaxy)"
