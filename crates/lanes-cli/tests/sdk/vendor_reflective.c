/* Reflective memory set up as programs written for the vendor's hardware do it (issue 28,
 * item 1), one role per node process:
 *
 *   vendor_reflective receiver N DIR [dmaglobal]   (several, on different nodes)
 *   vendor_reflective writer NRECEIVERS DIR
 *
 * Every receiver creates a segment with SCI_FLAG_BROADCAST and the same id (the group id),
 * prepares it with SCI_FLAG_BROADCAST, maps it without flags (its local memory, where the
 * writer's stores land) and makes it available, as the vendor's reflective-memory example
 * does. The writer connects to node DIS_BROADCAST_NODEID_GROUP_ALL with the group id and
 * SCI_FLAG_BROADCAST, maps the connection WITHOUT a flag (as kritjo/DoubleClique's client
 * does) and stores through the pointer: a word, then a 4 KiB block, then a word that says
 * the block is whole. Every receiver checks every byte, then removes its segment while the
 * writer is still connected (the example's closeout), which must succeed, and leaves
 * DIR/done.N. The writer waits for all of them, then stores again through its map (the
 * group outlived the receivers' removals: nothing faults), unmaps and disconnects.
 *
 * Each check prints "ok NAME" or "FAIL NAME ..."; the exit status is the number of
 * failures (capped), and "0 failures" ends a good run. */
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

#include "checks.h"

#define NO_FLAGS 0
#define GROUP 3
#define BYTES 65536
#define MAGIC 0x5245464cu  /* "REFL" */
#define BLOCK_AT 4096
#define BLOCK 4096
#define WHOLE_AT 64
#define TIMEOUT_MS 30000

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Spins until the 32-bit word at p is v (true), or the time is up (false). */
static int await_word(const volatile uint32_t *p, uint32_t v)
{
    double end = now_ms() + TIMEOUT_MS;
    while (*p != v) {
        if (now_ms() > end) return 0;
        usleep(100);
    }
    return 1;
}

static uint8_t pattern(int i)
{
    return (uint8_t)(i * 7 + 3);
}

static int receiver(int n, const char *dir, int dmaglobal)
{
    sci_error_t err;
    sci_desc_t sd;
    sci_local_segment_t seg;
    sci_map_t map;
    SCIInitialize(NO_FLAGS, &err);
    SCIOpen(&sd, NO_FLAGS, &err);
    check("SCIOpen", err, SCI_ERR_OK);
    unsigned int create = SCI_FLAG_BROADCAST | (dmaglobal ? SCI_FLAG_DMA_GLOBAL : 0);
    SCICreateSegment(sd, &seg, GROUP, BYTES, NULL, NULL, create, &err);
    check(dmaglobal ? "SCICreateSegment(SCI_FLAG_BROADCAST | SCI_FLAG_DMA_GLOBAL) with the group id"
                    : "SCICreateSegment(SCI_FLAG_BROADCAST) with the group id",
          err, SCI_ERR_OK);
    if (err != SCI_ERR_OK) return finish();
    truth("the segment id is the group id", SCIGetLocalSegmentId(seg) == GROUP);
    SCIPrepareSegment(seg, 0, SCI_FLAG_BROADCAST, &err);
    check("SCIPrepareSegment(SCI_FLAG_BROADCAST)", err, SCI_ERR_OK);
    const volatile uint8_t *rd = SCIMapLocalSegment(seg, &map, 0, BYTES, NULL, NO_FLAGS, &err);
    check("SCIMapLocalSegment without flags (the receiver's memory)", err, SCI_ERR_OK);
    SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err);
    check("SCISetSegmentAvailable", err, SCI_ERR_OK);
    printf("receiver %d ready\n", n);
    fflush(stdout);

    const volatile uint32_t *w = (const volatile uint32_t *)rd;
    truth("the writer's first store arrived", await_word(&w[0], MAGIC));
    truth("the writer's block is whole", await_word(&w[WHOLE_AT / 4], MAGIC + 1));
    int same = 1;
    for (int i = 0; i < BLOCK; i++) same &= rd[BLOCK_AT + i] == pattern(i);
    truth("every byte of the block", same);

    /* The vendor example's closeout: unmap, then remove, while the writer (and maybe other
     * receivers) are still connected to the group. */
    SCIUnmapSegment(map, NO_FLAGS, &err);
    check("SCIUnmapSegment", err, SCI_ERR_OK);
    SCIRemoveSegment(seg, NO_FLAGS, &err);
    check("SCIRemoveSegment while the writer is connected", err, SCI_ERR_OK);
    SCIClose(sd, NO_FLAGS, &err);
    check("SCIClose", err, SCI_ERR_OK);
    SCITerminate();

    char path[4096];
    snprintf(path, sizeof path, "%s/done.%d", dir, n);
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
    return finish();
}

static int writer(int receivers, const char *dir)
{
    sci_error_t err;
    sci_desc_t sd;
    sci_remote_segment_t rseg;
    sci_map_t map;
    SCIInitialize(NO_FLAGS, &err);
    SCIOpen(&sd, NO_FLAGS, &err);
    check("SCIOpen", err, SCI_ERR_OK);
    SCIConnectSegment(sd, &rseg, DIS_BROADCAST_NODEID_GROUP_ALL, GROUP, 0, NULL, NULL, TIMEOUT_MS,
                      SCI_FLAG_BROADCAST, &err);
    check("SCIConnectSegment(DIS_BROADCAST_NODEID_GROUP_ALL, SCI_FLAG_BROADCAST)", err, SCI_ERR_OK);
    if (err != SCI_ERR_OK) return finish();
    truth("SCIGetRemoteSegmentNodeId is DIS_BROADCAST_NODEID_GROUP_ALL",
          SCIGetRemoteSegmentNodeId(rseg) == DIS_BROADCAST_NODEID_GROUP_ALL);
    /* Wait until every receiver has its segment (they print "ready"; the test starts the
     * writer after that), then map without a flag and store. */
    volatile uint8_t *wr = SCIMapRemoteSegment(rseg, &map, 0, BYTES, NULL, NO_FLAGS, &err);
    check("SCIMapRemoteSegment without a flag", err, SCI_ERR_OK);
    if (err != SCI_ERR_OK) return finish();
    volatile uint32_t *w = (volatile uint32_t *)wr;
    w[0] = MAGIC; /* the first store: a read-only map would fault here */
    for (int i = 0; i < BLOCK; i++) wr[BLOCK_AT + i] = pattern(i);
    SCIFlush(NULL, NO_FLAGS);
    w[WHOLE_AT / 4] = MAGIC + 1;
    SCIFlush(NULL, NO_FLAGS);
    truth("stores through the unflagged map of the group", 1);

    /* Every receiver removes its segment while this connection exists. */
    double end = now_ms() + TIMEOUT_MS;
    int done = 0;
    while (done < receivers && now_ms() < end) {
        done = 0;
        for (int n = 1; n <= receivers; n++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/done.%d", dir, n);
            done += access(path, F_OK) == 0;
        }
        usleep(2000);
    }
    truth("every receiver removed its segment", done == receivers);
    w[1] = MAGIC + 2; /* the map still works after the receivers' removals */
    SCIFlush(NULL, NO_FLAGS);
    truth("a store after the receivers left", 1);
    SCIUnmapSegment(map, NO_FLAGS, &err);
    check("SCIUnmapSegment", err, SCI_ERR_OK);
    SCIDisconnectSegment(rseg, NO_FLAGS, &err);
    check("SCIDisconnectSegment", err, SCI_ERR_OK);
    SCIClose(sd, NO_FLAGS, &err);
    check("SCIClose", err, SCI_ERR_OK);
    SCITerminate();
    return finish();
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 4 && strcmp(argv[1], "receiver") == 0)
        return receiver(atoi(argv[2]), argv[3], argc > 4 && strcmp(argv[4], "dmaglobal") == 0);
    if (argc == 4 && strcmp(argv[1], "writer") == 0) return writer(atoi(argv[2]), argv[3]);
    fprintf(stderr, "usage: %s receiver N DIR [dmaglobal] | writer NRECEIVERS DIR\n", argv[0]);
    return 1;
}
