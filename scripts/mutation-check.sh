#!/usr/bin/env bash
# Mutation check: apply each deliberate bug listed in scripts/mutation_check.py to a temporary copy
# of the tree (never the working files), run the tests meant to catch it, and expect them to fail.
# One line per mutant (KILLED / SURVIVED / ERROR / NOT-FOUND, seconds); exit 1 if any was not killed.
# Usage: scripts/mutation-check.sh [--only NAME]... [--keep] [--timeout S]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VENV:-$root/.venv}"
if [[ ! -x "$venv/bin/pytest" ]]; then
  echo "mutation-check: $venv/bin/pytest not found (make venv)" >&2
  exit 2
fi
command -v git >/dev/null || { echo "mutation-check: git is needed to list the tree's files" >&2; exit 2; }
start=$(date +%s)
rc=0
"$venv/bin/python" "$root/scripts/mutation_check.py" --pytest "$venv/bin/pytest" "$@" || rc=$?
echo "mutation-check: $(( $(date +%s) - start )) s in all"
exit "$rc"
