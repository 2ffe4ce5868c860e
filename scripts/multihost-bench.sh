#!/usr/bin/env bash
# `lanes bench --transport ofi` between two hosts made of network namespaces
# (docs/BENCH.md, "Across hosts"). Needs root (ip netns), libfabric-bin (fi_pingpong) and
# iperf3, and a lanes binary built with the ofi transport:
#
#   cargo build --release -p lanes-cli --features lanes/ofi
#   sudo scripts/multihost-bench.sh [lanes bench options...]      e.g. --quick, --sizes 4-4K
#
# Builds namespaces <p>a and <p>b (p = lmb<pid>) joined by one veth pair whose two ends are
# created inside them (nothing appears in the caller's namespace), 10.77.1.1/24 and
# 10.77.1.2/24; writes a lanes.toml with one node per host (a: node 8, b: node 12, provider
# $LANES_BENCH_PROVIDER or tcp;ofi_rxm, progress $LANES_BENCH_PROGRESS or poll: no wait
# objects, as fi_pingpong runs by default; `wake` measures lanes.toml's default); sets the
# link's TCP congestion control to $LANES_BENCH_CONGESTION or cubic (a route metric, so the
# host's settings are untouched; `host` keeps the host's default: see below); starts
# `lanes daemon` on each host; runs
# `lanes bench --serve --once` as node 8 on a and `lanes bench --transport ofi
# --remote-node 8` as node 12 on b with the options given; prints the result. Everything it
# made (processes, namespaces, the scratch directory) is removed on exit, also on Ctrl-C.
# LANES_BIN points at the lanes binary (default: target/release/lanes, or $CARGO_TARGET_DIR's).
set -euo pipefail
cd "$(dirname "$0")/.."

lanes=${LANES_BIN:-${CARGO_TARGET_DIR:-target}/release/lanes}
provider=${LANES_BENCH_PROVIDER:-tcp;ofi_rxm}
progress=${LANES_BENCH_PROGRESS:-poll}
# Why not the host's default: where that is bbr, what the run measured depended on bbr
# more than on the programs. Measured on a VM whose kernel defaults to bbr: iperf3 0.8 to
# 1.3 GB/s over the pair against 2.2 to 7.7 (mostly above 5.5) with cubic, fi_pingpong at
# 512 KiB 170 to 190 us one way against 127, a 128 KiB PIO ping-pong's p99 0.56 to 0.67 ms
# against 0.09 to 0.13. cubic is Debian's default; the setting is the link's, the same for
# every program of the run.
congestion=${LANES_BENCH_CONGESTION:-cubic}
[[ -x $lanes ]] || { echo "no lanes binary at $lanes (cargo build --release -p lanes-cli --features lanes/ofi, or LANES_BIN)" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "network namespaces need root" >&2; exit 2; }
for c in ip fi_pingpong iperf3; do
    command -v "$c" >/dev/null || { echo "$c is missing (apt-get install iproute2 libfabric-bin iperf3)" >&2; exit 2; }
done

p=lmb$$
a=${p}a
b=${p}b
scratch=$(mktemp -d /tmp/lanes-multihost-bench.XXXXXX)
pids=()

cleanup() {
    local rc=$?
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    # At most 5 s for them to stop, then SIGKILL (before the namespaces go).
    for _ in $(seq 50); do
        alive=0
        for pid in "${pids[@]}"; do
            kill -0 "$pid" 2>/dev/null && alive=1
        done
        [[ $alive == 0 ]] && break
        sleep 0.1
    done
    for pid in "${pids[@]}"; do
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    ip netns del "$a" 2>/dev/null || true
    ip netns del "$b" 2>/dev/null || true
    rm -rf "$scratch"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$a"
ip netns add "$b"
ip link add eth0 netns "$a" type veth peer name eth0 netns "$b"
ip -n "$a" addr add 10.77.1.1/24 dev eth0
ip -n "$b" addr add 10.77.1.2/24 dev eth0
for ns in "$a" "$b"; do
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
done
for _ in $(seq 100); do
    [[ $(ip -n "$a" -o link show eth0) == *"state UP"* && $(ip -n "$b" -o link show eth0) == *"state UP"* ]] && break
    sleep 0.05
done
if [[ $congestion != host ]]; then
    # Replaces the connected route the address made, once the link is up.
    ip -n "$a" route replace 10.77.1.0/24 dev eth0 src 10.77.1.1 congctl "$congestion"
    ip -n "$b" route replace 10.77.1.0/24 dev eth0 src 10.77.1.2 congctl "$congestion"
    echo "link: TCP congestion control $congestion (LANES_BENCH_CONGESTION; host: the host's default)" >&2
fi

# Each host's key (the daemons accept another host only with the key lanes.toml lists).
key_a=$("$lanes" keygen --out "$scratch/a.key" 2>/dev/null | grep '^public_key')
key_b=$("$lanes" keygen --out "$scratch/b.key" 2>/dev/null | grep '^public_key')
cat >"$scratch/lanes.toml" <<EOF
[cluster]
provider = "$provider"
progress = "$progress"

[[node]]
id = 8
host = "a"
address = "10.77.1.1:7471"
$key_a

[[node]]
id = 12
host = "b"
address = "10.77.1.2:7471"
$key_b
EOF
mkdir -p "$scratch/a" "$scratch/b"

# Runs a command on host $1 (a or b) with that host's environment.
on() {
    local h=$1
    shift
    ip netns exec "${p}$h" env LANES_CONFIG="$scratch/lanes.toml" LANES_HOST="$h" LANES_DIR="$scratch/$h" \
        LANES_KEY_FILE="$scratch/$h.key" "$@"
}

# Starts a command on host $1 in the background; its pid (ip execs env, env execs the
# command, so the pid stays the command's) goes into pids.
start_on() {
    local h=$1 log=$2
    shift 2
    ip netns exec "${p}$h" env LANES_CONFIG="$scratch/lanes.toml" LANES_HOST="$h" LANES_DIR="$scratch/$h" \
        LANES_KEY_FILE="$scratch/$h.key" "$@" 2>"$log" &
    pids+=($!)
}

start_on a "$scratch/daemon-a.log" "$lanes" daemon
start_on b "$scratch/daemon-b.log" "$lanes" daemon
# Until each daemon sees the other host operational.
for _ in $(seq 200); do
    if on a "$lanes" status 2>/dev/null | grep -q 'b .*operational' &&
        on b "$lanes" status 2>/dev/null | grep -q 'a .*operational'; then
        break
    fi
    sleep 0.05
done

start_on a "$scratch/serve.log" env LANES_NODE_ID=8 "$lanes" bench --serve --once
server=${pids[-1]}
for _ in $(seq 200); do
    grep -q listening "$scratch/serve.log" && break
    kill -0 "$server" 2>/dev/null || { cat "$scratch/serve.log" >&2; exit 1; }
    sleep 0.05
done

set +e
on b env LANES_NODE_ID=12 "$lanes" bench --transport ofi --remote-node 8 "$@"
rc=$?
set -e
if [[ $rc != 0 ]]; then
    echo "--- server ---" >&2
    cat "$scratch/serve.log" >&2
    echo "--- daemons ---" >&2
    cat "$scratch/daemon-a.log" "$scratch/daemon-b.log" >&2
fi
exit "$rc"
