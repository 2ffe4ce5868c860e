/* Reflective memory (SCI_FLAG_BROADCAST) through libsisci.so, checked one by one in one
 * process: each check prints "ok NAME" or "FAIL NAME ..."; the exit status is the number of
 * failures (capped). Run as one node (LANES_NODE_ID) on a private fabric (LANES_DIR): it
 * creates groups, joins its own (node DIS_BROADCAST_NODEID_GROUP_ALL), maps, DMAs, and
 * walks the error paths: a fifth group, id in use, node 252 without the flag, the flag with
 * a node id, broadcast flags on ordinary segments, a group's loss. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <sisci_api.h>
#include <sisci_error.h>
#include <sisci_types.h>
#include <dis_types.h>

#include "checks.h"

#define NO_FLAGS 0
#define GROUP 0x5246

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static volatile int lost_events, other_events;

static sci_callback_action_t remote_cb(void *arg, sci_remote_segment_t seg, sci_segment_cb_reason_t reason,
                                       sci_error_t err)
{
    (void)seg;
    (void)err;
    if (arg != (void *)0x5246) return SCI_CALLBACK_CANCEL;
    if (reason == SCI_CB_LOST) {
        __atomic_add_fetch(&lost_events, 1, __ATOMIC_RELEASE);
    } else {
        __atomic_add_fetch(&other_events, 1, __ATOMIC_RELEASE);
    }
    return SCI_CALLBACK_CONTINUE;
}

/* Waits up to 5 s for *counter to reach want. */
static int await_count(volatile int *counter, int want)
{
    double t0 = now_ms();
    while (__atomic_load_n(counter, __ATOMIC_ACQUIRE) < want) {
        if (now_ms() - t0 > 5000) return 0;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return 1;
}

int main(void)
{
    sci_error_t err;
    sci_desc_t sd;
    unsigned int me = 0, node = 0, adapter = 0;

    SCIInitialize(NO_FLAGS, &err);
    check("SCIInitialize", err, SCI_ERR_OK);
    SCIOpen(&sd, NO_FLAGS, &err);
    check("SCIOpen", err, SCI_ERR_OK);
    SCIGetLocalNodeId(0, &me, NO_FLAGS, &err);
    check("SCIGetLocalNodeId", err, SCI_ERR_OK);

    {
        unsigned int groups = 0;
        sci_query_adapter_t qa = {0, 0, SCI_Q_ADAPTER_MCAST_MAX_GROUPS, &groups};
        SCIQuery(SCI_Q_ADAPTER, &qa, NO_FLAGS, &err);
        check("SCIQuery(SCI_Q_ADAPTER_MCAST_MAX_GROUPS)", err, SCI_ERR_OK);
        truth("a fabric holds four reflective groups", groups == 4);
    }

    /* ---- creating groups ---------------------------------------------------------------- */
    sci_local_segment_t g, extra[4];
    SCICreateSegment(sd, &g, GROUP, 65536, NULL, NULL, SCI_FLAG_BROADCAST, &err);
    check("SCICreateSegment(SCI_FLAG_BROADCAST) creates a group", err, SCI_ERR_OK);
    truth("SCIGetLocalSegmentId is the group id", SCIGetLocalSegmentId(g) == GROUP);
    truth("SCIGetLocalSegmentSize is the group's size", SCIGetLocalSegmentSize(g) == 65536);
    SCIPrepareSegment(g, 0, SCI_FLAG_BROADCAST, &err);
    check("SCIPrepareSegment(SCI_FLAG_BROADCAST) on a group", err, SCI_ERR_OK);
    SCISetSegmentAvailable(g, 0, NO_FLAGS, &err);
    check("SCISetSegmentAvailable on a group", err, SCI_ERR_OK);
    SCISetSegmentAvailable(g, 0, SCI_FLAG_BROADCAST, &err);
    check("SCISetSegmentAvailable(SCI_FLAG_BROADCAST), again", err, SCI_ERR_OK);
    SCIShareSegment(g, NO_FLAGS, &err);
    check("SCIShareSegment on a group", err, SCI_ERR_ILLEGAL_OPERATION);

    /* As on the vendor's hardware, every receiver creates the group's segment with its id: a
     * second create of the same id is one more receiver of the same group (its copy is the
     * group's), not an error. */
    SCICreateSegment(sd, &extra[0], GROUP, 4096, NULL, NULL, SCI_FLAG_BROADCAST, &err);
    check("a second group with the same id", err, SCI_ERR_OK);
    truth("is a receiver of the same group", SCIGetLocalSegmentId(extra[0]) == GROUP);
    SCIRemoveSegment(extra[0], NO_FLAGS, &err);
    check("the second receiver removed", err, SCI_ERR_OK);
    SCICreateSegment(sd, &extra[0], GROUP, 1 << 20, NULL, NULL, SCI_FLAG_BROADCAST, &err);
    check("a receiver larger than the group", err, SCI_ERR_ILLEGAL_PARAMETER);
    SCICreateSegment(sd, &extra[0], GROUP + 1, 4096, NULL, NULL, SCI_FLAG_BROADCAST | SCI_FLAG_EMPTY, &err);
    check("SCI_FLAG_BROADCAST | SCI_FLAG_EMPTY", err, SCI_ERR_ILLEGAL_FLAG);
    SCICreateSegment(sd, &extra[0], GROUP + 1, 4096, NULL, NULL, SCI_FLAG_BROADCAST | SCI_FLAG_PRIVATE, &err);
    check("SCI_FLAG_BROADCAST | SCI_FLAG_PRIVATE", err, SCI_ERR_ILLEGAL_FLAG);
    SCICreateSegment(sd, &extra[0], GROUP + 1, 0, NULL, NULL, SCI_FLAG_BROADCAST, &err);
    check("a group of size 0", err, SCI_ERR_ILLEGAL_PARAMETER);

    SCICreateSegment(sd, &extra[0], 0, 4096, NULL, NULL, SCI_FLAG_BROADCAST | SCI_FLAG_AUTO_ID, &err);
    check("SCI_FLAG_BROADCAST | SCI_FLAG_AUTO_ID", err, SCI_ERR_OK);
    unsigned int auto_id = SCIGetLocalSegmentId(extra[0]);
    truth("an automatic group id is chosen", auto_id != 0 && auto_id != GROUP);
    SCICreateSegment(sd, &extra[1], GROUP + 2, 4096, NULL, NULL, SCI_FLAG_BROADCAST, &err);
    check("a third group", err, SCI_ERR_OK);
    SCICreateSegment(sd, &extra[2], GROUP + 3, 4096, NULL, NULL, SCI_FLAG_BROADCAST, &err);
    check("a fourth group", err, SCI_ERR_OK);
    SCICreateSegment(sd, &extra[3], GROUP + 4, 4096, NULL, NULL, SCI_FLAG_BROADCAST, &err);
    check("a fifth group is refused: SCI_ERR_NOSPC", err, SCI_ERR_NOSPC);
    SCICreateSegment(sd, &extra[3], 0, 4096, NULL, NULL, SCI_FLAG_BROADCAST | SCI_FLAG_AUTO_ID, &err);
    check("a fifth group with an automatic id: SCI_ERR_NOSPC", err, SCI_ERR_NOSPC);
    {
        sci_local_segment_t plain;
        SCICreateSegment(sd, &plain, GROUP + 4, 4096, NULL, NULL, NO_FLAGS, &err);
        check("ordinary segments are not limited by groups", err, SCI_ERR_OK);
        SCIRemoveSegment(plain, NO_FLAGS, &err);
    }
    SCIRemoveSegment(extra[2], NO_FLAGS, &err);
    check("SCIRemoveSegment of a group", err, SCI_ERR_OK);
    SCICreateSegment(sd, &extra[2], GROUP + 4, 4096, NULL, NULL, SCI_FLAG_BROADCAST, &err);
    check("a group fits again after one was removed", err, SCI_ERR_OK);
    SCIRemoveSegment(extra[2], NO_FLAGS, &err);
    SCIRemoveSegment(extra[1], NO_FLAGS, &err);
    SCIRemoveSegment(extra[0], NO_FLAGS, &err);
    check("groups removed", err, SCI_ERR_OK);

    /* ---- connecting ----------------------------------------------------------------------- */
    sci_remote_segment_t m, bad;
    SCIConnectSegment(sd, &bad, DIS_BROADCAST_NODEID_GROUP_ALL, GROUP, 0, NULL, NULL, 0, NO_FLAGS, &err);
    check("node 252 without SCI_FLAG_BROADCAST: SCI_ERR_ILLEGAL_NODEID", err, SCI_ERR_ILLEGAL_NODEID);
    SCIConnectSegment(sd, &bad, me, GROUP, 0, NULL, NULL, 0, SCI_FLAG_BROADCAST, &err);
    check("SCI_FLAG_BROADCAST with a node id: SCI_ERR_ILLEGAL_NODEID", err, SCI_ERR_ILLEGAL_NODEID);
    SCIConnectSegment(sd, &bad, DIS_BROADCAST_NODEID_GROUP_ALL, 0x7777, 0, NULL, NULL, 0, SCI_FLAG_BROADCAST, &err);
    check("joining an absent group: SCI_ERR_NO_SUCH_SEGMENT", err, SCI_ERR_NO_SUCH_SEGMENT);
    double t0 = now_ms();
    SCIConnectSegment(sd, &bad, DIS_BROADCAST_NODEID_GROUP_ALL, 0x7777, 0, NULL, NULL, 200, SCI_FLAG_BROADCAST, &err);
    check("joining an absent group with a timeout: SCI_ERR_TIMEOUT", err, SCI_ERR_TIMEOUT);
    truth("the timeout was waited", now_ms() - t0 >= 150);
    SCIConnectSegment(sd, &m, DIS_BROADCAST_NODEID_GROUP_ALL, GROUP, 0, remote_cb, (void *)0x5246, 1000,
                      SCI_FLAG_BROADCAST | SCI_FLAG_USE_CALLBACK, &err);
    check("SCIConnectSegment(DIS_BROADCAST_NODEID_GROUP_ALL, SCI_FLAG_BROADCAST) joins", err, SCI_ERR_OK);
    truth("SCIGetRemoteSegmentNodeId is DIS_BROADCAST_NODEID_GROUP_ALL",
          SCIGetRemoteSegmentNodeId(m) == DIS_BROADCAST_NODEID_GROUP_ALL);
    truth("SCIGetRemoteSegmentId is the group id", SCIGetRemoteSegmentId(m) == GROUP);
    truth("SCIGetRemoteSegmentSize is the group's size", SCIGetRemoteSegmentSize(m) == 65536);
    {
        sci_segment_cb_reason_t r = SCIWaitForLocalSegmentEvent(g, &node, &adapter, 2000, NO_FLAGS, &err);
        check("SCIWaitForLocalSegmentEvent on the group", err, SCI_ERR_OK);
        truth("the member's joining is SCI_CB_CONNECT from its node", r == SCI_CB_CONNECT && node == me);
    }

    /* ---- maps ------------------------------------------------------------------------------- */
    sci_map_t wmap, rmap, lwmap, lrmap, tmp;
    volatile uint64_t *w = SCIMapRemoteSegment(m, &wmap, 0, 65536, NULL, SCI_FLAG_BROADCAST, &err);
    check("SCIMapRemoteSegment(SCI_FLAG_BROADCAST): the multicast address", err, SCI_ERR_OK);
    const volatile uint64_t *r = SCIMapRemoteSegment(m, &rmap, 0, 65536, NULL, SCI_FLAG_READONLY_MAP, &err);
    check("SCIMapRemoteSegment(SCI_FLAG_READONLY_MAP): the read address", err, SCI_ERR_OK);
    volatile uint64_t *lw = SCIMapLocalSegment(g, &lwmap, 0, 65536, NULL, SCI_FLAG_BROADCAST, &err);
    check("SCIMapLocalSegment(SCI_FLAG_BROADCAST)", err, SCI_ERR_OK);
    const volatile uint64_t *lr = SCIMapLocalSegment(g, &lrmap, 0, 65536, NULL, SCI_FLAG_READONLY_MAP, &err);
    check("SCIMapLocalSegment(SCI_FLAG_READONLY_MAP)", err, SCI_ERR_OK);
    SCIMapRemoteSegment(m, &tmp, 60000, 8192, NULL, SCI_FLAG_BROADCAST, &err);
    check("a group map out of range", err, SCI_ERR_OUT_OF_RANGE);
    w[3] = 0x1122334455667788ull;
    SCIFlush(NULL, SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY);
    truth("a member's multicast store is seen by its read map", r[3] == 0x1122334455667788ull);
    truth("and by the creator's local read map", lr[3] == 0x1122334455667788ull);
    lw[5] = 42;
    truth("the creator's multicast store is seen by the member", r[5] == 42);
    {
        char msg[100], back[100];
        memset(msg, 0x3C, sizeof msg);
        SCIMemCpy(NULL, msg, wmap, 1000, sizeof msg, SCI_FLAG_ERROR_CHECK, &err);
        check("SCIMemCpy into the group", err, SCI_ERR_OK);
        SCIMemCpy(NULL, back, rmap, 1000, sizeof back, SCI_FLAG_BLOCK_READ, &err);
        check("SCIMemCpy (block read) from the read map", err, SCI_ERR_OK);
        truth("what was read is what was written", memcmp(msg, back, sizeof msg) == 0);
        SCIMemCpy(NULL, msg, rmap, 1000, sizeof msg, NO_FLAGS, &err);
        check("a write through the read map", err, SCI_ERR_ACCESS);
        sci_query_map_t qm = {rmap, SCI_Q_MAP_MAPPED_TO_LOCAL_TARGET, 7};
        SCIQuery(SCI_Q_MAP, &qm, NO_FLAGS, &err);
        truth("the read map is a local target", err == SCI_ERR_OK && qm.data == 1);
        qm.map = wmap;
        SCIQuery(SCI_Q_MAP, &qm, NO_FLAGS, &err);
        truth("the multicast map is not", err == SCI_ERR_OK && qm.data == 0);
    }

    /* ---- broadcast flags on ordinary segments ------------------------------------------- */
    sci_local_segment_t src, plain;
    sci_remote_segment_t prem;
    sci_map_t smap;
    SCICreateSegment(sd, &src, 0x600, 8192, NULL, NULL, NO_FLAGS, &err);
    SCIPrepareSegment(src, 0, NO_FLAGS, &err);
    check("an ordinary segment (DMA source)", err, SCI_ERR_OK);
    SCIPrepareSegment(src, 0, SCI_FLAG_BROADCAST, &err);
    check("SCIPrepareSegment(SCI_FLAG_BROADCAST) on an ordinary segment", err, SCI_ERR_ILLEGAL_FLAG);
    SCIMapLocalSegment(src, &tmp, 0, 4096, NULL, SCI_FLAG_BROADCAST, &err);
    check("SCIMapLocalSegment(SCI_FLAG_BROADCAST) on an ordinary segment", err, SCI_ERR_ILLEGAL_FLAG);
    SCICreateSegment(sd, &plain, 0x601, 8192, NULL, NULL, NO_FLAGS, &err);
    SCIPrepareSegment(plain, 0, NO_FLAGS, &err);
    SCISetSegmentAvailable(plain, 0, NO_FLAGS, &err);
    SCIConnectSegment(sd, &prem, me, 0x601, 0, NULL, NULL, 1000, NO_FLAGS, &err);
    check("an ordinary connection", err, SCI_ERR_OK);
    SCIMapRemoteSegment(prem, &tmp, 0, 4096, NULL, SCI_FLAG_BROADCAST, &err);
    check("SCIMapRemoteSegment(SCI_FLAG_BROADCAST) on an ordinary segment", err, SCI_ERR_ILLEGAL_FLAG);

    /* ---- DMA to the group ------------------------------------------------------------------ */
    {
        sci_dma_queue_t dq;
        volatile uint8_t *s8 = SCIMapLocalSegment(src, &smap, 0, 8192, NULL, NO_FLAGS, &err);
        const volatile uint8_t *r8 = (const volatile uint8_t *)r;
        for (int i = 0; i < 8192; i++) s8[i] = (uint8_t)(i * 5 + 3);
        SCICreateDMAQueue(sd, &dq, 0, 4, NO_FLAGS, &err);
        check("SCICreateDMAQueue", err, SCI_ERR_OK);
        SCIStartDmaTransfer(dq, src, m, 0, 8192, 16384, NULL, NULL,
                            SCI_FLAG_DMA_GLOBAL | SCI_FLAG_BROADCAST | SCI_FLAG_DMA_WAIT, &err);
        check("SCIStartDmaTransfer(SCI_FLAG_DMA_GLOBAL | SCI_FLAG_BROADCAST)", err, SCI_ERR_OK);
        int same = 1;
        for (int i = 0; i < 8192; i++) same &= r8[16384 + i] == (uint8_t)(i * 5 + 3);
        truth("the DMA reached the group (seen through the read map)", same);
        SCIStartDmaTransfer(dq, src, m, 0, 4096, 32768, NULL, NULL, SCI_FLAG_DMA_WAIT, &err);
        check("a DMA to a group's connection without the flag", err, SCI_ERR_OK);
        truth("reached the group too", r8[32768] == 3 && r8[32768 + 4095] == (uint8_t)(4095 * 5 + 3));
        SCIStartDmaTransferMem(dq, (void *)(uintptr_t)s8, m, 256, 40000, NULL, NULL,
                               SCI_FLAG_BROADCAST | SCI_FLAG_DMA_WAIT, &err);
        check("SCIStartDmaTransferMem(SCI_FLAG_BROADCAST)", err, SCI_ERR_OK);
        truth("user memory reached the group", r8[40000] == 3 && r8[40255] == (uint8_t)(255 * 5 + 3));
        SCIStartDmaTransfer(dq, src, m, 0, 4096, 0, NULL, NULL, SCI_FLAG_BROADCAST | SCI_FLAG_DMA_READ, &err);
        check("a broadcast DMA read", err, SCI_ERR_ILLEGAL_FLAG);
        SCIStartDmaTransfer(dq, src, m, 0, 4096, 63000, NULL, NULL, SCI_FLAG_DMA_GLOBAL | SCI_FLAG_BROADCAST, &err);
        check("a broadcast DMA out of range", err, SCI_ERR_OUT_OF_RANGE);
        SCIStartDmaTransfer(dq, src, prem, 0, 4096, 0, NULL, NULL, SCI_FLAG_DMA_GLOBAL | SCI_FLAG_BROADCAST, &err);
        check("a broadcast DMA to an ordinary segment", err, SCI_ERR_ILLEGAL_FLAG);
        SCIRemoveDMAQueue(dq, NO_FLAGS, &err);
        check("SCIRemoveDMAQueue", err, SCI_ERR_OK);
        SCIUnmapSegment(smap, NO_FLAGS, &err);
    }
    SCIDisconnectSegment(prem, NO_FLAGS, &err);
    SCIRemoveSegment(plain, NO_FLAGS, &err);
    SCIRemoveSegment(src, NO_FLAGS, &err);
    check("ordinary segments removed", err, SCI_ERR_OK);

    /* ---- removal and loss -------------------------------------------------------------- */
    sci_sequence_t seq;
    SCICreateMapSequence(wmap, &seq, NO_FLAGS, &err);
    check("SCICreateMapSequence on the multicast map", err, SCI_ERR_OK);
    truth("SCICheckSequence while the group lives", SCICheckSequence(seq, NO_FLAGS, &err) == SCI_SEQ_OK);
    {
        sci_error_t status;
        SCIWaitForRemoteSegmentEvent(m, &status, 0, NO_FLAGS, &err);
        check("SCIWaitForRemoteSegmentEvent while a callback is registered", err, SCI_ERR_ILLEGAL_OPERATION);
    }
    SCIUnmapSegment(lwmap, NO_FLAGS, &err);
    SCIUnmapSegment(lrmap, NO_FLAGS, &err);
    check("the creator's maps unmapped", err, SCI_ERR_OK);
    /* Removing the creator's segment without the flag would leave the group to its member
     * (tests/sdk/vendor_reflective.c); forced, it ends the group for everyone. */
    SCIRemoveSegment(g, SCI_FLAG_FORCE_REMOVE, &err);
    check("SCIRemoveSegment(SCI_FLAG_FORCE_REMOVE) of a group with a member", err, SCI_ERR_OK);
    truth("the member's callback hears SCI_CB_LOST", await_count(&lost_events, 1) && other_events == 0);
    {
        sci_error_t status;
        /* The callback ended with the loss; a wait now reports the connection gone. */
        SCIWaitForRemoteSegmentEvent(m, &status, 0, NO_FLAGS, &err);
        check("SCIWaitForRemoteSegmentEvent after the lost callback", err, SCI_ERR_NOT_CONNECTED);
    }
    truth("the member's sequence fails once the group is gone",
          SCICheckSequence(seq, NO_FLAGS, &err) == SCI_SEQ_NOT_RETRIABLE);
    SCIRemoveSequence(seq, NO_FLAGS, &err);
    SCIUnmapSegment(wmap, NO_FLAGS, &err);
    SCIUnmapSegment(rmap, NO_FLAGS, &err);
    SCIDisconnectSegment(m, NO_FLAGS, &err);
    check("SCIDisconnectSegment of a lost group", err, SCI_ERR_OK);

    /* A member without a callback: the loss is an event to wait for; leaving is one for the
     * creator. */
    SCICreateSegment(sd, &g, GROUP, 4096, NULL, NULL, SCI_FLAG_BROADCAST, &err);
    check("the group id is free again", err, SCI_ERR_OK);
    SCIConnectSegment(sd, &m, DIS_BROADCAST_NODEID_GROUP_ALL, GROUP, 0, NULL, NULL, 1000, SCI_FLAG_BROADCAST, &err);
    check("joining again", err, SCI_ERR_OK);
    SCIWaitForLocalSegmentEvent(g, &node, &adapter, 2000, NO_FLAGS, &err);
    SCIDisconnectSegment(m, NO_FLAGS, &err);
    {
        sci_segment_cb_reason_t why = SCIWaitForLocalSegmentEvent(g, &node, &adapter, 2000, NO_FLAGS, &err);
        truth("leaving is SCI_CB_DISCONNECT for the creator", err == SCI_ERR_OK && why == SCI_CB_DISCONNECT);
    }
    SCIConnectSegment(sd, &m, DIS_BROADCAST_NODEID_GROUP_ALL, GROUP, 0, NULL, NULL, 1000, SCI_FLAG_BROADCAST, &err);
    SCISetSegmentUnavailable(g, 0, NO_FLAGS, &err);
    check("SCISetSegmentUnavailable on a group", err, SCI_ERR_OK);
    {
        sci_error_t status;
        sci_segment_cb_reason_t why = SCIWaitForRemoteSegmentEvent(m, &status, 2000, NO_FLAGS, &err);
        truth("the member hears SCI_CB_NOT_OPERATIONAL", err == SCI_ERR_OK && why == SCI_CB_NOT_OPERATIONAL);
        SCIConnectSegment(sd, &bad, DIS_BROADCAST_NODEID_GROUP_ALL, GROUP, 0, NULL, NULL, 100, SCI_FLAG_BROADCAST,
                          &err);
        check("an unavailable group is not joined", err, SCI_ERR_TIMEOUT);
        SCISetSegmentAvailable(g, 0, NO_FLAGS, &err);
        why = SCIWaitForRemoteSegmentEvent(m, &status, 2000, NO_FLAGS, &err);
        truth("then SCI_CB_OPERATIONAL", err == SCI_ERR_OK && why == SCI_CB_OPERATIONAL);
        SCIRemoveSegment(g, SCI_FLAG_FORCE_REMOVE, &err);
        why = SCIWaitForRemoteSegmentEvent(m, &status, 2000, NO_FLAGS, &err);
        check("SCIWaitForRemoteSegmentEvent after the group's removal", err, SCI_ERR_OK);
        truth("the group's loss is SCI_CB_LOST", why == SCI_CB_LOST && status == SCI_ERR_NOT_CONNECTED);
    }
    SCIDisconnectSegment(m, NO_FLAGS, &err);

    /* ---- closing ------------------------------------------------------------------------ */
    SCICreateSegment(sd, &g, GROUP, 4096, NULL, NULL, SCI_FLAG_BROADCAST, &err);
    SCIConnectSegment(sd, &m, DIS_BROADCAST_NODEID_GROUP_ALL, GROUP, 0, NULL, NULL, 1000, SCI_FLAG_BROADCAST, &err);
    SCIClose(sd, SCI_FLAG_FORCE_REMOVE, &err);
    check("SCIClose(SCI_FLAG_FORCE_REMOVE) with a group and a membership", err, SCI_ERR_OK);
    SCIOpen(&sd, NO_FLAGS, &err);
    SCICreateSegment(sd, &g, GROUP, 4096, NULL, NULL, SCI_FLAG_BROADCAST, &err);
    check("closing removed the group", err, SCI_ERR_OK);
    SCIClose(sd, SCI_FLAG_FORCE_REMOVE, &err);
    SCITerminate();

    printf("%d failures\n", failures);
    return failures > 100 ? 100 : failures;
}
