#!/usr/bin/env bash
# The main job: builds the `lanes` command and the socket accelerator it preloads (release),
# then runs `lanes bench` with the arguments given, every path included.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p lanes-cli -p lanes-sockets
exec target/release/lanes bench "$@"
