#!/usr/bin/env bash
# ansible-test (sanity or units) of this clone with the ansible-core of <venv> (scripts/publish/venv.sh),
# no containers (--venv). ansible-test wants the collection at .../ansible_collections/kdtree/fleet as a
# git work tree: build/publish/tree-<release>-<tree>/ansible_collections/kdtree/fleet, staged from
#   shipped: the tarball's files (galaxy.yml's build_ignore keeps the project's own test tree, benchmarks
#            and scripts out), plus what ansible-test reads from tests/: the ignore files,
#            tests/config.yml and the unit tests;
#   repo:    every file of the repository as git lists it (tracked and untracked, not ignored: the
#            set-up's collections/ link is ignored), i.e. what a clone of the repository holds.
# The ignore files are tests/sanity/ignore-<release>.txt (one reason per line).
# Usage: scripts/publish/ansible-test.sh <venv> <shipped|repo> <sanity|units> [ansible-test options...]
set -euo pipefail

usage="usage: ansible-test.sh <venv> <shipped|repo> <sanity|units> [ansible-test options...]"
venv=$(realpath "${1:?$usage}")
kind=${2:?$usage}
command=${3:?$usage}
shift 3
case $kind in shipped | repo) ;; *) echo "$usage" >&2; exit 2 ;; esac
case $command in sanity | units) ;; *) echo "$usage" >&2; exit 2 ;; esac
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
release=$("$venv/bin/python" -c 'import ansible.release as r; print(".".join(r.__version__.split(".")[:2]))')
tree=$root/build/publish/tree-$release-$kind/ansible_collections/kdtree/fleet

# The pip bootstrap script ansible-test would download, for the pip version this release pins.
pip_version=$(grep -oP "pip='\K[0-9.]+" "$venv"/lib/python3*/site-packages/ansible_test/_internal/python_requirements.py)
cache=~/.ansible/test/cache
mkdir -p "$cache"
install -m 0644 "$root/scripts/publish/get_pip_standin.py" "$cache/get_pip_${pip_version//./_}.py"

rm -rf "$tree" "$tree.tarball"
mkdir -p "$tree"
if [[ $kind == shipped ]]; then
  mkdir -p "$tree.tarball"
  "$venv/bin/ansible-galaxy" collection build --force --output-path "$tree.tarball" "$root" >/dev/null
  tar -xzf "$tree.tarball"/*.tar.gz -C "$tree"
  rm -rf "$tree.tarball"
  (cd "$root" && git ls-files -co --exclude-standard -z -- tests/sanity tests/unit tests/doubles/nvidia_smi tests/config.yml \
    | tar -c --null -T - -f -) | tar -x -C "$tree"
else
  (cd "$root" && git ls-files -co --exclude-standard -z | tar -c --null -T - -f -) | tar -x -C "$tree"
fi
# Staged in a fresh git repository (ansible-test lists files with git).
grep -qsx "tests/output/" "$tree/.gitignore" || printf "tests/output/\n" >> "$tree/.gitignore"
git -C "$tree" init -q
git -C "$tree" add -A

# The interpreters ansible-test may pick by version (--python X): the venv's, and pyenv's installs
# (not its shims, which answer for one version only), e.g. 3.9 for the import test on the oldest host.
PATH=$(tr : '\n' <<<"$PATH" | grep -v '/\.pyenv/shims' | paste -sd:)
for bin in /root/.pyenv/versions/*/bin; do [[ -d $bin ]] && PATH=$PATH:$bin; done
export PATH=$venv/bin:$PATH
cd "$tree"
start=$(date +%s)
rc=0
# sanity: --venv (ansible-test makes a venv per test with the versions it pins); units: --local, the
# venv's own pytest and tests/unit/requirements.txt (venv.sh installs them into core-2.21 while the other
# check venvs build), which saves creating and filling a venv here.
env_opt=--venv
[[ $command == units ]] && env_opt=--local
ansible-test "$command" "$env_opt" --color no "$@" || rc=$?
echo "ansible-test $command ($kind tree) ansible-core $release: rc=$rc in $(( $(date +%s) - start )) s"
exit "$rc"
