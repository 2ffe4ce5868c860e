/*
 * scibench - PIO throughput sweep between two nodes, in the manner of the vendor's scibench2.
 *
 * The server exports a segment and waits; the client connects, maps it and, for every
 * transfer size from -min to -max (powers of two), writes the segment with SCIMemCpy (or
 * plain stores through the map with -pio) for -loops rounds, then reports the average time
 * per transfer and the throughput. At the end the client writes a known pattern; the server,
 * told by the disconnect event that the client is done, verifies it.
 *
 *   LANES_NODE_ID=8 ./scibench -server
 *   LANES_NODE_ID=4 ./scibench -client -rn 8 [-max 1M] [-loops N] [-pio]
 *
 * Exit status: 0 done, 1 usage, 2 SISCI error, 3 data mismatch, peer lost or timeout.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sisci_api.h>

#define NO_FLAGS 0
#define DEFAULT_SEGMENT_ID 0x5342
#define DEFAULT_SIZE (1024 * 1024)

static const char *prog = "scibench";
#include "common.h"

static void usage(void)
{
    printf("Usage: %s -server [-id SEGID] [-size BYTES] [-timeout S]\n"
           "       %s -client -rn NODE [-id SEGID] [-min BYTES] [-max BYTES] [-loops N] [-pio]\n"
           "PIO throughput per transfer size (scibench2 style).\n"
           "  -server        export the segment, wait for one client, verify its last write\n"
           "  -client        measure writes into the segment of node NODE (-rn)\n"
           "  -id SEGID      segment id (default 0x%x)\n"
           "  -size BYTES    segment size on the server (default %d)\n"
           "  -min/-max      smallest/largest transfer (default 4 / the segment size)\n"
           "  -loops N       transfers per size (default: about 64 MiB or 20000 per size)\n"
           "  -pio           plain memcpy through the map instead of SCIMemCpy\n"
           "  -timeout S     seconds to wait for the peer (default 30)\n"
           "  -h             this help\n",
           prog, prog, DEFAULT_SEGMENT_ID, DEFAULT_SIZE);
}

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint8_t pattern(size_t i)
{
    return (uint8_t)((i * 31 + 7) ^ (i >> 8));
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
    SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err);
    CHECK("SCISetSegmentAvailable");
    fprintf(stderr, "%s: segment 0x%x of %zu bytes available; waiting for a client\n", prog, id, size);

    unsigned int node = 0, adapter = 0;
    sci_segment_cb_reason_t r = SCIWaitForLocalSegmentEvent(seg, &node, &adapter, timeout_ms, NO_FLAGS, &err);
    CHECK("SCIWaitForLocalSegmentEvent (connect)");
    if (r != SCI_CB_CONNECT) {
        fprintf(stderr, "%s: expected a connection, got event %d\n", prog, (int)r);
        return 3;
    }
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
        if (p[i] != pattern(i)) bad++;
    if (bad) {
        printf("%s: node %u disconnected; %zu of %zu bytes differ from the pattern\n", prog, node, bad, size);
        return 3;
    }
    printf("%s: node %u disconnected; verified %zu bytes\n", prog, node, size);
    SCIUnmapSegment(map, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment");
    SCIRemoveSegment(seg, NO_FLAGS, &err);
    CHECK("SCIRemoveSegment");
    return 0;
}

static int run_client(sci_desc_t sd, unsigned int rn, unsigned int id, size_t min, size_t max, unsigned long loops,
                      int pio, unsigned int timeout_ms)
{
    sci_error_t err;
    sci_remote_segment_t seg;
    sci_map_t map;
    sci_sequence_t seq;
    SCIConnectSegment(sd, &seg, rn, id, 0, NULL, NULL, timeout_ms, NO_FLAGS, &err);
    CHECK("SCIConnectSegment");
    size_t size = SCIGetRemoteSegmentSize(seg);
    if (max == 0 || max > size) max = size;
    if (min == 0 || min > max) {
        fprintf(stderr, "%s: bad size range %zu..%zu (segment %zu bytes)\n", prog, min, max, size);
        return 1;
    }
    volatile uint8_t *p = SCIMapRemoteSegment(seg, &map, 0, size, NULL, NO_FLAGS, &err);
    CHECK("SCIMapRemoteSegment");
    SCICreateMapSequence(map, &seq, NO_FLAGS, &err);
    CHECK("SCICreateMapSequence");
    uint8_t *buf = malloc(size);
    if (!buf) return 1;
    for (size_t i = 0; i < size; i++) buf[i] = pattern(i);

    printf("%s: %s into segment 0x%x of node %u (%zu bytes)\n", prog, pio ? "memcpy" : "SCIMemCpy", id, rn, size);
    printf("%12s %10s %16s %14s\n", "size", "loops", "avg latency(us)", "throughput(MB/s)");
    for (size_t s = min; s <= max; s *= 2) {
        unsigned long n = loops ? loops : (unsigned long)((64u << 20) / s);
        if (!loops && n > 20000) n = 20000;
        if (n < 4) n = 4;
        sci_sequence_status_t st;
        do {
            st = SCIStartSequence(seq, NO_FLAGS, &err);
            CHECK("SCIStartSequence");
        } while (st == SCI_SEQ_PENDING);
        double t0 = now_sec();
        for (unsigned long i = 0; i < n; i++) {
            if (pio) {
                memcpy((void *)p, buf, s);
                SCIFlush(NULL, SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY);
            } else {
                SCIMemCpy(seq, buf, map, 0, s, NO_FLAGS, &err);
                CHECK("SCIMemCpy");
            }
        }
        double t = now_sec() - t0;
        st = SCICheckSequence(seq, NO_FLAGS, &err);
        CHECK("SCICheckSequence");
        if (st != SCI_SEQ_OK) {
            fprintf(stderr, "%s: the transfers of size %zu failed (the server is gone?)\n", prog, s);
            return 3;
        }
        printf("%12zu %10lu %16.3f %14.1f\n", s, n, t / (double)n * 1e6, (double)s * (double)n / t / 1e6);
        fflush(stdout);
        if (s > max / 2) break;
    }
    /* The final image the server verifies: the whole segment, pattern throughout. */
    SCIMemCpy(seq, buf, map, 0, size, NO_FLAGS, &err);
    CHECK("SCIMemCpy");
    SCIRemoveSequence(seq, NO_FLAGS, &err);
    CHECK("SCIRemoveSequence");
    SCIUnmapSegment(map, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment");
    SCIDisconnectSegment(seg, NO_FLAGS, &err);
    CHECK("SCIDisconnectSegment");
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int server = 0, client = 0, pio = 0;
    unsigned int rn = 0, id = DEFAULT_SEGMENT_ID;
    size_t size = DEFAULT_SIZE, min = 4, max = 0;
    unsigned long loops = 0;
    double timeout = 30;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "-help") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "-server")) server = 1;
        else if (!strcmp(a, "-client")) client = 1;
        else if (!strcmp(a, "-pio")) pio = 1;
        else if (v && !strcmp(a, "-rn")) { rn = (unsigned int)strtoul(v, NULL, 0); i++; }
        else if (v && !strcmp(a, "-id")) { id = (unsigned int)strtoul(v, NULL, 0); i++; }
        else if (v && !strcmp(a, "-size")) { if (parse_size(v, &size) || size == 0) { usage(); return 1; } i++; }
        else if (v && !strcmp(a, "-min")) { if (parse_size(v, &min)) { usage(); return 1; } i++; }
        else if (v && !strcmp(a, "-max")) { if (parse_size(v, &max)) { usage(); return 1; } i++; }
        else if (v && !strcmp(a, "-loops")) { loops = strtoul(v, NULL, 0); i++; }
        else if (v && !strcmp(a, "-timeout")) { timeout = atof(v); i++; }
        else { fprintf(stderr, "%s: unknown or incomplete option %s\n", prog, a); usage(); return 1; }
    }
    if (server == client || (client && rn == 0)) { usage(); return 1; }
    unsigned int tmo = timeout > 0 ? (unsigned int)(timeout * 1000) : SCI_INFINITE_TIMEOUT;

    sci_error_t err;
    sci_desc_t sd;
    SCIInitialize(NO_FLAGS, &err);
    CHECK("SCIInitialize");
    SCIOpen(&sd, NO_FLAGS, &err);
    CHECK("SCIOpen");
    int rc = server ? run_server(sd, id, size, tmo) : run_client(sd, rn, id, min, max, loops, pio, tmo);
    SCIClose(sd, rc ? SCI_FLAG_FORCE_REMOVE : NO_FLAGS, &err);
    CHECK("SCIClose");
    SCITerminate();
    return rc;
}
