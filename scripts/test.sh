#!/usr/bin/env bash
# The whole test suite, as CI runs it. Installs what the tests need when it is missing
# (Debian packages, cargo tools), then checks formatting and lints and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*" >&2; }

# Debian packages the tests use, by the command that proves each is present.
declare -A apt_for=(
    [cc]=gcc
    [pkg-config]=pkg-config
    # Real programs under the socket accelerator (tests and `lanes bench sockets`).
    [iperf3]=iperf3
    [sockperf]=sockperf
    # UDP under the library (crates/lanes-sockets/tests/udp.rs): iperf 2, a DNS server,
    # its client and a load tool.
    [iperf]=iperf
    [dnsmasq]=dnsmasq-base
    [dig]=bind9-dnsutils
    [dnsperf]=dnsperf
    # Multicast under the library: a source-specific and an any-source ping (udp.rs).
    [ssmping]=ssmping
    # DDS (Cyclone DDS's ddsperf): multicast discovery, unicast data (udp.rs).
    [ddsperf]=cyclonedds-tools
    [redis-server]=redis-server
    [redis-benchmark]=redis-tools
    [nginx]=nginx-light
    [curl]=curl
    [wrk]=wrk
    # OpenSSH: sshd's seccomp-sandboxed pre-authentication child under the library; ssh
    # and scp over lanes0 (crates/lanes-cli/tests/ip.rs).
    [sshd]=openssh-server
    [ssh]=openssh-client
    # The ofi transport (feature lanes/ofi): fi_info and fi_pingpong.
    [fi_info]=libfabric-bin
    # The IP interface's tests (crates/lanes-cli/tests/ip.rs): ping and a checksummed
    # transfer over lanes0; the programs a user would try over it (curl against python's
    # http.server, dig against dnsmasq, iperf 2 multicast: above).
    [ping]=iputils-ping
    [socat]=socat
    # The system calls a connection makes under the library (crates/lanes-sockets/tests/conformance.rs).
    [strace]=strace
    [memcached]=memcached
    # PostgreSQL's server, initdb and pgbench (the test finds them under /usr/lib/postgresql).
    [pg_ctlcluster]=postgresql
    [node]=nodejs
    [haproxy]=haproxy
    [tracepath]=iputils-tracepath
    [traceroute]=traceroute
    [rsync]=rsync
    [python3]=python3
    # libuv's own test suite is built from its source (below).
    [cmake]=cmake
    # Network namespaces: the cluster tests (crates/lanes/tests/cluster.rs) and the
    # multi-host hosts.
    [ip]=iproute2
)
# Debian packages that install no command, by the pkg-config module that proves each.
declare -A apt_for_pkg_config=(
    ['libfabric >= 1.17']=libfabric-dev
)
# Debian packages that install no command, by a file that proves each: other projects' own
# socket test suites, run on kernel TCP and under the library
# (crates/lanes-sockets/tests/third_party_suites.rs).
declare -A apt_for_file=(
    [/usr/lib/python3.11/test/test_socket.py]=libpython3.11-testsuite
    [/usr/lib/python3/dist-packages/twisted/internet/test/test_tcp.py]=python3-twisted
    [/usr/lib/python3/dist-packages/tornado/test/runtests.py]=python3-tornado
    [/usr/libexec/installed-tests/glib/socket]=libglib2.0-tests
    [/usr/lib/python3/dist-packages/trio/tests/test_socket.py]=python3-trio
    [/usr/lib/python3/dist-packages/pytest/__init__.py]=python3-pytest
    [/usr/lib/python3/dist-packages/trustme/__init__.py]=python3-trustme
    [/usr/lib/python3/dist-packages/OpenSSL/__init__.py]=python3-openssl
)
missing=()
for cmd in "${!apt_for[@]}"; do
    command -v "$cmd" >/dev/null 2>&1 || missing+=("${apt_for[$cmd]}")
done
for module in "${!apt_for_pkg_config[@]}"; do
    pkg-config --exists "$module" 2>/dev/null || missing+=("${apt_for_pkg_config[$module]}")
done
for file in "${!apt_for_file[@]}"; do
    [ -e "$file" ] || missing+=("${apt_for_file[$file]}")
done
if ((${#missing[@]})); then
    log "installing Debian packages: ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Test namespaces are named lt<pid>n<k>{a,b,c,s}; a test process killed mid-test (a
# timeout) leaves its namespaces behind: remove those whose creator is gone, at the end.
sweep_test_namespaces() {
    [ "$(id -u)" -eq 0 ] && command -v ip >/dev/null 2>&1 || return 0
    local ns
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
        if [[ $ns =~ ^lt([0-9]+)n[0-9]+[abcs]$ ]] && [ ! -d "/proc/${BASH_REMATCH[1]}" ]; then
            ip netns del "$ns" && echo "removed stale test namespace $ns" >&2
        fi
    done
}
trap sweep_test_namespaces EXIT

# libuv's own test suite (crates/lanes-sockets/tests/third_party_suites.rs): the libuv
# that uvloop's source distribution on PyPI vendors, test sources included; its test runner
# is built once into the target directory.
LIBUV_VERSION=1.52.1
UVLOOP_SDIST=https://files.pythonhosted.org/packages/fa/42/02c739ce85fb2ee8d99212c61417da8140c6b87e9d97c430bea520d76044/uvloop-0.23.0.tar.gz
UVLOOP_SHA256=28d160f51ab4da3b187063652e643dea6831072add4adc1e6d62afbe73b6be27
libuv_dir="${CARGO_TARGET_DIR:-target}/third-party/libuv-$LIBUV_VERSION"
if [ ! -x "$libuv_dir/build/uv_run_tests_a" ]; then
    log "building libuv $LIBUV_VERSION's test runner"
    rm -rf "$libuv_dir" && mkdir -p "$libuv_dir"
    curl -fsSL --retry 3 -o "$libuv_dir/uvloop.tar.gz" "$UVLOOP_SDIST"
    echo "$UVLOOP_SHA256  $libuv_dir/uvloop.tar.gz" | sha256sum -c --quiet
    tar -xzf "$libuv_dir/uvloop.tar.gz" -C "$libuv_dir" --strip-components=3 uvloop-0.23.0/vendor/libuv
    mkdir -p "$libuv_dir/build"
    (cd "$libuv_dir/build" && cmake .. -DLIBUV_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release >/dev/null &&
        make -j"$(nproc)" uv_run_tests_a >/dev/null)
fi

rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
if ! cargo nextest --version >/dev/null 2>&1; then
    log "installing cargo-nextest"
    cargo install cargo-nextest --locked
fi

# Every build below includes the optional libfabric transport.
features=(--features lanes/ofi)

log "format"
cargo fmt --all -- --check
log "lints"
cargo clippy --workspace --all-targets "${features[@]}" -- -D warnings
log "build"
cargo build --workspace --all-targets "${features[@]}"
log "doc tests"
cargo test --workspace --doc "${features[@]}"
log "lock-free structures under loom (every interleaving)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p lanes-platform --lib --release loom_tests
log "tests"
cargo nextest run --workspace --no-fail-fast "${features[@]}" "$@"
