#!/usr/bin/env bash
# moto: local SQS, S3, Secrets Manager and EventBridge in one process (moto_server, from
# the machine's python) for the integration tests and the local stacks; also
# Lambda's control plane (functions, event source mappings: no invocations,
# which would need docker) and the IAM roles creating a function needs.
#
#   bash .ci/moto.sh start            start in the background (idempotent);
#                                     prints the endpoint, also kept in
#                                     .cache/moto/endpoint
#   bash .ci/moto.sh stop             stop what start started (idempotent)
#   bash .ci/moto.sh run -- CMD...    start a private instance, run CMD with
#                                     AWS_ENDPOINT_URL_SQS, _S3,
#                                     _SECRETS_MANAGER, _EVENTBRIDGE, _LAMBDA
#                                     and _IAM set to it, stop it (also
#                                     when CMD fails), exit with CMD's status
#
# run composes with scripts of the same shape, e.g.
#   bash .ci/dynamodb-local.sh run -- bash .ci/moto.sh run -- go test ./...
# It does not change directory, so CMD runs where it was invoked. Each run
# has its own state directory and port, so concurrent runs (and an instance
# left up by `start`) do not disturb each other.
#
# moto is not installed from here: it comes with the machine's python
# (moto[server]); when it is missing this script fails and says so.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${MOTO_STATE_DIR:-$ROOT/.cache/moto}
FIRST_PORT=4200
READY_TIMEOUT=90 # about 2 s idle; 10-20 s measured on a loaded 2-core machine
DETACH=1
MOTO=

log() { echo "moto: $*" >&2; }

# find_moto sets MOTO to moto_server, checking that its python can import
# the server (moto without the [server] extra has the command but not
# flask).
find_moto() {
  [ -n "$MOTO" ] && return 0
  MOTO=$(command -v moto_server || true)
  if [ -z "$MOTO" ] && [ -x "$HOME/.pyenv/shims/moto_server" ]; then
    MOTO=$HOME/.pyenv/shims/moto_server
  fi
  if [ -z "$MOTO" ]; then
    log "moto_server not found on PATH nor in $HOME/.pyenv/shims: install moto with its server (pip install 'moto[server]') for the python on PATH"
    return 1
  fi
  # The python that runs moto_server: its shebang's, unless that is a
  # shell (a pyenv shim), whose python3 is then the one next to it.
  local py shebang
  shebang=$(head -n 1 "$MOTO")
  py=${shebang#\#!}
  case "$py" in
  *python*) ;;
  *) py=$(dirname "$MOTO")/python3 ;;
  esac
  [ -x "${py%% *}" ] || py=python3
  # Unquoted: a shebang may carry an argument (#!/usr/bin/env python3).
  # shellcheck disable=SC2086
  if ! $py -c 'import moto.server' 2>/dev/null; then
    log "$MOTO exists but '$py -c \"import moto.server\"' fails: moto's server extra (flask) is missing for that python"
    return 1
  fi
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

# ours PID: is PID alive and a moto_server (not a recycled pid)?
ours() {
  local pid=$1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  [ -r "/proc/$pid/cmdline" ] || return 0 # no /proc: trust kill -0
  { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -qF -- "moto_server" # it may exit between the checks
}

running_pid() {
  local pid
  pid=$(cat "$STATE/pid" 2>/dev/null || true)
  if ours "$pid"; then echo "$pid"; fi
}

# ready PORT: does moto answer its own API there? (An open port alone may
# be another process that took it first.)
ready() {
  local reply
  reply=$({ exec 3<>"/dev/tcp/127.0.0.1/$1" &&
    printf 'GET /moto-api/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3 &&
    timeout 2 head -c 12 <&3; } 2>/dev/null) || return 1
  [[ "$reply" == HTTP/1.?\ * ]]
}

start() {
  find_moto
  mkdir -p "$STATE"
  local pid
  pid=$(running_pid)
  if [ -n "$pid" ]; then
    log "already running (pid $pid)"
    cat "$STATE/endpoint"
    return 0
  fi
  rm -f "$STATE/pid" "$STATE/endpoint"

  # A port found free can be taken before moto binds it (a concurrent
  # run); moto then exits at once, and we try the next port.
  local port=$FIRST_PORT tries
  for tries in 1 2 3 4 5; do
    port=$(free_port "$port")
    if [ "$DETACH" = 1 ]; then
      # start: its own session, so closing the terminal or a Ctrl-C meant
      # for something else does not take it down behind stop's back.
      setsid "$MOTO" -H 127.0.0.1 -p "$port" >"$STATE/moto.log" 2>&1 </dev/null &
    else
      # run: in our process group, so a CI timeout that kills the group
      # (even with SIGKILL, when no trap runs) takes moto down with it.
      "$MOTO" -H 127.0.0.1 -p "$port" >"$STATE/moto.log" 2>&1 </dev/null &
    fi
    pid=$!
    echo "$pid" >"$STATE/pid"

    local deadline=$((SECONDS + READY_TIMEOUT))
    # kill -0, not ours: until the shims have exec'd python, the pid's
    # command line is a shell's.
    while kill -0 "$pid" 2>/dev/null && ! ready "$port"; do
      if [ "$SECONDS" -ge "$deadline" ]; then
        log "not answering on port $port after ${READY_TIMEOUT}s; log tail:"
        tail -n 20 "$STATE/moto.log" >&2 || true
        stop
        return 1
      fi
      sleep 0.1
    done
    if ours "$pid" && ready "$port"; then
      echo "http://127.0.0.1:$port" >"$STATE/endpoint"
      log "listening at http://127.0.0.1:$port (pid $pid, log $STATE/moto.log)"
      echo "http://127.0.0.1:$port"
      return 0
    fi
    if grep -q "already in use" "$STATE/moto.log" 2>/dev/null; then
      port=$((port + 1))
      continue
    fi
    log "exited during start-up; log tail:"
    tail -n 20 "$STATE/moto.log" >&2 || true
    rm -f "$STATE/pid"
    return 1
  done
  log "could not bind a port after $tries tries; log tail:"
  tail -n 20 "$STATE/moto.log" >&2 || true
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
  # Before the state directory, so a machine without moto leaves none.
  find_moto
  # A private state directory (removed afterwards unless CMD failed, when
  # the log may explain why) keeps this instance apart from `start`'s and
  # from concurrent runs'. Failed runs' directories go after a day.
  if [ -z "${MOTO_STATE_DIR:-}" ]; then
    mkdir -p "$ROOT/.cache/moto"
    find "$ROOT/.cache/moto" -maxdepth 1 -name 'run.*' -type d -mmin +1440 -exec rm -rf {} + 2>/dev/null || true
    STATE=$(mktemp -d "$ROOT/.cache/moto/run.XXXXXX")
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
  local endpoint
  endpoint=$(cat "$STATE/endpoint")
  export AWS_ENDPOINT_URL_SQS=$endpoint AWS_ENDPOINT_URL_S3=$endpoint AWS_ENDPOINT_URL_SECRETS_MANAGER=$endpoint AWS_ENDPOINT_URL_EVENTBRIDGE=$endpoint
  export AWS_ENDPOINT_URL_LAMBDA=$endpoint AWS_ENDPOINT_URL_IAM=$endpoint
  "$@" || status=$?
  stop
  if [ -z "${MOTO_STATE_DIR:-}" ]; then
    if [ "$status" -eq 0 ]; then
      rm -rf "$STATE"
    else
      log "command exited with $status; moto log kept at $STATE/moto.log"
    fi
  fi
  return "$status"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
run)
  shift
  run "$@"
  ;;
*)
  echo "usage: $0 start | stop | run -- CMD..." >&2
  exit 2
  ;;
esac
