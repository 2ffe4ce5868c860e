/*
 * smartio_dev - a SmartIO device example: find a device of the fabric, borrow it, reach its
 * registers and give it memory, the way a user-space driver over SmartIO starts.
 *
 *  1. SCIGetDeviceList with a filter (PCI class, vendor id) lists the fabric device ids;
 *     the first one (or -fdid) is borrowed with SCIBorrowDevice (-exclusive: nobody else).
 *  2. SCIQuery(SCI_Q_DEVICE, SCI_Q_DEVICE_INFO) tells what it is and where.
 *  3. BAR 0: SCIConnectDeviceSegment(SCI_MEMTYPE_BAR, 0) and SCIMapRemoteSegment give the
 *     registers. The example programs a small command interface into them, as a driver
 *     would: the bus address of the host's command buffer into a base register, the address
 *     of the device's data buffer, a command block (SCIMemCpy through a sequence) and last
 *     the doorbell; then it reads every register back and checks it.
 *  4. Memory for the device: a device segment (SCICreateDeviceSegment, SCI_MEMTYPE_PRIVATE,
 *     connected with SCIConnectDeviceSegment and mapped; SCIMapRemoteSegmentForDevice gives
 *     the address the device uses), and a host segment (SCICreateSegment; mapped for the
 *     device with SCIMapLocalSegmentForDevice). A DMA transfer moves the command buffer into
 *     the device segment, and the example checks it there.
 *  5. Teardown in reverse: unmap for the device, unmap, disconnect, remove, SCIReturnDevice.
 *
 *   LANES_NODE_ID=4 ./smartio_dev [-class 0x010802] [-vendor 0x144d] [-fdid 0x100] [-exclusive]
 *   (on Lanes: LANES_SISCI_FAKE_DEVICES=0x100:64K:0x010802:0x144d:0xa808 describes a device)
 *
 * Exit status: 0 done, 1 usage, 2 SISCI error, 3 a register or buffer read back wrong,
 * 4 no device found (the fabric has no device that passes the filter).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sisci_api.h>
#include <sisci_error.h>
#include <sisci_types.h>
#include <dis_types.h>

#define NO_FLAGS    0
#define NO_CALLBACK NULL
#define NO_ARG      NULL
#define ADAPTER_NO  0
#define MAX_DEVICES 32

#define EXIT_NO_DEVICE 4

/* The command interface the example programs into BAR 0 (a made-up device's registers). */
#define REG_CMD_BASE   0x00   /* u64: bus address of the host command buffer */
#define REG_DATA_BASE  0x08   /* u64: bus address of the device data buffer */
#define REG_CMD_LEN    0x10   /* u32: bytes of the command block */
#define REG_DOORBELL   0x14   /* u32: the tail: commands posted */
#define REG_BLOCK      0x40   /* the command block: 64 bytes */
#define BLOCK_BYTES    64
#define BAR_MIN        (REG_BLOCK + BLOCK_BYTES)

#define HOST_SEG_ID    0x534D  /* the host command buffer */
#define DEV_SEG_ID     1       /* the device data buffer */
#define BUF_BYTES      8192

static const char *prog = "smartio_dev";
#include "common.h"

static void usage(void)
{
    printf("Usage: %s [-class C] [-vendor V] [-fdid ID] [-exclusive]\n"
           "Borrows a SmartIO device, maps its BAR 0, gives it memory and rings its doorbell.\n"
           "  -class C      PCI class code the device must have, e.g. 0x010802 (NVMe); 0: any\n"
           "  -vendor V     PCI vendor id it must have; 0: any\n"
           "  -fdid ID      borrow this fabric device id (it must pass the filter too)\n"
           "  -exclusive    borrow it exclusively (SCI_FLAG_EXCLUSIVE)\n"
           "  -h            this help\n"
           "Exit status: 0 done, 1 usage, 2 SISCI error, 3 a check failed, %d no device found.\n",
           prog, EXIT_NO_DEVICE);
}

static int failures;

static void expect(const char *what, int ok)
{
    printf("%s: %-44s %s\n", prog, what, ok ? "ok" : "WRONG");
    if (!ok) failures++;
}

int main(int argc, char **argv)
{
    unsigned long cls = 0, vendor = 0, want = 0;
    unsigned int borrow_flags = NO_FLAGS;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "-help") || !strcmp(a, "--help")) { usage(); return 0; }
        if (!strcmp(a, "-exclusive")) { borrow_flags |= SCI_FLAG_EXCLUSIVE; continue; }
        if (v && !strcmp(a, "-class")) cls = strtoul(v, &end, 0);
        else if (v && !strcmp(a, "-vendor")) vendor = strtoul(v, &end, 0);
        else if (v && !strcmp(a, "-fdid")) want = strtoul(v, &end, 0);
        else { fprintf(stderr, "%s: unknown or incomplete option %s\n", prog, a); usage(); return 1; }
        if (end == v || *end != '\0' || cls > 0xFFFFFF || vendor > 0xFFFF || want > 0xFFFFFFFFUL) {
            fprintf(stderr, "%s: bad value for %s: %s\n", prog, a, v);
            return 1;
        }
        i++;
    }

    sci_error_t err;
    sci_desc_t sd;
    unsigned int node = 0;
    SCIInitialize(NO_FLAGS, &err);
    CHECK("SCIInitialize");
    SCIOpen(&sd, NO_FLAGS, &err);
    CHECK("SCIOpen");
    SCIGetLocalNodeId(ADAPTER_NO, &node, NO_FLAGS, &err);
    CHECK("SCIGetLocalNodeId");

    /* 1. Find and borrow. */
    sci_smartio_device_info_t filter;
    unsigned int fdids[MAX_DEVICES];
    memset(&filter, 0, sizeof filter);
    filter.pci_class = (unsigned int)cls;
    filter.pci_vendor_id = (unsigned short)vendor;
    size_t n = SCIGetDeviceList(sd, fdids, MAX_DEVICES, &filter, NO_FLAGS, &err);
    CHECK("SCIGetDeviceList");
    unsigned int fdid = 0;
    for (size_t i = 0; i < n && fdid == 0; i++)
        if (want == 0 || fdids[i] == want) fdid = fdids[i];
    if (fdid == 0) {
        printf("%s: node %u: no SmartIO device found (class 0x%06lx, vendor 0x%04lx%s): nothing to borrow\n", prog,
               node, cls, vendor, want ? ", that fabric device id" : "");
        SCIClose(sd, NO_FLAGS, &err);
        CHECK("SCIClose");
        SCITerminate();
        return EXIT_NO_DEVICE;
    }
    printf("%s: node %u: %zu device(s) match; borrowing fabric device 0x%x\n", prog, node, n, fdid);
    sci_smartio_device_t dev;
    SCIBorrowDevice(sd, &dev, fdid, borrow_flags, &err);
    CHECK("SCIBorrowDevice");

    /* 2. What it is. */
    sci_smartio_device_info_t info;
    sci_smartio_query_device_t q;
    memset(&info, 0, sizeof info);
    q.fdid = SCIGetFabricDeviceId(dev);
    q.subcommand = SCI_Q_DEVICE_INFO;
    q.data = &info;
    SCIQuery(SCI_Q_DEVICE, &q, NO_FLAGS, &err);
    CHECK("SCIQuery(SCI_Q_DEVICE)");
    printf("%s: device 0x%llx: %04x:%04x class %06x, node %u, adapter %u, slot %d, \"%s\"\n", prog,
           (unsigned long long)info.fdid, info.pci_vendor_id, info.pci_device_id, info.pci_class, info.nodeid,
           info.adapter, info.physical_slot, info.user_name);
    expect("the device is the one borrowed", info.fdid == fdid && (cls == 0 || info.pci_class == cls) &&
                                                 (vendor == 0 || info.pci_vendor_id == vendor));

    /* 3. BAR 0: the registers. */
    sci_remote_segment_t bar;
    sci_map_t barmap;
    SCIConnectDeviceSegment(dev, &bar, 0, SCI_MEMTYPE_BAR, NO_CALLBACK, NO_ARG, NO_FLAGS, &err);
    CHECK("SCIConnectDeviceSegment(BAR 0)");
    size_t bar_size = SCIGetRemoteSegmentSize(bar);
    printf("%s: BAR 0: %zu bytes\n", prog, bar_size);
    if (bar_size < BAR_MIN) {
        fprintf(stderr, "%s: BAR 0 is smaller than the %d bytes of the registers\n", prog, BAR_MIN);
        SCIClose(sd, SCI_FLAG_FORCE_REMOVE, &err);
        return 3;
    }
    volatile uint8_t *regs = SCIMapRemoteSegment(bar, &barmap, 0, bar_size, NULL, SCI_FLAG_IO_MAP_IOSPACE, &err);
    CHECK("SCIMapRemoteSegment(BAR 0)");
    sci_sequence_t barseq;
    SCICreateMapSequence(barmap, &barseq, NO_FLAGS, &err);
    CHECK("SCICreateMapSequence");

    /* 4. Memory for the device: a device segment and a host segment, mapped for it. */
    sci_remote_segment_t devseg;
    sci_map_t devmap;
    sci_ioaddr_t dev_io = 0, host_io = 0;
    SCICreateDeviceSegment(dev, DEV_SEG_ID, BUF_BYTES, SCI_MEMTYPE_PRIVATE,
                           SCI_MEMACCESS_DEVICE_READ | SCI_MEMACCESS_DEVICE_WRITE | SCI_MEMACCESS_HOST_READ |
                               SCI_MEMACCESS_HOST_WRITE,
                           NO_FLAGS, &err);
    CHECK("SCICreateDeviceSegment");
    SCIConnectDeviceSegment(dev, &devseg, DEV_SEG_ID, SCI_MEMTYPE_PRIVATE, NO_CALLBACK, NO_ARG, NO_FLAGS, &err);
    CHECK("SCIConnectDeviceSegment(device segment)");
    volatile uint8_t *devbuf = SCIMapRemoteSegment(devseg, &devmap, 0, BUF_BYTES, NULL, NO_FLAGS, &err);
    CHECK("SCIMapRemoteSegment(device segment)");
    SCIMapRemoteSegmentForDevice(devseg, dev, &dev_io, 0, BUF_BYTES, NO_FLAGS, &err);
    CHECK("SCIMapRemoteSegmentForDevice");

    sci_local_segment_t host;
    sci_map_t hostmap;
    SCICreateSegment(sd, &host, HOST_SEG_ID, BUF_BYTES, NO_CALLBACK, NO_ARG, NO_FLAGS, &err);
    CHECK("SCICreateSegment (command buffer)");
    SCIPrepareSegment(host, ADAPTER_NO, NO_FLAGS, &err);
    CHECK("SCIPrepareSegment");
    uint8_t *cmdbuf = SCIMapLocalSegment(host, &hostmap, 0, BUF_BYTES, NULL, NO_FLAGS, &err);
    CHECK("SCIMapLocalSegment");
    SCISetSegmentAvailable(host, ADAPTER_NO, NO_FLAGS, &err);
    CHECK("SCISetSegmentAvailable");
    SCIMapLocalSegmentForDevice(host, ADAPTER_NO, dev, &host_io, 0, BUF_BYTES, NO_FLAGS, &err);
    CHECK("SCIMapLocalSegmentForDevice");
    printf("%s: command buffer at bus address 0x%llx, data buffer at 0x%llx\n", prog, (unsigned long long)host_io,
           (unsigned long long)dev_io);
    expect("both buffers have bus addresses", host_io != 0 && dev_io != 0);

    /* Commands into the host buffer; DMA them into the device's buffer. */
    for (size_t i = 0; i < BUF_BYTES; i++) cmdbuf[i] = (uint8_t)((i * 7U + 0x5AU) ^ (i >> 8));
    sci_dma_queue_t dq;
    SCICreateDMAQueue(sd, &dq, ADAPTER_NO, 1, NO_FLAGS, &err);
    CHECK("SCICreateDMAQueue");
    SCIStartDmaTransfer(dq, host, devseg, 0, BUF_BYTES, 0, NO_CALLBACK, NO_ARG, NO_FLAGS, &err);
    CHECK("SCIStartDmaTransfer");
    sci_dma_queue_state_t st = SCIWaitForDMAQueue(dq, 10000, NO_FLAGS, &err);
    CHECK("SCIWaitForDMAQueue");
    int same = st == SCI_DMAQUEUE_DONE;
    for (size_t i = 0; i < BUF_BYTES && same; i++) same = devbuf[i] == cmdbuf[i];
    expect("the DMA reached the device's buffer", same);
    SCIRemoveDMAQueue(dq, NO_FLAGS, &err);
    CHECK("SCIRemoveDMAQueue");

    /* Program the registers: the buffers, the command block, then ring the doorbell. */
    uint8_t block[BLOCK_BYTES];
    for (unsigned int i = 0; i < BLOCK_BYTES; i++) block[i] = (uint8_t)(0xC0U + i);
    sci_sequence_status_t ss;
    int tries = 0;
    do {
        ss = SCIStartSequence(barseq, NO_FLAGS, &err);
    } while (ss == SCI_SEQ_RETRIABLE && ++tries < 100);
    expect("SCIStartSequence on BAR 0", ss == SCI_SEQ_OK);
    *(volatile uint64_t *)(regs + REG_CMD_BASE) = host_io;
    *(volatile uint64_t *)(regs + REG_DATA_BASE) = dev_io;
    *(volatile uint32_t *)(regs + REG_CMD_LEN) = BLOCK_BYTES;
    SCIMemCpy(barseq, block, barmap, REG_BLOCK, BLOCK_BYTES, SCI_FLAG_ERROR_CHECK, &err);
    CHECK("SCIMemCpy (command block)");
    SCIStoreBarrier(barseq, NO_FLAGS);   /* the block before the doorbell */
    *(volatile uint32_t *)(regs + REG_DOORBELL) = 1;
    SCIFlush(barseq, NO_FLAGS);
    ss = SCICheckSequence(barseq, NO_FLAGS, &err);
    expect("SCICheckSequence on BAR 0", ss == SCI_SEQ_OK);

    int block_ok = 1;
    for (unsigned int i = 0; i < BLOCK_BYTES; i++) block_ok &= regs[REG_BLOCK + i] == block[i];
    expect("command buffer register", *(volatile uint64_t *)(regs + REG_CMD_BASE) == host_io);
    expect("data buffer register", *(volatile uint64_t *)(regs + REG_DATA_BASE) == dev_io);
    expect("command length register", *(volatile uint32_t *)(regs + REG_CMD_LEN) == BLOCK_BYTES);
    expect("command block", block_ok);
    expect("doorbell", *(volatile uint32_t *)(regs + REG_DOORBELL) == 1);

    /* 5. Teardown. */
    SCIUnmapLocalSegmentForDevice(host, ADAPTER_NO, dev, NO_FLAGS, &err);
    CHECK("SCIUnmapLocalSegmentForDevice");
    SCIUnmapSegment(hostmap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment (command buffer)");
    SCIRemoveSegment(host, NO_FLAGS, &err);
    CHECK("SCIRemoveSegment (command buffer)");
    SCIUnmapRemoteSegmentForDevice(devseg, dev, NO_FLAGS, &err);
    CHECK("SCIUnmapRemoteSegmentForDevice");
    SCIUnmapSegment(devmap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment (device segment)");
    SCIDisconnectSegment(devseg, NO_FLAGS, &err);
    CHECK("SCIDisconnectSegment (device segment)");
    SCIRemoveSequence(barseq, NO_FLAGS, &err);
    CHECK("SCIRemoveSequence");
    SCIUnmapSegment(barmap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment (BAR 0)");
    SCIDisconnectSegment(bar, NO_FLAGS, &err);
    CHECK("SCIDisconnectSegment (BAR 0)");
    SCIReturnDevice(dev, NO_FLAGS, &err);
    CHECK("SCIReturnDevice");
    SCIClose(sd, NO_FLAGS, &err);
    CHECK("SCIClose");
    SCITerminate();
    printf("%s: device 0x%x returned: %s\n", prog, fdid, failures ? "FAILED" : "done");
    return failures ? 3 : 0;
}
