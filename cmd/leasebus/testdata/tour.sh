#!/usr/bin/env bash
# tour.sh regenerates tour.txt next to it: the real output of a short tour of
# the leasebus command (help, the demo, publish, tail, leases, threads,
# threads cancel, leases revoke, an error).
#
#	cmd/leasebus/testdata/tour.sh
#
# It needs Go and redis-server on PATH. It builds the command into a temporary
# directory and starts a private redis-server on a free loopback port, and
# removes both when done. It fails when a command exits with an unexpected
# status, leaving tour.txt as it was.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
work=$(mktemp -d)
redis_pid=""
agent_pid=""
cleanup() {
	if [ -n "$agent_pid" ]; then kill "$agent_pid" 2>/dev/null || true; wait "$agent_pid" 2>/dev/null || true; fi
	if [ -n "$redis_pid" ]; then kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

command -v redis-server >/dev/null || { echo "tour.sh: redis-server is not on PATH" >&2; exit 1; }
(cd "$root" && go build -o "$work/leasebus" ./cmd/leasebus && go build -o "$work/tourworker" ./cmd/leasebus/testdata/tourworker)
export PATH="$work:$PATH"
unset LEASEBUS_REDIS_URL

# A private redis-server on a free port: try a few random ones.
for _ in 1 2 3 4 5; do
	port=$((20000 + RANDOM % 20000))
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
	redis_pid=$!
	for _ in $(seq 50); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break 2; fi
		kill -0 "$redis_pid" 2>/dev/null || break
		sleep 0.1
	done
	kill "$redis_pid" 2>/dev/null || true
	wait "$redis_pid" 2>/dev/null || true
	redis_pid=""
done
[ -n "$redis_pid" ] || { echo "tour.sh: could not start redis-server" >&2; cat "$work/redis.log" >&2; exit 1; }
url="redis://127.0.0.1:$port"

out="$work/tour.txt"
# show CMD WANT: print "$ CMD", run it, print its output (stdout and stderr),
# and fail unless it exits with status WANT.
show() {
	local cmd=$1 want=$2 code=0
	printf '$ %s\n' "$cmd" >>"$out"
	eval "$cmd" >>"$out" 2>&1 || code=$?
	if [ "$code" != "$want" ]; then
		echo "tour.sh: \"$cmd\" exited $code, want $want; its output:" >&2
		cat "$out" >&2
		exit 1
	fi
	echo >>"$out"
}

show 'leasebus --help' 0
show 'leasebus --version' 0
show 'leasebus demo --workers 3 --threads 2 --signals 4 --seed 7' 0
show "leasebus publish orders --type order.created --data '{\"id\": 1, \"total\": 9.5}' --metadata src=cli --redis $url" 0
show "leasebus publish orders --type order.paid --data '{\"id\": 1}' --redis $url" 0
show "leasebus tail orders --from earliest --count 2 --redis $url" 0

# leases: the thread leases of a demo running on the redis-server, caught
# while its runs hold them.
leasebus demo --seed 7 --redis "$url" >"$work/demo.txt" 2>&1 &
demo_pid=$!
keyspace=""
for _ in $(seq 100); do
	keyspace=$(grep -o 'keys under leasebus-demo-[0-9a-f]*' "$work/demo.txt" | cut -d' ' -f3 || true)
	[ -n "$keyspace" ] && break
	sleep 0.1
done
[ -n "$keyspace" ] || { echo "tour.sh: the background demo did not start" >&2; cat "$work/demo.txt" >&2; exit 1; }
cmd="leasebus leases --redis $url --keyspace $keyspace --prefix signals.thread."
listing=""
for _ in $(seq 100); do
	listing=$(eval "$cmd")
	[ "$listing" != "no live leases" ] && break
	sleep 0.05
done
printf '$ %s\n%s\n\n' "$cmd" "$listing" >>"$out"
wait "$demo_pid" || { echo "tour.sh: the background demo failed:" >&2; cat "$work/demo.txt" >&2; exit 1; }
show "leasebus leases --redis $url" 0

# threads, threads cancel, leases revoke: a deployment of one signals
# runtime (testdata/tourworker, process id tour-agent) working on thread
# chat-42 with two more signals queued, and keeping the lease
# jobs/nightly-report.
"$work/tourworker" --redis "$url" >"$work/agent.txt" 2>&1 &
agent_pid=$!
for _ in $(seq 100); do
	grep -q '^ready' "$work/agent.txt" && break
	kill -0 "$agent_pid" 2>/dev/null || { echo "tour.sh: tourworker exited" >&2; cat "$work/agent.txt" >&2; exit 1; }
	sleep 0.1
done
grep -q '^ready' "$work/agent.txt" || { echo "tour.sh: tourworker did not start" >&2; cat "$work/agent.txt" >&2; exit 1; }
show "leasebus threads --redis $url" 0
show "leasebus threads cancel chat-42 --reason 'user pressed stop' --redis $url" 0
for _ in $(seq 100); do
	grep -q 'started msg-2' "$work/agent.txt" && break
	sleep 0.05
done
show "leasebus threads --redis $url" 0
show "leasebus leases --redis $url" 0
show "leasebus leases revoke jobs/nightly-report --reason 'stuck since 03:00' --redis $url" 0
show "leasebus leases --prefix jobs/ --redis $url" 0
for _ in $(seq 200); do
	grep -q '^lease: ' "$work/agent.txt" && break
	sleep 0.05
done
printf '$ # what the deployment (testdata/tourworker) printed meanwhile\n' >>"$out"
cat "$work/agent.txt" >>"$out"
echo >>"$out"

show "leasebus topics delete orders --redis $url" 0
show 'leasebus tail orders --redis redis://127.0.0.1:1; echo "exit $?"' 0

cp "$out" "$here/tour.txt"
echo "tour.sh: wrote $here/tour.txt"
