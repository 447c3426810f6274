#!/usr/bin/env bash
# Galaxy's importer on the collection tarball, as Galaxy / Automation Hub run it on upload: metadata,
# a README for every role, the docs of every plugin and role (ansible-doc). Its ansible-lint pass is
# off here (scripts/publish/importer.cfg): `make lint` runs ansible-lint, production profile, already.
# Usage: scripts/publish/importer.sh <importer-venv> <tarball>
set -euo pipefail

venv=$(realpath "${1:?usage: importer.sh <importer-venv> <tarball>}")
tarball=$(realpath "${2:?usage: importer.sh <importer-venv> <tarball>}")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log=${tarball%.tar.gz}.importer.log
cd "$(dirname "$tarball")"
rc=0
PATH=$venv/bin:$PATH GALAXY_IMPORTER_CONFIG=$here/importer.cfg \
  "$venv/bin/python" -m galaxy_importer.main "$tarball" >"$log" 2>&1 || rc=$?
# The importer exits 0 on some refusals; its last line says whether it completed.
if [[ $rc -ne 0 ]] || ! grep -q '^Importer processing completed successfully' "$log" || grep -q '^ERROR' "$log"; then
  cat "$log"
  echo "importer: $tarball refused (log: $log)" >&2
  exit 1
fi
grep '^WARNING' "$log" || true
echo "importer: $(basename "$tarball") accepted"
