#!/usr/bin/env bash
# goaws: a local SQS (v0.5.4; see /work/shared/local-aws.md for what it gets
# right and wrong) for the queue adapter's integration tests.
#
#   bash .ci/goaws.sh install          fetch the binary into .cache/bin (once)
#   bash .ci/goaws.sh start            start in the background (idempotent);
#                                      prints the endpoint, also kept in
#                                      .cache/goaws/endpoint
#   bash .ci/goaws.sh stop             stop what start started (idempotent)
#   bash .ci/goaws.sh run -- CMD...    start a private instance, run CMD with
#                                      AWS_ENDPOINT_URL_SQS set, stop it
#                                      (also when CMD fails), exit with CMD's
#                                      status
#
# run composes with scripts of the same shape, e.g.
#   bash .ci/dynamodb-local.sh run -- bash .ci/goaws.sh run -- go test ./...
# It does not change directory, so CMD runs where it was invoked. Each run
# has its own state directory and port, so concurrent runs (and an instance
# left up by `start`) do not disturb each other.
set -euo pipefail

VERSION=v0.5.4
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN_DIR=$ROOT/.cache/bin
BIN=$BIN_DIR/goaws
STATE=${GOAWS_STATE_DIR:-$ROOT/.cache/goaws}
FIRST_PORT=4100
READY_TIMEOUT=30
DETACH=1

log() { echo "goaws: $*" >&2; }

install() {
  if [ -x "$BIN" ]; then
    return 0
  fi
  log "installing github.com/Admiral-Piett/goaws/app/cmd@$VERSION"
  mkdir -p "$BIN_DIR"
  # The package's binary is named after its directory, cmd; a private
  # GOBIN keeps that generic name out of the shared bin directory.
  local tmp
  tmp=$(mktemp -d "$BIN_DIR/.goaws-install.XXXXXX")
  if ! GOBIN=$tmp go install "github.com/Admiral-Piett/goaws/app/cmd@$VERSION"; then
    rm -rf "$tmp"
    return 1
  fi
  mv "$tmp/cmd" "$BIN"
  rm -rf "$tmp"
}

# port_open PORT: does something accept connections on 127.0.0.1:PORT?
port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

free_port() {
  local port=$1
  while port_open "$port"; do
    port=$((port + 1))
    if [ "$port" -gt 65535 ]; then
      log "no free port from $1 upward"
      return 1
    fi
  done
  echo "$port"
}

# ours PID: is PID alive and our goaws binary (not a recycled pid)?
ours() {
  local pid=$1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  [ -r "/proc/$pid/cmdline" ] || return 0 # no /proc: trust kill -0
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$BIN"
}

running_pid() {
  local pid
  pid=$(cat "$STATE/pid" 2>/dev/null || true)
  if ours "$pid"; then echo "$pid"; fi
}

write_config() {
  # Host is what goaws puts into queue URLs; Region and AccountId make its
  # queue ARNs look like real ones (arn:aws:sqs:us-east-1:000000000000:NAME).
  cat >"$STATE/goaws.yaml" <<EOF
Local:
  Host: 127.0.0.1
  Port: $1
  Region: us-east-1
  AccountId: "000000000000"
  LogToFile: false
  EnableDuplicates: false
  QueueAttributeDefaults:
    VisibilityTimeout: 30
    ReceiveMessageWaitTimeSeconds: 0
    MaximumMessageSize: 262144
  Queues: []
  Topics: []
  RandomLatency:
    Min: 0
    Max: 0
EOF
}

start() {
  install
  mkdir -p "$STATE"
  local pid
  pid=$(running_pid)
  if [ -n "$pid" ]; then
    log "already running (pid $pid)"
    cat "$STATE/endpoint"
    return 0
  fi
  rm -f "$STATE/pid" "$STATE/endpoint"

  # A port found free can be taken before goaws binds it (a concurrent
  # run); goaws then exits at once, and we try the next port.
  local port=$FIRST_PORT tries
  for tries in 1 2 3 4 5; do
    port=$(free_port "$port")
    write_config "$port"
    # The config path is explicit: without -config goaws searches the
    # whole working tree for a goaws.yaml. "Local" is the environment it
    # reads from the config.
    if [ "$DETACH" = 1 ]; then
      # start: its own session, so closing the terminal or a Ctrl-C meant
      # for something else does not take it down behind stop's back.
      setsid "$BIN" -config "$STATE/goaws.yaml" Local >"$STATE/goaws.log" 2>&1 </dev/null &
    else
      # run: in our process group, so a CI timeout that kills the group
      # (even with SIGKILL, when no trap runs) takes goaws down with it.
      "$BIN" -config "$STATE/goaws.yaml" Local >"$STATE/goaws.log" 2>&1 </dev/null &
    fi
    pid=$!
    echo "$pid" >"$STATE/pid"

    local deadline=$((SECONDS + READY_TIMEOUT))
    # kill -0, not ours: until setsid has exec'd goaws, the pid is a shell.
    while kill -0 "$pid" 2>/dev/null && ! port_open "$port"; do
      if [ "$SECONDS" -ge "$deadline" ]; then
        log "not answering on port $port after ${READY_TIMEOUT}s; log tail:"
        tail -n 20 "$STATE/goaws.log" >&2 || true
        stop
        return 1
      fi
      sleep 0.1
    done
    # A failed bind makes goaws exit right away; give it that moment so
    # another process answering on the port is not mistaken for ours.
    sleep 0.2
    if ours "$pid" && port_open "$port"; then
      echo "http://127.0.0.1:$port" >"$STATE/endpoint"
      log "listening at http://127.0.0.1:$port (pid $pid, log $STATE/goaws.log)"
      echo "http://127.0.0.1:$port"
      return 0
    fi
    if grep -q "address already in use" "$STATE/goaws.log" 2>/dev/null; then
      port=$((port + 1))
      continue
    fi
    log "exited during start-up; log tail:"
    tail -n 20 "$STATE/goaws.log" >&2 || true
    rm -f "$STATE/pid"
    return 1
  done
  log "could not bind a port after $tries tries; log tail:"
  tail -n 20 "$STATE/goaws.log" >&2 || true
  rm -f "$STATE/pid"
  return 1
}

stop() {
  local pid
  pid=$(running_pid)
  rm -f "$STATE/endpoint"
  if [ -z "$pid" ]; then
    rm -f "$STATE/pid"
    return 0
  fi
  kill "$pid" 2>/dev/null || true
  local i
  for i in $(seq 50); do
    ours "$pid" || break
    sleep 0.1
  done
  if ours "$pid"; then
    log "pid $pid ignored SIGTERM; killing"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  # Reap it when it is our child (run); harmless otherwise.
  wait "$pid" 2>/dev/null || true
  rm -f "$STATE/pid"
}

run() {
  if [ "${1:-}" = "--" ]; then shift; fi
  if [ $# -eq 0 ]; then
    log "usage: $0 run -- CMD..."
    return 2
  fi
  # A private state directory (removed afterwards unless CMD failed, when
  # the log may explain why) keeps this instance apart from `start`'s and
  # from concurrent runs'. Failed runs' directories go after a day.
  if [ -z "${GOAWS_STATE_DIR:-}" ]; then
    mkdir -p "$ROOT/.cache/goaws"
    find "$ROOT/.cache/goaws" -maxdepth 1 -name 'run.*' -type d -mmin +1440 -exec rm -rf {} + 2>/dev/null || true
    STATE=$(mktemp -d "$ROOT/.cache/goaws/run.XXXXXX")
  fi
  DETACH=0
  local status=0
  # stop on every way out: CMD failing, start failing half-way, a signal.
  # As in any script, a signal sent to this shell alone is acted on once
  # the running CMD returns; a Ctrl-C reaches CMD itself directly.
  trap 'stop' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  start >/dev/null
  AWS_ENDPOINT_URL_SQS=$(cat "$STATE/endpoint")
  export AWS_ENDPOINT_URL_SQS
  "$@" || status=$?
  stop
  if [ -z "${GOAWS_STATE_DIR:-}" ]; then
    if [ "$status" -eq 0 ]; then
      rm -rf "$STATE"
    else
      log "command exited with $status; goaws log kept at $STATE/goaws.log"
    fi
  fi
  return "$status"
}

case "${1:-}" in
install) install ;;
start) start ;;
stop) stop ;;
run)
  shift
  run "$@"
  ;;
*)
  echo "usage: $0 install | start | stop | run -- CMD..." >&2
  exit 2
  ;;
esac
