#!/usr/bin/env bash
# Headless Chromium from the system packages, for the console's browser
# test (internal/console, build tag integration), which drives it with
# chromedp.
#
#   bash .ci/chromium.sh install    apt-get install chromium if /usr/bin/chromium is missing
#
# The distribution's package, not a browser build downloaded by a tool:
# it installs with the machine's package manager, like the JRE DynamoDB
# Local needs, and is kept current by it.
set -euo pipefail

BIN=/usr/bin/chromium

log() { echo "chromium: $*" >&2; }

install() {
  if [ -x "$BIN" ]; then
    return 0
  fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    log "$BIN is missing and this is not root with apt-get: install the chromium package (see README: Prerequisites)"
    exit 1
  fi
  log "installing chromium (apt-get)"
  # Noninteractive: CI has no standard input to answer a prompt.
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
  [ -x "$BIN" ] || { log "apt-get installed chromium but $BIN is missing"; exit 1; }
  log "installed $("$BIN" --version 2>/dev/null || echo "$BIN")"
}

case "${1:-}" in
install) install ;;
*)
  echo "usage: $0 install" >&2
  exit 2
  ;;
esac
