/*
 * pingpong - PIO round-trip latency between two nodes, in the manner of the vendor's scipp.
 *
 * Each side exports a mailbox segment and maps the other's. A message of `size` bytes is
 * written into the peer's mailbox with CPU stores; its last word carries a sequence number
 * and is stored last (release), so the receiver, spinning on its own local memory, sees the
 * whole message once that word changes. SCIFlush(NULL, SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY)
 * before the word pushes the body out ahead of it, and after it pushes the word out now,
 * as on the vendor's hardware (write-combining buffers) and across hosts (where a mapping
 * of another host's segment is written through at such flushes); on one host it is a
 * store fence. The client drives the run through a command line in
 * the server's mailbox, so the server needs no arguments but its node's environment.
 *
 *   LANES_NODE_ID=8 ./pingpong -server
 *   LANES_NODE_ID=4 ./pingpong -client -rn 8 [-sizes 4-8K] [-iter 100000]
 *
 * Per message size it prints the round-trip time and the one-way latency (half of it):
 * average, minimum, median, 99th percentile and maximum, in microseconds.
 * Exit status: 0 done, 1 usage, 2 SISCI error, 3 peer lost or timed out.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sisci_api.h>
#include <sisci_error.h>
#include <sisci_types.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define HAVE_TSC 1
#endif

#define NO_FLAGS 0
#define NO_CALLBACK NULL
#define NO_ARG NULL

/* Mailbox layout: command line (client -> server; ack word server -> client), message. */
#define CTRL_SEQ   0
#define CTRL_KIND  8
#define CTRL_SIZE  16
#define CTRL_ITERS 24
#define CTRL_ARG0  32
#define CTRL_ARG1  40
#define CTRL_BASE  48
#define MSG        128

enum { CMD_HELLO = 1, CMD_RUN = 2, CMD_DONE = 3 };

#define SPINS_PER_CHECK 4096

static const char *prog = "pingpong";
#include "common.h"

static void usage(void)
{
    printf("Usage: %s -server [-id SEGID] [-max BYTES] [-cpu N] [-timeout S]\n"
           "       %s -client -rn NODE [-id SEGID] [-sizes LIST] [-iter N] [-warmup N] [-cpu N]\n"
           "                  [-timeout S]\n"
           "PIO ping-pong latency between two nodes (scipp style).\n"
           "  -server        wait for a client; serve one run, then exit\n"
           "  -client        measure against the server on node NODE (-rn)\n"
           "  -rn NODE       the server's node id\n"
           "  -id SEGID      the server's mailbox segment id (default 0x5050)\n"
           "  -max BYTES     largest message the server accepts (default 1048576)\n"
           "  -sizes LIST    message sizes: 4,64,1K or ranges of powers of two 4-8K (default 4-8K);\n"
           "                 multiples of 4\n"
           "  -iter N        measured round trips per size (default 100000)\n"
           "  -warmup N      unmeasured round trips before each size (default 10000)\n"
           "  -cpu N         pin this process to CPU N\n"
           "  -timeout S     seconds to wait for the peer (default 30)\n"
           "  -h             this help\n"
           "The node id comes from LANES_NODE_ID (Lanes) or the adapter.\n",
           prog, prog);
}

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline uint64_t ticks(void)
{
#ifdef HAVE_TSC
    return __rdtsc();
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
#endif
}

/* Nanoseconds per tick, measured against the monotonic clock. */
static double calibrate(void)
{
#ifdef HAVE_TSC
    double t0 = now_sec();
    uint64_t c0 = ticks();
    while (now_sec() - t0 < 0.05) {
    }
    double t1 = now_sec();
    uint64_t c1 = ticks();
    return (t1 - t0) * 1e9 / (double)(c1 - c0);
#else
    return 1.0;
#endif
}

/* Parses "4,64,1K" and "4-8K" (powers of two from 4 to 8K) into sizes[]. */
static int parse_sizes(const char *arg, size_t *sizes, int max)
{
    char buf[256];
    int n = 0;
    if (strlen(arg) >= sizeof buf) return -1;
    strcpy(buf, arg);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *dash = strchr(tok, '-');
        size_t lo, hi;
        if (dash) {
            *dash = '\0';
            if (parse_size(tok, &lo) || parse_size(dash + 1, &hi) || lo == 0 || hi < lo) return -1;
            for (size_t s = lo; s <= hi; s *= 2) {
                if (n == max) return -1;
                sizes[n++] = s;
            }
        } else {
            if (parse_size(tok, &lo)) return -1;
            if (n == max) return -1;
            sizes[n++] = lo;
        }
    }
    for (int i = 0; i < n; i++)
        if (sizes[i] < 4 || sizes[i] % 4 != 0) return -1;
    return n;
}

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        fprintf(stderr, "%s: cannot pin to cpu %d: %s\n", prog, cpu, strerror(errno));
        exit(1);
    }
}

static inline uint64_t load_acq64(volatile uint8_t *base, size_t off)
{
    return __atomic_load_n((volatile uint64_t *)(base + off), __ATOMIC_ACQUIRE);
}

/* Pushes the stores made to mapped segments out, in order (see the top of the file). */
static inline void push(void)
{
    SCIFlush(NULL, SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY);
}

/* Publishes a word after everything stored before it, and pushes it out. */
static inline void store_rel64(volatile uint8_t *base, size_t off, uint64_t v)
{
    push();
    __atomic_store_n((volatile uint64_t *)(base + off), v, __ATOMIC_RELEASE);
    push();
}

static inline void put_word(volatile uint8_t *base, size_t off, uint64_t v)
{
    *(volatile uint64_t *)(base + off) = v;
}

static inline uint64_t get_word(volatile uint8_t *base, size_t off)
{
    return *(volatile uint64_t *)(base + off);
}

/* Offset of a size-byte message's sequence word, and whether it is 64 bits wide. */
static inline size_t tail_of(size_t size, int *wide)
{
    *wide = size % 8 == 0;
    return *wide ? MSG + size - 8 : MSG + size - 4;
}

/* Writes a message whose final word is seq: payload first, then the word (release). */
static inline void put_msg(volatile uint8_t *remote, size_t size, const uint8_t *payload, uint64_t seq)
{
    int wide;
    size_t tail = tail_of(size, &wide);
    if (tail > MSG) {
        memcpy((void *)(remote + MSG), payload, tail - MSG);
        push();
    }
    if (wide)
        __atomic_store_n((volatile uint64_t *)(remote + tail), seq, __ATOMIC_RELEASE);
    else
        __atomic_store_n((volatile uint32_t *)(remote + tail), (uint32_t)seq, __ATOMIC_RELEASE);
    push();
}

static inline int arrived(volatile uint8_t *local, size_t size, uint64_t seq)
{
    int wide;
    size_t tail = tail_of(size, &wide);
    if (wide) return __atomic_load_n((volatile uint64_t *)(local + tail), __ATOMIC_ACQUIRE) == seq;
    return __atomic_load_n((volatile uint32_t *)(local + tail), __ATOMIC_ACQUIRE) == (uint32_t)seq;
}

/* Whether the peer's segment is still there (a sequence check: no system call). */
static int peer_alive(sci_sequence_t seq)
{
    sci_error_t err;
    return SCICheckSequence(seq, NO_FLAGS, &err) == SCI_SEQ_OK && err == SCI_ERR_OK;
}

static void lost(const char *what)
{
    fprintf(stderr, "%s: %s\n", prog, what);
    exit(3);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

struct mailbox {
    sci_local_segment_t seg;
    sci_map_t map;
    volatile uint8_t *p;
    size_t size;
};

static void create_mailbox(sci_desc_t sd, struct mailbox *mb, unsigned int id, size_t bytes, unsigned int flags)
{
    sci_error_t err;
    mb->size = bytes;
    SCICreateSegment(sd, &mb->seg, id, bytes, NO_CALLBACK, NO_ARG, flags, &err);
    CHECK("SCICreateSegment");
    SCIPrepareSegment(mb->seg, 0, NO_FLAGS, &err);
    CHECK("SCIPrepareSegment");
    mb->p = (volatile uint8_t *)SCIMapLocalSegment(mb->seg, &mb->map, 0, bytes, NULL, NO_FLAGS, &err);
    CHECK("SCIMapLocalSegment");
    SCISetSegmentAvailable(mb->seg, 0, NO_FLAGS, &err);
    CHECK("SCISetSegmentAvailable");
}

static void remove_mailbox(struct mailbox *mb)
{
    sci_error_t err;
    SCIUnmapSegment(mb->map, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment");
    SCIRemoveSegment(mb->seg, SCI_FLAG_FORCE_REMOVE, &err);
    CHECK("SCIRemoveSegment");
}

struct peer {
    sci_remote_segment_t seg;
    sci_map_t map;
    sci_sequence_t seq;
    volatile uint8_t *p;
};

static void connect_peer(sci_desc_t sd, struct peer *pr, unsigned int node, unsigned int id,
                         unsigned int timeout_ms, size_t need)
{
    sci_error_t err;
    SCIConnectSegment(sd, &pr->seg, node, id, 0, NO_CALLBACK, NO_ARG, timeout_ms, NO_FLAGS, &err);
    CHECK("SCIConnectSegment");
    size_t size = SCIGetRemoteSegmentSize(pr->seg);
    if (size < need) {
        fprintf(stderr, "%s: the peer's mailbox holds %zu bytes, %zu needed\n", prog, size, need);
        exit(1);
    }
    pr->p = (volatile uint8_t *)SCIMapRemoteSegment(pr->seg, &pr->map, 0, need, NULL, NO_FLAGS, &err);
    CHECK("SCIMapRemoteSegment");
    SCICreateMapSequence(pr->map, &pr->seq, NO_FLAGS, &err);
    CHECK("SCICreateMapSequence");
    SCIStartSequence(pr->seq, NO_FLAGS, &err);
    CHECK("SCIStartSequence");
}

static void disconnect_peer(struct peer *pr)
{
    sci_error_t err;
    SCIRemoveSequence(pr->seq, NO_FLAGS, &err);
    CHECK("SCIRemoveSequence");
    SCIUnmapSegment(pr->map, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment");
    SCIDisconnectSegment(pr->seg, NO_FLAGS, &err);
    CHECK("SCIDisconnectSegment");
}

/* Spins until the 64-bit word at off of local equals want; checks the peer now and then,
 * and gives up after timeout seconds (0: never). */
static void wait_word(volatile uint8_t *local, size_t off, uint64_t want, struct peer *pr, double timeout)
{
    double start = 0;
    for (unsigned long spins = 1;; spins++) {
        if (load_acq64(local, off) == want) return;
        if (spins % SPINS_PER_CHECK == 0) {
            if (pr && !peer_alive(pr->seq)) lost("the peer is gone");
            double t = now_sec();
            if (start == 0) start = t;
            if (timeout > 0 && t - start > timeout) lost("timed out waiting for the peer");
            if (t - start > 1.0) usleep(1000);
        }
    }
}

static int run_server(sci_desc_t sd, unsigned int id, size_t max, double timeout)
{
    struct mailbox mine;
    struct peer client;
    int have_client = 0;
    uint64_t last = 0;
    uint8_t *payload = malloc(max);
    if (!payload) return 1;
    for (size_t i = 0; i < max; i++) payload[i] = (uint8_t)(i * 13 + 5);

    create_mailbox(sd, &mine, id, MSG + max, NO_FLAGS);
    unsigned int node = 0;
    sci_error_t err;
    SCIGetLocalNodeId(0, &node, NO_FLAGS, &err);
    CHECK("SCIGetLocalNodeId");
    fprintf(stderr, "%s: serving as node %u on segment 0x%x; start the client with -client -rn %u\n",
            prog, node, id, node);

    for (;;) {
        /* Wait for the next command. */
        double start = now_sec();
        unsigned long spins = 0;
        while (load_acq64(mine.p, CTRL_SEQ) == last) {
            if (++spins % SPINS_PER_CHECK == 0) {
                if (have_client && !peer_alive(client.seq)) lost("the client is gone");
                double t = now_sec() - start;
                if (!have_client && timeout > 0 && t > timeout) lost("no client came");
                if (t > 1.0) usleep(1000);
            }
        }
        last = load_acq64(mine.p, CTRL_SEQ);
        uint64_t kind = get_word(mine.p, CTRL_KIND);
        uint64_t size = get_word(mine.p, CTRL_SIZE);
        uint64_t iters = get_word(mine.p, CTRL_ITERS);
        uint64_t base = get_word(mine.p, CTRL_BASE);
        if (kind == CMD_HELLO) {
            unsigned int cnode = (unsigned int)get_word(mine.p, CTRL_ARG0);
            unsigned int cseg = (unsigned int)get_word(mine.p, CTRL_ARG1);
            if (have_client) disconnect_peer(&client);
            connect_peer(sd, &client, cnode, cseg, 10000, MSG + 8);
            size_t csize = SCIGetRemoteSegmentSize(client.seg);
            disconnect_peer(&client);
            connect_peer(sd, &client, cnode, cseg, 10000, csize < MSG + max ? csize : MSG + max);
            have_client = 1;
            fprintf(stderr, "%s: client node %u connected\n", prog, cnode);
        } else if (kind == CMD_RUN) {
            if (!have_client || size < 4 || size % 4 != 0 || size > max) {
                fprintf(stderr, "%s: client asked for %llu-byte messages; this server takes at most %zu\n",
                        prog, (unsigned long long)size, max);
                return 1;
            }
            for (uint64_t i = 1; i <= iters; i++) {
                uint64_t s = base + i;
                unsigned long n = 0;
                while (!arrived(mine.p, size, s)) {
                    if (++n % SPINS_PER_CHECK == 0 && !peer_alive(client.seq)) lost("the client is gone");
                }
                put_msg(client.p, size, payload, s);
            }
        } else if (kind == CMD_DONE) {
            if (have_client) {
                store_rel64(client.p, CTRL_SEQ, last);
                disconnect_peer(&client);
            }
            break;
        } else {
            fprintf(stderr, "%s: unknown command %llu\n", prog, (unsigned long long)kind);
            return 1;
        }
        store_rel64(client.p, CTRL_SEQ, last);
    }
    remove_mailbox(&mine);
    free(payload);
    return 0;
}

struct client {
    struct mailbox mine;
    struct peer server;
    uint64_t seq;
};

static void command(struct client *c, uint64_t kind, uint64_t size, uint64_t iters, uint64_t a0, uint64_t a1,
                    uint64_t base)
{
    volatile uint8_t *t = c->server.p;
    put_word(t, CTRL_KIND, kind);
    put_word(t, CTRL_SIZE, size);
    put_word(t, CTRL_ITERS, iters);
    put_word(t, CTRL_ARG0, a0);
    put_word(t, CTRL_ARG1, a1);
    put_word(t, CTRL_BASE, base);
    c->seq++;
    store_rel64(t, CTRL_SEQ, c->seq);
}

static void await_ack(struct client *c, double timeout)
{
    wait_word(c->mine.p, CTRL_SEQ, c->seq, &c->server, timeout);
}

static int run_client(sci_desc_t sd, unsigned int rn, unsigned int id, size_t *sizes, int nsizes,
                      unsigned long iters, unsigned long warmup, double timeout)
{
    sci_error_t err;
    struct client c;
    size_t max = 0;
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] > max) max = sizes[i];
    memset(&c, 0, sizeof c);
    unsigned int me = 0;
    SCIGetLocalNodeId(0, &me, NO_FLAGS, &err);
    CHECK("SCIGetLocalNodeId");

    create_mailbox(sd, &c.mine, 0, MSG + max, SCI_FLAG_AUTO_ID);
    unsigned int tmo = timeout > 0 ? (unsigned int)(timeout * 1000) : SCI_INFINITE_TIMEOUT;
    connect_peer(sd, &c.server, rn, id, tmo, MSG + max);

    command(&c, CMD_HELLO, 0, 0, me, SCIGetLocalSegmentId(c.mine.seg), 0);
    await_ack(&c, 60);

    double ns_per_tick = calibrate();
    uint8_t *payload = malloc(max);
    uint64_t *samples = malloc(sizeof(uint64_t) * (iters ? iters : 1));
    if (!payload || !samples) return 1;
    for (size_t i = 0; i < max; i++) payload[i] = (uint8_t)(i * 7 + 1);

    printf("%s: PIO, node %u <-> node %u, %lu iterations per size (%lu warm-up)\n", prog, me, rn, iters, warmup);
    printf("%8s  %10s  %10s %9s %9s %9s %9s\n", "size", "rtt avg", "1-way avg", "min", "p50", "p99", "max");
    uint64_t msg = 0;
    for (int k = 0; k < nsizes; k++) {
        size_t size = sizes[k];
        uint64_t total = warmup + iters;
        uint64_t base = msg;
        command(&c, CMD_RUN, size, total, 0, 0, base);
        for (uint64_t i = 1; i <= total; i++) {
            uint64_t s = base + i;
            uint64_t t0 = ticks();
            put_msg(c.server.p, size, payload, s);
            unsigned long n = 0;
            while (!arrived(c.mine.p, size, s)) {
                if (++n % SPINS_PER_CHECK == 0 && !peer_alive(c.server.seq)) lost("the server is gone");
            }
            uint64_t t1 = ticks();
            if (i > warmup) samples[i - warmup - 1] = t1 - t0;
        }
        msg = base + total;
        await_ack(&c, 60);
        if (SCICheckSequence(c.server.seq, NO_FLAGS, &err) != SCI_SEQ_OK) lost("the transfers failed");

        double sum = 0;
        for (unsigned long i = 0; i < iters; i++) sum += (double)samples[i];
        qsort(samples, iters, sizeof samples[0], cmp_u64);
        double us = ns_per_tick / 1000.0;
        double avg = sum / (double)iters * us;
        double mn = (double)samples[0] * us, mx = (double)samples[iters - 1] * us;
        double p50 = (double)samples[iters / 2] * us, p99 = (double)samples[(iters * 99) / 100] * us;
        printf("%8zu  %10.3f  %10.3f %9.3f %9.3f %9.3f %9.3f\n", size, avg, avg / 2, mn / 2, p50 / 2, p99 / 2,
               mx / 2);
        fflush(stdout);
    }
    printf("(microseconds; one-way = round trip / 2; min/p50/p99/max are one-way)\n");
    command(&c, CMD_DONE, 0, 0, 0, 0, 0);
    await_ack(&c, 10);
    disconnect_peer(&c.server);
    remove_mailbox(&c.mine);
    free(payload);
    free(samples);
    return 0;
}

int main(int argc, char **argv)
{
    int server = 0, client = 0, cpu = -1;
    unsigned int rn = 0, id = 0x5050;
    size_t max = 1 << 20;
    size_t sizes[64];
    int nsizes = parse_sizes("4-8K", sizes, 64);
    unsigned long iters = 100000, warmup = 10000;
    double timeout = 30;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "-help") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "-server")) server = 1;
        else if (!strcmp(a, "-client")) client = 1;
        else if (v && !strcmp(a, "-rn")) { rn = (unsigned int)strtoul(v, NULL, 0); i++; }
        else if (v && !strcmp(a, "-id")) { id = (unsigned int)strtoul(v, NULL, 0); i++; }
        else if (v && !strcmp(a, "-max")) { if (parse_size(v, &max) || max < 8) { usage(); return 1; } i++; }
        else if (v && !strcmp(a, "-sizes")) {
            nsizes = parse_sizes(v, sizes, 64);
            if (nsizes <= 0) { fprintf(stderr, "%s: bad -sizes %s (multiples of 4)\n", prog, v); return 1; }
            i++;
        }
        else if (v && !strcmp(a, "-iter")) { iters = strtoul(v, NULL, 0); i++; }
        else if (v && !strcmp(a, "-warmup")) { warmup = strtoul(v, NULL, 0); i++; }
        else if (v && !strcmp(a, "-cpu")) { cpu = atoi(v); i++; }
        else if (v && !strcmp(a, "-timeout")) { timeout = atof(v); i++; }
        else { fprintf(stderr, "%s: unknown or incomplete option %s\n", prog, a); usage(); return 1; }
    }
    if (server == client || (client && rn == 0) || iters == 0) { usage(); return 1; }
    if (cpu >= 0) pin(cpu);

    sci_error_t err;
    sci_desc_t sd;
    SCIInitialize(NO_FLAGS, &err);
    CHECK("SCIInitialize");
    SCIOpen(&sd, NO_FLAGS, &err);
    CHECK("SCIOpen");
    int rc = server ? run_server(sd, id, max, timeout)
                    : run_client(sd, rn, id, sizes, nsizes, iters, warmup, timeout);
    SCIClose(sd, rc ? SCI_FLAG_FORCE_REMOVE : NO_FLAGS, &err);
    CHECK("SCIClose");
    SCITerminate();
    return rc;
}
