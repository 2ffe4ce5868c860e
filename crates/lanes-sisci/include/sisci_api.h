/*
 * sisci_api.h - the SISCI API (Software Infrastructure for Shared-Memory Cluster
 * Interconnect), as implemented by Lanes: libsisci.so over a software shared-memory fabric
 * whose nodes are processes (LANES_NODE_ID) on this host.
 *
 * Build:  cc -D_REENTRANT -pthread -I/opt/DIS/include -I/opt/DIS/include/dis prog.c \
 *            -L/opt/DIS/lib64 -lsisci      (or: pkg-config --cflags --libs sisci)
 *
 * Every function is exported three times: under its plain name, and as
 * _SISCI_PUBLIC_FUNC_ST_<Name> and _SISCI_PUBLIC_FUNC_MT_<Name> (the names the vendor library
 * exports, for programs that dlopen("libsisci.so") and dlsym them). This header declares the
 * plain names; it does not rename them.
 *
 * Constants are plain #define literals (the vendor header makes them link-time constants, so
 * every program written for it also compiles here). Flags are per function: values overlap.
 * A function refuses flags it does not know with SCI_ERR_ILLEGAL_FLAG, and flags it knows but
 * a software fabric cannot honour with SCI_ERR_FLAG_NOT_IMPLEMENTED or SCI_ERR_NOT_SUPPORTED.
 *
 * Lanes behaviour where the API leaves a choice:
 *  - SCIOpen() before SCIInitialize() fails with SCI_ERR_NOT_INITIALIZED.
 *  - SCIClose() refuses with SCI_ERR_BUSY while resources created through the descriptor
 *    (segments, connections, maps, sequences, interrupts, DMA queues) are still open; with
 *    SCI_FLAG_FORCE_REMOVE it releases them all (segments are removed forcibly).
 *  - SCIRemoveSegment() and SCIDisconnectSegment() refuse with SCI_ERR_BUSY while maps of the
 *    segment exist ("the segment is currently mapped or in use", as the vendor's header
 *    says); SCIRemoveSegment() also while peers stay connected for 1 s (it waits that long
 *    for them to leave), unless SCI_FLAG_FORCE_REMOVE
 *    or an earlier SCISetSegmentUnavailable(..., SCI_FLAG_FORCE_DISCONNECT) (peers then hear
 *    SCI_CB_DISCONNECT, their sequences fail, and a new connect finds no such segment).
 *    SCIUnmapSegment() refuses while sequences of the map exist.
 *  - Callbacks are used when SCI_FLAG_USE_CALLBACK is given and the callback is not NULL;
 *    they run on a library thread. While one is registered, the matching SCIWaitFor...()
 *    call fails with SCI_ERR_ILLEGAL_OPERATION; returning SCI_CALLBACK_CANCEL removes it.
 *  - Segment events: a local segment reports SCI_CB_CONNECT, SCI_CB_DISCONNECT and, when a
 *    connected peer dies, SCI_CB_LOST; a remote segment reports SCI_CB_NOT_OPERATIONAL /
 *    SCI_CB_OPERATIONAL (owner made it unavailable / available), SCI_CB_DISCONNECT (owner
 *    removed it) and SCI_CB_LOST (owner died).
 *  - Timeouts are in milliseconds; 0 does not wait; SCI_INFINITE_TIMEOUT waits for ever.
 *  - SCITriggerDataInterrupt() on a full queue of the receiver (16 messages per sender)
 *    fails at once with SCI_ERR_NOSPC, as programs written for the vendor's library expect
 *    (they count it as a dropped message and go on). Payloads are at most 4096
 *    bytes. SCIWaitForDataInterrupt() with a too-small buffer fails with SCI_ERR_OVERFLOW,
 *    sets *length to the size needed and keeps the message.
 *  - CSR access and SCIConnectSCISpace answer SCI_ERR_NOT_SUPPORTED (a PCIe or software
 *    fabric has no SCI control and status registers or global SCI address space);
 *    SCIAttachPhysicalMemory attaches memory of the process (an address, not a bus address)
 *    to a segment created with SCI_FLAG_EMPTY, as SCIRegisterSegmentMemory does.
 *  - The full list, function by function and flag by flag (same, emulated, or the vendor's
 *    error and why): docs/sisci-compat.md in the Lanes sources.
 *  - Running out of file descriptors (EMFILE, ENFILE), memory or space (ENOMEM, ENOSPC,
 *    EDQUOT) is SCI_ERR_NOSPC, the "out of resources" code, whichever call it hits.
 *
 * Errors and their causes. A code does not always say why a call failed: SCI_ERR_SYSTEM
 * from a corrupt or hostile file in the fabric directory, a configuration error or a failed
 * system call, say. So:
 *  - Each thread keeps its last failed call. SCIGetErrorString(code), for the code that call
 *    returned, gives "<the code's string>: <the cause>", e.g. "System error: corrupt segment
 *    file /dev/shm/lanes-1000/nodes/8/seg-00000005: bad magic 0x...". For any other code,
 *    on another thread, or once another call of the thread has failed, it gives the code's
 *    fixed string. Every string it returns stays valid and unchanged for the life of the
 *    process.
 *  - A failure whose cause the code hides (a corrupt or hostile object file, a configuration
 *    error, a failed system call, a peer's malformed data, libfabric's and the cluster
 *    daemon's failures) is also reported as one line on stderr, naming the function, the
 *    cause and the file:
 *      libsisci (lanes): SCIConnectSegment: corrupt segment file ...: bad magic ... (SCI_ERR_SYSTEM)
 *    A report identical to the previous one is not repeated. Failures whose code says it
 *    all (SCI_ERR_NO_SUCH_SEGMENT, SCI_ERR_TIMEOUT, a bad parameter, ...) print nothing.
 *    LANES_SISCI_QUIET=1 silences these reports; LANES_SISCI_DEBUG=1 reports every failed
 *    call (and wins over LANES_SISCI_QUIET). The library never writes to stdout.
 *
 * Reflective memory (multicast) is the broadcast flag on the segment calls. A store into a
 * group reaches the memory of every member, in order per writer; reads are local.
 *  - As with the vendor, every receiver calls SCICreateSegment(..., segmentId, size, ...,
 *    SCI_FLAG_BROADCAST) with the same id (the group id; with SCI_FLAG_AUTO_ID a free id,
 *    see SCIGetLocalSegmentId): the first creates the group, the others join it as
 *    receivers (one larger than the group: SCI_ERR_ILLEGAL_PARAMETER). It is prepared and
 *    available at once: SCIPrepareSegment and SCISetSegmentAvailable (which accept
 *    SCI_FLAG_BROADCAST) change nothing; SCISetSegmentUnavailable stops new members from
 *    joining. A fabric holds at most 4 groups (SCI_Q_ADAPTER_MCAST_MAX_GROUPS): a fifth fails
 *    with SCI_ERR_NOSPC (out of resources, as too many connections). SCI_FLAG_EMPTY and
 *    SCI_FLAG_PRIVATE do not go with SCI_FLAG_BROADCAST (SCI_ERR_ILLEGAL_FLAG).
 *  - SCIMapLocalSegment on a group: with SCI_FLAG_BROADCAST the multicast write map;
 *    otherwise the receiver's copy (SCI_FLAG_READONLY_MAP: read-only). On one host the
 *    receivers share one copy, so a store into it is seen by the others. The creator's
 *    segment events are members joining (SCI_CB_CONNECT), leaving (SCI_CB_DISCONNECT) and
 *    dying (SCI_CB_LOST). SCIRemoveSegment of a receiver's segment leaves the group to the
 *    others; with SCI_FLAG_FORCE_REMOVE it ends the group for everyone. The group lives as
 *    long as the process that created it.
 *  - SCIConnectSegment(sd, &seg, DIS_BROADCAST_NODEID_GROUP_ALL, groupId, ...,
 *    SCI_FLAG_BROADCAST) joins the group, waiting up to the timeout for it to exist
 *    (SCI_ERR_NO_SUCH_SEGMENT without a timeout, SCI_ERR_TIMEOUT after one; a node the
 *    creator did not choose as a receiver, which only groups created through the Lanes
 *    Rust API can name, gets SCI_ERR_CONNECTION_REFUSED). Node 252 without
 *    the flag, or the flag with any other node id, is SCI_ERR_ILLEGAL_NODEID: the flag says
 *    the node id addresses a group, and 252 is the only group address and no node.
 *    SCIGetRemoteSegmentNodeId of a group connection is 252 (the address connected to, not
 *    the creator's node); SCIGetRemoteSegmentId is the group id.
 *  - SCIMapRemoteSegment on a group connection is the multicast (write) address, with
 *    SCI_FLAG_BROADCAST or without (the vendor's writers map it without a flag and store);
 *    with SCI_FLAG_READONLY_MAP it is the read address, mapped read-only (writes through it
 *    fault; SCIMemCpy into it fails with SCI_ERR_ACCESS). SCI_Q_MAP_MAPPED_TO_LOCAL_TARGET
 *    is 1 for the read map, 0 for the multicast one.
 *  - The group's loss (its creator removed it or died) is SCI_CB_LOST on a group connection
 *    (status SCI_ERR_NOT_CONNECTED); sequences of its maps then fail.
 *  - SCIStartDmaTransfer/Vec/Mem to a group connection write to the group, with
 *    SCI_FLAG_DMA_GLOBAL | SCI_FLAG_BROADCAST or without; SCI_FLAG_BROADCAST with
 *    SCI_FLAG_DMA_READ is SCI_ERR_ILLEGAL_FLAG.
 *  - SCI_FLAG_BROADCAST on a segment, map or transfer that is not a group's is
 *    SCI_ERR_ILLEGAL_FLAG.
 */
#ifndef LANES_SISCI_API_H
#define LANES_SISCI_API_H

#include <stddef.h>
#include <stdint.h>

#include "sisci_api_macros.h"
#include "sisci_types.h"
#include "sisci_error.h"
#include "dis/dis_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the API these declarations follow, and of Lanes. */
#define SISCI_API_VERSION_MAJOR 2
#define SISCI_API_VERSION_MINOR 0
#define LANES_SISCI_VERSION     "0.1.0"

#define SCI_INFINITE_TIMEOUT 0xFFFFFFFFU

/* ---- Flags (per function; values overlap between functions) ---------------------------- */

/* General */
#define SCI_FLAG_USE_CALLBACK            0x1U
#define SCI_FLAG_EMPTY                   0x2U
#define SCI_FLAG_PRIVATE                 0x4U
#define SCI_FLAG_DMA_SOURCE_ONLY         0x8U
#define SCI_FLAG_PHYSICAL                0x1000U
#define SCI_FLAG_CUDA_BUFFER             0x2000U
#define SCI_FLAG_AUTO_ID                 0x20000000U

/* Interrupts */
#define SCI_FLAG_FIXED_INTNO             0x2U
#define SCI_FLAG_SHARED_INT              0x4U
#define SCI_FLAG_CONDITIONAL_INTERRUPT   0x8U
#define SCI_FLAG_COUNTING_INT            0x20U

/* DMA */
#define SCI_FLAG_DMA_WAIT                0x4U
#define SCI_FLAG_DMA_READ                0x10U
#define SCI_FLAG_DMA_PHDMA               0x20U
#define SCI_FLAG_DMA_GLOBAL              0x40U
#define SCI_FLAG_ALLOW_UNICAST           0x80U
#define SCI_FLAG_DMA_SYSDMA              0x100U
#define SCI_FLAG_DMA_USER_MEM            0x200U
#define SCI_FLAG_DMA_ADAPTER             0x800U

/* Maps */
#define SCI_FLAG_FIXED_MAP_ADDR          0x1U
#define SCI_FLAG_READONLY_MAP            0x2U
#define SCI_FLAG_LOCK_OPERATION          0x4U
#define SCI_FLAG_IO_MAP_IOSPACE          0x80U
#define SCI_FLAG_NO_MEMORY_LOOPBACK      0x800U
#define SCI_FLAG_SHARED_MAP              0x2000U
#define SCI_FLAG_BROADCAST               0x40000U

/* Cache */
#define SCI_FLAG_CACHE_FLUSH             0x100000U
#define SCI_FLAG_CACHE_INVALIDATE        0x200000U

/* Other */
#define SCI_FLAG_FORCE_REMOVE            0x20U
#define SCI_FLAG_EXCLUSIVE               0x1000000U   /* SCIBorrowDevice: nobody else may borrow */

/* Segments and memory */
#define SCI_FLAG_SCIF_BUFFER             0x4000U      /* SCIAttachPhysicalMemory: not supported */
#define SCI_FLAG_LOCK_USER_MEM           0x400U       /* SCIRegisterSegmentMemory */
#define SCI_FLAG_SHARE_EXTERNAL          0x40U        /* SCIShareSegment */
#define SCI_FLAG_WRITE_BACK_CACHE_MAP    0x8000000U   /* maps: cached mapping */

/* DMA channels */
#define SCI_FLAG_DMA_CHANNEL_SHARED      0x1U         /* SCIRequestDMAChannel */

/* Conditional interrupts (SCIRegisterInterruptFlag) and interrupt maps */
#define SCI_FLAG_CONDITIONAL_INTERRUPT_MAP        0x8U
#define SCI_FLAG_UNCONDITIONAL_DATA_INTERRUPT_MAP 0x10U

/* SmartIO */
#define SCI_FLAG_PCIE_REQUESTER_GLOBAL   0x1U         /* SCIRegisterPCIeRequester */
#define SCI_FLAG_DEVICE_SIDE_ONLY        0x2001000U   /* SCICreateDeviceSegment */
#define SCI_FLAG_LOCAL_ONLY              0x2002000U   /* SCICreateDeviceSegment */
#define SCI_FLAG_DEVICE_PREFER_BANDWIDTH 0x4000001U   /* SCICreateDeviceSegment */
#define SCI_FLAG_HOST_PREFER_BANDWIDTH   0x4000002U   /* SCICreateDeviceSegment */
#define SCI_FLAG_SPECIFY_PATH            0x10000000U  /* SCIConnectDeviceSegmentPath */
#define SCI_FLAG_SPECIFY_SLOT            0x20000000U  /* SCIConnectDeviceSegmentPath */

/* Older names still used by programs (Lanes values). */
#define SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY  0x10000U  /* SCIFlush */
#define SCI_FLAG_BLOCK_READ              0x4000U   /* SCIMemCpy: copy from the remote side */
#define SCI_FLAG_ERROR_CHECK             0x8000U   /* SCIMemCpy, SCIMemWrite */
#define SCI_FLAG_NO_FLUSH                0x400U    /* SCIMemCpy, SCIMemWrite */
#define SCI_FLAG_NO_STORE_BARRIER        0x40000000U /* SCIMemCpy, SCIMemWrite */

/* Flags of the vendor's that were missing (values per function, so they may overlap). */
#define SCI_FLAG_NOTIFY                  0x10U     /* SCISetSegmentUnavailable (Lanes value) */
#define SCI_FLAG_FORCE_DISCONNECT        0x20U     /* SCISetSegmentUnavailable (Lanes value) */

/* ---- Queries (SCIQuery) ----------------------------------------------------------------- */

/* Commands */
#define SCI_Q_VENDORID                   1U  /* data: sci_query_string_t */
#define SCI_Q_API                        2U  /* data: sci_query_string_t */
#define SCI_Q_ADAPTER                    3U  /* data: sci_query_adapter_t */
#define SCI_Q_SYSTEM                     4U  /* data: sci_query_system_t */
#define SCI_Q_LOCAL_SEGMENT              5U  /* data: sci_query_local_segment_t */
#define SCI_Q_REMOTE_SEGMENT             6U  /* data: sci_query_remote_segment_t */
#define SCI_Q_MAP                        7U  /* data: sci_query_map_t */
#define SCI_Q_DMA                        8U  /* data: sci_query_dma_t */
#define SCI_Q_SISCI_DRIVER_VERSION       9U  /* data: sci_query_string_t */
#define SCI_Q_DEVICE                     10U /* data: sci_smartio_query_device_t */

/* SCI_Q_ADAPTER subcommands; data points to an unsigned int unless noted. */
#define SCI_Q_ADAPTER_DMA_SIZE_ALIGNMENT        0x101U
#define SCI_Q_ADAPTER_DMA_OFFSET_ALIGNMENT      0x102U
#define SCI_Q_ADAPTER_DMA_MTU                   0x103U
#define SCI_Q_ADAPTER_SUGGESTED_MIN_DMA_SIZE    0x104U
#define SCI_Q_ADAPTER_SUGGESTED_MIN_BLOCK_SIZE  0x105U
#define SCI_Q_ADAPTER_NODEID                    0x106U
#define SCI_Q_ADAPTER_SERIAL_NUMBER             0x107U
#define SCI_Q_ADAPTER_CARD_TYPE                 0x108U
#define SCI_Q_ADAPTER_NUMBER_OF_STREAMS         0x109U
#define SCI_Q_ADAPTER_STREAM_BUFFER_SIZE        0x10AU
#define SCI_Q_ADAPTER_CONFIGURED                0x10BU
#define SCI_Q_ADAPTER_LINK_OPERATIONAL          0x10CU
#define SCI_Q_ADAPTER_HW_LINK_STATUS_IS_OK      0x10DU
#define SCI_Q_ADAPTER_NUMBER                    0x10EU
#define SCI_Q_ADAPTER_INSTANCE_NUMBER           0x10FU
#define SCI_Q_ADAPTER_FIRMWARE_OK               0x110U
#define SCI_Q_ADAPTER_CONNECTED_TO_SWITCH       0x111U
#define SCI_Q_ADAPTER_ATT_PAGE_SIZE             0x112U
#define SCI_Q_ADAPTER_ATT_NUMBER_OF_ENTRIES     0x113U
#define SCI_Q_ADAPTER_ATT_AVAILABLE_ENTRIES     0x114U
#define SCI_Q_ADAPTER_MCAST_MAX_GROUPS          0x115U  /* reflective groups a fabric holds: 4 */
#define SCI_Q_ADAPTER_BDF                       0x116U
#define SCI_Q_ADAPTER_NUMBER_OF_LINKS           0x117U
#define SCI_Q_ADAPTER_LINK_WIDTH                0x118U
#define SCI_Q_ADAPTER_LINK_SPEED                0x119U
#define SCI_Q_ADAPTER_LINK_UPTIME               0x11AU  /* seconds since this process called SCIInitialize */
#define SCI_Q_ADAPTER_LINK_DOWNTIME             0x11BU
#define SCI_Q_ADAPTER_LINK_CABLE_INSERTED       0x11CU
#define SCI_Q_ADAPTER_LINK_ENABLED              0x11DU
#define SCI_Q_ADAPTER_LINK_PARTNER_PORT_NO      0x11EU

/* The card type SCI_Q_ADAPTER_CARD_TYPE reports for the Lanes software adapter. */
#define SCI_ADAPTER_TYPE_LANES                  0x4C4EU

/* SCI_Q_SYSTEM subcommands */
#define SCI_Q_SYSTEM_HOSTBRIDGE                 0x201U
#define SCI_Q_SYSTEM_WRITE_POSTING_ENABLED      0x202U
#define SCI_Q_SYSTEM_WRITE_COMBINING_ENABLED    0x203U
#define SCI_Q_SYSTEM_CPU_CACHE_LINE_SIZE        0x204U  /* bytes */
#define HOSTBRIDGE_NOT_AVAILABLE                0U
#define HOSTBRIDGE_UNKNOWN                      1U

/* SCI_Q_LOCAL_SEGMENT / SCI_Q_REMOTE_SEGMENT / SCI_Q_MAP subcommands */
#define SCI_Q_LOCAL_SEGMENT_IOADDR                     0x301U
#define SCI_Q_REMOTE_SEGMENT_IOADDR                    0x302U
#define SCI_Q_MAP_MAPPED_TO_LOCAL_TARGET               0x303U
#define SCI_Q_MAP_QUERY_REMOTE_MAPPED_TO_LOCAL_TARGET  0x304U

/* SCI_Q_DMA subcommands; the flags argument of SCIQuery picks the engine
 * (SCI_FLAG_DMA_ADAPTER, SCI_FLAG_DMA_SYSDMA or SCI_FLAG_DMA_GLOBAL; 0 means the adapter's). */
#define SCI_Q_DMA_AVAILABLE                     0x401U  /* data: unsigned int, 1 or 0 */
#define SCI_Q_DMA_CAPABILITIES                  0x402U  /* data: sci_dma_capabilities_t */

/* SCI_Q_DEVICE subcommands */
#define SCI_Q_DEVICE_INFO                       0x501U  /* data: sci_smartio_device_info_t */

typedef struct {
    char         *str;    /* a buffer of `length` bytes; receives a NUL-terminated string */
    unsigned int  length;
} sci_query_string_t;

typedef struct {
    unsigned int  localAdapterNo;
    unsigned int  portNo;
    unsigned int  subcommand;
    void         *data;
} sci_query_adapter_t;

typedef struct {
    unsigned int  subcommand;
    void         *data;
} sci_query_system_t;

typedef struct {
    sci_local_segment_t segment;
    unsigned int        subcommand;
    union {
        sci_ioaddr_t    ioaddr;
    } data;
} sci_query_local_segment_t;

typedef struct {
    sci_remote_segment_t segment;
    unsigned int         subcommand;
    union {
        sci_ioaddr_t     ioaddr;
    } data;
} sci_query_remote_segment_t;

typedef struct {
    sci_map_t          map;
    unsigned int       subcommand;
    unsigned long long data;
} sci_query_map_t;

typedef struct {
    unsigned int  localAdapterNo;
    unsigned int  subcommand;
    void         *data;
} sci_query_dma_t;

typedef struct {
    unsigned int  num_channels;
    unsigned int  max_transfer_size;
    unsigned int  max_vector_length;
    unsigned int  support_mem2io;        /* 0 on Lanes: no device memory */
    unsigned int  support_io2mem;        /* 0 on Lanes */
    unsigned int  support_io2io;         /* 0 on Lanes */
    unsigned int  min_align_bytes;
    unsigned int  suggested_align_bytes;
} sci_dma_capabilities_t;

/* SCIQuery(SCI_Q_DEVICE, ...): what to ask of which SmartIO device. */
typedef struct {
    unsigned long long fdid;
    unsigned int       subcommand;  /* SCI_Q_DEVICE_INFO */
    void              *data;        /* sci_smartio_device_info_t for SCI_Q_DEVICE_INFO */
} sci_smartio_query_device_t;

/* ---- Library and node ------------------------------------------------------------------- */

void        SCIInitialize(unsigned int flags, sci_error_t *error);
void        SCITerminate(void);
void        SCIOpen(sci_desc_t *sd, unsigned int flags, sci_error_t *error);
void        SCIClose(sci_desc_t sd, unsigned int flags, sci_error_t *error);
/* The code's string; for the code of this thread's last failed call, with its cause (above). */
const char *SCIGetErrorString(sci_error_t error);
void        SCIGetLocalNodeId(unsigned int adapterNo, unsigned int *nodeId, unsigned int flags,
                              sci_error_t *error);
int         SCIProbeNode(sci_desc_t sd, unsigned int localAdapterNo, unsigned int nodeId,
                         unsigned int flags, sci_error_t *error);
void        SCIQuery(unsigned int command, void *data, unsigned int flags, sci_error_t *error);
void        SCIGetNodeIdByAdapterName(char *adapterName, dis_nodeId_list_t *nodeIdList,
                                      dis_virt_adapter_t *adapterType, unsigned int flags,
                                      sci_error_t *error);
/* As SCIGetNodeIdByAdapterName, with the local adapter number of each node id found
 * (localAdapterNo points to DIS_MAX_NSCIS entries; Lanes has adapter 0 only). */
void        SCIGetNodeInfoByAdapterName(char *adapterName, unsigned int *localAdapterNo,
                                        dis_nodeId_list_t *nodeIdList,
                                        dis_adapter_type_t *adapterType, unsigned int flags,
                                        sci_error_t *error);
/* A name for an adapter type (SCI_Q_ADAPTER_CARD_TYPE) and for its family; the strings stay
 * valid for the life of the process. */
const char *SCIGetAdapterTypeString(unsigned int adapterType);
const char *SCIGetAdapterFamilyString(unsigned int adapterType);

/* Control and status registers of SCI adapters: SCI_ERR_NOT_SUPPORTED (no such registers). */
unsigned int SCIGetCSRRegister(sci_desc_t sd, unsigned int localAdapterNo,
                               unsigned int SCINodeId, unsigned int CSROffset,
                               unsigned int flags, sci_error_t *error);
void        SCISetCSRRegister(sci_desc_t sd, unsigned int localAdapterNo, unsigned int SCINodeId,
                              unsigned int CSROffset, unsigned int CSRValue, unsigned int flags,
                              sci_error_t *error);
unsigned int SCIGetLocalCSR(sci_desc_t sd, unsigned int localAdapterNo, unsigned int CSROffset,
                            unsigned int flags, sci_error_t *error);
void        SCISetLocalCSR(sci_desc_t sd, unsigned int localAdapterNo, unsigned int CSROffset,
                           unsigned int CSRValue, unsigned int flags, sci_error_t *error);

/* ---- Local segments --------------------------------------------------------------------- */

void   SCICreateSegment(sci_desc_t sd, sci_local_segment_t *segment, unsigned int segmentId,
                        size_t size, sci_cb_local_segment_t callback, void *callbackArg,
                        unsigned int flags, sci_error_t *error);
void   SCIPrepareSegment(sci_local_segment_t segment, unsigned int localAdapterNo,
                         unsigned int flags, sci_error_t *error);
void   SCISetSegmentAvailable(sci_local_segment_t segment, unsigned int localAdapterNo,
                              unsigned int flags, sci_error_t *error);
void   SCISetSegmentUnavailable(sci_local_segment_t segment, unsigned int localAdapterNo,
                                unsigned int flags, sci_error_t *error);
void   SCIRemoveSegment(sci_local_segment_t segment, unsigned int flags, sci_error_t *error);
size_t SCIGetLocalSegmentSize(sci_local_segment_t segment);
unsigned int SCIGetLocalSegmentId(sci_local_segment_t segment);
sci_segment_cb_reason_t SCIWaitForLocalSegmentEvent(sci_local_segment_t segment,
                                                    unsigned int *sourceNodeId,
                                                    unsigned int *localAdapterNo,
                                                    unsigned int timeout, unsigned int flags,
                                                    sci_error_t *error);
void   SCIRegisterSegmentMemory(void *address, size_t size, sci_local_segment_t segment,
                                unsigned int flags, sci_error_t *error);
void   SCIAttachPhysicalMemory(sci_ioaddr_t ioaddress, void *address, unsigned int busNo,
                               size_t size, sci_local_segment_t segment, unsigned int flags,
                               sci_error_t *error);
void   SCIAttachLocalSegment(sci_desc_t sd, sci_local_segment_t *segment, unsigned int segmentId,
                             size_t *size, sci_cb_local_segment_t callback, void *callbackArg,
                             unsigned int flags, sci_error_t *error);
void   SCIShareSegment(sci_local_segment_t segment, unsigned int flags, sci_error_t *error);

/* ---- Remote segments -------------------------------------------------------------------- */

void   SCIConnectSegment(sci_desc_t sd, sci_remote_segment_t *segment, unsigned int nodeId,
                         unsigned int segmentId, unsigned int localAdapterNo,
                         sci_cb_remote_segment_t callback, void *callbackArg,
                         unsigned int timeout, unsigned int flags, sci_error_t *error);
void   SCIDisconnectSegment(sci_remote_segment_t segment, unsigned int flags, sci_error_t *error);
size_t SCIGetRemoteSegmentSize(sci_remote_segment_t segment);
unsigned int SCIGetRemoteSegmentId(sci_remote_segment_t segment);
unsigned int SCIGetRemoteSegmentNodeId(sci_remote_segment_t segment);
sci_segment_cb_reason_t SCIWaitForRemoteSegmentEvent(sci_remote_segment_t segment,
                                                     sci_error_t *status, unsigned int timeout,
                                                     unsigned int flags, sci_error_t *error);
/* A window of the global SCI address space as a remote segment: SCI_ERR_NOT_SUPPORTED. */
void   SCIConnectSCISpace(sci_desc_t sd, unsigned int localAdapterNo, sci_remote_segment_t *segment,
                          sci_address_t address, unsigned int size, unsigned int flags,
                          sci_error_t *error);

/* ---- Maps and programmed I/O ------------------------------------------------------------ */

volatile void *SCIMapRemoteSegment(sci_remote_segment_t segment, sci_map_t *map, size_t offset,
                                   size_t size, void *addr, unsigned int flags, sci_error_t *error);
void          *SCIMapLocalSegment(sci_local_segment_t segment, sci_map_t *map, size_t offset,
                                  size_t size, void *addr, unsigned int flags, sci_error_t *error);
void           SCIUnmapSegment(sci_map_t map, unsigned int flags, sci_error_t *error);
volatile void *SCIGetMapPointer(sci_map_t map);
/* The map's physical address: 0 (memory of a software fabric has none to give). */
sci_ioaddr_t   SCIGetMapPhysAddr(sci_map_t map);

void   SCICreateMapSequence(sci_map_t map, sci_sequence_t *sequence, unsigned int flags,
                            sci_error_t *error);
void   SCIRemoveSequence(sci_sequence_t sequence, unsigned int flags, sci_error_t *error);
sci_sequence_status_t SCIStartSequence(sci_sequence_t sequence, unsigned int flags,
                                       sci_error_t *error);
sci_sequence_status_t SCICheckSequence(sci_sequence_t sequence, unsigned int flags,
                                       sci_error_t *error);
void   SCIStoreBarrier(sci_sequence_t sequence, unsigned int flags);
void   SCIFlush(sci_sequence_t sequence, unsigned int flags);
void   SCIMemCpy(sci_sequence_t sequence, void *memAddr, sci_map_t remoteMap, size_t remoteOffset,
                 size_t size, unsigned int flags, sci_error_t *error);
void   SCIMemWrite(void *memAddr, volatile void *remoteAddr, size_t size, unsigned int flags,
                   sci_error_t *error);
/* SCIMemCpy to two maps (a mirrored pair of segments, say): the same bytes at the same offset
 * of both, first remoteMap then remoteMap2; with SCI_FLAG_BLOCK_READ it reads from
 * remoteMap. Fails as SCIMemCpy does, at the first copy that fails. */
void   SCIMemCpy_dual(sci_sequence_t sequence, void *memAddr, sci_map_t remoteMap,
                      sci_map_t remoteMap2, size_t remoteOffset, size_t size, unsigned int flags,
                      sci_error_t *error);
void   SCICacheSync(sci_map_t map, void *addr, size_t length, unsigned int flags,
                    sci_error_t *error);

/* ---- DMA -------------------------------------------------------------------------------- */

void   SCICreateDMAQueue(sci_desc_t sd, sci_dma_queue_t *dq, unsigned int localAdapterNo,
                         unsigned int maxEntries, unsigned int flags, sci_error_t *error);
void   SCIRemoveDMAQueue(sci_dma_queue_t dq, unsigned int flags, sci_error_t *error);
void   SCIAbortDMAQueue(sci_dma_queue_t dq, unsigned int flags, sci_error_t *error);
sci_dma_queue_state_t SCIDMAQueueState(sci_dma_queue_t dq);
sci_dma_queue_state_t SCIWaitForDMAQueue(sci_dma_queue_t dq, unsigned int timeout,
                                         unsigned int flags, sci_error_t *error);
void   SCIStartDmaTransfer(sci_dma_queue_t dq, sci_local_segment_t localSegment,
                           sci_remote_segment_t remoteSegment, size_t localOffset, size_t size,
                           size_t remoteOffset, sci_cb_dma_t callback, void *callbackArg,
                           unsigned int flags, sci_error_t *error);
void   SCIStartDmaTransferVec(sci_dma_queue_t dq, sci_local_segment_t localSegment,
                              sci_remote_segment_t remoteSegment, unsigned int vecLength,
                              dis_dma_vec_t *disDmaVec, sci_cb_dma_t callback, void *callbackArg,
                              unsigned int flags, sci_error_t *error);
void   SCIStartDmaTransferMem(sci_dma_queue_t dq, void *localAddress,
                              sci_remote_segment_t remoteSegment, size_t size, size_t remoteOffset,
                              sci_cb_dma_t callback, void *callbackArg, unsigned int flags,
                              sci_error_t *error);
void   SCIRequestDMAChannel(sci_desc_t sd, sci_dma_channel_t *channel, unsigned int localAdapterNo,
                            sci_dma_type_t type, unsigned int channelId, unsigned int flags,
                            sci_error_t *error);
void   SCIAssignDMAChannel(sci_dma_channel_t channel, sci_dma_queue_t dq, unsigned int flags,
                           sci_error_t *error);
void   SCIReturnDMAChannel(sci_dma_channel_t channel, sci_error_t *error);
/* Segments need no preparation for a channel on shared memory: these check their handles. */
void   SCIPrepareLocalSegmentForDMA(sci_dma_channel_t channel, sci_local_segment_t localSegment,
                                    unsigned int flags, sci_error_t *error);
void   SCIUnprepareLocalSegmentForDMA(sci_dma_channel_t channel, sci_local_segment_t localSegment,
                                      unsigned int flags, sci_error_t *error);
void   SCIPrepareRemoteSegmentForDMA(sci_dma_channel_t channel, sci_remote_segment_t remoteSegment,
                                     unsigned int flags, sci_error_t *error);
void   SCIUnprepareRemoteSegmentForDMA(sci_dma_channel_t channel, sci_remote_segment_t remoteSegment,
                                       unsigned int flags, sci_error_t *error);

/* ---- Interrupts ------------------------------------------------------------------------- */

void   SCICreateInterrupt(sci_desc_t sd, sci_local_interrupt_t *interrupt, unsigned int localAdapterNo,
                          unsigned int *interruptNo, sci_cb_interrupt_t callback, void *callbackArg,
                          unsigned int flags, sci_error_t *error);
void   SCIRemoveInterrupt(sci_local_interrupt_t interrupt, unsigned int flags, sci_error_t *error);
void   SCIWaitForInterrupt(sci_local_interrupt_t interrupt, unsigned int timeout, unsigned int flags,
                           sci_error_t *error);
void   SCIConnectInterrupt(sci_desc_t sd, sci_remote_interrupt_t *interrupt, unsigned int nodeId,
                           unsigned int localAdapterNo, unsigned int interruptNo,
                           unsigned int timeout, unsigned int flags, sci_error_t *error);
void   SCIDisconnectInterrupt(sci_remote_interrupt_t interrupt, unsigned int flags,
                              sci_error_t *error);
void   SCITriggerInterrupt(sci_remote_interrupt_t interrupt, unsigned int flags, sci_error_t *error);
/* SCICreateInterrupt with the number the program names: *interruptNo is the number (as with
 * SCI_FLAG_FIXED_INTNO); a number in use is SCI_ERR_BUSY. */
void   SCICreateNamedInterrupt(sci_desc_t sd, sci_local_interrupt_t *interrupt,
                               unsigned int localAdapterNo, unsigned int *interruptNo,
                               sci_cb_interrupt_t callback, void *callbackArg, unsigned int flags,
                               sci_error_t *error);

/* ---- Interrupt flags and conditional interrupts ----------------------------------------
 * SCIRegisterInterruptFlag makes a local interrupt (sci_local_interrupt_t: wait for it,
 * give it a callback, remove it as any other) whose trigger is the flag at `offset` (4-byte
 * aligned) of a local segment. On the vendor's hardware a remote node triggers it by a store
 * through a SCI_FLAG_CONDITIONAL_INTERRUPT_MAP map; a software fabric cannot see a store, so
 * on Lanes the flag word holds, once registered, an interrupt number: a remote node reads it
 * through its map of the segment and triggers with SCIConnectInterrupt (that number) and
 * SCITriggerInterrupt.
 *
 * Every trigger is counted (SCIGetConditionalInterruptTrigCounter: the triggers since the
 * last SCIEnable/SCIDisableConditionalInterrupt, which reset the count; SCI_ERR_OVERFLOW once
 * it passed UINT_MAX). With SCI_FLAG_CONDITIONAL_INTERRUPT a trigger is delivered only while
 * the flag is enabled, and delivering one disables it: the program handles the interrupt,
 * then enables the flag again. A flag is enabled when registered. SCIEnable fails with
 * SCI_ERR_COND_INT_RACE_PROBLEM, leaving the flag disabled, when triggers came while it was
 * disabled (they were not delivered): the program checks its state and enables again.
 * SCIDisable stops delivery. Without SCI_FLAG_CONDITIONAL_INTERRUPT every trigger is
 * delivered and enabling only resets the count. */
void   SCIRegisterInterruptFlag(unsigned int localAdapterNo, sci_local_interrupt_t *interrupt,
                                sci_local_segment_t segment, unsigned int offset,
                                sci_cb_interrupt_t callback, void *callbackArg, unsigned int flags,
                                sci_error_t *error);
void   SCIEnableConditionalInterrupt(sci_local_interrupt_t interrupt, unsigned int flags,
                                     sci_error_t *error);
void   SCIDisableConditionalInterrupt(sci_local_interrupt_t interrupt, unsigned int flags,
                                      sci_error_t *error);
void   SCIGetConditionalInterruptTrigCounter(sci_local_interrupt_t interrupt,
                                             unsigned int *interruptTrigCounter,
                                             unsigned int flags, sci_error_t *error);

/* ---- Data interrupts -------------------------------------------------------------------- */

void   SCICreateDataInterrupt(sci_desc_t sd, sci_local_data_interrupt_t *interrupt,
                              unsigned int localAdapterNo, unsigned int *interruptNo,
                              sci_cb_data_interrupt_t callback, void *callbackArg,
                              unsigned int flags, sci_error_t *error);
void   SCIRemoveDataInterrupt(sci_local_data_interrupt_t interrupt, unsigned int flags,
                              sci_error_t *error);
void   SCIWaitForDataInterrupt(sci_local_data_interrupt_t interrupt, void *data,
                               unsigned int *length, unsigned int timeout, unsigned int flags,
                               sci_error_t *error);
void   SCIConnectDataInterrupt(sci_desc_t sd, sci_remote_data_interrupt_t *interrupt,
                               unsigned int nodeId, unsigned int localAdapterNo,
                               unsigned int interruptNo, unsigned int timeout, unsigned int flags,
                               sci_error_t *error);
void   SCIDisconnectDataInterrupt(sci_remote_data_interrupt_t interrupt, unsigned int flags,
                                  sci_error_t *error);
void   SCITriggerDataInterrupt(sci_remote_data_interrupt_t interrupt, void *data,
                               unsigned int length, unsigned int flags, sci_error_t *error);

/* ---- SmartIO (device lending) -----------------------------------------------------------
 * No physical PCIe device exists on a software fabric: SCIGetDeviceList finds no device
 * (0, SCI_ERR_OK) and SCIBorrowDevice fails with SCI_ERR_NO_SUCH_FDID.
 *
 * For testing a program's control flow, LANES_SISCI_FAKE_DEVICES describes devices backed by
 * ordinary memory, each `FDID[:BAR0_SIZE[:CLASS[:VENDOR[:DEVICE]]]]`, separated by commas
 * (numbers decimal or 0x-hex, sizes with an optional K, M or G; defaults: a 4 KiB BAR 0,
 * class, vendor and device 0). Such a device belongs to the process: it can be borrowed
 * (SCI_FLAG_EXCLUSIVE: by nobody else; SCI_ERR_NOT_AVAILABLE while another handle holds it),
 * its BAR 0 connected (SCIConnectDeviceSegment with SCI_MEMTYPE_BAR, segment id 0) and
 * mapped like any remote segment, device segments created (SCI_MEMTYPE_PRIVATE or _SHARED;
 * an id in use is SCI_ERR_SEGMENTID_USED) and connected, segments mapped for the device
 * (the I/O addresses are made-up bus addresses: nothing reads them), and the device
 * returned. SCIReturnDevice is SCI_ERR_BUSY while device segments it connected are still
 * connected; the last return removes the device segments. */
size_t SCIGetDeviceList(sci_desc_t sd, unsigned int *fdids, size_t length,
                        const sci_smartio_device_info_t *filter, unsigned int flags,
                        sci_error_t *error);
void   SCIBorrowDevice(sci_desc_t sd, sci_smartio_device_t *device, unsigned long long fdid,
                       unsigned int flags, sci_error_t *error);
void   SCIReturnDevice(sci_smartio_device_t device, unsigned int flags, sci_error_t *error);
void   SCIReleaseExclusiveBorrow(sci_smartio_device_t device, unsigned int flags,
                                 sci_error_t *error);
unsigned int SCIGetFabricDeviceId(sci_smartio_device_t device);
void   SCIConnectDeviceSegment(sci_smartio_device_t device, sci_remote_segment_t *segment,
                               unsigned int segmentId, unsigned int memoryType,
                               sci_cb_remote_segment_t callback, void *callbackArg,
                               unsigned int flags, sci_error_t *error);
/* SCIConnectDeviceSegment through a given local adapter. */
void   SCIConnectDeviceSegmentPath(sci_smartio_device_t device, sci_remote_segment_t *segment,
                                   unsigned int segmentId, unsigned int memoryType,
                                   unsigned int localAdapterNo, sci_cb_remote_segment_t callback,
                                   void *callbackArg, unsigned int flags, sci_error_t *error);
void   SCICreateDeviceSegment(sci_smartio_device_t device, unsigned int segmentId, size_t size,
                              unsigned int memoryType, unsigned int accessHints,
                              unsigned int flags, sci_error_t *error);
void   SCIMapLocalSegmentForDevice(sci_local_segment_t segment, unsigned int localAdapterNo,
                                   sci_smartio_device_t device, sci_ioaddr_t *ioaddr,
                                   size_t offset, size_t size, unsigned int flags,
                                   sci_error_t *error);
void   SCIUnmapLocalSegmentForDevice(sci_local_segment_t segment, unsigned int localAdapterNo,
                                     sci_smartio_device_t device, unsigned int flags,
                                     sci_error_t *error);
void   SCIMapRemoteSegmentForDevice(sci_remote_segment_t segment, sci_smartio_device_t device,
                                    sci_ioaddr_t *ioaddr, size_t offset, size_t size,
                                    unsigned int flags, sci_error_t *error);
void   SCIUnmapRemoteSegmentForDevice(sci_remote_segment_t segment, sci_smartio_device_t device,
                                      unsigned int flags, sci_error_t *error);
/* A local PCIe device (bus, device/function) as a requester of remote segments: recorded per
 * descriptor (the memory of a software fabric needs no requester set-up). Registering one
 * twice is SCI_ERR_BUSY, unregistering one not registered SCI_ERR_ILLEGAL_OPERATION. */
void   SCIRegisterPCIeRequester(sci_desc_t sd, unsigned int localAdapterNo, unsigned int bus,
                                unsigned int devfn, unsigned int flags, sci_error_t *error);
void   SCIUnregisterPCIeRequester(sci_desc_t sd, unsigned int localAdapterNo, unsigned int bus,
                                  unsigned int devfn, unsigned int flags, sci_error_t *error);

/* ---- Exported without a prototype -------------------------------------------------------
 * The vendor library also exports these, which its header does not declare; libsisci.so
 * (Lanes) exports them too (plain names only), and declares them nowhere either:
 *   void         SetSciMemCopyFunction(unsigned int function);  the PIO copy routine of
 *                                 SCIMemCpy (remembered; Lanes has one copy routine)
 *   unsigned int GetSciMemCopyFunction(void);                   the number last set (0)
 *   DISStartDmaTransfer, DISStartDmaTransferVec: SCIStartDmaTransfer and
 *                                 SCIStartDmaTransferVec under other names (same arguments)
 */

#ifdef __cplusplus
}
#endif

#endif /* LANES_SISCI_API_H */
