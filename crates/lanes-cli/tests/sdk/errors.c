/* Error paths and edge cases of libsisci.so, checked one by one: each check prints
 * "ok NAME" or "FAIL NAME ..."; the exit status is the number of failures (capped).
 * Run as one node (LANES_NODE_ID); it connects to its own segments and interrupts. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sisci_api.h>
#include <sisci_error.h>
#include <sisci_types.h>
#include <dis_types.h>

#include "checks.h"

#define NO_FLAGS 0

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
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

/* Case labels need constant expressions: the headers' constants are. */
static const char *classify(sci_error_t e)
{
    switch (e) {
    case SCI_ERR_OK: return "ok";
    case SCI_ERR_TIMEOUT: return "timeout";
    case SCI_ERR_NO_SUCH_SEGMENT: return "no such segment";
    default: return "other";
    }
}

static unsigned int me;

/* ---- callbacks ---------------------------------------------------------------------- */

static volatile int local_connects, local_disconnects, local_node_ok;

static sci_callback_action_t local_cb(void *arg, sci_local_segment_t seg, sci_segment_cb_reason_t reason,
                                      unsigned int node, unsigned int adapter, sci_error_t err)
{
    (void)arg;
    (void)adapter;
    if (err != SCI_ERR_OK || SCIGetLocalSegmentId(seg) != 0x400) return SCI_CALLBACK_CANCEL;
    if (reason == SCI_CB_CONNECT) {
        if (node == me) local_node_ok = 1;
        __atomic_add_fetch(&local_connects, 1, __ATOMIC_RELEASE);
    } else if (reason == SCI_CB_DISCONNECT || reason == SCI_CB_LOST) {
        __atomic_add_fetch(&local_disconnects, 1, __ATOMIC_RELEASE);
        return SCI_CALLBACK_CANCEL;
    }
    return SCI_CALLBACK_CONTINUE;
}

static volatile int remote_events[6];

static sci_callback_action_t remote_cb(void *arg, sci_remote_segment_t seg, sci_segment_cb_reason_t reason,
                                       sci_error_t err)
{
    (void)seg;
    (void)err;
    if (arg != (void *)0x1234) return SCI_CALLBACK_CANCEL;
    if (reason >= 1 && reason <= 5) __atomic_add_fetch(&remote_events[reason], 1, __ATOMIC_RELEASE);
    return SCI_CALLBACK_CONTINUE;
}

static volatile int interrupts_seen;

static sci_callback_action_t interrupt_cb(void *arg, sci_local_interrupt_t irq, sci_error_t err)
{
    (void)arg;
    (void)irq;
    if (err == SCI_ERR_OK) __atomic_add_fetch(&interrupts_seen, 1, __ATOMIC_RELEASE);
    return SCI_CALLBACK_CONTINUE;
}

static volatile int data_seen;
static char data_got[64];

static sci_callback_action_t data_cb(void *arg, sci_local_data_interrupt_t irq, void *data, unsigned int len,
                                     sci_error_t err)
{
    (void)arg;
    (void)irq;
    if (err == SCI_ERR_OK && len < sizeof data_got) {
        memcpy(data_got, data, len);
        __atomic_add_fetch(&data_seen, 1, __ATOMIC_RELEASE);
    }
    return SCI_CALLBACK_CANCEL;
}

static volatile int dma_done;
static volatile sci_error_t dma_status = SCI_ERR_SYSTEM;

static sci_callback_action_t dma_cb(void *arg, sci_dma_queue_t dq, sci_error_t status)
{
    (void)arg;
    dma_status = status;
    if (SCIDMAQueueState(dq) == SCI_DMAQUEUE_DONE) __atomic_add_fetch(&dma_done, 1, __ATOMIC_RELEASE);
    return SCI_CALLBACK_CANCEL;
}

/* A DMA completion callback that starts the next transfer, five times over. */
struct chain {
    sci_dma_queue_t dq;
    sci_local_segment_t local;
    sci_remote_segment_t remote;
    volatile int links;
    volatile int failed;
};

static sci_callback_action_t chain_cb(void *arg, sci_dma_queue_t dq, sci_error_t status)
{
    struct chain *c = arg;
    sci_error_t err;
    (void)dq;
    if (status != SCI_ERR_OK) {
        c->failed = 1;
        return SCI_CALLBACK_CANCEL;
    }
    int n = __atomic_add_fetch(&c->links, 1, __ATOMIC_ACQ_REL);
    if (n < 5) {
        SCIStartDmaTransfer(c->dq, c->local, c->remote, 0, 1024, (size_t)n * 1024, chain_cb, c, SCI_FLAG_USE_CALLBACK,
                            &err);
        if (err != SCI_ERR_OK) c->failed = 1;
    }
    return SCI_CALLBACK_CANCEL;
}

/* ---- a waiter cancelled by removal --------------------------------------------------- */

struct waiter {
    sci_local_interrupt_t irq;
    sci_error_t err;
};

static void *wait_thread(void *p)
{
    struct waiter *w = p;
    SCIWaitForInterrupt(w->irq, 10000, NO_FLAGS, &w->err);
    return NULL;
}

/* ---- threads hammering the library -------------------------------------------------- */

struct worker {
    sci_desc_t sd;
    int errors;
};

static void *worker(void *p)
{
    struct worker *w = p;
    sci_error_t err;
    for (int i = 0; i < 40; i++) {
        sci_local_segment_t seg;
        sci_remote_segment_t rseg;
        sci_map_t map;
        SCICreateSegment(w->sd, &seg, 0, 4096, NULL, NULL, SCI_FLAG_AUTO_ID, &err);
        if (err != SCI_ERR_OK) { w->errors++; continue; }
        unsigned int id = SCIGetLocalSegmentId(seg);
        SCIPrepareSegment(seg, 0, NO_FLAGS, &err);
        w->errors += err != SCI_ERR_OK;
        SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err);
        w->errors += err != SCI_ERR_OK;
        SCIConnectSegment(w->sd, &rseg, me, id, 0, NULL, NULL, 1000, NO_FLAGS, &err);
        if (err == SCI_ERR_OK) {
            volatile uint32_t *p32 = SCIMapRemoteSegment(rseg, &map, 0, 4096, NULL, NO_FLAGS, &err);
            if (err == SCI_ERR_OK) {
                p32[7] = (uint32_t)i;
                SCIUnmapSegment(map, NO_FLAGS, &err);
                w->errors += err != SCI_ERR_OK;
            } else {
                w->errors++;
            }
            SCIDisconnectSegment(rseg, NO_FLAGS, &err);
            w->errors += err != SCI_ERR_OK;
        } else {
            w->errors++;
        }
        SCIRemoveSegment(seg, NO_FLAGS, &err);
        w->errors += err != SCI_ERR_OK;
        /* Garbage and stale handles on the side: refused, never dereferenced. */
        SCIPrepareSegment(seg, 0, NO_FLAGS, &err);
        w->errors += err != SCI_ERR_ILLEGAL_PARAMETER;
        SCITriggerInterrupt((sci_remote_interrupt_t)(uintptr_t)(0x1000 + i * 8), NO_FLAGS, &err);
        w->errors += err != SCI_ERR_ILLEGAL_PARAMETER;
    }
    return NULL;
}

int main(void)
{
    sci_error_t err;
    sci_desc_t sd = NULL;

    /* ---- constants -------------------------------------------------------------------- */
    truth("SCI_ERR_OK is 0", SCI_ERR_OK == 0);
    truth("SCI_ERR_TIMEOUT is 0x4000090A", SCI_ERR_TIMEOUT == 0x4000090A);
    truth("SCI_ERR_NO_SUCH_NODEID is 0x40000A00", SCI_ERR_NO_SUCH_NODEID == 0x40000A00);
    truth("SCI_ERR_TRANSFER_FAILED is 0x40000A06", SCI_ERR_TRANSFER_FAILED == 0x40000A06);
    truth("SCI_INFINITE_TIMEOUT", SCI_INFINITE_TIMEOUT == 0xFFFFFFFFu);
    truth("constants in case labels", !strcmp(classify(SCI_ERR_TIMEOUT), "timeout"));

    /* ---- library ---------------------------------------------------------------------- */
    SCIOpen(&sd, NO_FLAGS, &err);
    check("SCIOpen before SCIInitialize", err, SCI_ERR_NOT_INITIALIZED);
    SCIInitialize(0x80, &err);
    check("SCIInitialize with a bad flag", err, SCI_ERR_ILLEGAL_FLAG);
    SCIInitialize(NO_FLAGS, &err);
    check("SCIInitialize", err, SCI_ERR_OK);
    SCIOpen(NULL, NO_FLAGS, &err);
    check("SCIOpen(NULL)", err, SCI_ERR_ILLEGAL_PARAMETER);
    SCIOpen(&sd, NO_FLAGS, &err);
    check("SCIOpen", err, SCI_ERR_OK);
    SCIGetLocalNodeId(0, &me, NO_FLAGS, &err);
    check("SCIGetLocalNodeId", err, SCI_ERR_OK);
    SCIGetLocalNodeId(1, &me, NO_FLAGS, &err);
    check("SCIGetLocalNodeId on adapter 1", err, SCI_ERR_NO_SUCH_ADAPTERNO);
    SCIGetLocalNodeId(0, NULL, NO_FLAGS, &err);
    check("SCIGetLocalNodeId(NULL)", err, SCI_ERR_ILLEGAL_PARAMETER);

    /* ---- error strings ------------------------------------------------------------------ */
    {
        sci_error_t codes[] = {SCI_ERR_OK, SCI_ERR_BUSY, SCI_ERR_TIMEOUT, SCI_ERR_NO_SUCH_SEGMENT,
                               SCI_ERR_NOT_SUPPORTED, SCI_ERR_NO_SUCH_INTNO, SCI_ERR_TRANSFER_FAILED,
                               SCI_ERR_NO_SUCH_NODEID, (sci_error_t)0x12345};
        int good = 1;
        for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
            const char *a = SCIGetErrorString(codes[i]), *b = SCIGetErrorString(codes[i]);
            good &= a != NULL && a[0] != '\0' && a == b;
        }
        good &= strcmp(SCIGetErrorString(SCI_ERR_BUSY), SCIGetErrorString(SCI_ERR_TIMEOUT)) != 0;
        truth("SCIGetErrorString: stable, distinct, never NULL", good);
    }

    /* ---- bad handles and pointers ------------------------------------------------------- */
    int on_stack = 0;
    SCIClose((sci_desc_t)&on_stack, NO_FLAGS, &err);
    check("SCIClose(garbage)", err, SCI_ERR_ILLEGAL_PARAMETER);
    SCIClose(NULL, NO_FLAGS, &err);
    check("SCIClose(NULL)", err, SCI_ERR_ILLEGAL_PARAMETER);
    SCIPrepareSegment((sci_local_segment_t)0x1000, 0, NO_FLAGS, &err);
    check("SCIPrepareSegment(garbage)", err, SCI_ERR_ILLEGAL_PARAMETER);
    SCIPrepareSegment((sci_local_segment_t)sd, 0, NO_FLAGS, &err);
    check("a descriptor passed as a segment", err, SCI_ERR_ILLEGAL_PARAMETER);
    SCIPrepareSegment(NULL, 0, NO_FLAGS, NULL); /* NULL error pointer: must not crash */
    truth("calls with a NULL error pointer return", 1);
    truth("SCIGetLocalSegmentSize(garbage) is 0", SCIGetLocalSegmentSize((sci_local_segment_t)&on_stack) == 0);
    truth("SCIGetMapPointer(garbage) is NULL", SCIGetMapPointer((sci_map_t)&on_stack) == NULL);
    truth("SCIDMAQueueState(garbage) is ERROR", SCIDMAQueueState((sci_dma_queue_t)&on_stack) == SCI_DMAQUEUE_ERROR);
    SCIStoreBarrier((sci_sequence_t)&on_stack, 0);
    SCIFlush(NULL, SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY);
    truth("SCIFlush(NULL, SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY)", 1);

    /* ---- segments ----------------------------------------------------------------------- */
    sci_local_segment_t seg, seg2;
    SCICreateSegment(sd, &seg, 0x100, 8192, NULL, NULL, NO_FLAGS, &err);
    check("SCICreateSegment", err, SCI_ERR_OK);
    SCICreateSegment(sd, &seg2, 0x100, 8192, NULL, NULL, NO_FLAGS, &err);
    check("SCICreateSegment: id in use", err, SCI_ERR_SEGMENTID_USED);
    SCICreateSegment(sd, &seg2, 0x101, 0, NULL, NULL, NO_FLAGS, &err);
    check("SCICreateSegment: size 0", err, SCI_ERR_ILLEGAL_PARAMETER);
    SCICreateSegment(sd, &seg2, 0x101, 4096, NULL, NULL, 0x4000000, &err);
    check("SCICreateSegment: unknown flag", err, SCI_ERR_ILLEGAL_FLAG);
    SCICreateSegment(sd, &seg2, 0x101, 4096, NULL, NULL, SCI_FLAG_BROADCAST | SCI_FLAG_EMPTY, &err);
    check("SCICreateSegment: SCI_FLAG_BROADCAST | SCI_FLAG_EMPTY", err, SCI_ERR_ILLEGAL_FLAG);
    SCICreateSegment(sd, NULL, 0x101, 4096, NULL, NULL, NO_FLAGS, &err);
    check("SCICreateSegment(NULL handle)", err, SCI_ERR_ILLEGAL_PARAMETER);
    SCICreateSegment(sd, &seg2, 0, 4096, NULL, NULL, SCI_FLAG_AUTO_ID, &err);
    check("SCICreateSegment: SCI_FLAG_AUTO_ID", err, SCI_ERR_OK);
    truth("automatic ids are chosen", SCIGetLocalSegmentId(seg2) != 0);
    SCIRemoveSegment(seg2, NO_FLAGS, &err);
    check("SCIRemoveSegment", err, SCI_ERR_OK);
    SCIRemoveSegment(seg2, NO_FLAGS, &err);
    check("SCIRemoveSegment twice (stale handle)", err, SCI_ERR_ILLEGAL_PARAMETER);
    truth("SCIGetLocalSegmentSize", SCIGetLocalSegmentSize(seg) == 8192);
    truth("SCIGetLocalSegmentId", SCIGetLocalSegmentId(seg) == 0x100);

    SCIPrepareSegment(seg, 1, NO_FLAGS, &err);
    check("SCIPrepareSegment on adapter 1", err, SCI_ERR_NO_SUCH_ADAPTERNO);
    SCIPrepareSegment(seg, 99, NO_FLAGS, &err);
    check("SCIPrepareSegment on adapter 99", err, SCI_ERR_ILLEGAL_ADAPTERNO);
    SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err);
    check("SCISetSegmentAvailable before prepare", err, SCI_ERR_SEGMENT_NOT_PREPARED);

    sci_remote_segment_t rseg;
    SCIConnectSegment(sd, &rseg, me, 0x100, 0, NULL, NULL, 0, NO_FLAGS, &err);
    check("SCIConnectSegment: not available", err, SCI_ERR_CONNECTION_REFUSED);
    SCIPrepareSegment(seg, 0, NO_FLAGS, &err);
    check("SCIPrepareSegment", err, SCI_ERR_OK);
    SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err);
    check("SCISetSegmentAvailable", err, SCI_ERR_OK);
    SCIConnectSegment(sd, &rseg, me, 0x999, 0, NULL, NULL, 0, NO_FLAGS, &err);
    check("SCIConnectSegment: no such segment", err, SCI_ERR_NO_SUCH_SEGMENT);
    double t0 = now_ms();
    SCIConnectSegment(sd, &rseg, me, 0x999, 0, NULL, NULL, 200, NO_FLAGS, &err);
    check("SCIConnectSegment: timeout", err, SCI_ERR_TIMEOUT);
    truth("the timeout was waited", now_ms() - t0 >= 150);
    SCIConnectSegment(sd, &rseg, 6, 0x100, 0, NULL, NULL, 0, NO_FLAGS, &err);
    check("SCIConnectSegment: node id 6", err, SCI_ERR_ILLEGAL_NODEID);
    SCIConnectSegment(sd, &rseg, 64, 0x100, 0, NULL, NULL, 0, NO_FLAGS, &err);
    check("SCIConnectSegment: absent node 64", err, SCI_ERR_NO_SUCH_NODEID);
    SCIConnectSegment(sd, &rseg, DIS_BROADCAST_NODEID_GROUP_ALL, 0x100, 0, NULL, NULL, 0, NO_FLAGS, &err);
    check("SCIConnectSegment: node 252 without SCI_FLAG_BROADCAST", err, SCI_ERR_ILLEGAL_NODEID);
    SCIConnectSegment(sd, &rseg, me, 0x100, 0, NULL, NULL, SCI_INFINITE_TIMEOUT, NO_FLAGS, &err);
    check("SCIConnectSegment", err, SCI_ERR_OK);
    truth("SCIGetRemoteSegmentSize", SCIGetRemoteSegmentSize(rseg) == 8192);
    truth("SCIGetRemoteSegmentId", SCIGetRemoteSegmentId(rseg) == 0x100);
    truth("SCIGetRemoteSegmentNodeId", SCIGetRemoteSegmentNodeId(rseg) == me);
    truth("SCIProbeNode(own node)", SCIProbeNode(sd, 0, me, NO_FLAGS, &err) == 1 && err == SCI_ERR_OK);
    truth("SCIProbeNode(absent node)", SCIProbeNode(sd, 0, 64, NO_FLAGS, &err) == 0);
    check("SCIProbeNode(absent node) error", err, SCI_ERR_NO_REMOTE_LINK_ACCESS);
    SCIProbeNode(sd, 0, 7, NO_FLAGS, &err);
    check("SCIProbeNode(node 7)", err, SCI_ERR_ILLEGAL_NODEID);

    /* ---- maps, copies, sequences -------------------------------------------------------- */
    sci_map_t rmap, lmap, tmp;
    SCIMapRemoteSegment(rseg, &tmp, 4096, 8192, NULL, NO_FLAGS, &err);
    check("SCIMapRemoteSegment: out of range", err, SCI_ERR_OUT_OF_RANGE);
    SCIMapRemoteSegment(rseg, &tmp, 0, 0, NULL, NO_FLAGS, &err);
    check("SCIMapRemoteSegment: size 0", err, SCI_ERR_ILLEGAL_PARAMETER);
    SCIMapRemoteSegment(rseg, &tmp, 0, 4096, NULL, SCI_FLAG_FIXED_MAP_ADDR, &err);
    check("SCIMapRemoteSegment: SCI_FLAG_FIXED_MAP_ADDR", err, SCI_ERR_FLAG_NOT_IMPLEMENTED);
    SCIMapRemoteSegment(rseg, NULL, 0, 4096, NULL, NO_FLAGS, &err);
    check("SCIMapRemoteSegment(NULL map)", err, SCI_ERR_ILLEGAL_PARAMETER);
    volatile uint8_t *rp = SCIMapRemoteSegment(rseg, &rmap, 0, 8192, NULL, NO_FLAGS, &err);
    check("SCIMapRemoteSegment", err, SCI_ERR_OK);
    const volatile uint8_t *lp = SCIMapLocalSegment(seg, &lmap, 0, 8192, NULL, SCI_FLAG_READONLY_MAP, &err);
    check("SCIMapLocalSegment (read-only)", err, SCI_ERR_OK);
    truth("SCIGetMapPointer", SCIGetMapPointer(rmap) == rp);
    rp[10] = 42;
    SCIFlush(NULL, SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY);
    truth("a store through the remote map reaches the segment", lp[10] == 42);

    char buf[8192], back[8192];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (char)(i * 7);
    SCIMemCpy(NULL, buf, rmap, 8000, 1000, NO_FLAGS, &err);
    check("SCIMemCpy: out of range", err, SCI_ERR_OUT_OF_RANGE);
    SCIMemCpy(NULL, NULL, rmap, 0, 100, NO_FLAGS, &err);
    check("SCIMemCpy(NULL buffer)", err, SCI_ERR_ILLEGAL_PARAMETER);
    sci_sequence_t seq;
    SCICreateMapSequence(rmap, &seq, NO_FLAGS, &err);
    check("SCICreateMapSequence", err, SCI_ERR_OK);
    truth("SCIStartSequence", SCIStartSequence(seq, NO_FLAGS, &err) == SCI_SEQ_OK && err == SCI_ERR_OK);
    SCIMemCpy(seq, buf, rmap, 0, sizeof buf, NO_FLAGS, &err);
    check("SCIMemCpy", err, SCI_ERR_OK);
    memset(back, 0, sizeof back);
    SCIMemCpy(seq, back, rmap, 0, sizeof back, SCI_FLAG_BLOCK_READ, &err);
    check("SCIMemCpy with SCI_FLAG_BLOCK_READ", err, SCI_ERR_OK);
    truth("what was read is what was written", memcmp(buf, back, sizeof buf) == 0);
    truth("SCICheckSequence", SCICheckSequence(seq, NO_FLAGS, &err) == SCI_SEQ_OK && err == SCI_ERR_OK);
    SCIStoreBarrier(seq, NO_FLAGS);
    SCIMemWrite(buf, (volatile void *)(rp + 100), 50, NO_FLAGS, &err);
    check("SCIMemWrite", err, SCI_ERR_OK);
    SCIMemWrite(buf, (volatile void *)back, 50, NO_FLAGS, &err);
    check("SCIMemWrite outside any map", err, SCI_ERR_ILLEGAL_ADDRESS);
    SCIMemWrite(buf, (volatile void *)(rp + 8190), 50, NO_FLAGS, &err);
    check("SCIMemWrite past the map's end", err, SCI_ERR_ILLEGAL_ADDRESS);
    SCICacheSync(rmap, (void *)(uintptr_t)rp, 8192, SCI_FLAG_CACHE_FLUSH, &err);
    check("SCICacheSync", err, SCI_ERR_OK);
    SCICacheSync(rmap, (void *)(uintptr_t)rp, 9000, SCI_FLAG_CACHE_FLUSH, &err);
    check("SCICacheSync: out of range", err, SCI_ERR_OUT_OF_RANGE);
    {
        sci_query_map_t qm;
        qm.map = rmap;
        qm.subcommand = SCI_Q_MAP_MAPPED_TO_LOCAL_TARGET;
        qm.data = 7;
        SCIQuery(SCI_Q_MAP, &qm, NO_FLAGS, &err);
        check("SCIQuery(SCI_Q_MAP)", err, SCI_ERR_OK);
        truth("a map of this node's own segment is local", qm.data == 1);
    }

    SCIRemoveSegment(seg, NO_FLAGS, &err);
    check("SCIRemoveSegment while mapped", err, SCI_ERR_BUSY);
    SCIUnmapSegment(lmap, NO_FLAGS, &err);
    check("SCIUnmapSegment (local)", err, SCI_ERR_OK);
    SCIRemoveSegment(seg, NO_FLAGS, &err);
    check("SCIRemoveSegment while connected", err, SCI_ERR_BUSY);
    SCIDisconnectSegment(rseg, NO_FLAGS, &err);
    check("SCIDisconnectSegment while mapped", err, SCI_ERR_BUSY);
    SCIUnmapSegment(rmap, NO_FLAGS, &err);
    check("SCIUnmapSegment with a sequence", err, SCI_ERR_BUSY);
    SCIClose(sd, NO_FLAGS, &err);
    check("SCIClose with open resources", err, SCI_ERR_BUSY);
    SCIRemoveSegment(seg, SCI_FLAG_FORCE_REMOVE, &err);
    check("SCIRemoveSegment with SCI_FLAG_FORCE_REMOVE", err, SCI_ERR_OK);
    truth("the sequence fails once the segment is gone", SCICheckSequence(seq, NO_FLAGS, &err) == SCI_SEQ_NOT_RETRIABLE);
    {
        sci_error_t status;
        sci_segment_cb_reason_t r = SCIWaitForRemoteSegmentEvent(rseg, &status, 2000, NO_FLAGS, &err);
        check("SCIWaitForRemoteSegmentEvent after removal", err, SCI_ERR_OK);
        truth("the removal is reported as SCI_CB_DISCONNECT", r == SCI_CB_DISCONNECT);
    }
    SCIMemCpy(seq, buf, rmap, 0, 64, NO_FLAGS, &err);
    check("SCIMemCpy into a removed segment", err, SCI_ERR_TRANSFER_FAILED);
    SCIRemoveSequence(seq, NO_FLAGS, &err);
    check("SCIRemoveSequence", err, SCI_ERR_OK);
    SCIUnmapSegment(rmap, NO_FLAGS, &err);
    check("SCIUnmapSegment (remote)", err, SCI_ERR_OK);
    SCIDisconnectSegment(rseg, NO_FLAGS, &err);
    check("SCIDisconnectSegment", err, SCI_ERR_OK);
    SCIPrepareSegment(seg, 0, NO_FLAGS, &err);
    check("a removed segment's handle", err, SCI_ERR_ILLEGAL_PARAMETER);

    /* ---- registered memory ------------------------------------------------------------- */
    {
        void *mem = NULL;
        if (posix_memalign(&mem, 4096, 8192) != 0) return 100;
        memset(mem, 0, 8192);
        SCICreateSegment(sd, &seg, 0x300, 8192, NULL, NULL, SCI_FLAG_EMPTY, &err);
        check("SCICreateSegment with SCI_FLAG_EMPTY", err, SCI_ERR_OK);
        SCIPrepareSegment(seg, 0, NO_FLAGS, &err);
        check("SCIPrepareSegment before SCIRegisterSegmentMemory", err, SCI_ERR_SEGMENT_NOT_PREPARED);
        SCIRegisterSegmentMemory(mem, 8192, seg, NO_FLAGS, &err);
        check("SCIRegisterSegmentMemory", err, SCI_ERR_OK);
        SCIRegisterSegmentMemory(mem, 8192, seg, NO_FLAGS, &err);
        check("SCIRegisterSegmentMemory twice", err, SCI_ERR_ILLEGAL_OPERATION);
        SCIPrepareSegment(seg, 0, NO_FLAGS, &err);
        SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err);
        SCIConnectSegment(sd, &rseg, me, 0x300, 0, NULL, NULL, 1000, NO_FLAGS, &err);
        check("SCIConnectSegment to registered memory", err, SCI_ERR_OK);
        volatile uint32_t *p32 = SCIMapRemoteSegment(rseg, &rmap, 0, 8192, NULL, NO_FLAGS, &err);
        p32[100] = 0xC0FFEE;
        SCIFlush(NULL, 0);
        truth("a remote store lands in the registered memory", ((uint32_t *)mem)[100] == 0xC0FFEE);
        SCIUnmapSegment(rmap, NO_FLAGS, &err);
        SCIDisconnectSegment(rseg, NO_FLAGS, &err);
        SCIRemoveSegment(seg, NO_FLAGS, &err);
        check("SCIRemoveSegment (registered)", err, SCI_ERR_OK);
        SCIAttachPhysicalMemory(0, NULL, 0, 4096, seg, NO_FLAGS, &err);
        check("SCIAttachPhysicalMemory(stale)", err, SCI_ERR_ILLEGAL_PARAMETER);
    }

    /* ---- segments shared between processes of one node ---------------------------------- */
    {
        sci_local_segment_t shared, attached;
        size_t size = 0;
        SCICreateSegment(sd, &shared, 0x700, 4096, NULL, NULL, NO_FLAGS, &err);
        SCIPrepareSegment(shared, 0, NO_FLAGS, &err);
        SCIAttachLocalSegment(sd, &attached, 0x700, &size, NULL, NULL, NO_FLAGS, &err);
        check("SCIAttachLocalSegment before SCIShareSegment", err, SCI_ERR_ILLEGAL_OPERATION);
        SCIShareSegment(shared, NO_FLAGS, &err);
        check("SCIShareSegment", err, SCI_ERR_OK);
        SCIAttachLocalSegment(sd, &attached, 0x701, &size, NULL, NULL, NO_FLAGS, &err);
        check("SCIAttachLocalSegment: no such segment", err, SCI_ERR_NO_SUCH_SEGMENT);
        SCIAttachLocalSegment(sd, &attached, 0x700, NULL, NULL, NULL, NO_FLAGS, &err);
        check("SCIAttachLocalSegment(NULL size)", err, SCI_ERR_ILLEGAL_PARAMETER);
        SCIAttachLocalSegment(sd, &attached, 0x700, &size, NULL, NULL, NO_FLAGS, &err);
        check("SCIAttachLocalSegment", err, SCI_ERR_OK);
        truth("the attached segment's size and id", size == 4096 && SCIGetLocalSegmentId(attached) == 0x700);
        SCIRemoveSegment(attached, NO_FLAGS, &err);
        check("SCIRemoveSegment (attached: detaches)", err, SCI_ERR_OK);
        SCIRemoveSegment(shared, NO_FLAGS, &err);
        check("SCIRemoveSegment (shared)", err, SCI_ERR_OK);
    }

    /* ---- segment events and callbacks ------------------------------------------------- */
    {
        SCICreateSegment(sd, &seg, 0x400, 4096, local_cb, NULL, SCI_FLAG_USE_CALLBACK, &err);
        check("SCICreateSegment with a callback", err, SCI_ERR_OK);
        SCIPrepareSegment(seg, 0, NO_FLAGS, &err);
        SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err);
        SCIConnectSegment(sd, &rseg, me, 0x400, 0, remote_cb, (void *)0x1234, 1000, SCI_FLAG_USE_CALLBACK, &err);
        check("SCIConnectSegment with a callback", err, SCI_ERR_OK);
        truth("local callback: SCI_CB_CONNECT", await_count(&local_connects, 1) && local_node_ok);
        unsigned int node, adapter;
        SCIWaitForLocalSegmentEvent(seg, &node, &adapter, 0, NO_FLAGS, &err);
        check("SCIWaitForLocalSegmentEvent while a callback is registered", err, SCI_ERR_ILLEGAL_OPERATION);
        SCISetSegmentUnavailable(seg, 0, NO_FLAGS, &err);
        truth("remote callback: SCI_CB_NOT_OPERATIONAL", await_count(&remote_events[SCI_CB_NOT_OPERATIONAL], 1));
        SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err);
        truth("remote callback: SCI_CB_OPERATIONAL", await_count(&remote_events[SCI_CB_OPERATIONAL], 1));
        SCIDisconnectSegment(rseg, NO_FLAGS, &err);
        check("SCIDisconnectSegment (callback)", err, SCI_ERR_OK);
        truth("local callback: SCI_CB_DISCONNECT", await_count(&local_disconnects, 1));
        SCIRemoveSegment(seg, NO_FLAGS, &err);
        check("SCIRemoveSegment (callback)", err, SCI_ERR_OK);

        /* Waiting instead of callbacks. */
        SCICreateSegment(sd, &seg, 0x401, 4096, NULL, NULL, NO_FLAGS, &err);
        SCIPrepareSegment(seg, 0, NO_FLAGS, &err);
        SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err);
        SCIWaitForLocalSegmentEvent(seg, &node, &adapter, 50, NO_FLAGS, &err);
        check("SCIWaitForLocalSegmentEvent: timeout", err, SCI_ERR_TIMEOUT);
        SCIConnectSegment(sd, &rseg, me, 0x401, 0, NULL, NULL, 1000, NO_FLAGS, &err);
        node = 0;
        sci_segment_cb_reason_t r = SCIWaitForLocalSegmentEvent(seg, &node, &adapter, 2000, NO_FLAGS, &err);
        check("SCIWaitForLocalSegmentEvent", err, SCI_ERR_OK);
        truth("the event is SCI_CB_CONNECT from this node", r == SCI_CB_CONNECT && node == me && adapter == 0);
        sci_error_t status;
        SCIWaitForRemoteSegmentEvent(rseg, &status, 50, NO_FLAGS, &err);
        check("SCIWaitForRemoteSegmentEvent: timeout", err, SCI_ERR_TIMEOUT);
        SCIDisconnectSegment(rseg, NO_FLAGS, &err);
        r = SCIWaitForLocalSegmentEvent(seg, &node, &adapter, 2000, NO_FLAGS, &err);
        truth("then SCI_CB_DISCONNECT", err == SCI_ERR_OK && r == SCI_CB_DISCONNECT);
        SCIRemoveSegment(seg, NO_FLAGS, &err);
    }

    /* ---- interrupts --------------------------------------------------------------------- */
    {
        sci_local_interrupt_t irq, irq2;
        sci_remote_interrupt_t rirq;
        unsigned int no = 77, no2 = 77;
        SCICreateInterrupt(sd, &irq, 0, &no, NULL, NULL, SCI_FLAG_FIXED_INTNO, &err);
        check("SCICreateInterrupt (fixed number)", err, SCI_ERR_OK);
        SCICreateInterrupt(sd, &irq2, 0, &no2, NULL, NULL, SCI_FLAG_FIXED_INTNO, &err);
        check("SCICreateInterrupt: number in use", err, SCI_ERR_BUSY);
        SCICreateInterrupt(sd, &irq2, 0, &no2, NULL, NULL, NO_FLAGS, &err);
        check("SCICreateInterrupt (automatic number)", err, SCI_ERR_OK);
        truth("the automatic number is written back", no2 != 77);
        SCIRemoveInterrupt(irq2, NO_FLAGS, &err);
        check("SCIRemoveInterrupt", err, SCI_ERR_OK);
        SCICreateInterrupt(sd, &irq2, 0, NULL, NULL, NULL, NO_FLAGS, &err);
        check("SCICreateInterrupt(NULL number)", err, SCI_ERR_ILLEGAL_PARAMETER);
        SCICreateInterrupt(sd, &irq2, 0, &no2, NULL, NULL, SCI_FLAG_SHARED_INT, &err);
        check("SCICreateInterrupt: SCI_FLAG_SHARED_INT", err, SCI_ERR_FLAG_NOT_IMPLEMENTED);
        SCIConnectInterrupt(sd, &rirq, me, 0, 9999, 0, NO_FLAGS, &err);
        check("SCIConnectInterrupt: no such interrupt", err, SCI_ERR_NO_SUCH_INTNO);
        SCIConnectInterrupt(sd, &rirq, me, 0, 77, 1000, NO_FLAGS, &err);
        check("SCIConnectInterrupt", err, SCI_ERR_OK);
        SCIWaitForInterrupt(irq, 50, NO_FLAGS, &err);
        check("SCIWaitForInterrupt: timeout", err, SCI_ERR_TIMEOUT);
        SCITriggerInterrupt(rirq, NO_FLAGS, &err);
        check("SCITriggerInterrupt", err, SCI_ERR_OK);
        SCIWaitForInterrupt(irq, 1000, NO_FLAGS, &err);
        check("SCIWaitForInterrupt", err, SCI_ERR_OK);

        struct waiter w = {irq, SCI_ERR_OK};
        pthread_t th;
        pthread_create(&th, NULL, wait_thread, &w);
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
        SCIRemoveInterrupt(irq, NO_FLAGS, &err);
        pthread_join(th, NULL);
        check("a wait ends when its interrupt is removed", w.err, SCI_ERR_CANCELLED);
        SCITriggerInterrupt(rirq, NO_FLAGS, &err);
        check("SCITriggerInterrupt after removal", err, SCI_ERR_NOT_CONNECTED);
        SCIDisconnectInterrupt(rirq, NO_FLAGS, &err);
        check("SCIDisconnectInterrupt", err, SCI_ERR_OK);

        no = 78;
        SCICreateInterrupt(sd, &irq, 0, &no, interrupt_cb, NULL, SCI_FLAG_FIXED_INTNO | SCI_FLAG_USE_CALLBACK, &err);
        check("SCICreateInterrupt with a callback", err, SCI_ERR_OK);
        SCIConnectInterrupt(sd, &rirq, me, 0, 78, 1000, NO_FLAGS, &err);
        for (int i = 0; i < 3; i++) SCITriggerInterrupt(rirq, NO_FLAGS, &err);
        truth("the interrupt callback ran three times", await_count(&interrupts_seen, 3));
        SCIWaitForInterrupt(irq, 0, NO_FLAGS, &err);
        check("SCIWaitForInterrupt with a callback", err, SCI_ERR_ILLEGAL_OPERATION);
        SCIDisconnectInterrupt(rirq, NO_FLAGS, &err);
        SCIRemoveInterrupt(irq, NO_FLAGS, &err);
        check("SCIRemoveInterrupt (callback)", err, SCI_ERR_OK);
    }

    /* ---- data interrupts ------------------------------------------------------------- */
    {
        sci_local_data_interrupt_t dirq;
        sci_remote_data_interrupt_t rdirq;
        unsigned int no = 88, len;
        char msg[16] = "hello, node!!!!", got[64], big[5000];
        SCICreateDataInterrupt(sd, &dirq, 0, &no, NULL, NULL, SCI_FLAG_FIXED_INTNO, &err);
        check("SCICreateDataInterrupt", err, SCI_ERR_OK);
        SCIConnectDataInterrupt(sd, &rdirq, me, 0, 88, 1000, NO_FLAGS, &err);
        check("SCIConnectDataInterrupt", err, SCI_ERR_OK);
        SCIConnectDataInterrupt(sd, &rdirq, me, 0, 89, 0, NO_FLAGS, &err);
        check("SCIConnectDataInterrupt: no such interrupt", err, SCI_ERR_NO_SUCH_INTNO);
        SCIConnectDataInterrupt(sd, &rdirq, me, 0, 88, 1000, NO_FLAGS, &err);
        len = sizeof got;
        SCIWaitForDataInterrupt(dirq, got, &len, 0, NO_FLAGS, &err);
        check("SCIWaitForDataInterrupt: timeout", err, SCI_ERR_TIMEOUT);
        SCITriggerDataInterrupt(rdirq, msg, sizeof msg, NO_FLAGS, &err);
        check("SCITriggerDataInterrupt", err, SCI_ERR_OK);
        len = 4;
        SCIWaitForDataInterrupt(dirq, got, &len, 1000, NO_FLAGS, &err);
        check("SCIWaitForDataInterrupt: buffer too small", err, SCI_ERR_OVERFLOW);
        truth("the size needed is returned", len == sizeof msg);
        len = sizeof got;
        SCIWaitForDataInterrupt(dirq, got, &len, 1000, NO_FLAGS, &err);
        check("SCIWaitForDataInterrupt", err, SCI_ERR_OK);
        truth("the message arrives whole", len == sizeof msg && memcmp(got, msg, sizeof msg) == 0);
        memset(big, 1, sizeof big);
        SCITriggerDataInterrupt(rdirq, big, sizeof big, NO_FLAGS, &err);
        check("SCITriggerDataInterrupt: over 4096 bytes", err, SCI_ERR_ILLEGAL_PARAMETER);
        SCIWaitForDataInterrupt(dirq, got, NULL, 0, NO_FLAGS, &err);
        check("SCIWaitForDataInterrupt(NULL length)", err, SCI_ERR_ILLEGAL_PARAMETER);
        SCIDisconnectDataInterrupt(rdirq, NO_FLAGS, &err);
        check("SCIDisconnectDataInterrupt", err, SCI_ERR_OK);
        SCIRemoveDataInterrupt(dirq, NO_FLAGS, &err);
        check("SCIRemoveDataInterrupt", err, SCI_ERR_OK);

        no = 90;
        SCICreateDataInterrupt(sd, &dirq, 0, &no, data_cb, NULL, SCI_FLAG_FIXED_INTNO | SCI_FLAG_USE_CALLBACK, &err);
        check("SCICreateDataInterrupt with a callback", err, SCI_ERR_OK);
        SCIConnectDataInterrupt(sd, &rdirq, me, 0, 90, 1000, NO_FLAGS, &err);
        SCITriggerDataInterrupt(rdirq, msg, sizeof msg, NO_FLAGS, &err);
        truth("the data interrupt callback got the message",
              await_count(&data_seen, 1) && memcmp(data_got, msg, sizeof msg) == 0);
        SCIDisconnectDataInterrupt(rdirq, NO_FLAGS, &err);
        SCIRemoveDataInterrupt(dirq, NO_FLAGS, &err);
    }

    /* ---- DMA ---------------------------------------------------------------------------- */
    {
        sci_dma_queue_t dq;
        sci_dma_channel_t ch;
        sci_local_segment_t a, b;
        sci_map_t am, bm;
        /* 0 entries is a queue of one, as programs measured on the hardware expect. */
        SCICreateDMAQueue(sd, &dq, 0, 0, NO_FLAGS, &err);
        check("SCICreateDMAQueue: 0 entries", err, SCI_ERR_OK);
        SCIRemoveDMAQueue(dq, NO_FLAGS, &err);
        check("SCIRemoveDMAQueue of the 0-entry queue", err, SCI_ERR_OK);
        SCICreateDMAQueue(sd, &dq, 0, 4, NO_FLAGS, &err);
        check("SCICreateDMAQueue", err, SCI_ERR_OK);
        truth("a new queue is idle", SCIDMAQueueState(dq) == SCI_DMAQUEUE_IDLE);
        SCICreateSegment(sd, &a, 0x500, 8192, NULL, NULL, NO_FLAGS, &err);
        SCIPrepareSegment(a, 0, NO_FLAGS, &err);
        SCICreateSegment(sd, &b, 0x501, 8192, NULL, NULL, NO_FLAGS, &err);
        SCIPrepareSegment(b, 0, NO_FLAGS, &err);
        SCISetSegmentAvailable(b, 0, NO_FLAGS, &err);
        SCIConnectSegment(sd, &rseg, me, 0x501, 0, NULL, NULL, 1000, NO_FLAGS, &err);
        check("SCIConnectSegment (DMA target)", err, SCI_ERR_OK);
        volatile uint8_t *ap = SCIMapLocalSegment(a, &am, 0, 8192, NULL, NO_FLAGS, &err);
        volatile uint8_t *bp = SCIMapLocalSegment(b, &bm, 0, 8192, NULL, NO_FLAGS, &err);
        for (int i = 0; i < 8192; i++) ap[i] = (uint8_t)(i * 3 + 1);
        SCIStartDmaTransfer(dq, a, rseg, 0, 4096, 1024, NULL, NULL, NO_FLAGS, &err);
        check("SCIStartDmaTransfer", err, SCI_ERR_OK);
        truth("SCIWaitForDMAQueue",
              SCIWaitForDMAQueue(dq, 5000, NO_FLAGS, &err) == SCI_DMAQUEUE_DONE && err == SCI_ERR_OK);
        int same = 1;
        for (int i = 0; i < 4096; i++) same &= bp[1024 + i] == (uint8_t)(i * 3 + 1);
        truth("the DMA transfer wrote the remote segment", same);
        SCIStartDmaTransfer(dq, a, rseg, 0, 4096, 6000, NULL, NULL, NO_FLAGS, &err);
        check("SCIStartDmaTransfer: out of range", err, SCI_ERR_OUT_OF_RANGE);
        SCIStartDmaTransfer(dq, a, rseg, 0, 4096, 0, NULL, NULL, SCI_FLAG_BROADCAST, &err);
        check("SCIStartDmaTransfer: SCI_FLAG_BROADCAST to an ordinary segment", err, SCI_ERR_ILLEGAL_FLAG);
        dis_dma_vec_t vec[5];
        for (int i = 0; i < 5; i++) {
            vec[i].size = 512;
            vec[i].local_offset = (size_t)i * 512;
            vec[i].remote_offset = (size_t)i * 1024;
            vec[i].flags = 0;
        }
        /* A vector is one of the queue's entries, however long (as the vendor's queues count
         * them; tests/sdk/vendor_calls.c). */
        SCIStartDmaTransferVec(dq, a, rseg, 5, vec, NULL, NULL, NO_FLAGS, &err);
        check("SCIStartDmaTransferVec: a vector longer than maxEntries is one entry", err, SCI_ERR_OK);
        SCIWaitForDMAQueue(dq, 5000, NO_FLAGS, &err);
        SCIStartDmaTransferVec(dq, a, rseg, 4, vec, dma_cb, NULL, SCI_FLAG_USE_CALLBACK | SCI_FLAG_DMA_READ, &err);
        check("SCIStartDmaTransferVec (read, callback)", err, SCI_ERR_OK);
        truth("the DMA callback ran with SCI_ERR_OK", await_count(&dma_done, 1) && dma_status == SCI_ERR_OK);
        SCIWaitForDMAQueue(dq, 5000, NO_FLAGS, &err);
        same = 1;
        for (int i = 0; i < 512; i++) same &= ap[512 + i] == bp[1024 + i];
        truth("the DMA read filled the local segment", same);
        char mem[256];
        memset(mem, 0x5A, sizeof mem);
        struct chain ch5 = {dq, a, rseg, 0, 0};
        SCIStartDmaTransfer(dq, a, rseg, 0, 1024, 0, chain_cb, &ch5, SCI_FLAG_USE_CALLBACK, &err);
        check("SCIStartDmaTransfer with a callback that starts the next", err, SCI_ERR_OK);
        truth("five chained transfers, each started by the previous one's callback",
              await_count(&ch5.links, 5) && !ch5.failed);
        truth("then the queue is done", SCIWaitForDMAQueue(dq, 5000, NO_FLAGS, &err) == SCI_DMAQUEUE_DONE);
        SCIStartDmaTransferMem(dq, mem, rseg, sizeof mem, 7000, NULL, NULL, SCI_FLAG_DMA_WAIT, &err);
        check("SCIStartDmaTransferMem with SCI_FLAG_DMA_WAIT", err, SCI_ERR_OK);
        truth("memory reached the remote segment", bp[7000] == 0x5A && bp[7255] == 0x5A);
        SCIRequestDMAChannel(sd, &ch, 0, SCI_DMA_TYPE_DONTCARE, 99, NO_FLAGS, &err);
        check("SCIRequestDMAChannel: channel 99", err, SCI_ERR_ILLEGAL_PARAMETER);
        SCIRequestDMAChannel(sd, &ch, 0, SCI_DMA_TYPE_DONTCARE, SCI_DMA_CHANNEL_ID_DONTCARE, NO_FLAGS, &err);
        check("SCIRequestDMAChannel", err, SCI_ERR_OK);
        SCIAssignDMAChannel(ch, dq, NO_FLAGS, &err);
        check("SCIAssignDMAChannel", err, SCI_ERR_OK);
        /* The vendor's channel sequence: segments prepared for the channel, then unprepared. */
        SCIPrepareLocalSegmentForDMA(ch, a, NO_FLAGS, &err);
        check("SCIPrepareLocalSegmentForDMA", err, SCI_ERR_OK);
        SCIPrepareRemoteSegmentForDMA(ch, rseg, NO_FLAGS, &err);
        check("SCIPrepareRemoteSegmentForDMA", err, SCI_ERR_OK);
        SCIPrepareRemoteSegmentForDMA(ch, (sci_remote_segment_t)(void *)a, NO_FLAGS, &err);
        check("SCIPrepareRemoteSegmentForDMA: a local segment's handle", err, SCI_ERR_ILLEGAL_PARAMETER);
        SCIStartDmaTransfer(dq, a, rseg, 0, 8192, 0, NULL, NULL, SCI_FLAG_DMA_WAIT, &err);
        check("a transfer on the assigned channel", err, SCI_ERR_OK);
        SCIUnprepareRemoteSegmentForDMA(ch, rseg, NO_FLAGS, &err);
        check("SCIUnprepareRemoteSegmentForDMA", err, SCI_ERR_OK);
        SCIUnprepareLocalSegmentForDMA(ch, a, NO_FLAGS, &err);
        check("SCIUnprepareLocalSegmentForDMA", err, SCI_ERR_OK);
        SCIReturnDMAChannel(ch, &err);
        check("SCIReturnDMAChannel", err, SCI_ERR_OK);
        SCIRemoveDMAQueue(dq, NO_FLAGS, &err);
        check("SCIRemoveDMAQueue", err, SCI_ERR_OK);
        truth("a removed queue's state is ERROR", SCIDMAQueueState(dq) == SCI_DMAQUEUE_ERROR);
        SCIUnmapSegment(am, NO_FLAGS, &err);
        SCIUnmapSegment(bm, NO_FLAGS, &err);
        SCIDisconnectSegment(rseg, NO_FLAGS, &err);
        SCIRemoveSegment(a, NO_FLAGS, &err);
        SCIRemoveSegment(b, NO_FLAGS, &err);
        check("DMA segments removed", err, SCI_ERR_OK);
    }

    /* ---- queries and what a software fabric cannot do --------------------------------- */
    {
        char small[4];
        sci_query_string_t qs = {small, sizeof small};
        SCIQuery(SCI_Q_VENDORID, &qs, NO_FLAGS, &err);
        check("SCIQuery(SCI_Q_VENDORID) into 4 bytes", err, SCI_ERR_OVERFLOW);
        truth("the truncated string is terminated", small[3] == '\0');
        SCIQuery(999, &qs, NO_FLAGS, &err);
        check("SCIQuery: unknown command", err, SCI_ERR_ILLEGAL_QUERY);
        SCIQuery(SCI_Q_ADAPTER, NULL, NO_FLAGS, &err);
        check("SCIQuery(NULL)", err, SCI_ERR_ILLEGAL_PARAMETER);
        unsigned int v = 0;
        sci_query_adapter_t qa = {0, 0, SCI_Q_ADAPTER_NODEID, &v};
        SCIQuery(SCI_Q_ADAPTER, &qa, NO_FLAGS, &err);
        check("SCIQuery(SCI_Q_ADAPTER_NODEID)", err, SCI_ERR_OK);
        truth("the adapter's node id is the local node id", v == me);
        qa.localAdapterNo = 1;
        SCIQuery(SCI_Q_ADAPTER, &qa, NO_FLAGS, &err);
        check("SCIQuery on adapter 1", err, SCI_ERR_NO_SUCH_ADAPTERNO);
        qa.localAdapterNo = 0;
        qa.subcommand = 0x7777;
        SCIQuery(SCI_Q_ADAPTER, &qa, NO_FLAGS, &err);
        check("SCIQuery: unknown adapter subcommand", err, SCI_ERR_ILLEGAL_QUERY);
        sci_smartio_device_t dev = (sci_smartio_device_t)&on_stack;
        SCIBorrowDevice(sd, &dev, 0x100, NO_FLAGS, &err);
        check("SCIBorrowDevice: no such device", err, SCI_ERR_NO_SUCH_FDID);
        truth("no device handle is returned", dev == NULL);
        dis_nodeId_list_t list;
        dis_virt_adapter_t type;
        char name[] = "no-such-host.invalid";
        SCIGetNodeIdByAdapterName(name, &list, &type, NO_FLAGS, &err);
        check("SCIGetNodeIdByAdapterName: unknown host", err, SCI_ERR_NO_SUCH_NODEID);
        char local[] = "localhost";
        SCIGetNodeIdByAdapterName(local, &list, &type, NO_FLAGS, &err);
        check("SCIGetNodeIdByAdapterName(localhost)", err, SCI_ERR_OK);
        truth("localhost is this node", list[0] == me && list[1] == 0);
    }

    /* ---- threads ------------------------------------------------------------------------ */
    {
        pthread_t th[4];
        struct worker w[4];
        for (int i = 0; i < 4; i++) {
            w[i].sd = sd;
            w[i].errors = 0;
            pthread_create(&th[i], NULL, worker, &w[i]);
        }
        int errors = 0;
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            errors += w[i].errors;
        }
        truth("four threads creating, connecting, mapping and removing at once", errors == 0);
    }

    /* ---- closing -------------------------------------------------------------------------- */
    SCICreateSegment(sd, &seg, 0x600, 4096, NULL, NULL, NO_FLAGS, &err);
    SCIClose(sd, NO_FLAGS, &err);
    check("SCIClose with a segment left", err, SCI_ERR_BUSY);
    SCIClose(sd, SCI_FLAG_FORCE_REMOVE, &err);
    check("SCIClose with SCI_FLAG_FORCE_REMOVE", err, SCI_ERR_OK);
    SCIPrepareSegment(seg, 0, NO_FLAGS, &err);
    check("a segment of a closed descriptor", err, SCI_ERR_ILLEGAL_PARAMETER);
    SCIClose(sd, NO_FLAGS, &err);
    check("SCIClose twice", err, SCI_ERR_ILLEGAL_PARAMETER);
    SCITerminate();
    SCIOpen(&sd, NO_FLAGS, &err);
    check("SCIOpen after SCITerminate", err, SCI_ERR_NOT_INITIALIZED);

    printf("%d failures\n", failures);
    return failures > 100 ? 100 : failures;
}
