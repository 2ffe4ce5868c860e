/* Plain stores to a reflective group through SCIGetMapPointer, between two nodes (meant to
 * run on two hosts of a cluster, where the group's copies are one per member process).
 *
 *   LANES_NODE_ID=8 ./group_stores -create     creates group 0x4753 and waits for a member
 *   LANES_NODE_ID=4 ./group_stores -join       joins it
 *
 * Each side stores through the pointer of its SCI_FLAG_BROADCAST map, makes the stores leave
 * with SCIFlush, and reads the other's stores from its read map:
 *   1. the creator stores a word at 0; the member sees it;
 *   2. the member stores a word at 64 through its whole-group map; the creator sees it;
 *   3. the creator stores 4 KiB of a pattern at 4096, flushes, then stores a ready word
 *      (raw stores are ordered only by barriers); the member checks every byte;
 *   4. the member stores its verdict at 128 through a map of only [128, 192); the creator
 *      reads it;
 *   5. the creator stores a word at 192 and does not flush; the member sees it anyway (stores
 *      leave by themselves soon, as they do through the hardware's mapping).
 * Exit status: 0 when every step passed, 1 on bad usage, 2 on a SISCI error, 3 on a timeout
 * or a wrong value. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sisci_api.h>
#include <sisci_error.h>
#include <sisci_types.h>
#include <dis_types.h>

#define NO_FLAGS 0
#define GROUP 0x4753
#define BYTES 16384
#define WORD_A 0x1111222233334444ULL
#define WORD_B 0x5555666677778888ULL
#define WORD_C 0x9999aaaabbbbccccULL
#define OFF_BLOCK 4096
#define BLOCK 4096
#define OFF_VERDICT 128
#define OFF_UNFLUSHED 192
#define OFF_READY 256
#define VERDICT_OK 1
#define VERDICT_BAD 2
#define TIMEOUT_S 20

static sci_error_t err;

#define CHECK(what)                                                                               \
    do {                                                                                          \
        if (err != SCI_ERR_OK) {                                                                  \
            fprintf(stderr, "group_stores: %s: %s (0x%x)\n", what, SCIGetErrorString(err), err); \
            exit(2);                                                                              \
        }                                                                                         \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t load(const volatile char *base, size_t off)
{
    return __atomic_load_n((const volatile uint64_t *)(base + off), __ATOMIC_ACQUIRE);
}

static void store(volatile char *base, size_t off, uint64_t v)
{
    *(volatile uint64_t *)(base + off) = v;
}

/* Waits until the word at `off` of `rd` is `want`; exits 3 after TIMEOUT_S. */
static void await_word(const volatile char *rd, size_t off, uint64_t want, const char *what)
{
    double until = now_s() + TIMEOUT_S;
    uint64_t v;
    while ((v = load(rd, off)) != want) {
        if (now_s() > until) {
            fprintf(stderr, "group_stores: %s: word %zu is 0x%llx, not 0x%llx, after %d s\n", what, off,
                    (unsigned long long)v, (unsigned long long)want, TIMEOUT_S);
            exit(3);
        }
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    printf("ok %s\n", what);
    fflush(stdout);
}

static uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 131 + 7);
}

static int create(sci_desc_t sd)
{
    sci_local_segment_t seg;
    sci_map_t rmap, wmap;
    SCICreateSegment(sd, &seg, GROUP, BYTES, NULL, NULL, SCI_FLAG_BROADCAST, &err);
    CHECK("SCICreateSegment(SCI_FLAG_BROADCAST)");
    SCIPrepareSegment(seg, 0, SCI_FLAG_BROADCAST, &err);
    CHECK("SCIPrepareSegment");
    SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err);
    CHECK("SCISetSegmentAvailable");
    SCIMapLocalSegment(seg, &rmap, 0, BYTES, NULL, SCI_FLAG_READONLY_MAP, &err);
    CHECK("SCIMapLocalSegment (read)");
    const volatile char *rd = SCIGetMapPointer(rmap);
    SCIMapLocalSegment(seg, &wmap, 0, BYTES, NULL, SCI_FLAG_BROADCAST, &err);
    CHECK("SCIMapLocalSegment(SCI_FLAG_BROADCAST)");
    volatile char *wr = SCIGetMapPointer(wmap);
    if (!rd || !wr) {
        fprintf(stderr, "group_stores: SCIGetMapPointer returned NULL\n");
        return 2;
    }

    unsigned int node = 0, adapter = 0;
    sci_segment_cb_reason_t why;
    do {
        why = SCIWaitForLocalSegmentEvent(seg, &node, &adapter, TIMEOUT_S * 1000, NO_FLAGS, &err);
        CHECK("SCIWaitForLocalSegmentEvent (a member joins)");
    } while (why != SCI_CB_CONNECT);
    printf("ok node %u joined\n", node);

    store(wr, 0, WORD_A);
    SCIFlush(NULL, SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY);
    await_word(rd, 64, WORD_B, "the member's store at 64 arrived");

    for (size_t i = 0; i < BLOCK; i++) wr[OFF_BLOCK + i] = pattern(i);
    SCIFlush(NULL, NO_FLAGS);
    store(wr, OFF_READY, 1);
    SCIFlush(NULL, SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY);
    double until = now_s() + TIMEOUT_S;
    while (load(rd, OFF_VERDICT) == 0 && now_s() < until) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    if (load(rd, OFF_VERDICT) != VERDICT_OK) {
        fprintf(stderr, "group_stores: the member's verdict on the block is %llu\n",
                (unsigned long long)load(rd, OFF_VERDICT));
        return 3;
    }
    printf("ok the member verified the block\n");

    store(wr, OFF_UNFLUSHED, WORD_C);
    do {
        why = SCIWaitForLocalSegmentEvent(seg, &node, &adapter, TIMEOUT_S * 1000, NO_FLAGS, &err);
        CHECK("SCIWaitForLocalSegmentEvent (the member leaves)");
    } while (why != SCI_CB_DISCONNECT && why != SCI_CB_LOST);
    printf("ok node %u left\n", node);

    SCIUnmapSegment(wmap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment (write)");
    SCIUnmapSegment(rmap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment (read)");
    SCIRemoveSegment(seg, NO_FLAGS, &err);
    CHECK("SCIRemoveSegment");
    return 0;
}

static int join(sci_desc_t sd)
{
    sci_remote_segment_t rseg;
    sci_map_t rmap, wmap, vmap;
    SCIConnectSegment(sd, &rseg, DIS_BROADCAST_NODEID_GROUP_ALL, GROUP, 0, NULL, NULL, TIMEOUT_S * 1000,
                      SCI_FLAG_BROADCAST, &err);
    CHECK("SCIConnectSegment(DIS_BROADCAST_NODEID_GROUP_ALL)");
    const volatile char *rd = SCIMapRemoteSegment(rseg, &rmap, 0, BYTES, NULL, SCI_FLAG_READONLY_MAP, &err);
    CHECK("SCIMapRemoteSegment (read)");
    SCIMapRemoteSegment(rseg, &wmap, 0, BYTES, NULL, SCI_FLAG_BROADCAST, &err);
    CHECK("SCIMapRemoteSegment(SCI_FLAG_BROADCAST)");
    volatile char *wr = SCIGetMapPointer(wmap);
    SCIMapRemoteSegment(rseg, &vmap, OFF_VERDICT, 64, NULL, SCI_FLAG_BROADCAST, &err);
    CHECK("SCIMapRemoteSegment(SCI_FLAG_BROADCAST) of 64 bytes");
    volatile char *verdict = SCIGetMapPointer(vmap);
    if (!wr || !verdict) {
        fprintf(stderr, "group_stores: SCIGetMapPointer returned NULL\n");
        return 2;
    }

    await_word(rd, 0, WORD_A, "the creator's store at 0 arrived");
    store(wr, 64, WORD_B);
    SCIFlush(NULL, SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY);

    /* The ready word follows the block's flush: once it is here, so is every byte. */
    await_word(rd, OFF_READY, 1, "the creator's block arrived");
    size_t bad = BLOCK;
    for (size_t i = 0; i < BLOCK && bad == BLOCK; i++) {
        if ((uint8_t)rd[OFF_BLOCK + i] != pattern(i)) bad = i;
    }
    store(verdict, 0, bad == BLOCK ? VERDICT_OK : VERDICT_BAD);
    SCIFlush(NULL, NO_FLAGS);
    if (bad != BLOCK) {
        fprintf(stderr, "group_stores: the block differs at byte %zu\n", bad);
        return 3;
    }
    printf("ok every byte of the block\n");

    await_word(rd, OFF_UNFLUSHED, WORD_C, "the creator's unflushed store arrived");

    SCIUnmapSegment(vmap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment (verdict)");
    SCIUnmapSegment(wmap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment (write)");
    SCIUnmapSegment(rmap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment (read)");
    SCIDisconnectSegment(rseg, NO_FLAGS, &err);
    CHECK("SCIDisconnectSegment");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "-create") && strcmp(argv[1], "-join"))) {
        fprintf(stderr, "usage: group_stores -create | -join\n");
        return 1;
    }
    sci_desc_t sd;
    SCIInitialize(NO_FLAGS, &err);
    CHECK("SCIInitialize");
    SCIOpen(&sd, NO_FLAGS, &err);
    CHECK("SCIOpen");
    int rc = strcmp(argv[1], "-create") ? join(sd) : create(sd);
    SCIClose(sd, NO_FLAGS, &err);
    CHECK("SCIClose");
    SCITerminate();
    return rc;
}
