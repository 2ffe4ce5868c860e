/*
 * dma_bench - DMA transfer time and bandwidth per message size, in the manner of the
 * vendor's dma_bench.
 *
 * The server exports a segment (filled with its own pattern) and waits; the client creates a
 * local segment of the same size, connects, and for each message size moves a vector of
 * -vec messages with SCIStartDmaTransferVec (or single transfers, or from ordinary memory
 * with -mem), waiting for the queue each time, and prints the time per vector and the
 * bandwidth. With -read it reads from the server instead and checks what it read. Last it
 * writes the whole segment with one DMA transfer; the server, told by the disconnect event
 * that the client is done, verifies it.
 *
 *   LANES_NODE_ID=8 ./dma_bench -server
 *   LANES_NODE_ID=4 ./dma_bench -client -rn 8 [-vec 1] [-max 1M] [-read] [-mem] [-callback]
 *
 * Exit status: 0 done, 1 usage, 2 SISCI error, 3 data mismatch or failed transfer.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sisci_api.h>
#include <dis_types.h>

#define NO_FLAGS 0
#define DEFAULT_SEGMENT_ID 0x444D
#define DEFAULT_SIZE (4 * 1024 * 1024)

static const char *prog = "dma_bench";
#define DIE_SCI_EXIT(err) ((err) == SCI_ERR_TRANSFER_FAILED ? 3 : 2)
#include "common.h"

static void usage(void)
{
    printf("Usage: %s -server [-id SEGID] [-size BYTES] [-timeout S]\n"
           "       %s -client -rn NODE [-id SEGID] [-min BYTES] [-max BYTES] [-vec N] [-loops N]\n"
           "                  [-read] [-mem] [-callback]\n"
           "DMA transfer time and bandwidth per message size (dma_bench style).\n"
           "  -server        export the segment, wait for one client, verify its final write\n"
           "  -client        transfer to (or from, -read) the segment of node NODE (-rn)\n"
           "  -id SEGID      segment id (default 0x%x)\n"
           "  -size BYTES    segment size (server; default %d)\n"
           "  -min/-max      smallest/largest message (default 64 / segment size / vector length)\n"
           "  -vec N         messages per vector (1..%d, default 1)\n"
           "  -loops N       vectors per size (default: about 256 MiB, 2..2000)\n"
           "  -read          DMA from the remote segment into the local one, and check it\n"
           "  -mem           from ordinary memory (SCIStartDmaTransferMem) instead of a segment\n"
           "  -callback      count completions with a DMA callback as well as waiting\n"
           "  -timeout S     seconds to wait for the peer (default 30)\n"
           "  -h             this help\n",
           prog, prog, DEFAULT_SEGMENT_ID, DEFAULT_SIZE, DIS_DMA_MAX_VECLEN);
}

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint8_t client_pattern(size_t i) { return (uint8_t)((i * 29 + 3) ^ (i >> 9)); }
static uint8_t server_pattern(size_t i) { return (uint8_t)((i * 17 + 11) ^ (i >> 7)); }

static volatile unsigned long completions;

static sci_callback_action_t on_done(void *arg, sci_dma_queue_t dq, sci_error_t status)
{
    (void)arg;
    (void)dq;
    if (status == SCI_ERR_OK) __atomic_add_fetch(&completions, 1, __ATOMIC_RELAXED);
    return SCI_CALLBACK_CANCEL;
}

static int run_server(sci_desc_t sd, unsigned int id, size_t size, unsigned int timeout_ms)
{
    sci_error_t err;
    sci_local_segment_t seg;
    sci_map_t map;
    SCICreateSegment(sd, &seg, id, size, NULL, NULL, NO_FLAGS, &err);
    CHECK("SCICreateSegment");
    SCIPrepareSegment(seg, 0, NO_FLAGS, &err);
    CHECK("SCIPrepareSegment");
    volatile uint8_t *p = SCIMapLocalSegment(seg, &map, 0, size, NULL, NO_FLAGS, &err);
    CHECK("SCIMapLocalSegment");
    for (size_t i = 0; i < size; i++) p[i] = server_pattern(i);
    SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err);
    CHECK("SCISetSegmentAvailable");
    fprintf(stderr, "%s: segment 0x%x of %zu bytes available; waiting for a client\n", prog, id, size);

    unsigned int node = 0, adapter = 0;
    sci_segment_cb_reason_t r = SCIWaitForLocalSegmentEvent(seg, &node, &adapter, timeout_ms, NO_FLAGS, &err);
    CHECK("SCIWaitForLocalSegmentEvent (connect)");
    printf("%s: node %u connected\n", prog, node);
    fflush(stdout);
    r = SCIWaitForLocalSegmentEvent(seg, &node, &adapter, SCI_INFINITE_TIMEOUT, NO_FLAGS, &err);
    CHECK("SCIWaitForLocalSegmentEvent (disconnect)");
    if (r != SCI_CB_DISCONNECT && r != SCI_CB_LOST) {
        fprintf(stderr, "%s: unexpected segment event %d\n", prog, (int)r);
        return 3;
    }
    /* A client that exits right after disconnecting may be reported lost instead: either
     * way it is done, and the data tells whether it finished its work. */
    size_t bad = 0;
    for (size_t i = 0; i < size; i++)
        if (p[i] != client_pattern(i)) bad++;
    if (bad) {
        printf("%s: node %u disconnected; %zu of %zu bytes differ from the client's pattern\n", prog, node, bad, size);
        return 3;
    }
    printf("%s: node %u disconnected; verified %zu bytes written by DMA\n", prog, node, size);
    SCIUnmapSegment(map, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment");
    SCIRemoveSegment(seg, NO_FLAGS, &err);
    CHECK("SCIRemoveSegment");
    return 0;
}

struct opts {
    unsigned int rn, id, vec;
    size_t min, max;
    unsigned long loops;
    int read, mem, callback;
    unsigned int timeout_ms;
};

static int run_client(sci_desc_t sd, const struct opts *o)
{
    sci_error_t err;
    sci_remote_segment_t rseg;
    sci_local_segment_t lseg;
    sci_map_t lmap;
    sci_dma_queue_t dq;
    SCIConnectSegment(sd, &rseg, o->rn, o->id, 0, NULL, NULL, o->timeout_ms, NO_FLAGS, &err);
    CHECK("SCIConnectSegment");
    size_t size = SCIGetRemoteSegmentSize(rseg);
    SCICreateSegment(sd, &lseg, 0, size, NULL, NULL, SCI_FLAG_AUTO_ID, &err);
    CHECK("SCICreateSegment");
    SCIPrepareSegment(lseg, 0, NO_FLAGS, &err);
    CHECK("SCIPrepareSegment");
    volatile uint8_t *lp = SCIMapLocalSegment(lseg, &lmap, 0, size, NULL, NO_FLAGS, &err);
    CHECK("SCIMapLocalSegment");
    uint8_t *mem = malloc(size);
    if (!mem) return 1;
    for (size_t i = 0; i < size; i++) lp[i] = mem[i] = client_pattern(i);
    SCICreateDMAQueue(sd, &dq, 0, o->vec, NO_FLAGS, &err);
    CHECK("SCICreateDMAQueue");

    size_t max = o->max ? o->max : size / o->vec;
    if (max * o->vec > size) max = size / o->vec;
    if (o->min == 0 || o->min > max) {
        fprintf(stderr, "%s: no message size fits: min %zu, max %zu for %u-entry vectors in %zu bytes\n", prog,
                o->min, max, o->vec, size);
        return 1;
    }
    unsigned int flags = (o->read ? SCI_FLAG_DMA_READ : 0) | (o->callback ? SCI_FLAG_USE_CALLBACK : 0);
    unsigned int me = 0;
    SCIGetLocalNodeId(0, &me, NO_FLAGS, &err);
    CHECK("SCIGetLocalNodeId");
    printf("%s: DMA %s node %u %s %s, vector length %u\n", prog, o->read ? "read from" : "write to", o->rn,
           o->read ? "into" : "from", o->mem ? "user memory" : "a local segment", o->vec);
    printf("%12s %8s %16s %16s\n", "message", "loops", "time/vector(us)", "bandwidth(MB/s)");
    dis_dma_vec_t vec[DIS_DMA_MAX_VECLEN];
    for (size_t s = o->min; s <= max; s *= 2) {
        unsigned long n = o->loops ? o->loops : (unsigned long)((256u << 20) / (s * o->vec));
        if (!o->loops && n > 2000) n = 2000;
        if (n < 2) n = 2;
        for (unsigned int i = 0; i < o->vec; i++) {
            vec[i].size = s;
            vec[i].local_offset = i * s;
            vec[i].remote_offset = i * s;
            vec[i].flags = 0;
        }
        completions = 0;
        double t0 = now_sec();
        for (unsigned long k = 0; k < n; k++) {
            if (o->mem) {
                for (unsigned int i = 0; i < o->vec; i++) {
                    SCIStartDmaTransferMem(dq, mem + i * s, rseg, s, i * s, o->callback ? on_done : NULL, NULL, flags,
                                           &err);
                    CHECK("SCIStartDmaTransferMem");
                }
            } else if (o->vec == 1) {
                SCIStartDmaTransfer(dq, lseg, rseg, 0, s, 0, o->callback ? on_done : NULL, NULL, flags, &err);
                CHECK("SCIStartDmaTransfer");
            } else {
                SCIStartDmaTransferVec(dq, lseg, rseg, o->vec, vec, o->callback ? on_done : NULL, NULL, flags, &err);
                CHECK("SCIStartDmaTransferVec");
            }
            sci_dma_queue_state_t st = SCIWaitForDMAQueue(dq, SCI_INFINITE_TIMEOUT, NO_FLAGS, &err);
            CHECK("SCIWaitForDMAQueue");
            if (st != SCI_DMAQUEUE_DONE) {
                fprintf(stderr, "%s: the DMA queue ended in state %d\n", prog, (int)st);
                return 3;
            }
        }
        double t = now_sec() - t0;
        printf("%12zu %8lu %16.3f %16.1f\n", s, n, t / (double)n * 1e6, (double)s * o->vec * (double)n / t / 1e6);
        fflush(stdout);
        if (o->callback) {
            unsigned long want = o->mem ? n * o->vec : n;
            double w0 = now_sec();
            while (__atomic_load_n(&completions, __ATOMIC_RELAXED) < want && now_sec() - w0 < 5) {
            }
            if (completions < want) {
                fprintf(stderr, "%s: %lu of %lu completion callbacks came\n", prog, completions, want);
                return 3;
            }
        }
        if (s > max / 2) break;
    }
    if (o->read) {
        /* What was read must be the server's pattern. */
        size_t span = max * o->vec, bad = 0;
        const volatile uint8_t *src = o->mem ? (volatile uint8_t *)mem : lp;
        for (size_t i = 0; i < span; i++)
            if (src[i] != server_pattern(i)) bad++;
        if (bad) {
            fprintf(stderr, "%s: %zu of %zu bytes read differ from the server's pattern\n", prog, bad, span);
            return 3;
        }
        printf("%s: verified %zu bytes read by DMA\n", prog, span);
        for (size_t i = 0; i < size; i++) lp[i] = client_pattern(i);
    }
    /* The final image the server verifies: the whole segment in one transfer. */
    SCIStartDmaTransfer(dq, lseg, rseg, 0, size, 0, NULL, NULL, SCI_FLAG_DMA_WAIT, &err);
    CHECK("SCIStartDmaTransfer (final)");

    SCIRemoveDMAQueue(dq, NO_FLAGS, &err);
    CHECK("SCIRemoveDMAQueue");
    SCIUnmapSegment(lmap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment");
    SCIRemoveSegment(lseg, NO_FLAGS, &err);
    CHECK("SCIRemoveSegment");
    SCIDisconnectSegment(rseg, NO_FLAGS, &err);
    CHECK("SCIDisconnectSegment");
    free(mem);
    return 0;
}

int main(int argc, char **argv)
{
    int server = 0, client = 0;
    size_t size = DEFAULT_SIZE;
    double timeout = 30;
    struct opts o;
    memset(&o, 0, sizeof o);
    o.id = DEFAULT_SEGMENT_ID;
    o.vec = 1;
    o.min = 64;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "-help") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "-server")) server = 1;
        else if (!strcmp(a, "-client")) client = 1;
        else if (!strcmp(a, "-read")) o.read = 1;
        else if (!strcmp(a, "-mem")) o.mem = 1;
        else if (!strcmp(a, "-callback")) o.callback = 1;
        else if (v && !strcmp(a, "-rn")) { o.rn = (unsigned int)strtoul(v, NULL, 0); i++; }
        else if (v && !strcmp(a, "-id")) { o.id = (unsigned int)strtoul(v, NULL, 0); i++; }
        else if (v && !strcmp(a, "-size")) { if (parse_size(v, &size) || size == 0) { usage(); return 1; } i++; }
        else if (v && !strcmp(a, "-min")) { if (parse_size(v, &o.min)) { usage(); return 1; } i++; }
        else if (v && !strcmp(a, "-max")) { if (parse_size(v, &o.max)) { usage(); return 1; } i++; }
        else if (v && !strcmp(a, "-vec")) { o.vec = (unsigned int)strtoul(v, NULL, 0); i++; }
        else if (v && !strcmp(a, "-loops")) { o.loops = strtoul(v, NULL, 0); i++; }
        else if (v && !strcmp(a, "-timeout")) { timeout = atof(v); i++; }
        else { fprintf(stderr, "%s: unknown or incomplete option %s\n", prog, a); usage(); return 1; }
    }
    if (server == client || (client && o.rn == 0) || o.vec == 0 || o.vec > DIS_DMA_MAX_VECLEN) { usage(); return 1; }
    o.timeout_ms = timeout > 0 ? (unsigned int)(timeout * 1000) : SCI_INFINITE_TIMEOUT;

    sci_error_t err;
    sci_desc_t sd;
    SCIInitialize(NO_FLAGS, &err);
    CHECK("SCIInitialize");
    SCIOpen(&sd, NO_FLAGS, &err);
    CHECK("SCIOpen");
    int rc = server ? run_server(sd, o.id, size, o.timeout_ms) : run_client(sd, &o);
    SCIClose(sd, rc ? SCI_FLAG_FORCE_REMOVE : NO_FLAGS, &err);
    CHECK("SCIClose");
    SCITerminate();
    return rc;
}
