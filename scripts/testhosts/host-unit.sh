# shellcheck shell=bash
# Sourced INSIDE a test host by the two installers of its stock unit, sglang.service: install-double.sh
# (the test double) and engine-install.sh (the real engine). It travels beside them (make-bundle.sh and
# engine-host.sh copy it in). The installer defines log() (stdout) and die() (stderr, exit 1) and sets
# `changed=1` whenever it installs something: the unit is then restarted.

# unit_put FILE UNIT: install FILE as UNIT (0644) and reload systemd, when UNIT differs from it.
unit_put() {
  if ! cmp -s "$1" "$2"; then
    install -m 0644 "$1" "$2"
    systemctl daemon-reload
    log "installed $2"
    changed=1
  fi
}

# unit_journal LINES: the last LINES lines of sglang.service's current run, on stderr.
unit_journal() {
  journalctl -o cat --no-pager _SYSTEMD_INVOCATION_ID="$(systemctl show -p InvocationID --value sglang.service)" |
    tail -n "$1" >&2
}

# unit_up URL WAIT: enable sglang.service and (re)start it when `changed` or when it is not active (a
# running unit with nothing changed is left alone). Unless WAIT is 0, wait up to WAIT seconds for URL
# to answer 200 (saying how long after the start); die with the run's journal when the unit fails or
# the time is up.
unit_up() {
  local url=$1 seconds=$2 t0 since="(already running)" code i
  systemctl enable -q sglang.service
  t0=$(date +%s.%N)
  if ((changed)) || ! systemctl is-active -q sglang.service; then
    systemctl restart sglang.service
    log "started sglang.service"
    since=""
  fi
  ((seconds > 0)) || return 0
  for ((i = 0; i < seconds * 5; i++)); do
    code="$(curl -s -m 2 -o /dev/null -w '%{http_code}' "$url" || true)"
    if [[ "$code" == 200 ]]; then
      [[ -n "$since" ]] || since="$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s after the start"
      log "sglang.service healthy ($url 200) $since"
      return 0
    fi
    if [[ "$(systemctl show -p ActiveState --value sglang.service)" == failed ]]; then
      unit_journal 40
      systemctl status --no-pager sglang.service >&2 || true
      die "sglang.service failed"
    fi
    sleep 0.2
  done
  unit_journal 20
  die "sglang.service not healthy after ${seconds}s"
}
