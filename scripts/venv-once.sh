# shellcheck shell=bash
# Sourced by the scripts that build a venv once (router-venv.sh, gpu-rehearsal-venv.sh,
# publish/venv.sh): one build at a time per venv, and a stamp (<venv>/.kdtree-stamp) naming what the
# venv was built from, so that a second run with the same inputs is a no-op. The stamp is the build's
# last step: a build that died half-way has none and is redone.

# venv_base PYTHON: the base interpreter as a stamp names it, "<real path> <version>".
venv_base() {
  "$1" -c 'import os, sys; print(os.path.realpath(sys.executable), sys.version.split()[0])'
}

# venv_hash FILE...: one sha256 of the files' bytes together (the building script and this file, at
# least: a change to either rebuilds).
venv_hash() {
  cat "$@" | sha256sum | cut -d' ' -f1
}

# venv_reuse_or_remake LABEL VENV WANT PYTHON BASE: wait for VENV's build lock (fd 9, held until the
# script exits). When VENV's stamp is WANT and its python runs, say so and END THE SCRIPT (exit 0);
# else remove VENV and make it afresh from PYTHON, for the caller to install into and then stamp.
# LABEL and BASE (venv_base PYTHON) only name them in the two messages.
venv_reuse_or_remake() {
  local label=$1 venv=$2 want=$3 python=$4 base=$5
  mkdir -p "$(dirname "$venv")"
  exec 9>"$venv.lock"
  flock 9
  if [[ -f "$venv/.kdtree-stamp" && "$(cat "$venv/.kdtree-stamp")" == "$want" ]] &&
    "$venv/bin/python" -c '' 2>/dev/null; then
    echo "$label: reusing $venv ($base)"
    exit 0
  fi
  echo "$label: building $venv from $base"
  rm -rf "$venv"
  "$python" -m venv "$venv"
}

# venv_stamp VENV WANT: record that VENV is built from WANT (the build's last step).
venv_stamp() {
  echo "$2" >"$1/.kdtree-stamp"
}

# devcache_entry LINK NAME RECIPE...: the machine-level cache's entry for this recipe (scripts/devcache.py:
# <home>/<NAME>-<first 16 hex of the recipe's sha256>), LINK (the clone's .cache/<...>) pointed at it.
# Prints the entry: build into it (its stamp says whether it is done), never into LINK.
devcache_entry() {
  local link=$1 name=$2 key
  shift 2
  key=$(printf '%s\n' "$@" | sha256sum | cut -c1-16)
  python3 "$(dirname "${BASH_SOURCE[0]}")/devcache.py" link "$link" "$name" "$key"
}
