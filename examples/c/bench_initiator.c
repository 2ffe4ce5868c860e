/*
 * bench_initiator - the initiator of the benchmark suite: finds its peers, drives the
 * experiments through data interrupt orders, checks every result and prints a table.
 *
 * It probes every node of -peers (SCIProbeNode, retried until -timeout), connects to each
 * peer's control data interrupt and says HELLO; the peer connects back (the initiator's
 * reply data interrupt, segment and interrupt) and answers READY. Then, peer by peer:
 *   pio-pingpong  ping-pong over PIO: a sequence word and a payload stored into the peer's
 *                 segment, the pong (payload copied by the peer with SCIMemCpy) awaited in
 *                 our segment; both maps checked with sequences (SCIStartSequence /
 *                 SCICheckSequence); every payload checked
 *   irq-roundtrip a trigger of the peer's interrupt, answered by its callback triggering ours
 *   dma           SCIStartDmaTransfer of -dma-size bytes on a 1-entry DMA queue, waited for
 *   dma-vec       the same bytes as a -vec entry vector (SCIStartDmaTransferVec), the chunks
 *                 reversed on the way; the peer verifies both
 * and for all peers at once:
 *   broadcast     rounds stored into the reflective group every peer created (connected at
 *                 node DIS_BROADCAST_NODEID_GROUP_ALL, mapped without a flag); every peer
 *                 checks each round in its copy
 * Last it tells every peer to exit and waits for their goodbyes.
 *
 *   LANES_NODE_ID=8  ./bench_peer &
 *   LANES_NODE_ID=12 ./bench_peer &
 *   LANES_NODE_ID=4  ./bench_initiator -peers 8,12 [-iters 10000] [-dma-size 256K]
 *
 * Exit status: 0 every experiment validated its data, 1 usage, 2 SISCI error, 3 an
 * experiment failed validation, or a peer is unreachable or did not answer.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sisci_api.h>
#include <sisci_error.h>
#include <sisci_types.h>
#include <dis_types.h>

#define NO_FLAGS    0
#define NO_CALLBACK NULL
#define NO_ARG      NULL
#define ADAPTER_NO  0

static const char *prog = "bench_initiator";
#include "common.h"
#include "bench_proto.h"

static void usage(void)
{
    printf("Usage: %s -peers NODE[,NODE...] [-iters N] [-size B] [-irq-iters N] [-dma-size B]\n"
           "       [-dma-iters N] [-vec N] [-rounds N] [-bcast-size B] [-timeout MS]\n"
           "The initiator of the benchmark suite: drives bench_peer processes on the given nodes.\n"
           "  -peers LIST     the peers' node ids, comma separated (at most %d)\n"
           "  -iters N        PIO ping-pong round trips per peer (default 10000)\n"
           "  -size B         PIO ping-pong payload, 0..%u bytes (default 64)\n"
           "  -irq-iters N    interrupt round trips per peer (default 1000)\n"
           "  -dma-size B     bytes per DMA transfer (default 256K)\n"
           "  -dma-iters N    DMA transfers per peer and kind (default 100)\n"
           "  -vec N          entries of the DMA vector (default 4)\n"
           "  -rounds N       broadcast rounds (default 1000)\n"
           "  -bcast-size B   bytes per broadcast round (default 4K, at most %u)\n"
           "  -timeout MS     longest wait for a peer or an answer (default 30000)\n"
           "  -h              this help\n"
           "Exit status: 0 every experiment validated, 1 usage, 2 SISCI error, 3 a check failed.\n",
           prog, BENCH_MAX_PEERS, BENCH_MAX_PING, BENCH_GROUP_SIZE - GROUP_PAYLOAD_OFF);
}

struct peer {
    unsigned int node;
    sci_remote_data_interrupt_t ctrl;
    sci_remote_segment_t seg;
    sci_map_t map;
    volatile uint8_t *base;
    sci_sequence_t seq;
    size_t seg_size;
    sci_remote_interrupt_t irq;
    uint64_t pings;   /* the last ping sequence number sent */
};

struct row {
    char name[16];
    char who[16];
    unsigned long iters;
    double avg, min, max, mbs;   /* microseconds; MB/s (0: none) */
    int ok;
};

static struct peer peers[BENCH_MAX_PEERS];
static int npeers;
static struct row rows[4 * BENCH_MAX_PEERS + 1];
static int nrows;
static unsigned int my_node, timeout = 30000;
static sci_local_data_interrupt_t replies;

static void send_order(struct peer *p, uint32_t cmd, uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    sci_error_t err;
    struct bench_msg m = {BENCH_MAGIC, cmd, my_node, BENCH_OK, a, b, c, d};
    SCITriggerDataInterrupt(p->ctrl, &m, sizeof m, NO_FLAGS, &err);
    CHECK("SCITriggerDataInterrupt (order)");
}

/* Waits for the reply `cmd` of node `node`; 0, or -1 when none came in time or it was not
 * the one expected. */
static int await_reply(unsigned int node, uint32_t cmd, struct bench_msg *m)
{
    sci_error_t err;
    unsigned int len = sizeof *m;
    SCIWaitForDataInterrupt(replies, m, &len, timeout, NO_FLAGS, &err);
    if (err == SCI_ERR_TIMEOUT) {
        fprintf(stderr, "%s: node %u did not answer within %u ms\n", prog, node, timeout);
        return -1;
    }
    CHECK("SCIWaitForDataInterrupt");
    if (len != sizeof *m || m->magic != BENCH_MAGIC || m->node != node || m->cmd != cmd) {
        fprintf(stderr, "%s: unexpected reply (%u bytes, order %u from node %u; expected %u from %u)\n", prog, len,
                m->cmd, m->node, cmd, node);
        return -1;
    }
    return 0;
}

/* Waits for a reply `cmd` of any peer; its index, or -1. */
static int await_any(uint32_t cmd, struct bench_msg *m)
{
    sci_error_t err;
    unsigned int len = sizeof *m;
    SCIWaitForDataInterrupt(replies, m, &len, timeout, NO_FLAGS, &err);
    if (err == SCI_ERR_TIMEOUT) {
        fprintf(stderr, "%s: no peer answered within %u ms\n", prog, timeout);
        return -1;
    }
    CHECK("SCIWaitForDataInterrupt");
    if (len == sizeof *m && m->magic == BENCH_MAGIC && m->cmd == cmd)
        for (int k = 0; k < npeers; k++)
            if (peers[k].node == m->node) return k;
    fprintf(stderr, "%s: unexpected reply (%u bytes, order %u from node %u)\n", prog, len, m->cmd, m->node);
    return -1;
}

static int await_done(struct peer *p, struct bench_msg *m)
{
    return await_reply(p->node, REP_DONE, m) == 0 && m->status == BENCH_OK ? 0 : -1;
}

static struct row *add_row(const char *name, const char *who, unsigned long iters)
{
    struct row *r = &rows[nrows++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->who, sizeof r->who, "%s", who);
    r->iters = iters;
    r->min = 1e300;
    return r;
}

static void sample(struct row *r, double us)
{
    r->avg += us;
    if (us < r->min) r->min = us;
    if (us > r->max) r->max = us;
}

static void finish(struct row *r, unsigned long n)
{
    r->avg = n ? r->avg / (double)n : 0;
    if (n == 0) r->min = 0;
}

static int check_pattern(const volatile uint8_t *p, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != bench_pattern(seed, i)) return 0;
    return 1;
}

/* PIO ping-pong with peer k; `mine` is our segment's map. */
static void pio_pingpong(int k, volatile uint8_t *mine, unsigned long iters, size_t len)
{
    sci_error_t err;
    struct peer *p = &peers[k];
    struct bench_msg m;
    char who[16];
    snprintf(who, sizeof who, "node %u", p->node);
    struct row *r = add_row("pio-pingpong", who, iters);
    volatile uint8_t *line = mine + (size_t)k * INIT_LINE_BYTES;
    sci_sequence_status_t ss;
    int tries = 0, ok = 1;
    unsigned long n = 0;
    do {
        ss = SCIStartSequence(p->seq, NO_FLAGS, &err);
    } while (ss == SCI_SEQ_RETRIABLE && ++tries < 1000);
    if (ss != SCI_SEQ_OK) { fprintf(stderr, "%s: SCIStartSequence: %d\n", prog, (int)ss); ok = 0; }
    uint64_t first = p->pings;
    send_order(p, CMD_PINGPONG, iters, len, first, 0);
    for (unsigned long i = 1; i <= iters && ok; i++) {
        uint64_t s = first + i;
        double t0 = now_us();
        for (size_t b = 0; b < len; b++) p->base[PEER_PAYLOAD_OFF + b] = bench_pattern(s, b);
        store_word(p->base, PEER_PING_OFF, s);
        SCIFlush(p->seq, SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY);
        p->pings = s;
        if (spin_until(line + INIT_PONG_OFF, s, t0 + timeout * 1000.0) != 0) {
            fprintf(stderr, "%s: node %u: no pong %llu\n", prog, p->node, (unsigned long long)s);
            ok = 0;
            break;
        }
        sample(r, now_us() - t0);
        n++;
        if (!check_pattern(line + INIT_PAYLOAD_OFF, len, s ^ 0xA5U)) {
            fprintf(stderr, "%s: node %u: pong %llu has a wrong payload\n", prog, p->node, (unsigned long long)s);
            ok = 0;
        }
    }
    ss = SCICheckSequence(p->seq, NO_FLAGS, &err);
    if (ss != SCI_SEQ_OK) { fprintf(stderr, "%s: SCICheckSequence: %d\n", prog, (int)ss); ok = 0; }
    if (await_done(p, &m) != 0 || m.a != n) ok = 0;
    finish(r, n);
    r->ok = ok && n == iters;
}

static void irq_roundtrip(int k, sci_local_interrupt_t mine, unsigned long iters)
{
    sci_error_t err;
    struct peer *p = &peers[k];
    struct bench_msg m;
    char who[16];
    snprintf(who, sizeof who, "node %u", p->node);
    struct row *r = add_row("irq-roundtrip", who, iters);
    unsigned long n = 0;
    int ok = 1;
    send_order(p, CMD_IRQ_RESET, 0, 0, 0, 0);
    if (await_done(p, &m) != 0) ok = 0;
    for (unsigned long i = 0; i < iters && ok; i++) {
        double t0 = now_us();
        SCITriggerInterrupt(p->irq, NO_FLAGS, &err);
        CHECK("SCITriggerInterrupt");
        SCIWaitForInterrupt(mine, timeout, NO_FLAGS, &err);
        if (err == SCI_ERR_TIMEOUT) {
            fprintf(stderr, "%s: node %u: interrupt %lu not answered\n", prog, p->node, i);
            ok = 0;
            break;
        }
        CHECK("SCIWaitForInterrupt");
        sample(r, now_us() - t0);
        n++;
    }
    /* Every answer was awaited: none may be left over. */
    SCIWaitForInterrupt(mine, 0, NO_FLAGS, &err);
    if (err != SCI_ERR_TIMEOUT) {
        fprintf(stderr, "%s: node %u: an interrupt more than triggered (%s)\n", prog, p->node, SCIGetErrorString(err));
        ok = 0;
    }
    send_order(p, CMD_IRQ_COUNT, 0, 0, 0, 0);
    if (await_done(p, &m) != 0 || m.a != n) {
        fprintf(stderr, "%s: node %u counted %llu interrupts of %lu\n", prog, p->node, (unsigned long long)m.a, n);
        ok = 0;
    }
    finish(r, n);
    r->ok = ok && n == iters;
}

/* DMA of `size` bytes into the peer's DMA area: one transfer, or a vector of `vec` chunks
 * reversed on the way. */
static void dma(int k, sci_dma_queue_t dq, sci_local_segment_t src, uint8_t *srcmem, size_t size, unsigned long iters,
                unsigned int vec)
{
    sci_error_t err;
    struct peer *p = &peers[k];
    struct bench_msg m;
    char who[16];
    snprintf(who, sizeof who, "node %u", p->node);
    struct row *r = add_row(vec ? "dma-vec" : "dma", who, iters);
    uint64_t seed = ((uint64_t)p->node << 8) + (vec ? 2U : 1U);
    size_t chunk = vec ? size / vec : size;
    dis_dma_vec_t v[DIS_DMA_MAX_VECLEN];
    unsigned long n = 0;
    int ok = 1;

    if (!vec) {
        for (size_t i = 0; i < size; i++) srcmem[i] = bench_pattern(seed, i);
    } else {
        /* Local chunk c goes to remote chunk vec-1-c: fill it with what belongs there. */
        for (unsigned int c = 0; c < vec; c++) {
            size_t dst = (size_t)(vec - 1 - c) * chunk;
            for (size_t i = 0; i < chunk; i++) srcmem[(size_t)c * chunk + i] = bench_pattern(seed, dst + i);
            v[c].size = (unsigned int)chunk;
            v[c].local_offset = (unsigned int)((size_t)c * chunk);
            v[c].remote_offset = (unsigned int)(PEER_DMA_OFF + dst);
            v[c].flags = 0;
        }
    }
    for (unsigned long i = 0; i < iters; i++) {
        double t0 = now_us();
        if (vec) {
            SCIStartDmaTransferVec(dq, src, p->seg, vec, v, NO_CALLBACK, NO_ARG, NO_FLAGS, &err);
            CHECK("SCIStartDmaTransferVec");
        } else {
            SCIStartDmaTransfer(dq, src, p->seg, 0, size, PEER_DMA_OFF, NO_CALLBACK, NO_ARG, NO_FLAGS, &err);
            CHECK("SCIStartDmaTransfer");
        }
        sci_dma_queue_state_t st = SCIWaitForDMAQueue(dq, timeout, NO_FLAGS, &err);
        CHECK("SCIWaitForDMAQueue");
        if (st != SCI_DMAQUEUE_DONE) {
            fprintf(stderr, "%s: node %u: DMA queue state %d\n", prog, p->node, (int)st);
            ok = 0;
            break;
        }
        sample(r, now_us() - t0);
        n++;
    }
    size_t moved = vec ? chunk * vec : size;
    send_order(p, CMD_DMA_CHECK, PEER_DMA_OFF, moved, seed, 0);
    if (await_done(p, &m) != 0) {
        fprintf(stderr, "%s: node %u: the DMA data is wrong\n", prog, p->node);
        ok = 0;
    }
    finish(r, n);
    r->mbs = r->avg > 0 ? (double)moved / r->avg : 0;
    r->ok = ok && n == iters;
}

static void broadcast(sci_desc_t sd, unsigned long rounds, size_t len)
{
    sci_error_t err;
    sci_remote_segment_t group;
    sci_map_t map;
    struct bench_msg m;
    char who[16];
    snprintf(who, sizeof who, "%d peers", npeers);
    struct row *r = add_row("broadcast", who, rounds);
    unsigned long n = 0;
    int ok = 1;

    SCIConnectSegment(sd, &group, DIS_BROADCAST_NODEID_GROUP_ALL, BENCH_GROUP, ADAPTER_NO, NO_CALLBACK, NO_ARG,
                      timeout, SCI_FLAG_BROADCAST, &err);
    CHECK("SCIConnectSegment(DIS_BROADCAST_NODEID_GROUP_ALL)");
    /* The writer maps the group without a flag: the multicast address. */
    volatile uint8_t *g = SCIMapRemoteSegment(group, &map, 0, BENCH_GROUP_SIZE, NULL, NO_FLAGS, &err);
    CHECK("SCIMapRemoteSegment(group)");
    for (unsigned long i = 1; i <= rounds && ok; i++) {
        double t0 = now_us();
        for (size_t b = 0; b < len; b++) g[GROUP_PAYLOAD_OFF + b] = bench_pattern(i, b);
        SCIFlush(NULL, SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY);
        store_word(g, GROUP_ROUND_OFF, i);
        SCIFlush(NULL, SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY);
        for (int k = 0; k < npeers; k++) send_order(&peers[k], CMD_BCAST_CHECK, i, len, 0, 0);
        /* The peers answer in any order: each once. */
        int answered[BENCH_MAX_PEERS] = {0};
        for (int got = 0; got < npeers && ok; got++) {
            int k = await_any(REP_DONE, &m);
            if (k < 0 || answered[k] || m.status != BENCH_OK || m.a != i) {
                fprintf(stderr, "%s: %s%u: broadcast round %lu failed\n", prog, k < 0 ? "no answer, " : "node ",
                        k < 0 ? 0 : peers[k].node, i);
                ok = 0;
                break;
            }
            answered[k] = 1;
        }
        if (!ok) break;
        sample(r, now_us() - t0);
        n++;
    }
    SCIUnmapSegment(map, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment(group)");
    SCIDisconnectSegment(group, NO_FLAGS, &err);
    CHECK("SCIDisconnectSegment(group)");
    finish(r, n);
    r->mbs = r->avg > 0 ? (double)len * (double)npeers / r->avg : 0;
    r->ok = ok && n == rounds;
}

static int parse_count(const char *s, unsigned long *out)
{
    char *end;
    *out = strtoul(s, &end, 0);
    return end == s || *end != '\0' ? -1 : 0;
}

int main(int argc, char **argv)
{
    unsigned long iters = 10000, irq_iters = 1000, dma_iters = 100, rounds = 1000, vec = 4;
    size_t len = 64, dma_size = 256 << 10, bcast_size = 4096;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "-help") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (v && !strcmp(a, "-peers")) {
            char buf[512];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                unsigned long node;
                if (npeers == BENCH_MAX_PEERS || parse_count(t, &node) != 0 || node == 0 || node > 0xFFFF) {
                    bad = 1;
                    break;
                }
                peers[npeers++].node = (unsigned int)node;
            }
        }
        else if (v && !strcmp(a, "-iters")) bad = parse_count(v, &iters);
        else if (v && !strcmp(a, "-irq-iters")) bad = parse_count(v, &irq_iters);
        else if (v && !strcmp(a, "-dma-iters")) bad = parse_count(v, &dma_iters);
        else if (v && !strcmp(a, "-rounds")) bad = parse_count(v, &rounds);
        else if (v && !strcmp(a, "-vec")) bad = parse_count(v, &vec) || vec == 0 || vec > DIS_DMA_MAX_VECLEN;
        else if (v && !strcmp(a, "-size")) bad = parse_size(v, &len) || len > BENCH_MAX_PING;
        else if (v && !strcmp(a, "-dma-size")) bad = parse_size(v, &dma_size) || dma_size == 0;
        else if (v && !strcmp(a, "-bcast-size"))
            bad = parse_size(v, &bcast_size) || bcast_size > BENCH_GROUP_SIZE - GROUP_PAYLOAD_OFF;
        else if (v && !strcmp(a, "-timeout")) {
            unsigned long t;
            bad = parse_count(v, &t) || t == 0 || t > 3600000;
            timeout = (unsigned int)t;
        }
        else { fprintf(stderr, "%s: unknown or incomplete option %s\n", prog, a); usage(); return 1; }
        if (bad) { fprintf(stderr, "%s: bad value for %s: %s\n", prog, a, v); usage(); return 1; }
        i++;
    }
    if (npeers == 0) { fprintf(stderr, "%s: -peers is required\n", prog); usage(); return 1; }
    if (dma_size % vec != 0) { fprintf(stderr, "%s: -dma-size must be a multiple of -vec\n", prog); return 1; }

    sci_error_t err;
    sci_desc_t sd;
    sci_local_segment_t seg, src;
    sci_map_t segmap, srcmap;
    sci_local_interrupt_t irq;
    sci_dma_queue_t dq;
    unsigned int reply_no = BENCH_REPLY_INTNO, irq_no = BENCH_INIT_INTNO;
    size_t seg_size = (size_t)npeers * INIT_LINE_BYTES;

    SCIInitialize(NO_FLAGS, &err);
    CHECK("SCIInitialize");
    SCIOpen(&sd, NO_FLAGS, &err);
    CHECK("SCIOpen");
    SCIGetLocalNodeId(ADAPTER_NO, &my_node, NO_FLAGS, &err);
    CHECK("SCIGetLocalNodeId");
    SCICreateDataInterrupt(sd, &replies, ADAPTER_NO, &reply_no, NO_CALLBACK, NO_ARG, SCI_FLAG_FIXED_INTNO, &err);
    CHECK("SCICreateDataInterrupt");
    SCICreateInterrupt(sd, &irq, ADAPTER_NO, &irq_no, NO_CALLBACK, NO_ARG, SCI_FLAG_FIXED_INTNO, &err);
    CHECK("SCICreateInterrupt");
    SCICreateSegment(sd, &seg, BENCH_INIT_SEG, seg_size, NO_CALLBACK, NO_ARG, NO_FLAGS, &err);
    CHECK("SCICreateSegment");
    SCIPrepareSegment(seg, ADAPTER_NO, NO_FLAGS, &err);
    CHECK("SCIPrepareSegment");
    volatile uint8_t *mine = SCIMapLocalSegment(seg, &segmap, 0, seg_size, NULL, NO_FLAGS, &err);
    CHECK("SCIMapLocalSegment");
    memset((void *)mine, 0, seg_size);
    SCISetSegmentAvailable(seg, ADAPTER_NO, NO_FLAGS, &err);
    CHECK("SCISetSegmentAvailable");
    SCICreateSegment(sd, &src, BENCH_DMA_SEG, dma_size, NO_CALLBACK, NO_ARG, NO_FLAGS, &err);
    CHECK("SCICreateSegment (DMA source)");
    SCIPrepareSegment(src, ADAPTER_NO, NO_FLAGS, &err);
    CHECK("SCIPrepareSegment (DMA source)");
    uint8_t *srcmem = SCIMapLocalSegment(src, &srcmap, 0, dma_size, NULL, NO_FLAGS, &err);
    CHECK("SCIMapLocalSegment (DMA source)");
    SCICreateDMAQueue(sd, &dq, ADAPTER_NO, 1, NO_FLAGS, &err);
    CHECK("SCICreateDMAQueue");

    /* Discovery: probe each node, then order HELLO and wait for READY. */
    printf("%s: node %u, %d peers\n", prog, my_node, npeers);
    for (int k = 0; k < npeers; k++) {
        struct peer *p = &peers[k];
        struct bench_msg m;
        double deadline = now_us() + timeout * 1000.0;
        int up;
        while (!(up = SCIProbeNode(sd, ADAPTER_NO, p->node, NO_FLAGS, &err)) && now_us() < deadline) {
            struct timespec ts = {0, 20 * 1000000};
            nanosleep(&ts, NULL);
        }
        if (!up) {
            fprintf(stderr, "%s: node %u is not reachable (%s)\n", prog, p->node, SCIGetErrorString(err));
            SCIClose(sd, SCI_FLAG_FORCE_REMOVE, &err);
            return 3;
        }
        SCIConnectDataInterrupt(sd, &p->ctrl, p->node, ADAPTER_NO, BENCH_CTRL_INTNO, timeout, NO_FLAGS, &err);
        CHECK("SCIConnectDataInterrupt (peer control)");
        send_order(p, CMD_HELLO, (uint64_t)k * INIT_LINE_BYTES, reply_no, BENCH_INIT_SEG, irq_no);
        if (await_reply(p->node, REP_READY, &m) != 0) {
            SCIClose(sd, SCI_FLAG_FORCE_REMOVE, &err);
            return 3;
        }
        SCIConnectSegment(sd, &p->seg, p->node, (unsigned int)m.a, ADAPTER_NO, NO_CALLBACK, NO_ARG, timeout, NO_FLAGS,
                          &err);
        CHECK("SCIConnectSegment (peer)");
        p->seg_size = SCIGetRemoteSegmentSize(p->seg);
        if (p->seg_size < PEER_DMA_OFF + dma_size) {
            fprintf(stderr, "%s: node %u: its segment (%zu bytes) is too small for -dma-size %zu\n", prog, p->node,
                    p->seg_size, dma_size);
            SCIClose(sd, SCI_FLAG_FORCE_REMOVE, &err);
            return 1;
        }
        p->base = SCIMapRemoteSegment(p->seg, &p->map, 0, PEER_DMA_OFF, NULL, NO_FLAGS, &err);
        CHECK("SCIMapRemoteSegment (peer)");
        SCICreateMapSequence(p->map, &p->seq, NO_FLAGS, &err);
        CHECK("SCICreateMapSequence");
        SCIConnectInterrupt(sd, &p->irq, p->node, ADAPTER_NO, (unsigned int)m.c, timeout, NO_FLAGS, &err);
        CHECK("SCIConnectInterrupt (peer)");
        printf("%s: peer node %u: segment 0x%llx (%zu bytes), interrupt %llu, group 0x%llx\n", prog, p->node,
               (unsigned long long)m.a, p->seg_size, (unsigned long long)m.c, (unsigned long long)m.d);
    }
    fflush(stdout);

    for (int k = 0; k < npeers; k++) pio_pingpong(k, mine, iters, len);
    for (int k = 0; k < npeers; k++) irq_roundtrip(k, irq, irq_iters);
    for (int k = 0; k < npeers; k++) dma(k, dq, src, srcmem, dma_size, dma_iters, 0);
    for (int k = 0; k < npeers; k++) dma(k, dq, src, srcmem, dma_size, dma_iters, (unsigned int)vec);
    broadcast(sd, rounds, bcast_size);

    int good = 0;
    printf("\n%-14s %-9s %8s %11s %11s %11s %10s  %s\n", "experiment", "peer", "iters", "avg(us)", "min(us)",
           "max(us)", "MB/s", "check");
    for (int i = 0; i < nrows; i++) {
        struct row *r = &rows[i];
        char mbs[32] = "-";
        if (r->mbs > 0) snprintf(mbs, sizeof mbs, "%.1f", r->mbs);
        printf("%-14s %-9s %8lu %11.3f %11.3f %11.3f %10s  %s\n", r->name, r->who, r->iters, r->avg, r->min, r->max,
               mbs, r->ok ? "ok" : "FAILED");
        good += r->ok;
    }
    printf("\n");

    /* Teardown: leave each peer's resources, tell it to exit, wait for its goodbye. */
    int said_bye = 0;
    for (int k = 0; k < npeers; k++) {
        struct peer *p = &peers[k];
        struct bench_msg m;
        SCIDisconnectInterrupt(p->irq, NO_FLAGS, &err);
        CHECK("SCIDisconnectInterrupt");
        SCIRemoveSequence(p->seq, NO_FLAGS, &err);
        CHECK("SCIRemoveSequence");
        SCIUnmapSegment(p->map, NO_FLAGS, &err);
        CHECK("SCIUnmapSegment (peer)");
        SCIDisconnectSegment(p->seg, NO_FLAGS, &err);
        CHECK("SCIDisconnectSegment (peer)");
        send_order(p, CMD_EXIT, 0, 0, 0, 0);
        if (await_reply(p->node, REP_BYE, &m) == 0) said_bye++;
        SCIDisconnectDataInterrupt(p->ctrl, NO_FLAGS, &err);
        CHECK("SCIDisconnectDataInterrupt");
    }
    SCIRemoveDMAQueue(dq, NO_FLAGS, &err);
    CHECK("SCIRemoveDMAQueue");
    SCIUnmapSegment(srcmap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment (DMA source)");
    SCIRemoveSegment(src, NO_FLAGS, &err);
    CHECK("SCIRemoveSegment (DMA source)");
    SCIUnmapSegment(segmap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment");
    SCIRemoveSegment(seg, NO_FLAGS, &err);
    CHECK("SCIRemoveSegment");
    SCIRemoveInterrupt(irq, NO_FLAGS, &err);
    CHECK("SCIRemoveInterrupt");
    SCIRemoveDataInterrupt(replies, NO_FLAGS, &err);
    CHECK("SCIRemoveDataInterrupt");
    SCIClose(sd, NO_FLAGS, &err);
    CHECK("SCIClose");
    SCITerminate();

    if (good == nrows && said_bye == npeers) {
        printf("%s: all %d experiments validated, %d peers said goodbye\n", prog, nrows, said_bye);
        return 0;
    }
    printf("%s: %d of %d experiments validated, %d of %d peers said goodbye: FAILED\n", prog, good, nrows, said_bye,
           npeers);
    return 3;
}
