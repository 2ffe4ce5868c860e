/*
 * reflective - reflective memory (multicast) latency: one writer, N acknowledging receivers.
 *
 * SISCI has no calls of its own for reflective memory; it is flags. The writer creates the
 * group as a segment with SCI_FLAG_BROADCAST (the segment id is the group id) and maps it
 * twice with SCIMapLocalSegment: read-only for local reads, and with SCI_FLAG_BROADCAST for
 * stores that reach every member. A receiver joins with SCIConnectSegment to node
 * DIS_BROADCAST_NODEID_GROUP_ALL with the group id and SCI_FLAG_BROADCAST, and maps it with
 * SCIMapRemoteSegment: with SCI_FLAG_READONLY_MAP for reads (its local copy), with
 * SCI_FLAG_BROADCAST (or no flag: a connection to the group maps its multicast address) for
 * multicast stores.
 *
 * The writer hears receivers join through its segment's events (SCI_CB_CONNECT), lists
 * them in the group's memory and waits for each to answer. Then, each round, it stores the
 * round number into the group; every receiver, spinning on its read map, stores the number
 * back into its own acknowledgement line; the round ends when the writer has seen all N. The
 * one-way latency is half that round trip. Finally the writer joins its own group and
 * writes a payload into it by DMA (SCI_FLAG_DMA_GLOBAL | SCI_FLAG_BROADCAST); every
 * receiver checks it.
 *
 *   LANES_NODE_ID=8  ./reflective -server -group 0x5246 -size 2
 *   LANES_NODE_ID=4  ./reflective -client -group 0x5246
 *   LANES_NODE_ID=12 ./reflective -client -group 0x5246
 *
 * Exit status: 0 done, 1 usage, 2 SISCI error, 3 a member lost, timed out or bad data.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sisci_api.h>
#include <sisci_error.h>
#include <sisci_types.h>
#include <dis_types.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define HAVE_TSC 1
#endif

#define NO_FLAGS 0
#define NO_CALLBACK NULL
#define NO_ARG NULL

/* The group's memory: control words (writer), the roster (writer), one 64-byte line per
 * receiver (that receiver), then the DMA payload. */
#define OFF_ROUND     0     /* u64: the round number */
#define OFF_STATE     64    /* u64: STATE_* */
#define OFF_NRECV     128   /* u64: receivers in the roster */
#define OFF_PLEN      136   /* u64: payload length */
#define OFF_ROSTER    256   /* u64 per receiver: its node id, in the order they joined */
#define OFF_LINE(k)   (1024 + 64 * (size_t)(k))
#define LINE_ACK      0     /* u64: the last round seen */
#define LINE_CHECKED  8     /* u64: payload verdict, CHECK_OK or CHECK_BAD */
#define LINE_HELLO    16    /* u64: the receiver's node id, once it found itself in the roster */
#define OFF_PAYLOAD   8192
#define MAX_RECEIVERS 64
#define MIN_BYTES     (OFF_PAYLOAD + 8192)

enum { STATE_SETUP = 0, STATE_RUN = 1, STATE_DMA = 2, STATE_DONE = 3 };
enum { CHECK_OK = 1, CHECK_BAD = 2 };

#define SPINS_PER_CHECK 4096

static const char *prog = "reflective";
#include "common.h"

static void usage(void)
{
    printf("Usage: %s -server [-group G] [-size N] [-bytes B] [-iter N] [-warmup N] [-cpu N] [-timeout S]\n"
           "       %s -client -group G [-cpu N] [-timeout S]\n"
           "Reflective memory (multicast) latency: one writer, N acknowledging receivers.\n"
           "  -server       create group G and write to it; measure until every receiver acknowledged\n"
           "  -client       join group G and acknowledge every round (one receiver per node)\n"
           "  -group G      the group id (the segment id of SCI_FLAG_BROADCAST); a server without it\n"
           "                picks one (SCI_FLAG_AUTO_ID) and prints it\n"
           "  -size N       receivers the writer waits for; each round ends when all N acknowledged\n"
           "                (default 1, at most %d)\n"
           "  -bytes B      the group's memory: 16K and up, e.g. 64K or 1M (default 64K)\n"
           "  -iter N       measured rounds (default 100000, at most 10000000)\n"
           "  -warmup N     unmeasured rounds first (default 10000)\n"
           "  -cpu N        pin this process to CPU N\n"
           "  -timeout S    seconds to wait for members or an answer (default 30)\n"
           "  -h            this help\n"
           "The node id comes from LANES_NODE_ID (Lanes) or the adapter. The writer prints the\n"
           "round trip and the one-way latency (half of it): average, minimum, median, maximum.\n",
           prog, prog, MAX_RECEIVERS);
}

/* A member lost, a timeout, or bad data: exit status 3. */
static void die_lost(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die_lost(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(3);
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

/* Words of the group, with acquire loads and release stores: a receiver that sees a round
 * number also sees everything the writer stored before it. */
static inline uint64_t load(const volatile void *base, size_t off)
{
    return __atomic_load_n((const volatile uint64_t *)((const volatile char *)base + off), __ATOMIC_ACQUIRE);
}

/* Stores go through the multicast map and are pushed out at once: SCIFlush(NULL,
 * SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY) empties the CPU's write buffers, so each store travels
 * to every member, in order, before the next. Where a group spans hosts, Lanes sends plain
 * stores at such flushes (in the order made), and otherwise within about 10 ms, in no
 * promised order; on one host the call is a fence. */
static inline void store(volatile void *base, size_t off, uint64_t v)
{
    __atomic_store_n((volatile uint64_t *)((volatile char *)base + off), v, __ATOMIC_RELEASE);
    SCIFlush(NULL, SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY);
}

/* Between two looks at memory: a pause, or giving the CPU away when the spinning processes
 * outnumber the CPUs (otherwise a spinner waits for the process it keeps from running). */
static inline void relax(int share_cpu)
{
    if (share_cpu) {
        sched_yield();
    } else {
#if defined(__x86_64__) || defined(__i386__)
        _mm_pause();
#endif
    }
}

static int cpus_allowed(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void pin(int cpu)
{
    cpu_set_t set;
    if (cpu < 0) return;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        fprintf(stderr, "%s: cannot pin to CPU %d: %s\n", prog, cpu, strerror(errno));
        exit(1);
    }
}

/* The payload byte at offset i: both sides compute it. */
static inline uint8_t pattern(size_t i)
{
    return (uint8_t)((i * 131u + 7u) ^ (i >> 8));
}

static int parse_uint(const char *s, unsigned long *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 0);
    if (errno != 0 || end == s || *end != '\0') return -1;
    *out = v;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- the writer ----------------------------------------------------------------------- */

struct server_opts {
    int auto_id;
    unsigned int group, receivers, timeout;
    size_t bytes;
    unsigned long iters, warmup;
};

/* Looks at the writer's segment events without waiting: a receiver that left or died
 * ends the run. */
static void check_members(sci_local_segment_t seg, const unsigned int *nodes, unsigned int n)
{
    sci_error_t err;
    unsigned int node = 0, adapter = 0;
    for (;;) {
        sci_segment_cb_reason_t why = SCIWaitForLocalSegmentEvent(seg, &node, &adapter, 0, NO_FLAGS, &err);
        if (err == SCI_ERR_TIMEOUT) return;
        CHECK("SCIWaitForLocalSegmentEvent");
        if (why != SCI_CB_DISCONNECT && why != SCI_CB_LOST) continue;
        for (unsigned int k = 0; k < n; k++) {
            if (nodes[k] == node) {
                die_lost(why == SCI_CB_LOST ? "receiver node %u died (SCI_CB_LOST) during the run"
                                            : "receiver node %u left (SCI_CB_DISCONNECT) during the run",
                         node);
            }
        }
    }
}

static int run_server(const struct server_opts *o)
{
    sci_error_t err;
    sci_desc_t sd;
    sci_local_segment_t seg;
    sci_map_t rmap, wmap;
    unsigned int me = 0, node = 0, adapter = 0, n = 0;
    unsigned int nodes[MAX_RECEIVERS];
    const int cpus = cpus_allowed();

    SCIInitialize(NO_FLAGS, &err);
    CHECK("SCIInitialize");
    SCIOpen(&sd, NO_FLAGS, &err);
    CHECK("SCIOpen");
    SCIGetLocalNodeId(0, &me, NO_FLAGS, &err);
    CHECK("SCIGetLocalNodeId");

    /* The group: a segment created with SCI_FLAG_BROADCAST. */
    SCICreateSegment(sd, &seg, o->group, o->bytes, NO_CALLBACK, NO_ARG,
                     SCI_FLAG_BROADCAST | (o->auto_id ? SCI_FLAG_AUTO_ID : 0), &err);
    if (err == SCI_ERR_NOSPC) {
        unsigned int max = 0;
        sci_error_t qerr;
        sci_query_adapter_t q = {0, 0, SCI_Q_ADAPTER_MCAST_MAX_GROUPS, &max};
        SCIQuery(SCI_Q_ADAPTER, &q, NO_FLAGS, &qerr);
        if (qerr == SCI_ERR_OK) fprintf(stderr, "%s: the fabric holds at most %u reflective groups\n", prog, max);
    }
    CHECK("SCICreateSegment(SCI_FLAG_BROADCAST)");
    unsigned int group = SCIGetLocalSegmentId(seg);
    SCIPrepareSegment(seg, 0, SCI_FLAG_BROADCAST, &err);
    CHECK("SCIPrepareSegment");
    SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err);
    CHECK("SCISetSegmentAvailable");
    const volatile char *rd = SCIMapLocalSegment(seg, &rmap, 0, o->bytes, NULL, SCI_FLAG_READONLY_MAP, &err);
    CHECK("SCIMapLocalSegment (read)");
    volatile char *wr = SCIMapLocalSegment(seg, &wmap, 0, o->bytes, NULL, SCI_FLAG_BROADCAST, &err);
    CHECK("SCIMapLocalSegment(SCI_FLAG_BROADCAST)");
    fprintf(stderr, "%s: group %u (0x%x, %zu bytes) created on node %u; waiting for %u receiver%s\n", prog, group,
            group, o->bytes, me, o->receivers, o->receivers == 1 ? "" : "s");
    fflush(stderr);

    /* Receivers, as they connect: listed in the roster, in order. */
    double deadline = now_sec() + o->timeout;
    while (n < o->receivers) {
        double remaining = deadline - now_sec();
        if (remaining <= 0) die_lost("only %u of %u receivers joined in time", n, o->receivers);
        sci_segment_cb_reason_t why =
            SCIWaitForLocalSegmentEvent(seg, &node, &adapter, (unsigned int)(remaining * 1000) + 1, NO_FLAGS, &err);
        if (err == SCI_ERR_TIMEOUT) continue;
        CHECK("SCIWaitForLocalSegmentEvent");
        int listed = 0;
        for (unsigned int k = 0; k < n; k++) listed |= nodes[k] == node;
        if (why == SCI_CB_CONNECT) {
            if (listed) die_lost("node %u joined twice: run one receiver per node", node);
            nodes[n] = node;
            store(wr, OFF_ROSTER + 8 * (size_t)n, node);
            store(wr, OFF_NRECV, ++n);
            fprintf(stderr, "%s: receiver %u: node %u joined\n", prog, n, node);
        } else if (listed) {
            die_lost("receiver node %u left before the run", node);
        }
    }
    for (unsigned int k = 0; k < n; k++) {
        while (load(rd, OFF_LINE(k) + LINE_HELLO) != nodes[k]) {
            if (now_sec() > deadline) die_lost("receiver node %u did not answer within %u s", nodes[k], o->timeout);
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }

    /* The rounds. */
    const int share_cpu = (int)n + 1 > cpus;
    const double ns_per_tick = calibrate();
    const unsigned long total = o->warmup + o->iters;
    double *rtt = malloc(o->iters * sizeof *rtt);
    if (!rtt) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return 2;
    }
    store(wr, OFF_STATE, STATE_RUN);
    for (unsigned long r = 1; r <= total; r++) {
        uint64_t t0 = ticks();
        store(wr, OFF_ROUND, r);
        for (unsigned int k = 0; k < n; k++) {
            unsigned long spins = 0;
            double since = 0;
            while (load(rd, OFF_LINE(k) + LINE_ACK) != r) {
                relax(share_cpu);
                if (++spins % SPINS_PER_CHECK == 0) {
                    check_members(seg, nodes, n);
                    if (since == 0) since = now_sec();
                    else if (now_sec() - since > o->timeout)
                        die_lost("receiver node %u did not acknowledge within %u s", nodes[k], o->timeout);
                }
            }
        }
        uint64_t t = ticks() - t0;
        if (r > o->warmup) rtt[r - o->warmup - 1] = (double)t * ns_per_tick * 1e-3;
    }

    /* A payload by DMA, through the writer's own membership of the group. */
    sci_remote_segment_t self;
    sci_local_segment_t src;
    sci_map_t smap;
    sci_dma_queue_t dq;
    size_t plen = o->bytes - OFF_PAYLOAD;
    SCIConnectSegment(sd, &self, DIS_BROADCAST_NODEID_GROUP_ALL, group, 0, NO_CALLBACK, NO_ARG,
                      o->timeout * 1000, SCI_FLAG_BROADCAST, &err);
    CHECK("SCIConnectSegment(DIS_BROADCAST_NODEID_GROUP_ALL)");
    SCICreateSegment(sd, &src, 0, plen, NO_CALLBACK, NO_ARG, SCI_FLAG_AUTO_ID, &err);
    CHECK("SCICreateSegment (DMA source)");
    SCIPrepareSegment(src, 0, NO_FLAGS, &err);
    CHECK("SCIPrepareSegment (DMA source)");
    volatile uint8_t *sp = SCIMapLocalSegment(src, &smap, 0, plen, NULL, NO_FLAGS, &err);
    CHECK("SCIMapLocalSegment (DMA source)");
    for (size_t i = 0; i < plen; i++) sp[i] = pattern(i);
    SCICreateDMAQueue(sd, &dq, 0, 1, NO_FLAGS, &err);
    CHECK("SCICreateDMAQueue");
    double d0 = now_sec();
    SCIStartDmaTransfer(dq, src, self, 0, plen, OFF_PAYLOAD, NO_CALLBACK, NO_ARG,
                        SCI_FLAG_DMA_GLOBAL | SCI_FLAG_BROADCAST | SCI_FLAG_DMA_WAIT, &err);
    CHECK("SCIStartDmaTransfer(SCI_FLAG_DMA_GLOBAL | SCI_FLAG_BROADCAST)");
    double dma_us = (now_sec() - d0) * 1e6;
    for (size_t i = 0; i < plen; i++) {
        if ((uint8_t)rd[OFF_PAYLOAD + i] != pattern(i)) die_lost("the DMA payload differs at byte %u", (unsigned)i);
    }
    store(wr, OFF_PLEN, plen);
    store(wr, OFF_STATE, STATE_DMA);
    deadline = now_sec() + o->timeout;
    for (unsigned int k = 0; k < n; k++) {
        uint64_t v;
        while ((v = load(rd, OFF_LINE(k) + LINE_CHECKED)) == 0) {
            if (now_sec() > deadline) die_lost("receiver node %u did not check the payload within %u s", nodes[k], o->timeout);
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
        if (v != CHECK_OK) die_lost("receiver node %u saw a different payload", nodes[k]);
    }

    /* Done: receivers leave (SCI_CB_DISCONNECT), then the group goes. */
    store(wr, OFF_STATE, STATE_DONE);
    unsigned int left = 0;
    deadline = now_sec() + o->timeout;
    while (left < n && now_sec() < deadline) {
        sci_segment_cb_reason_t why = SCIWaitForLocalSegmentEvent(seg, &node, &adapter, 100, NO_FLAGS, &err);
        if (err == SCI_ERR_TIMEOUT) continue;
        CHECK("SCIWaitForLocalSegmentEvent");
        if ((why == SCI_CB_DISCONNECT || why == SCI_CB_LOST) && node != me) left++;
    }
    SCIRemoveDMAQueue(dq, NO_FLAGS, &err);
    CHECK("SCIRemoveDMAQueue");
    SCIUnmapSegment(smap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment");
    SCIRemoveSegment(src, NO_FLAGS, &err);
    CHECK("SCIRemoveSegment (DMA source)");
    SCIDisconnectSegment(self, NO_FLAGS, &err);
    CHECK("SCIDisconnectSegment");
    SCIUnmapSegment(rmap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment");
    SCIUnmapSegment(wmap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment");
    SCIRemoveSegment(seg, NO_FLAGS, &err);
    if (err == SCI_ERR_BUSY) SCIRemoveSegment(seg, SCI_FLAG_FORCE_REMOVE, &err);
    CHECK("SCIRemoveSegment");
    SCIClose(sd, NO_FLAGS, &err);
    CHECK("SCIClose");
    SCITerminate();

    /* The figures. */
    double sum = 0;
    for (unsigned long i = 0; i < o->iters; i++) sum += rtt[i];
    qsort(rtt, o->iters, sizeof *rtt, cmp_double);
    double avg = sum / (double)o->iters, min = rtt[0], med = rtt[o->iters / 2], max = rtt[o->iters - 1];
    printf("%s: group %u, writer node %u, %u receiver%s (nodes", prog, group, me, n, n == 1 ? "" : "s");
    for (unsigned int k = 0; k < n; k++) printf("%s %u", k ? "," : "", nodes[k]);
    printf("), %lu rounds after %lu warm-up\n", o->iters, o->warmup);
    printf("round trip (all %u acknowledged): avg %.3f us, min %.3f, median %.3f, max %.3f\n", n, avg, min, med, max);
    printf("one-way latency (round trip / 2):  avg %.3f us, min %.3f, median %.3f, max %.3f\n", avg / 2, min / 2,
           med / 2, max / 2);
    printf("DMA: %zu bytes written to the group by one SCI_FLAG_BROADCAST transfer in %.1f us, verified by %u "
           "receiver%s\n",
           plen, dma_us, n, n == 1 ? "" : "s");
    if (share_cpu) {
        printf("note: %u spinning processes on %d CPUs take turns: the latency measures the scheduler, not the "
               "fabric\n",
               n + 1, cpus);
    }
    if (left < n) printf("note: %u receiver(s) did not leave in time; the group was removed forcibly\n", n - left);
    free(rtt);
    return 0;
}

/* ---- a receiver ----------------------------------------------------------------------- */

static volatile int group_lost;

/* Runs on a library thread: the group went away (its writer removed it or died). */
static sci_callback_action_t on_group_event(void *arg, sci_remote_segment_t seg, sci_segment_cb_reason_t reason,
                                            sci_error_t status)
{
    (void)arg;
    (void)seg;
    (void)status;
    if (reason == SCI_CB_LOST || reason == SCI_CB_DISCONNECT) {
        __atomic_store_n(&group_lost, 1, __ATOMIC_RELEASE);
        return SCI_CALLBACK_CANCEL;
    }
    return SCI_CALLBACK_CONTINUE;
}

static void check_group(unsigned int group)
{
    if (__atomic_load_n(&group_lost, __ATOMIC_ACQUIRE))
        die_lost("group %u is gone (SCI_CB_LOST): the writer removed it or died", group);
}

static int run_client(unsigned int group, unsigned int timeout)
{
    sci_error_t err;
    sci_desc_t sd;
    sci_remote_segment_t rseg;
    sci_map_t rmap, wmap;
    unsigned int me = 0;
    const int cpus = cpus_allowed();

    SCIInitialize(NO_FLAGS, &err);
    CHECK("SCIInitialize");
    SCIOpen(&sd, NO_FLAGS, &err);
    CHECK("SCIOpen");
    SCIGetLocalNodeId(0, &me, NO_FLAGS, &err);
    CHECK("SCIGetLocalNodeId");

    /* Join: node DIS_BROADCAST_NODEID_GROUP_ALL, the group id, SCI_FLAG_BROADCAST. */
    SCIConnectSegment(sd, &rseg, DIS_BROADCAST_NODEID_GROUP_ALL, group, 0, on_group_event, NO_ARG, timeout * 1000,
                      SCI_FLAG_BROADCAST | SCI_FLAG_USE_CALLBACK, &err);
    if (err == SCI_ERR_TIMEOUT || err == SCI_ERR_NO_SUCH_SEGMENT)
        die_lost("no group %u appeared within %u s (start the writer: %s -server -group %u)", group, timeout, prog,
                 group);
    CHECK("SCIConnectSegment(DIS_BROADCAST_NODEID_GROUP_ALL, SCI_FLAG_BROADCAST)");
    size_t bytes = SCIGetRemoteSegmentSize(rseg);
    if (bytes < MIN_BYTES) die_lost("group %u has %u bytes: not a group of a reflective writer", group, (unsigned)bytes);
    const volatile char *rd = SCIMapRemoteSegment(rseg, &rmap, 0, bytes, NULL, SCI_FLAG_READONLY_MAP, &err);
    CHECK("SCIMapRemoteSegment (read)");
    volatile char *wr = SCIMapRemoteSegment(rseg, &wmap, 0, bytes, NULL, SCI_FLAG_BROADCAST, &err);
    CHECK("SCIMapRemoteSegment(SCI_FLAG_BROADCAST)");
    fprintf(stderr, "%s: node %u joined group %u (%zu bytes)\n", prog, me, group, bytes);
    fflush(stderr);

    /* Find this node in the roster. */
    unsigned int k = MAX_RECEIVERS;
    double deadline = now_sec() + timeout;
    while (k == MAX_RECEIVERS) {
        uint64_t n = load(rd, OFF_NRECV);
        for (unsigned int i = 0; i < n && i < MAX_RECEIVERS; i++) {
            if (load(rd, OFF_ROSTER + 8 * (size_t)i) == me) k = i;
        }
        if (k != MAX_RECEIVERS) break;
        check_group(group);
        if (now_sec() > deadline) die_lost("the writer of group %u did not list node %u in time", group, me);
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    store(wr, OFF_LINE(k) + LINE_HELLO, me);

    /* Acknowledge every round until the writer is done; check the payload on the way. */
    uint64_t last = 0, seen_at_check = 0;
    unsigned long rounds = 0, spins = 0;
    int checked = 0, share_cpu = 0;
    size_t plen = 0;
    double quiet_since = now_sec();
    for (;;) {
        uint64_t v = load(rd, OFF_ROUND);
        if (v != last) {
            store(wr, OFF_LINE(k) + LINE_ACK, v);
            last = v;
            rounds++;
            continue;
        }
        relax(share_cpu);
        if (++spins % SPINS_PER_CHECK != 0) continue;
        check_group(group);
        share_cpu = (int)load(rd, OFF_NRECV) + 1 > cpus;
        uint64_t state = load(rd, OFF_STATE);
        if (state >= STATE_DMA && !checked) {
            plen = load(rd, OFF_PLEN);
            int same = plen > 0 && plen <= bytes - OFF_PAYLOAD;
            for (size_t i = 0; same && i < plen; i++) same = (uint8_t)rd[OFF_PAYLOAD + i] == pattern(i);
            store(wr, OFF_LINE(k) + LINE_CHECKED, same ? CHECK_OK : CHECK_BAD);
            checked = 1;
            if (!same) die_lost("group %u: the DMA payload differs (%u bytes)", group, (unsigned)plen);
        }
        if (state == STATE_DONE) break;
        if (rounds != seen_at_check || state == STATE_DMA) {
            seen_at_check = rounds;
            quiet_since = now_sec();
        } else if (now_sec() - quiet_since > timeout) {
            die_lost("no word from the writer of group %u for %u s", group, timeout);
        }
    }

    SCIUnmapSegment(rmap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment");
    SCIUnmapSegment(wmap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment");
    SCIDisconnectSegment(rseg, NO_FLAGS, &err);
    CHECK("SCIDisconnectSegment");
    SCIClose(sd, NO_FLAGS, &err);
    CHECK("SCIClose");
    SCITerminate();
    printf("%s: node %u, receiver %u of group %u: acknowledged %lu rounds; DMA payload of %zu bytes verified\n", prog,
           me, k + 1, group, rounds, plen);
    return 0;
}

int main(int argc, char **argv)
{
    int server = 0, client = 0, have_group = 0, cpu = -1;
    unsigned long group = 0, receivers = 1, timeout = 30, iters = 100000, warmup = 10000, v;
    size_t bytes = 64 << 10;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "-help") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "-server")) server = 1;
        else if (!strcmp(a, "-client")) client = 1;
        else if (val && !strcmp(a, "-group") && !parse_uint(val, &group) && group <= 0xFFFFFFFFul) { have_group = 1; i++; }
        else if (val && !strcmp(a, "-size") && !parse_uint(val, &receivers)) i++;
        else if (val && !strcmp(a, "-bytes") && !parse_size(val, &bytes)) i++;
        else if (val && !strcmp(a, "-iter") && !parse_uint(val, &iters)) i++;
        else if (val && !strcmp(a, "-warmup") && !parse_uint(val, &warmup)) i++;
        else if (val && !strcmp(a, "-timeout") && !parse_uint(val, &timeout)) i++;
        else if (val && !strcmp(a, "-cpu") && !parse_uint(val, &v) && v < CPU_SETSIZE) { cpu = (int)v; i++; }
        else { fprintf(stderr, "%s: unknown, incomplete or invalid option %s\n", prog, a); usage(); return 1; }
    }
    if (server == client || (client && !have_group)) { usage(); return 1; }
    if (receivers < 1 || receivers > MAX_RECEIVERS) {
        fprintf(stderr, "%s: -size %lu: 1 to %d receivers\n", prog, receivers, MAX_RECEIVERS);
        return 1;
    }
    if (bytes < MIN_BYTES) {
        fprintf(stderr, "%s: -bytes %zu: a group needs at least %d bytes\n", prog, bytes, MIN_BYTES);
        return 1;
    }
    if (iters < 1 || iters > 10000000 || timeout < 1 || timeout > 3600 * 24) {
        fprintf(stderr, "%s: -iter is 1 to 10000000, -timeout 1 to 86400 s\n", prog);
        return 1;
    }
    pin(cpu);
    if (client) return run_client((unsigned int)group, (unsigned int)timeout);
    struct server_opts o = {!have_group, (unsigned int)group, (unsigned int)receivers, (unsigned int)timeout,
                            bytes, iters, warmup};
    return run_server(&o);
}
