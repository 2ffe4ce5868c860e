#!/usr/bin/env bash
# The C ping-pong over libsisci.so (examples/c/pingpong.c) beside `lanes pingpong`: same
# message sizes, iterations and CPUs, runs alternating between the two, and per size the
# median one-way latency of each and their ratio (C / Rust). The C layer adds nothing to the
# data path when the ratio is 1.
#
#   scripts/sisci-pingpong-bench.sh            (SIZES, ITER, ROUNDS, CPUS override the defaults)
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=${SIZES:-4,64,256,1K,8K}
ITER=${ITER:-100000}
ROUNDS=${ROUNDS:-3}
CPUS=${CPUS:-0,1}
A=${CPUS%,*}
B=${CPUS#*,}

cargo build --release -q -p lanes-cli -p lanes-sisci
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
target/release/lanes sdk install --prefix "$work/sdk" --no-ldconfig --lib target/release/libsisci.so >/dev/null
cc -O2 -Wall -Wextra -Werror -D_REENTRANT -pthread -I"$work/sdk/include" -I"$work/sdk/include/dis" \
    examples/c/pingpong.c -L"$work/sdk/lib64" -lsisci -Wl,-rpath,"$work/sdk/lib64" -o "$work/pingpong"
export LANES_DIR="$work/fabric"
unset LANES_CONFIG

for r in $(seq 1 "$ROUNDS"); do
    echo "round $r/$ROUNDS: C pingpong over libsisci.so" >&2
    LANES_NODE_ID=8 "$work/pingpong" -server -cpu "$B" 2>/dev/null &
    LANES_NODE_ID=4 "$work/pingpong" -client -rn 8 -cpu "$A" -sizes "$SIZES" -iter "$ITER" >"$work/c.$r"
    wait
    echo "round $r/$ROUNDS: lanes pingpong" >&2
    LANES_NODE_ID=4 target/release/lanes pingpong --cpu "$A,$B" --sizes "$SIZES" --iterations "$ITER" >"$work/rust.$r"
done

# Rows: C prints microseconds (size, rtt, one-way avg, min, p50, p99, max), lanes nanoseconds
# (size, rtt, one-way avg, min, p50, ...): keep the one-way average and median in ns.
for r in $(seq 1 "$ROUNDS"); do
    awk '$1 ~ /^[0-9]+$/ && NF == 7 { printf "c %s %.1f %.1f\n", $1, $3 * 1000, $5 * 1000 }' "$work/c.$r"
    awk '$1 ~ /^[0-9]+$/ && $NF ~ /x$/ { printf "rust %s %.1f %.1f\n", $1, $3, $5 }' "$work/rust.$r"
done >"$work/all"

echo
echo "one-way latency in ns, median of $ROUNDS alternating runs of $ITER round trips, cpus $CPUS"
printf "%8s %12s %12s %8s   %12s %12s %8s\n" size "C avg" "lanes avg" "C/Rust" "C p50" "lanes p50" "C/Rust"
for size in $(awk '{print $2}' "$work/all" | sort -n -u); do
    med() { awk -v k="$1" -v s="$size" -v f="$2" '$1 == k && $2 == s {print $f}' "$work/all" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
    awk -v s="$size" -v ca="$(med c 3)" -v ra="$(med rust 3)" -v cm="$(med c 4)" -v rm="$(med rust 4)" \
        'BEGIN { printf "%8s %12.1f %12.1f %8.3f   %12.1f %12.1f %8.3f\n", s, ca, ra, ca / ra, cm, rm, cm / rm }'
done
