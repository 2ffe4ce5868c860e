/* The whole vendor API surface, included the vendor's way and built with
 * -Wall -Wextra -Wconversion -Werror (issue 28, item 6):
 *
 * - "function NAME": every function the headers declare, and the four the vendor exports
 *   without a prototype (declared here, as a program calling them declares them), each
 *   taken by address into a table: the build proves the declarations, the link the exports.
 * - "sizeof TYPE N": the structs whose layout the library reads or writes.
 * - "const NAME VALUE": the constants, as the compiler sees them.
 * - Then, as node 4 of a private fabric, the calls that are new: adapter strings, node info,
 *   CSR and SCI space (SCI_ERR_NOT_SUPPORTED), SCIMemCpy_dual, the vendor's DMA vector
 *   layout through SCIStartDmaTransferVec and DISStartDmaTransferVec, DISStartDmaTransfer,
 *   SCIQuery's vendor layouts (DMA capabilities, map, driver version, cache line), named
 *   interrupts, an interrupt flag triggered by this node, SCIAttachPhysicalMemory of the
 *   process's own memory, and the memcpy-function switch.
 *
 * Each check prints "ok NAME" or "FAIL NAME ..."; "0 failures" ends a good run. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "sisci_api.h"
#include "sisci_error.h"
#include "sisci_types.h"
#include "dis_types.h"

#include "checks.h"

#define NO_FLAGS 0U

/* The exports the vendor's header does not declare, declared as their callers do. */
void SetSciMemCopyFunction(unsigned int function);
unsigned int GetSciMemCopyFunction(void);
void DISStartDmaTransfer(sci_dma_queue_t dq, sci_local_segment_t localSegment,
                         sci_remote_segment_t remoteSegment, size_t localOffset, size_t size,
                         size_t remoteOffset, sci_cb_dma_t callback, void *callbackArg,
                         unsigned int flags, sci_error_t *error);
void DISStartDmaTransferVec(sci_dma_queue_t dq, sci_local_segment_t localSegment,
                            sci_remote_segment_t remoteSegment, unsigned int vecLength,
                            dis_dma_vec_t *disDmaVec, sci_cb_dma_t callback, void *callbackArg,
                            unsigned int flags, sci_error_t *error);

/* The parameter annotations of the vendor's headers. */
static unsigned int annotated(IN unsigned int a, OUT unsigned int *b, IN_OUT unsigned int *c)
{
    *b = a + *c;
    *c = a;
    return *b;
}

typedef void (*any_fn)(void);
#define FN(f) {#f, (any_fn)f}

static const struct {
    const char *name;
    any_fn fn;
} functions[] = {
    FN(SCIInitialize), FN(SCITerminate), FN(SCIOpen), FN(SCIClose), FN(SCIGetErrorString),
    FN(SCIGetLocalNodeId), FN(SCIProbeNode), FN(SCIQuery), FN(SCIGetNodeIdByAdapterName),
    FN(SCIGetNodeInfoByAdapterName), FN(SCIGetAdapterTypeString), FN(SCIGetAdapterFamilyString),
    FN(SCIGetCSRRegister), FN(SCISetCSRRegister), FN(SCIGetLocalCSR), FN(SCISetLocalCSR),
    FN(SCICreateSegment), FN(SCIPrepareSegment), FN(SCISetSegmentAvailable),
    FN(SCISetSegmentUnavailable), FN(SCIRemoveSegment), FN(SCIGetLocalSegmentSize),
    FN(SCIGetLocalSegmentId), FN(SCIWaitForLocalSegmentEvent), FN(SCIRegisterSegmentMemory),
    FN(SCIAttachPhysicalMemory), FN(SCIAttachLocalSegment), FN(SCIShareSegment),
    FN(SCIConnectSegment), FN(SCIDisconnectSegment), FN(SCIGetRemoteSegmentSize),
    FN(SCIGetRemoteSegmentId), FN(SCIGetRemoteSegmentNodeId), FN(SCIWaitForRemoteSegmentEvent),
    FN(SCIConnectSCISpace), FN(SCIMapRemoteSegment), FN(SCIMapLocalSegment), FN(SCIUnmapSegment),
    FN(SCIGetMapPointer), FN(SCIGetMapPhysAddr), FN(SCICreateMapSequence), FN(SCIRemoveSequence),
    FN(SCIStartSequence), FN(SCICheckSequence), FN(SCIStoreBarrier), FN(SCIFlush), FN(SCIMemCpy),
    FN(SCIMemWrite), FN(SCICacheSync), FN(SCIMemCpy_dual), FN(SCICreateDMAQueue),
    FN(SCIRemoveDMAQueue), FN(SCIAbortDMAQueue), FN(SCIDMAQueueState), FN(SCIWaitForDMAQueue),
    FN(SCIStartDmaTransfer), FN(SCIStartDmaTransferVec), FN(SCIStartDmaTransferMem),
    FN(SCIRequestDMAChannel), FN(SCIAssignDMAChannel), FN(SCIReturnDMAChannel),
    FN(SCIPrepareLocalSegmentForDMA), FN(SCIUnprepareLocalSegmentForDMA),
    FN(SCIPrepareRemoteSegmentForDMA), FN(SCIUnprepareRemoteSegmentForDMA),
    FN(SCICreateInterrupt), FN(SCIRemoveInterrupt), FN(SCIWaitForInterrupt),
    FN(SCIConnectInterrupt), FN(SCIDisconnectInterrupt), FN(SCITriggerInterrupt),
    FN(SCICreateNamedInterrupt), FN(SCIRegisterInterruptFlag), FN(SCIEnableConditionalInterrupt),
    FN(SCIDisableConditionalInterrupt), FN(SCIGetConditionalInterruptTrigCounter),
    FN(SCICreateDataInterrupt), FN(SCIRemoveDataInterrupt), FN(SCIWaitForDataInterrupt),
    FN(SCIConnectDataInterrupt), FN(SCIDisconnectDataInterrupt), FN(SCITriggerDataInterrupt),
    FN(SCIGetDeviceList), FN(SCIBorrowDevice), FN(SCIReturnDevice), FN(SCIReleaseExclusiveBorrow),
    FN(SCIGetFabricDeviceId), FN(SCIConnectDeviceSegment), FN(SCIConnectDeviceSegmentPath),
    FN(SCICreateDeviceSegment), FN(SCIMapLocalSegmentForDevice), FN(SCIUnmapLocalSegmentForDevice),
    FN(SCIMapRemoteSegmentForDevice), FN(SCIUnmapRemoteSegmentForDevice),
    FN(SCIRegisterPCIeRequester), FN(SCIUnregisterPCIeRequester),
    FN(SetSciMemCopyFunction), FN(GetSciMemCopyFunction), FN(DISStartDmaTransfer),
    FN(DISStartDmaTransferVec),
};

#define SIZE(t) printf("sizeof %s %zu\n", #t, sizeof(t))
#define CONST(c) printf("const %s %llu\n", #c, (unsigned long long)(c))

static void print_surface(void)
{
    size_t i;
    for (i = 0; i < sizeof functions / sizeof functions[0]; i++) {
        if (functions[i].fn == NULL) failures++;
        printf("function %s\n", functions[i].name);
    }

    SIZE(dis_dma_vec_t);
    SIZE(sci_dma_capabilities_t);
    SIZE(sci_query_map_t);
    SIZE(sci_query_dma_t);
    SIZE(sci_query_system_t);
    SIZE(sci_query_string_t);
    SIZE(sci_address_t);
    SIZE(sci_smartio_device_info_t);
    SIZE(sci_smartio_query_device_t);

    /* Every other type of the headers, used once. */
    {
        sci_desc_t a = NULL;
        sci_local_segment_t b = NULL;
        sci_remote_segment_t c = NULL;
        sci_map_t d = NULL;
        sci_sequence_t e = NULL;
        sci_dma_queue_t f = NULL;
        sci_dma_channel_t g = NULL;
        sci_local_interrupt_t h = NULL;
        sci_remote_interrupt_t i2 = NULL;
        sci_local_data_interrupt_t j = NULL;
        sci_remote_data_interrupt_t k = NULL;
        sci_smartio_device_t l = NULL;
        sci_device_t m = l;
        sci_ioaddr_t n = 0;
        sci_callback_action_t o = SCI_CALLBACK_CONTINUE;
        sci_segment_cb_reason_t p = SCI_CB_CONNECT;
        sci_dma_queue_state_t q = SCI_DMAQUEUE_IDLE;
        sci_sequence_status_t r = SCI_SEQ_OK;
        sci_dma_type_t s = SCI_DMA_TYPE_DONTCARE;
        sci_cb_local_segment_t t = NULL;
        sci_cb_remote_segment_t u = NULL;
        sci_cb_dma_t v = NULL;
        sci_cb_interrupt_t w = NULL;
        sci_cb_data_interrupt_t x = NULL;
        dis_nodeId_list_t y = {0};
        dis_virt_adapter_t z = DIS_VIRT_ADAPTER_LANES;
        dis_adapter_type_t z2 = z;
        sci_query_adapter_t qa = {0, 0, SCI_Q_ADAPTER_NODEID, NULL};
        sci_query_local_segment_t ql = {NULL, SCI_Q_LOCAL_SEGMENT_IOADDR, {0}};
        sci_query_remote_segment_t qr = {NULL, SCI_Q_REMOTE_SEGMENT_IOADDR, {0}};
        unsigned int b1 = 0, c1 = 2;
        truth("the types of the headers", a == NULL && b == NULL && c == NULL && d == NULL && e == NULL &&
                                              f == NULL && g == NULL && h == NULL && i2 == NULL && j == NULL &&
                                              k == NULL && m == NULL && n == 0 && o == SCI_CALLBACK_CONTINUE &&
                                              p == SCI_CB_CONNECT && q == SCI_DMAQUEUE_IDLE && r == SCI_SEQ_OK &&
                                              s == SCI_DMA_TYPE_DONTCARE && t == NULL && u == NULL && v == NULL &&
                                              w == NULL && x == NULL && y[0] == 0 && z2 == DIS_VIRT_ADAPTER_LANES &&
                                              qa.data == NULL && ql.data.ioaddr == 0 && qr.data.ioaddr == 0);
        truth("IN, OUT and IN_OUT annotate parameters", annotated(5, &b1, &c1) == 7 && b1 == 7 && c1 == 5);
    }

    CONST(SCI_ERR_MASK);
    CONST(SISCI_ERR_MASK);
    CONST(SCI_ERR_OK);
    CONST(SCI_ERR_NO_SUCH_FDID);
    CONST(SCI_ERR_SEMAPHORE_COUNT_EXCEEDED);
    CONST(SCI_ERR_IRQL_ILLEGAL);
    CONST(SCI_ERR_COND_INT_RACE_PROBLEM);
    CONST(SCI_ERR_NOT_SUPPORTED);
    CONST(SCI_INFINITE_TIMEOUT);
    CONST(SCI_FLAG_USE_CALLBACK);
    CONST(SCI_FLAG_EMPTY);
    CONST(SCI_FLAG_PRIVATE);
    CONST(SCI_FLAG_DMA_SOURCE_ONLY);
    CONST(SCI_FLAG_PHYSICAL);
    CONST(SCI_FLAG_CUDA_BUFFER);
    CONST(SCI_FLAG_SCIF_BUFFER);
    CONST(SCI_FLAG_AUTO_ID);
    CONST(SCI_FLAG_FIXED_INTNO);
    CONST(SCI_FLAG_SHARED_INT);
    CONST(SCI_FLAG_CONDITIONAL_INTERRUPT);
    CONST(SCI_FLAG_COUNTING_INT);
    CONST(SCI_FLAG_DMA_WAIT);
    CONST(SCI_FLAG_DMA_READ);
    CONST(SCI_FLAG_DMA_PHDMA);
    CONST(SCI_FLAG_DMA_GLOBAL);
    CONST(SCI_FLAG_ALLOW_UNICAST);
    CONST(SCI_FLAG_DMA_SYSDMA);
    CONST(SCI_FLAG_DMA_USER_MEM);
    CONST(SCI_FLAG_DMA_ADAPTER);
    CONST(SCI_FLAG_DMA_CHANNEL_SHARED);
    CONST(SCI_FLAG_FIXED_MAP_ADDR);
    CONST(SCI_FLAG_READONLY_MAP);
    CONST(SCI_FLAG_LOCK_OPERATION);
    CONST(SCI_FLAG_IO_MAP_IOSPACE);
    CONST(SCI_FLAG_NO_MEMORY_LOOPBACK);
    CONST(SCI_FLAG_SHARED_MAP);
    CONST(SCI_FLAG_BROADCAST);
    CONST(SCI_FLAG_WRITE_BACK_CACHE_MAP);
    CONST(SCI_FLAG_CONDITIONAL_INTERRUPT_MAP);
    CONST(SCI_FLAG_UNCONDITIONAL_DATA_INTERRUPT_MAP);
    CONST(SCI_FLAG_CACHE_FLUSH);
    CONST(SCI_FLAG_CACHE_INVALIDATE);
    CONST(SCI_FLAG_FORCE_REMOVE);
    CONST(SCI_FLAG_EXCLUSIVE);
    CONST(SCI_FLAG_LOCK_USER_MEM);
    CONST(SCI_FLAG_SHARE_EXTERNAL);
    CONST(SCI_FLAG_PCIE_REQUESTER_GLOBAL);
    CONST(SCI_FLAG_DEVICE_SIDE_ONLY);
    CONST(SCI_FLAG_LOCAL_ONLY);
    CONST(SCI_FLAG_DEVICE_PREFER_BANDWIDTH);
    CONST(SCI_FLAG_HOST_PREFER_BANDWIDTH);
    CONST(SCI_FLAG_SPECIFY_PATH);
    CONST(SCI_FLAG_SPECIFY_SLOT);
    CONST(SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY);
    CONST(SCI_FLAG_BLOCK_READ);
    CONST(SCI_FLAG_ERROR_CHECK);
    CONST(SCI_FLAG_NO_FLUSH);
    CONST(SCI_FLAG_NO_STORE_BARRIER);
    CONST(SCI_MEMTYPE_BAR);
    CONST(SCI_MEMTYPE_PRIVATE);
    CONST(SCI_MEMTYPE_SHARED);
    CONST(SCI_MEMACCESS_DEVICE_READ);
    CONST(SCI_MEMACCESS_DEVICE_WRITE);
    CONST(SCI_MEMACCESS_HOST_READ);
    CONST(SCI_MEMACCESS_HOST_WRITE);
    CONST(SCI_MEMACCESS_MULTIHOST_READ);
    CONST(SCI_MEMACCESS_MULTIHOST_WRITE);
    CONST(SCI_MEMACCESS_P2P_READ);
    CONST(SCI_MEMACCESS_P2P_WRITE);
    CONST(SCI_Q_VENDORID);
    CONST(SCI_Q_API);
    CONST(SCI_Q_ADAPTER);
    CONST(SCI_Q_SYSTEM);
    CONST(SCI_Q_LOCAL_SEGMENT);
    CONST(SCI_Q_REMOTE_SEGMENT);
    CONST(SCI_Q_MAP);
    CONST(SCI_Q_DMA);
    CONST(SCI_Q_SISCI_DRIVER_VERSION);
    CONST(SCI_Q_DEVICE);
    CONST(SCI_Q_DEVICE_INFO);
    CONST(SCI_Q_SYSTEM_CPU_CACHE_LINE_SIZE);
    CONST(SCI_Q_DMA_AVAILABLE);
    CONST(SCI_Q_DMA_CAPABILITIES);
    CONST(DIS_BROADCAST_NODEID_GROUP_ALL);
    CONST(DIS_MAX_NSCIS);
    CONST(DIS_DMA_MAX_VECLEN);
    CONST(SCI_DMA_CHANNEL_ID_DONTCARE);
}

static volatile int dma_done;

static sci_callback_action_t dma_cb(void *arg, sci_dma_queue_t q, sci_error_t status)
{
    (void)arg;
    (void)q;
    if (status == SCI_ERR_OK) __atomic_add_fetch(&dma_done, 1, __ATOMIC_RELEASE);
    return SCI_CALLBACK_CANCEL;
}

static void run_calls(void)
{
    sci_error_t err;
    sci_desc_t sd;
    unsigned int node = 0;

    SCIInitialize(NO_FLAGS, &err);
    check("SCIInitialize", err, SCI_ERR_OK);
    SCIOpen(&sd, NO_FLAGS, &err);
    check("SCIOpen", err, SCI_ERR_OK);
    SCIGetLocalNodeId(0, &node, NO_FLAGS, &err);
    check("SCIGetLocalNodeId", err, SCI_ERR_OK);

    /* ---- adapter strings and node info ------------------------------------------------- */
    {
        unsigned int card = 0;
        sci_query_adapter_t qa = {0, 0, SCI_Q_ADAPTER_CARD_TYPE, &card};
        SCIQuery(SCI_Q_ADAPTER, &qa, NO_FLAGS, &err);
        check("SCIQuery(SCI_Q_ADAPTER_CARD_TYPE)", err, SCI_ERR_OK);
        const char *type = SCIGetAdapterTypeString(card);
        const char *family = SCIGetAdapterFamilyString(card);
        truth("SCIGetAdapterTypeString names the Lanes adapter", type != NULL && strstr(type, "Lanes") != NULL);
        truth("SCIGetAdapterFamilyString names its family", family != NULL && strcmp(family, "Lanes") == 0);
        truth("an unknown adapter type is unknown", strstr(SCIGetAdapterTypeString(0xDEAD), "Unknown") != NULL);
        printf("adapter type: %s, family %s\n", type, family);

        char name[] = "localhost";
        unsigned int adapters[DIS_MAX_NSCIS] = {9, 9, 9, 9};
        dis_nodeId_list_t nodes;
        dis_adapter_type_t kind;
        SCIGetNodeInfoByAdapterName(name, adapters, &nodes, &kind, NO_FLAGS, &err);
        check("SCIGetNodeInfoByAdapterName(localhost)", err, SCI_ERR_OK);
        truth("it is this node, on adapter 0", nodes[0] == node && adapters[0] == 0 && adapters[3] == 0 &&
                                                   kind == DIS_VIRT_ADAPTER_LANES);
        char nobody[] = "no-such-host.invalid";
        SCIGetNodeInfoByAdapterName(nobody, adapters, &nodes, &kind, NO_FLAGS, &err);
        check("SCIGetNodeInfoByAdapterName(unknown host)", err, SCI_ERR_NO_SUCH_NODEID);
        SCIGetNodeInfoByAdapterName(name, NULL, &nodes, &kind, NO_FLAGS, &err);
        check("SCIGetNodeInfoByAdapterName(NULL adapters)", err, SCI_ERR_ILLEGAL_PARAMETER);
    }

    /* ---- CSR and SCI space: not on this fabric ----------------------------------------- */
    {
        unsigned int v = SCIGetCSRRegister(sd, 0, node, 0, NO_FLAGS, &err);
        check("SCIGetCSRRegister", err, SCI_ERR_NOT_SUPPORTED);
        truth("it reads 0", v == 0);
        SCISetCSRRegister(sd, 0, node, 0, 1, NO_FLAGS, &err);
        check("SCISetCSRRegister", err, SCI_ERR_NOT_SUPPORTED);
        v = SCIGetLocalCSR(sd, 0, 0, NO_FLAGS, &err);
        check("SCIGetLocalCSR", err, SCI_ERR_NOT_SUPPORTED);
        SCISetLocalCSR(sd, 0, 0, v, NO_FLAGS, &err);
        check("SCISetLocalCSR", err, SCI_ERR_NOT_SUPPORTED);
        SCIGetLocalCSR(NULL, 0, 0, NO_FLAGS, &err);
        check("SCIGetLocalCSR: a bad descriptor", err, SCI_ERR_ILLEGAL_PARAMETER);
        sci_remote_segment_t space = (sci_remote_segment_t)(uintptr_t)1;
        sci_address_t at = {(unsigned short)node, 0, 0x1000};
        SCIConnectSCISpace(sd, 0, &space, at, 4096, NO_FLAGS, &err);
        check("SCIConnectSCISpace", err, SCI_ERR_NOT_SUPPORTED);
        truth("it clears the handle", space == NULL);
    }

    /* ---- segments for the copies and DMA ----------------------------------------------- */
    sci_local_segment_t a, b, c;
    sci_remote_segment_t rb, rc;
    sci_map_t amap, bmap, cmap;
    volatile uint8_t *ap, *bp, *cp;
    SCICreateSegment(sd, &a, 0xA1, 8192, NULL, NULL, NO_FLAGS, &err);
    check("SCICreateSegment a", err, SCI_ERR_OK);
    SCICreateSegment(sd, &b, 0xA2, 8192, NULL, NULL, NO_FLAGS, &err);
    check("SCICreateSegment b", err, SCI_ERR_OK);
    SCICreateSegment(sd, &c, 0xA3, 8192, NULL, NULL, NO_FLAGS, &err);
    check("SCICreateSegment c", err, SCI_ERR_OK);
    SCIPrepareSegment(a, 0, NO_FLAGS, &err);
    SCIPrepareSegment(b, 0, NO_FLAGS, &err);
    SCIPrepareSegment(c, 0, NO_FLAGS, &err);
    SCISetSegmentAvailable(b, 0, NO_FLAGS, &err);
    SCISetSegmentAvailable(c, 0, NO_FLAGS, &err);
    check("segments prepared and available", err, SCI_ERR_OK);
    SCIConnectSegment(sd, &rb, node, 0xA2, 0, NULL, NULL, 1000, NO_FLAGS, &err);
    check("SCIConnectSegment b", err, SCI_ERR_OK);
    SCIConnectSegment(sd, &rc, node, 0xA3, 0, NULL, NULL, 1000, NO_FLAGS, &err);
    check("SCIConnectSegment c", err, SCI_ERR_OK);
    ap = (volatile uint8_t *)SCIMapLocalSegment(a, &amap, 0, 8192, NULL, NO_FLAGS, &err);
    check("SCIMapLocalSegment a", err, SCI_ERR_OK);
    bp = (volatile uint8_t *)SCIMapRemoteSegment(rb, &bmap, 0, 8192, NULL, NO_FLAGS, &err);
    check("SCIMapRemoteSegment b", err, SCI_ERR_OK);
    cp = (volatile uint8_t *)SCIMapRemoteSegment(rc, &cmap, 0, 8192, NULL, NO_FLAGS, &err);
    check("SCIMapRemoteSegment c", err, SCI_ERR_OK);
    truth("SCIGetMapPhysAddr gives 0 (no physical address)", SCIGetMapPhysAddr(bmap) == 0);

    {
        uint8_t msg[300], back[300];
        size_t i;
        int same = 1;
        for (i = 0; i < sizeof msg; i++) msg[i] = (uint8_t)(i * 7 + 3);
        SCIMemCpy_dual(NULL, msg, bmap, cmap, 100, sizeof msg, NO_FLAGS, &err);
        check("SCIMemCpy_dual", err, SCI_ERR_OK);
        for (i = 0; i < sizeof msg; i++) same &= bp[100 + i] == msg[i] && cp[100 + i] == msg[i];
        truth("the same bytes reached both segments", same);
        SCIMemCpy_dual(NULL, back, bmap, cmap, 100, sizeof back, SCI_FLAG_BLOCK_READ, &err);
        check("SCIMemCpy_dual (block read)", err, SCI_ERR_OK);
        truth("it read the first map", memcmp(back, msg, sizeof msg) == 0);
        SCIMemCpy_dual(NULL, msg, bmap, cmap, 8000, sizeof msg, NO_FLAGS, &err);
        check("SCIMemCpy_dual: out of range", err, SCI_ERR_OUT_OF_RANGE);
        SCIMemCpy_dual(NULL, msg, bmap, NULL, 0, sizeof msg, NO_FLAGS, &err);
        check("SCIMemCpy_dual: a bad second map", err, SCI_ERR_ILLEGAL_PARAMETER);
    }

    /* ---- DMA: the vendor's vector layout, and the DIS names ---------------------------- */
    {
        sci_dma_queue_t dq;
        dis_dma_vec_t vec[4];
        unsigned int i;
        int same = 1;
        for (i = 0; i < 8192; i++) ap[i] = (uint8_t)(i * 5 + 1);
        SCICreateDMAQueue(sd, &dq, 0, 4, NO_FLAGS, &err);
        check("SCICreateDMAQueue", err, SCI_ERR_OK);
        for (i = 0; i < 4; i++) {
            vec[i].size = 256;
            vec[i].local_offset = i * 512;
            vec[i].remote_offset = 4096 + i * 256;
            vec[i].flags = 0;
        }
        SCIStartDmaTransferVec(dq, a, rb, 4, vec, NULL, NULL, SCI_FLAG_DMA_WAIT, &err);
        check("SCIStartDmaTransferVec (unsigned int members)", err, SCI_ERR_OK);
        for (i = 0; i < 4 * 256; i++) same &= bp[4096 + i] == ap[(i / 256) * 512 + i % 256];
        truth("every element went where its offsets say", same);
        for (i = 0; i < 4; i++) vec[i].remote_offset = 6000 + i * 256;
        DISStartDmaTransferVec(dq, a, rc, 4, vec, dma_cb, NULL, SCI_FLAG_USE_CALLBACK, &err);
        check("DISStartDmaTransferVec", err, SCI_ERR_OK);
        SCIWaitForDMAQueue(dq, 5000, NO_FLAGS, &err);
        check("its transfers completed", err, SCI_ERR_OK);
        for (i = 0; i < 5000 && __atomic_load_n(&dma_done, __ATOMIC_ACQUIRE) == 0; i++) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
        same = 1;
        for (i = 0; i < 4 * 256; i++) same &= cp[6000 + i] == ap[(i / 256) * 512 + i % 256];
        truth("DISStartDmaTransferVec wrote the vector", same && dma_done == 1);
        DISStartDmaTransfer(dq, a, rc, 0, 512, 0, NULL, NULL, SCI_FLAG_DMA_WAIT, &err);
        check("DISStartDmaTransfer", err, SCI_ERR_OK);
        same = 1;
        for (i = 0; i < 512; i++) same &= cp[i] == ap[i];
        truth("DISStartDmaTransfer wrote the segment", same);
        DISStartDmaTransfer(dq, a, rc, 0, 512, 8000, NULL, NULL, SCI_FLAG_DMA_WAIT, &err);
        check("DISStartDmaTransfer: out of range", err, SCI_ERR_OUT_OF_RANGE);
        SCIStartDmaTransferVec(dq, a, rb, 0, vec, NULL, NULL, NO_FLAGS, &err);
        check("SCIStartDmaTransferVec: no elements", err, SCI_ERR_ILLEGAL_PARAMETER);
        SCIStartDmaTransferVec(dq, a, rb, 4, NULL, NULL, NULL, NO_FLAGS, &err);
        check("SCIStartDmaTransferVec: NULL vector", err, SCI_ERR_ILLEGAL_PARAMETER);
        SCIRemoveDMAQueue(dq, NO_FLAGS, &err);
        check("SCIRemoveDMAQueue", err, SCI_ERR_OK);
    }

    /* ---- SCIQuery in the vendor's layouts ------------------------------------------------ */
    {
        sci_dma_capabilities_t caps;
        sci_query_dma_t qd;
        memset(&caps, 0xFF, sizeof caps);
        qd.localAdapterNo = 0;
        qd.subcommand = SCI_Q_DMA_CAPABILITIES;
        qd.data = &caps;
        SCIQuery(SCI_Q_DMA, &qd, SCI_FLAG_DMA_ADAPTER, &err);
        check("SCIQuery(SCI_Q_DMA_CAPABILITIES)", err, SCI_ERR_OK);
        truth("the capabilities fill every member",
              caps.num_channels > 0 && caps.max_vector_length == DIS_DMA_MAX_VECLEN && caps.support_mem2io == 0 &&
                  caps.support_io2mem == 0 && caps.support_io2io == 0 && caps.min_align_bytes == 1 &&
                  caps.suggested_align_bytes == 64);
        unsigned int avail = 7;
        qd.subcommand = SCI_Q_DMA_AVAILABLE;
        qd.data = &avail;
        SCIQuery(SCI_Q_DMA, &qd, SCI_FLAG_DMA_ADAPTER, &err);
        check("SCIQuery(SCI_Q_DMA_AVAILABLE) still answers", err, SCI_ERR_OK);

        sci_query_map_t qm;
        qm.map = amap;
        qm.subcommand = SCI_Q_MAP_MAPPED_TO_LOCAL_TARGET;
        qm.data = 0xFFFFFFFFFFFFFFFFULL;
        SCIQuery(SCI_Q_MAP, &qm, NO_FLAGS, &err);
        check("SCIQuery(SCI_Q_MAP)", err, SCI_ERR_OK);
        truth("the 64-bit data is 1 for a local map", qm.data == 1);

        char text[128];
        sci_query_string_t qs = {text, sizeof text};
        SCIQuery(SCI_Q_SISCI_DRIVER_VERSION, &qs, NO_FLAGS, &err);
        check("SCIQuery(SCI_Q_SISCI_DRIVER_VERSION)", err, SCI_ERR_OK);
        truth("it names Lanes", strstr(text, "Lanes") != NULL);
        SCIQuery(SCI_Q_VENDORID, &qs, NO_FLAGS, &err);
        check("SCIQuery(SCI_Q_VENDORID) still answers", err, SCI_ERR_OK);

        unsigned int line = 0;
        sci_query_system_t qsys = {SCI_Q_SYSTEM_CPU_CACHE_LINE_SIZE, &line};
        SCIQuery(SCI_Q_SYSTEM, &qsys, NO_FLAGS, &err);
        check("SCIQuery(SCI_Q_SYSTEM_CPU_CACHE_LINE_SIZE)", err, SCI_ERR_OK);
        truth("a cache line is a power of two", line >= 16 && (line & (line - 1)) == 0);
        unsigned int wc = 9;
        qsys.subcommand = SCI_Q_SYSTEM_WRITE_COMBINING_ENABLED;
        qsys.data = &wc;
        SCIQuery(SCI_Q_SYSTEM, &qsys, NO_FLAGS, &err);
        check("SCIQuery(SCI_Q_SYSTEM_WRITE_COMBINING_ENABLED) still answers", err, SCI_ERR_OK);
    }

    /* ---- named interrupts ---------------------------------------------------------------- */
    {
        sci_local_interrupt_t named, again;
        sci_remote_interrupt_t ri;
        unsigned int no = 0x777;
        SCICreateNamedInterrupt(sd, &named, 0, &no, NULL, NULL, NO_FLAGS, &err);
        check("SCICreateNamedInterrupt(0x777)", err, SCI_ERR_OK);
        truth("it has the number it was named", no == 0x777);
        SCICreateNamedInterrupt(sd, &again, 0, &no, NULL, NULL, NO_FLAGS, &err);
        check("SCICreateNamedInterrupt: the number in use", err, SCI_ERR_BUSY);
        SCIConnectInterrupt(sd, &ri, node, 0, 0x777, 1000, NO_FLAGS, &err);
        check("SCIConnectInterrupt to it", err, SCI_ERR_OK);
        SCITriggerInterrupt(ri, NO_FLAGS, &err);
        check("SCITriggerInterrupt", err, SCI_ERR_OK);
        SCIWaitForInterrupt(named, 5000, NO_FLAGS, &err);
        check("SCIWaitForInterrupt on the named interrupt", err, SCI_ERR_OK);
        SCIDisconnectInterrupt(ri, NO_FLAGS, &err);
        SCIRemoveInterrupt(named, NO_FLAGS, &err);
        check("SCIRemoveInterrupt", err, SCI_ERR_OK);
    }

    /* ---- an interrupt flag, triggered by this node -------------------------------------- */
    {
        sci_local_interrupt_t flag, plain;
        sci_remote_interrupt_t ri;
        unsigned int count = 99, no = 0;
        SCIRegisterInterruptFlag(0, &flag, a, 64, NULL, NULL, SCI_FLAG_CONDITIONAL_INTERRUPT, &err);
        check("SCIRegisterInterruptFlag", err, SCI_ERR_OK);
        no = *(volatile unsigned int *)(ap + 64);
        truth("the flag word holds the flag's interrupt number", no != 0);
        SCIConnectInterrupt(sd, &ri, node, 0, no, 1000, NO_FLAGS, &err);
        check("SCIConnectInterrupt to the flag", err, SCI_ERR_OK);
        SCITriggerInterrupt(ri, NO_FLAGS, &err);
        SCIWaitForInterrupt(flag, 5000, NO_FLAGS, &err);
        check("the trigger is delivered", err, SCI_ERR_OK);
        SCIGetConditionalInterruptTrigCounter(flag, &count, NO_FLAGS, &err);
        check("SCIGetConditionalInterruptTrigCounter", err, SCI_ERR_OK);
        truth("one trigger counted", count == 1);
        SCIEnableConditionalInterrupt(flag, NO_FLAGS, &err);
        check("SCIEnableConditionalInterrupt", err, SCI_ERR_OK);
        SCIDisableConditionalInterrupt(flag, NO_FLAGS, &err);
        check("SCIDisableConditionalInterrupt", err, SCI_ERR_OK);
        SCIRegisterInterruptFlag(0, &plain, a, 66, NULL, NULL, NO_FLAGS, &err);
        check("SCIRegisterInterruptFlag: an unaligned offset", err, SCI_ERR_OFFSET_ALIGNMENT);
        SCIRegisterInterruptFlag(0, &plain, a, 8192, NULL, NULL, NO_FLAGS, &err);
        check("SCIRegisterInterruptFlag: past the segment", err, SCI_ERR_OUT_OF_RANGE);
        SCICreateInterrupt(sd, &plain, 0, &no, NULL, NULL, NO_FLAGS, &err);
        SCIEnableConditionalInterrupt(plain, NO_FLAGS, &err);
        check("SCIEnableConditionalInterrupt: not a flag", err, SCI_ERR_ILLEGAL_OPERATION);
        SCIRemoveInterrupt(plain, NO_FLAGS, &err);
        SCIDisconnectInterrupt(ri, NO_FLAGS, &err);
        SCIRemoveInterrupt(flag, NO_FLAGS, &err);
        check("SCIRemoveInterrupt (the flag)", err, SCI_ERR_OK);
        SCIEnableConditionalInterrupt(flag, NO_FLAGS, &err);
        check("SCIEnableConditionalInterrupt: removed", err, SCI_ERR_ILLEGAL_PARAMETER);
    }

    /* ---- SCIAttachPhysicalMemory of the process's own memory --------------------------- */
    {
        sci_local_segment_t empty;
        sci_map_t emap;
        void *mem = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        truth("mmap", mem != MAP_FAILED);
        ((volatile uint8_t *)mem)[10] = 0x5A;
        SCICreateSegment(sd, &empty, 0xA4, 8192, NULL, NULL, SCI_FLAG_EMPTY, &err);
        check("SCICreateSegment(SCI_FLAG_EMPTY)", err, SCI_ERR_OK);
        SCIAttachPhysicalMemory(0, NULL, 0, 8192, empty, NO_FLAGS, &err);
        check("SCIAttachPhysicalMemory without an address", err, SCI_ERR_NOT_SUPPORTED);
        SCIAttachPhysicalMemory(0, mem, 0, 8192, empty, SCI_FLAG_CUDA_BUFFER, &err);
        check("SCIAttachPhysicalMemory of a GPU buffer", err, SCI_ERR_NOT_SUPPORTED);
        SCIAttachPhysicalMemory(0x1000, mem, 0, 8192, empty, NO_FLAGS, &err);
        check("SCIAttachPhysicalMemory of the process's memory", err, SCI_ERR_OK);
        volatile uint8_t *ep = (volatile uint8_t *)SCIMapLocalSegment(empty, &emap, 0, 8192, NULL, NO_FLAGS, &err);
        check("SCIMapLocalSegment of it", err, SCI_ERR_OK);
        truth("the segment is that memory", ep != NULL && ep[10] == 0x5A);
        SCIUnmapSegment(emap, NO_FLAGS, &err);
        SCIRemoveSegment(empty, NO_FLAGS, &err);
        check("SCIRemoveSegment", err, SCI_ERR_OK);
        munmap(mem, 8192);
    }

    /* ---- the memcpy function switch ------------------------------------------------------ */
    truth("GetSciMemCopyFunction starts at 0", GetSciMemCopyFunction() == 0);
    SetSciMemCopyFunction(5);
    truth("SetSciMemCopyFunction is remembered", GetSciMemCopyFunction() == 5);

    SCIUnmapSegment(amap, NO_FLAGS, &err);
    SCIUnmapSegment(bmap, NO_FLAGS, &err);
    SCIUnmapSegment(cmap, NO_FLAGS, &err);
    SCIDisconnectSegment(rb, NO_FLAGS, &err);
    SCIDisconnectSegment(rc, NO_FLAGS, &err);
    SCIRemoveSegment(a, NO_FLAGS, &err);
    SCIRemoveSegment(b, NO_FLAGS, &err);
    SCIRemoveSegment(c, NO_FLAGS, &err);
    SCIClose(sd, NO_FLAGS, &err);
    check("SCIClose with everything released", err, SCI_ERR_OK);
    SCITerminate();
}

int main(void)
{
    print_surface();
    run_calls();
    printf("%d failures\n", failures);
    return failures > 100 ? 100 : failures;
}
