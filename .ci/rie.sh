#!/usr/bin/env bash
# The AWS Lambda Runtime Interface Emulator (aws-lambda-rie): the local
# stand-in for the Lambda service that `sam local invoke` runs inside its
# container, and that internal/dev/lambdatest starts to run each function's
# real bootstrap in the integration tests.
#
#   bash .ci/rie.sh install    build it into .cache/bin/aws-lambda-rie (once)
#
# The version is a pseudo-version pinned to one commit: the module has no
# tagged releases, and an unpinned @latest would let the emulator change
# under the tests between two runs.
set -euo pipefail

MODULE=github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie
VERSION=v0.0.0-20261030222936-bef5c4ba774d
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN_DIR=$ROOT/.cache/bin
BIN=$BIN_DIR/aws-lambda-rie

log() { echo "rie: $*" >&2; }

install() {
  if [ -x "$BIN" ]; then
    return 0
  fi
  if ! command -v go >/dev/null 2>&1; then
    log "go not found on PATH; it builds the emulator (install Go 1.26+, see README: Prerequisites)"
    exit 1
  fi
  log "installing $MODULE@$VERSION"
  mkdir -p "$BIN_DIR"
  # Into a private folder first, then renamed: a run interrupted half-way,
  # or two installs at once, never leave a truncated binary at $BIN that
  # the check above would take for a finished install.
  local tmp
  tmp=$(mktemp -d "$BIN_DIR/.rie-install.XXXXXX")
  # shellcheck disable=SC2064 # expand now: tmp is local
  trap "rm -rf '$tmp'" EXIT
  GOBIN=$tmp go install "$MODULE@$VERSION"
  mv -f "$tmp/aws-lambda-rie" "$BIN"
  log "installed $BIN"
}

case "${1:-}" in
install) install ;;
*)
  echo "usage: $0 install" >&2
  exit 2
  ;;
esac
