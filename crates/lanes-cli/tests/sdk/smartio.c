/* SmartIO as a device driver written for the vendor's library drives it (issue 28, item 7),
 * in one node process:
 *
 *   smartio none   no device exists: the device list is empty, borrowing is
 *                  SCI_ERR_NO_SUCH_FDID, device calls on bad handles are refused; PCIe
 *                  requesters are recorded.
 *   smartio fake   with LANES_SISCI_FAKE_DEVICES="0x100:64K:0x010802:0x144d:0xa808,0x200":
 *                  list (with filters), borrow (exclusively, then shared), query, connect
 *                  and map BAR 0 (two borrowers see the same memory), DMA into it, create,
 *                  connect and map device segments, map segments for the device, return
 *                  (refused while device segments are connected), and the last return
 *                  removes the device's memory.
 *   smartio bad    LANES_SISCI_FAKE_DEVICES is malformed: SCI_ERR_SYSTEM, with the cause.
 *
 * Each check prints "ok NAME" or "FAIL NAME ..."; "0 failures" ends a good run. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sisci_api.h>
#include <sisci_error.h>
#include <sisci_types.h>
#include <dis_types.h>

#include "checks.h"

#define NO_FLAGS 0U

static sci_error_t query_info(unsigned long long fdid, sci_smartio_device_info_t *info)
{
    sci_error_t err;
    sci_smartio_query_device_t q;
    memset(info, 0, sizeof *info);
    q.fdid = fdid;
    q.subcommand = SCI_Q_DEVICE_INFO;
    q.data = info;
    SCIQuery(SCI_Q_DEVICE, &q, NO_FLAGS, &err);
    return err;
}

static void no_device(sci_desc_t sd)
{
    sci_error_t err;
    unsigned int ids[8] = {0};
    sci_smartio_device_t dev = (sci_smartio_device_t)(uintptr_t)1;
    sci_remote_segment_t seg;
    sci_smartio_device_info_t info;
    sci_ioaddr_t io;

    size_t n = SCIGetDeviceList(sd, ids, 8, NULL, NO_FLAGS, &err);
    check("SCIGetDeviceList", err, SCI_ERR_OK);
    truth("no device is found", n == 0);
    SCIBorrowDevice(sd, &dev, 0x100, NO_FLAGS, &err);
    check("SCIBorrowDevice: no such device", err, SCI_ERR_NO_SUCH_FDID);
    truth("the handle is cleared", dev == NULL);
    SCIBorrowDevice(sd, &dev, 0x100, SCI_FLAG_EXCLUSIVE, &err);
    check("SCIBorrowDevice(SCI_FLAG_EXCLUSIVE): no such device", err, SCI_ERR_NO_SUCH_FDID);
    check("SCI_Q_DEVICE_INFO: no such device", query_info(0x100, &info), SCI_ERR_NO_SUCH_FDID);
    SCIConnectDeviceSegment(NULL, &seg, 0, SCI_MEMTYPE_BAR, NULL, NULL, NO_FLAGS, &err);
    check("SCIConnectDeviceSegment: no device handle", err, SCI_ERR_ILLEGAL_PARAMETER);
    SCICreateDeviceSegment(NULL, 1, 4096, SCI_MEMTYPE_PRIVATE, 0, NO_FLAGS, &err);
    check("SCICreateDeviceSegment: no device handle", err, SCI_ERR_ILLEGAL_PARAMETER);
    SCIReturnDevice(NULL, NO_FLAGS, &err);
    check("SCIReturnDevice: no device handle", err, SCI_ERR_ILLEGAL_PARAMETER);
    SCIReleaseExclusiveBorrow(NULL, NO_FLAGS, &err);
    check("SCIReleaseExclusiveBorrow: no device handle", err, SCI_ERR_ILLEGAL_PARAMETER);
    truth("SCIGetFabricDeviceId of no device is 0", SCIGetFabricDeviceId(NULL) == 0);
    SCIMapRemoteSegmentForDevice(NULL, NULL, &io, 0, 4096, NO_FLAGS, &err);
    check("SCIMapRemoteSegmentForDevice: no handles", err, SCI_ERR_ILLEGAL_PARAMETER);

    SCIRegisterPCIeRequester(sd, 0, 1, 0, SCI_FLAG_PCIE_REQUESTER_GLOBAL, &err);
    check("SCIRegisterPCIeRequester", err, SCI_ERR_OK);
    SCIRegisterPCIeRequester(sd, 0, 1, 0, SCI_FLAG_PCIE_REQUESTER_GLOBAL, &err);
    check("SCIRegisterPCIeRequester: already registered", err, SCI_ERR_BUSY);
    SCIRegisterPCIeRequester(sd, 0, 256, 0, NO_FLAGS, &err);
    check("SCIRegisterPCIeRequester: bus 256", err, SCI_ERR_ILLEGAL_PARAMETER);
    SCIUnregisterPCIeRequester(sd, 0, 1, 0, NO_FLAGS, &err);
    check("SCIUnregisterPCIeRequester", err, SCI_ERR_OK);
    SCIUnregisterPCIeRequester(sd, 0, 1, 0, NO_FLAGS, &err);
    check("SCIUnregisterPCIeRequester: not registered", err, SCI_ERR_ILLEGAL_OPERATION);
}

static void fake_device(sci_desc_t sd, sci_desc_t sd2, unsigned int node)
{
    sci_error_t err;
    unsigned int ids[8] = {0};
    sci_smartio_device_info_t filter, info;
    sci_smartio_device_t dev, dev2, dev3;
    size_t n;

    n = SCIGetDeviceList(sd, ids, 8, NULL, NO_FLAGS, &err);
    check("SCIGetDeviceList", err, SCI_ERR_OK);
    truth("both fake devices are listed", n == 2 && ids[0] == 0x100 && ids[1] == 0x200);
    memset(&filter, 0, sizeof filter);
    filter.pci_class = 0x010802;
    n = SCIGetDeviceList(sd, ids, 8, &filter, NO_FLAGS, &err);
    truth("a class filter finds the NVMe one", err == SCI_ERR_OK && n == 1 && ids[0] == 0x100);
    filter.pci_class = 0x030000;
    n = SCIGetDeviceList(sd, ids, 8, &filter, NO_FLAGS, &err);
    truth("and nothing for another class", err == SCI_ERR_OK && n == 0);
    n = SCIGetDeviceList(sd, ids, 1, NULL, NO_FLAGS, &err);
    truth("a list of one entry gets one", err == SCI_ERR_OK && n == 1);
    n = SCIGetDeviceList(sd, NULL, 8, NULL, NO_FLAGS, &err);
    check("SCIGetDeviceList: NULL list", err, SCI_ERR_ILLEGAL_PARAMETER);

    SCIBorrowDevice(sd, &dev, 0x100, SCI_FLAG_EXCLUSIVE, &err);
    check("SCIBorrowDevice(SCI_FLAG_EXCLUSIVE)", err, SCI_ERR_OK);
    truth("SCIGetFabricDeviceId", SCIGetFabricDeviceId(dev) == 0x100);
    SCIBorrowDevice(sd2, &dev2, 0x100, NO_FLAGS, &err);
    check("SCIBorrowDevice while borrowed exclusively", err, SCI_ERR_NOT_AVAILABLE);
    SCIReleaseExclusiveBorrow(dev, NO_FLAGS, &err);
    check("SCIReleaseExclusiveBorrow", err, SCI_ERR_OK);
    SCIReleaseExclusiveBorrow(dev, NO_FLAGS, &err);
    check("SCIReleaseExclusiveBorrow: not exclusive", err, SCI_ERR_ILLEGAL_OPERATION);
    SCIBorrowDevice(sd2, &dev2, 0x100, NO_FLAGS, &err);
    check("a second borrower", err, SCI_ERR_OK);
    SCIBorrowDevice(sd2, &dev3, 0x100, SCI_FLAG_EXCLUSIVE, &err);
    check("SCIBorrowDevice(SCI_FLAG_EXCLUSIVE) while borrowed", err, SCI_ERR_NOT_AVAILABLE);
    SCIBorrowDevice(sd, &dev3, 0x300, NO_FLAGS, &err);
    check("SCIBorrowDevice: no such device", err, SCI_ERR_NO_SUCH_FDID);

    check("SCI_Q_DEVICE_INFO", query_info(0x100, &info), SCI_ERR_OK);
    truth("the device's information", info.fdid == 0x100 && info.pci_class == 0x010802 &&
                                          info.pci_vendor_id == 0x144d && info.pci_device_id == 0xa808 &&
                                          info.nodeid == node && info.adapter == 0 && info.physical_slot == -1 &&
                                          strcmp(info.user_name, "lanes-fake-device-0x100") == 0);

    /* BAR 0: memory both borrowers see. */
    sci_remote_segment_t bar, bar2, priv, shared, none;
    sci_map_t barmap, bar2map, privmap;
    volatile uint32_t *regs, *regs2;
    SCIConnectDeviceSegment(dev, &bar, 0, SCI_MEMTYPE_BAR, NULL, NULL, NO_FLAGS, &err);
    check("SCIConnectDeviceSegment(BAR 0)", err, SCI_ERR_OK);
    truth("BAR 0 has the size described", SCIGetRemoteSegmentSize(bar) == 65536);
    regs = (volatile uint32_t *)SCIMapRemoteSegment(bar, &barmap, 0, 65536, NULL, SCI_FLAG_IO_MAP_IOSPACE, &err);
    check("SCIMapRemoteSegment(BAR 0, SCI_FLAG_IO_MAP_IOSPACE)", err, SCI_ERR_OK);
    regs[0] = 0xC0FFEE;
    regs[5] = 42;
    SCIConnectDeviceSegmentPath(dev2, &bar2, 0, SCI_MEMTYPE_BAR, 0, NULL, NULL, SCI_FLAG_SPECIFY_PATH, &err);
    check("SCIConnectDeviceSegmentPath(BAR 0) by the second borrower", err, SCI_ERR_OK);
    regs2 = (volatile uint32_t *)SCIMapRemoteSegment(bar2, &bar2map, 0, 4096, NULL, NO_FLAGS, &err);
    check("its map", err, SCI_ERR_OK);
    truth("both see the same device memory", regs2[0] == 0xC0FFEE && regs2[5] == 42);
    SCIConnectDeviceSegment(dev, &none, 1, SCI_MEMTYPE_BAR, NULL, NULL, NO_FLAGS, &err);
    check("SCIConnectDeviceSegment(BAR 1): no such BAR", err, SCI_ERR_NO_SUCH_SEGMENT);
    SCIConnectDeviceSegment(dev, &none, 0, 0x8, NULL, NULL, NO_FLAGS, &err);
    check("SCIConnectDeviceSegment: no such memory type", err, SCI_ERR_ILLEGAL_PARAMETER);
    SCIConnectDeviceSegmentPath(dev, &none, 0, SCI_MEMTYPE_BAR, 1, NULL, NULL, NO_FLAGS, &err);
    check("SCIConnectDeviceSegmentPath: adapter 1", err, SCI_ERR_NO_SUCH_ADAPTERNO);

    /* DMA into the device's BAR, as into any remote segment. */
    {
        sci_local_segment_t src;
        sci_map_t srcmap;
        sci_dma_queue_t dq;
        SCICreateSegment(sd, &src, 0x51, 4096, NULL, NULL, NO_FLAGS, &err);
        SCIPrepareSegment(src, 0, NO_FLAGS, &err);
        volatile uint8_t *sp = (volatile uint8_t *)SCIMapLocalSegment(src, &srcmap, 0, 4096, NULL, NO_FLAGS, &err);
        check("a local segment for DMA", err, SCI_ERR_OK);
        for (unsigned int i = 0; i < 256; i++) sp[i] = (uint8_t)i;
        SCICreateDMAQueue(sd, &dq, 0, 1, NO_FLAGS, &err);
        SCIStartDmaTransfer(dq, src, bar, 0, 256, 1024, NULL, NULL, SCI_FLAG_DMA_WAIT, &err);
        check("SCIStartDmaTransfer into BAR 0", err, SCI_ERR_OK);
        volatile uint8_t *b8 = (volatile uint8_t *)regs;
        truth("the bytes are in the device's memory", b8[1024] == 0 && b8[1024 + 200] == 200);
        SCIRemoveDMAQueue(dq, NO_FLAGS, &err);

        /* A local segment mapped for the device. */
        sci_ioaddr_t io = 0;
        SCISetSegmentAvailable(src, 0, NO_FLAGS, &err);
        SCIMapLocalSegmentForDevice(src, 0, dev, &io, 0, 4096, NO_FLAGS, &err);
        check("SCIMapLocalSegmentForDevice", err, SCI_ERR_OK);
        truth("it gives a bus address", io != 0);
        SCIMapLocalSegmentForDevice(src, 0, dev, &io, 4000, 200, NO_FLAGS, &err);
        check("SCIMapLocalSegmentForDevice: out of range", err, SCI_ERR_OUT_OF_RANGE);
        SCIUnmapLocalSegmentForDevice(src, 0, dev, NO_FLAGS, &err);
        check("SCIUnmapLocalSegmentForDevice", err, SCI_ERR_OK);
        SCIUnmapLocalSegmentForDevice(src, 0, dev, NO_FLAGS, &err);
        check("SCIUnmapLocalSegmentForDevice: not mapped", err, SCI_ERR_ILLEGAL_OPERATION);
        SCIUnmapSegment(srcmap, NO_FLAGS, &err);
        SCIRemoveSegment(src, NO_FLAGS, &err);
        check("the local segment is removed", err, SCI_ERR_OK);
    }

    /* Device segments. */
    SCICreateDeviceSegment(dev, 1, 4096, SCI_MEMTYPE_PRIVATE,
                           SCI_MEMACCESS_DEVICE_READ | SCI_MEMACCESS_HOST_WRITE, NO_FLAGS, &err);
    check("SCICreateDeviceSegment(SCI_MEMTYPE_PRIVATE)", err, SCI_ERR_OK);
    SCICreateDeviceSegment(dev, 1, 4096, SCI_MEMTYPE_PRIVATE, 0, NO_FLAGS, &err);
    check("SCICreateDeviceSegment: the id in use", err, SCI_ERR_SEGMENTID_USED);
    SCICreateDeviceSegment(dev, 0, 4096, SCI_MEMTYPE_BAR, 0, NO_FLAGS, &err);
    check("SCICreateDeviceSegment: a BAR", err, SCI_ERR_ILLEGAL_PARAMETER);
    SCICreateDeviceSegment(dev, 2, 4096, SCI_MEMTYPE_SHARED,
                           SCI_MEMACCESS_HOST_WRITE | SCI_MEMACCESS_MULTIHOST_READ, NO_FLAGS, &err);
    check("SCICreateDeviceSegment(SCI_MEMTYPE_SHARED)", err, SCI_ERR_OK);
    SCIConnectDeviceSegment(dev, &priv, 1, SCI_MEMTYPE_PRIVATE, NULL, NULL, NO_FLAGS, &err);
    check("SCIConnectDeviceSegment(SCI_MEMTYPE_PRIVATE)", err, SCI_ERR_OK);
    volatile uint8_t *pp = (volatile uint8_t *)SCIMapRemoteSegment(priv, &privmap, 0, 4096, NULL, NO_FLAGS, &err);
    check("its map", err, SCI_ERR_OK);
    pp[100] = 0x77;
    truth("it holds what is written", pp[100] == 0x77);
    SCIConnectDeviceSegment(dev2, &shared, 2, SCI_MEMTYPE_SHARED, NULL, NULL, NO_FLAGS, &err);
    check("SCIConnectDeviceSegment(SCI_MEMTYPE_SHARED) by the second borrower", err, SCI_ERR_OK);
    SCIConnectDeviceSegment(dev, &none, 3, SCI_MEMTYPE_PRIVATE, NULL, NULL, NO_FLAGS, &err);
    check("SCIConnectDeviceSegment: no such device segment", err, SCI_ERR_NO_SUCH_SEGMENT);
    truth("a failed connection clears the handle", none == NULL);
    {
        sci_ioaddr_t io = 0, io2 = 0;
        SCIMapRemoteSegmentForDevice(priv, dev, &io, 0, 4096, NO_FLAGS, &err);
        check("SCIMapRemoteSegmentForDevice", err, SCI_ERR_OK);
        SCIMapRemoteSegmentForDevice(priv, dev, &io2, 512, 512, NO_FLAGS, &err);
        truth("offsets add to the segment's bus address", err == SCI_ERR_OK && io != 0 && io2 == io + 512);
        SCIMapRemoteSegmentForDevice(priv, dev, &io2, 4096, 1, NO_FLAGS, &err);
        check("SCIMapRemoteSegmentForDevice: out of range", err, SCI_ERR_OUT_OF_RANGE);
        SCIMapRemoteSegmentForDevice(bar, dev, &io2, 0, 65536, NO_FLAGS, &err);
        check("SCIMapRemoteSegmentForDevice(BAR 0)", err, SCI_ERR_OK);
        SCIUnmapRemoteSegmentForDevice(priv, dev, NO_FLAGS, &err);
        check("SCIUnmapRemoteSegmentForDevice", err, SCI_ERR_OK);
        SCIUnmapRemoteSegmentForDevice(priv, dev, NO_FLAGS, &err);
        check("SCIUnmapRemoteSegmentForDevice: not mapped", err, SCI_ERR_ILLEGAL_OPERATION);
    }

    /* Returning. */
    SCIReturnDevice(dev, NO_FLAGS, &err);
    check("SCIReturnDevice while its segments are connected", err, SCI_ERR_BUSY);
    SCIUnmapSegment(barmap, NO_FLAGS, &err);
    SCIUnmapSegment(privmap, NO_FLAGS, &err);
    SCIDisconnectSegment(bar, NO_FLAGS, &err);
    check("SCIDisconnectSegment(BAR 0)", err, SCI_ERR_OK);
    SCIDisconnectSegment(priv, NO_FLAGS, &err);
    check("SCIDisconnectSegment(device segment)", err, SCI_ERR_OK);
    SCIReturnDevice(dev, NO_FLAGS, &err);
    check("SCIReturnDevice", err, SCI_ERR_OK);
    SCIReturnDevice(dev, NO_FLAGS, &err);
    check("SCIReturnDevice again", err, SCI_ERR_ILLEGAL_PARAMETER);
    truth("the second borrower still sees BAR 0", regs2[0] == 0xC0FFEE);
    SCIUnmapSegment(bar2map, NO_FLAGS, &err);
    SCIDisconnectSegment(bar2, NO_FLAGS, &err);
    SCIDisconnectSegment(shared, NO_FLAGS, &err);
    SCIReturnDevice(dev2, NO_FLAGS, &err);
    check("the last borrower returns it", err, SCI_ERR_OK);

    /* The last return removed the device's memory: a new borrower finds it fresh. */
    SCIBorrowDevice(sd, &dev, 0x100, NO_FLAGS, &err);
    check("SCIBorrowDevice again", err, SCI_ERR_OK);
    SCIConnectDeviceSegment(dev, &none, 1, SCI_MEMTYPE_PRIVATE, NULL, NULL, NO_FLAGS, &err);
    check("the device segments went with the last return", err, SCI_ERR_NO_SUCH_SEGMENT);
    SCIConnectDeviceSegment(dev, &bar, 0, SCI_MEMTYPE_BAR, NULL, NULL, NO_FLAGS, &err);
    check("SCIConnectDeviceSegment(BAR 0) again", err, SCI_ERR_OK);
    regs = (volatile uint32_t *)SCIMapRemoteSegment(bar, &barmap, 0, 4096, NULL, NO_FLAGS, &err);
    truth("BAR 0 is new memory", err == SCI_ERR_OK && regs[0] == 0);
    SCIUnmapSegment(barmap, NO_FLAGS, &err);
    SCIDisconnectSegment(bar, NO_FLAGS, &err);
    SCIClose(sd, NO_FLAGS, &err);
    check("SCIClose with a borrowed device", err, SCI_ERR_BUSY);
    SCIClose(sd, SCI_FLAG_FORCE_REMOVE, &err);
    check("SCIClose(SCI_FLAG_FORCE_REMOVE) returns it", err, SCI_ERR_OK);
    SCIBorrowDevice(sd2, &dev, 0x100, SCI_FLAG_EXCLUSIVE, &err);
    check("then it can be borrowed exclusively", err, SCI_ERR_OK);
    SCIReturnDevice(dev, NO_FLAGS, &err);
    check("and returned", err, SCI_ERR_OK);
}

int main(int argc, char **argv)
{
    sci_error_t err;
    sci_desc_t sd, sd2;
    unsigned int node = 0;
    const char *mode = argc > 1 ? argv[1] : "none";

    SCIInitialize(NO_FLAGS, &err);
    SCIOpen(&sd, NO_FLAGS, &err);
    check("SCIOpen", err, SCI_ERR_OK);
    SCIOpen(&sd2, NO_FLAGS, &err);
    check("SCIOpen (a second descriptor)", err, SCI_ERR_OK);
    SCIGetLocalNodeId(0, &node, NO_FLAGS, &err);

    if (strcmp(mode, "none") == 0) {
        no_device(sd);
        SCIClose(sd, NO_FLAGS, &err);
        check("SCIClose", err, SCI_ERR_OK);
    } else if (strcmp(mode, "fake") == 0) {
        fake_device(sd, sd2, node);
    } else {
        unsigned int ids[4];
        size_t n = SCIGetDeviceList(sd, ids, 4, NULL, NO_FLAGS, &err);
        check("SCIGetDeviceList with a malformed LANES_SISCI_FAKE_DEVICES", err, SCI_ERR_SYSTEM);
        truth("nothing is listed", n == 0);
        printf("message: %s\n", SCIGetErrorString(err));
        SCIClose(sd, NO_FLAGS, &err);
    }
    SCIClose(sd2, NO_FLAGS, &err);
    check("SCIClose (the second descriptor)", err, SCI_ERR_OK);
    SCITerminate();
    printf("%d failures\n", failures);
    return failures > 100 ? 100 : failures;
}
