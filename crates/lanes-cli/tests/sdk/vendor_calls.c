/* Flags, DMA vectors and data interrupts as programs written for the vendor's library use
 * them (issue 28, items 3 to 5), in one node process:
 *
 * - SCICreateSegment with SCI_FLAG_DMA_GLOBAL, alone and with SCI_FLAG_BROADCAST (kritjo's
 *   sisci-perf creates its segments with SCI_FLAG_DMA_GLOBAL | SCI_FLAG_AUTO_ID);
 *   SCIRegisterSegmentMemory with SCI_FLAG_LOCK_USER_MEM; SCISetSegmentUnavailable with
 *   SCI_FLAG_NOTIFY; SCIShareSegment with SCI_FLAG_SHARE_EXTERNAL; a map with
 *   SCI_FLAG_WRITE_BACK_CACHE_MAP; SCIRequestDMAChannel with SCI_FLAG_DMA_CHANNEL_SHARED; an
 *   unknown flag is still illegal.
 * - SCIStartDmaTransferVec counts a vector as one of the queue's maxEntries: an 8-element
 *   vector on a queue of 1 entry and on one of 4 (public SISCI benchmarks create a
 *   queue of one entry and start vectors of many); a vector longer than DIS_DMA_MAX_VECLEN
 *   is SCI_ERR_MAX_ENTRIES.
 * - SCITriggerDataInterrupt into a full queue fails at once with SCI_ERR_NOSPC (sisci-perf
 *   triggers in a timed loop and counts SCI_ERR_NOSPC); a callback passed without
 *   SCI_FLAG_USE_CALLBACK is never called and SCIWaitForDataInterrupt gets the messages
 *   (sisci-perf's peer creates its benchmark interrupts with a callback and no flags).
 *
 * Each check prints "ok NAME" or "FAIL NAME ..."; "0 failures" ends a good run. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

static volatile int callback_calls;

static sci_callback_action_t never_cb(void *arg, sci_local_data_interrupt_t irq, void *data, unsigned int len,
                                      sci_error_t status)
{
    (void)arg;
    (void)irq;
    (void)data;
    (void)len;
    (void)status;
    __atomic_add_fetch(&callback_calls, 1, __ATOMIC_RELEASE);
    return SCI_CALLBACK_CONTINUE;
}

int main(void)
{
    sci_error_t err;
    sci_desc_t sd;
    unsigned int me = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    SCIInitialize(NO_FLAGS, &err);
    SCIOpen(&sd, NO_FLAGS, &err);
    check("SCIOpen", err, SCI_ERR_OK);
    SCIGetLocalNodeId(0, &me, NO_FLAGS, &err);

    /* ---- item 3: flags ---------------------------------------------------------------- */
    sci_local_segment_t a, b, g, reg;
    SCICreateSegment(sd, &a, 0x7801, 1 << 16, NULL, NULL, SCI_FLAG_DMA_GLOBAL, &err);
    check("SCICreateSegment(SCI_FLAG_DMA_GLOBAL)", err, SCI_ERR_OK);
    SCICreateSegment(sd, &b, 0, 1 << 16, NULL, NULL, SCI_FLAG_DMA_GLOBAL | SCI_FLAG_AUTO_ID, &err);
    check("SCICreateSegment(SCI_FLAG_DMA_GLOBAL | SCI_FLAG_AUTO_ID)", err, SCI_ERR_OK);
    SCICreateSegment(sd, &g, 2, 4096, NULL, NULL, SCI_FLAG_DMA_GLOBAL | SCI_FLAG_BROADCAST, &err);
    check("SCICreateSegment(SCI_FLAG_DMA_GLOBAL | SCI_FLAG_BROADCAST)", err, SCI_ERR_OK);
    SCIRemoveSegment(g, NO_FLAGS, &err);
    check("the group removed", err, SCI_ERR_OK);
    {
        sci_local_segment_t bad;
        SCICreateSegment(sd, &bad, 0x7809, 4096, NULL, NULL, 0x8000000, &err);
        check("SCICreateSegment with a flag nobody defines", err, SCI_ERR_ILLEGAL_FLAG);
    }
    void *mem = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    SCICreateSegment(sd, &reg, 0x7802, 1 << 16, NULL, NULL, SCI_FLAG_EMPTY, &err);
    check("SCICreateSegment(SCI_FLAG_EMPTY)", err, SCI_ERR_OK);
    SCIRegisterSegmentMemory(mem, 1 << 16, reg, SCI_FLAG_LOCK_USER_MEM, &err);
    check("SCIRegisterSegmentMemory(SCI_FLAG_LOCK_USER_MEM)", err, SCI_ERR_OK);
    SCIRemoveSegment(reg, NO_FLAGS, &err);
    check("the registered segment removed", err, SCI_ERR_OK);

    SCIPrepareSegment(a, 0, NO_FLAGS, &err);
    SCISetSegmentAvailable(a, 0, NO_FLAGS, &err);
    SCIPrepareSegment(b, 0, NO_FLAGS, &err);
    SCISetSegmentAvailable(b, 0, NO_FLAGS, &err);
    SCISetSegmentUnavailable(b, 0, SCI_FLAG_NOTIFY, &err);
    check("SCISetSegmentUnavailable(SCI_FLAG_NOTIFY)", err, SCI_ERR_OK);
    SCISetSegmentAvailable(b, 0, NO_FLAGS, &err);
    check("available again", err, SCI_ERR_OK);
    SCIShareSegment(a, SCI_FLAG_SHARE_EXTERNAL, &err);
    check("SCIShareSegment(SCI_FLAG_SHARE_EXTERNAL)", err, SCI_ERR_OK);
    {
        sci_map_t cm;
        volatile uint32_t *c = SCIMapLocalSegment(a, &cm, 0, 4096, NULL, SCI_FLAG_WRITE_BACK_CACHE_MAP, &err);
        check("SCIMapLocalSegment(SCI_FLAG_WRITE_BACK_CACHE_MAP)", err, SCI_ERR_OK);
        if (err == SCI_ERR_OK) c[0] = 1;
        SCIUnmapSegment(cm, NO_FLAGS, &err);
        sci_dma_channel_t ch;
        SCIRequestDMAChannel(sd, &ch, 0, SCI_DMA_TYPE_DONTCARE, SCI_DMA_CHANNEL_ID_DONTCARE, SCI_FLAG_DMA_CHANNEL_SHARED,
                             &err);
        check("SCIRequestDMAChannel(SCI_FLAG_DMA_CHANNEL_SHARED)", err, SCI_ERR_OK);
        SCIReturnDMAChannel(ch, &err);
    }

    /* ---- item 4: DMA vectors ----------------------------------------------------------- */
    sci_remote_segment_t rb;
    sci_map_t am, bm;
    SCIConnectSegment(sd, &rb, me, SCIGetLocalSegmentId(b), 0, NULL, NULL, 1000, NO_FLAGS, &err);
    check("SCIConnectSegment", err, SCI_ERR_OK);
    volatile uint8_t *ap = SCIMapLocalSegment(a, &am, 0, 1 << 16, NULL, NO_FLAGS, &err);
    volatile uint8_t *bp = SCIMapLocalSegment(b, &bm, 0, 1 << 16, NULL, NO_FLAGS, &err);
    for (int i = 0; i < 1 << 16; i++) ap[i] = (uint8_t)(i * 5 + 1);
    dis_dma_vec_t vec[DIS_DMA_MAX_VECLEN + 1];
    for (int i = 0; i < DIS_DMA_MAX_VECLEN + 1; i++) {
        vec[i].size = 64;
        vec[i].local_offset = (size_t)i * 128;
        vec[i].remote_offset = (size_t)i * 128 + 64;
        vec[i].flags = 0;
    }
    unsigned int queues[] = {1, 4};
    for (int q = 0; q < 2; q++) {
        sci_dma_queue_t dq;
        char name[128];
        memset((void *)bp, 0, 1 << 16);
        SCICreateDMAQueue(sd, &dq, 0, queues[q], NO_FLAGS, &err);
        check("SCICreateDMAQueue", err, SCI_ERR_OK);
        SCIStartDmaTransferVec(dq, a, rb, 8, vec, NULL, NULL, NO_FLAGS, &err);
        snprintf(name, sizeof name, "an 8-element vector on a queue of %u entries", queues[q]);
        check(name, err, SCI_ERR_OK);
        truth("its transfers complete",
              SCIWaitForDMAQueue(dq, 5000, NO_FLAGS, &err) == SCI_DMAQUEUE_DONE && err == SCI_ERR_OK);
        int same = 1;
        for (int i = 0; i < 8; i++)
            for (int j = 0; j < 64; j++) same &= bp[i * 128 + 64 + j] == ap[i * 128 + j];
        truth("every element of the vector arrived", same);
        SCIStartDmaTransferVec(dq, a, rb, DIS_DMA_MAX_VECLEN, vec, NULL, NULL, SCI_FLAG_DMA_WAIT, &err);
        check("a vector of DIS_DMA_MAX_VECLEN elements", err, SCI_ERR_OK);
        SCIStartDmaTransferVec(dq, a, rb, DIS_DMA_MAX_VECLEN + 1, vec, NULL, NULL, NO_FLAGS, &err);
        check("a vector longer than DIS_DMA_MAX_VECLEN", err, SCI_ERR_MAX_ENTRIES);
        SCIRemoveDMAQueue(dq, NO_FLAGS, &err);
        check("SCIRemoveDMAQueue", err, SCI_ERR_OK);
    }
    SCIUnmapSegment(am, NO_FLAGS, &err);
    SCIUnmapSegment(bm, NO_FLAGS, &err);
    SCIDisconnectSegment(rb, NO_FLAGS, &err);
    SCIRemoveSegment(a, NO_FLAGS, &err);
    SCIRemoveSegment(b, NO_FLAGS, &err);
    check("segments removed", err, SCI_ERR_OK);

    /* ---- item 5: data interrupts ------------------------------------------------------ */
    {
        sci_local_data_interrupt_t dirq;
        sci_remote_data_interrupt_t rdirq;
        unsigned int no = 0, len;
        char msg[8] = "message", got[64];
        SCICreateDataInterrupt(sd, &dirq, 0, &no, never_cb, NULL, NO_FLAGS, &err);
        check("SCICreateDataInterrupt with a callback and no flags", err, SCI_ERR_OK);
        SCIConnectDataInterrupt(sd, &rdirq, me, 0, no, 1000, NO_FLAGS, &err);
        check("SCIConnectDataInterrupt", err, SCI_ERR_OK);
        int sent = 0;
        double t0 = 0, took = 0;
        for (int i = 0; i < 1000; i++) {
            t0 = now_ms();
            SCITriggerDataInterrupt(rdirq, msg, sizeof msg, NO_FLAGS, &err);
            took = now_ms() - t0;
            if (err != SCI_ERR_OK) break;
            sent++;
        }
        check("SCITriggerDataInterrupt into a full queue", err, SCI_ERR_NOSPC);
        truth("fails at once, without waiting for room", took < 1000.0);
        truth("after the queue filled", sent >= 1 && sent < 1000);
        truth("the callback passed without SCI_FLAG_USE_CALLBACK was not called", callback_calls == 0);
        len = sizeof got;
        SCIWaitForDataInterrupt(dirq, got, &len, 1000, NO_FLAGS, &err);
        check("SCIWaitForDataInterrupt gets the first message", err, SCI_ERR_OK);
        truth("whole", len == sizeof msg && memcmp(got, msg, sizeof msg) == 0);
        SCITriggerDataInterrupt(rdirq, msg, sizeof msg, NO_FLAGS, &err);
        check("SCITriggerDataInterrupt once there is room again", err, SCI_ERR_OK);
        int drained = 1;
        for (;;) {
            len = sizeof got;
            SCIWaitForDataInterrupt(dirq, got, &len, 0, NO_FLAGS, &err);
            if (err != SCI_ERR_OK) break;
            drained++;
        }
        truth("every message queued is received", drained == sent + 1);
        truth("and the callback was never called", callback_calls == 0);
        SCIDisconnectDataInterrupt(rdirq, NO_FLAGS, &err);
        SCIRemoveDataInterrupt(dirq, NO_FLAGS, &err);
        check("SCIRemoveDataInterrupt", err, SCI_ERR_OK);
    }

    SCIClose(sd, NO_FLAGS, &err);
    check("SCIClose", err, SCI_ERR_OK);
    SCITerminate();
    munmap(mem, 1 << 16);
    printf("%d failures\n", failures);
    return failures > 100 ? 100 : failures;
}
