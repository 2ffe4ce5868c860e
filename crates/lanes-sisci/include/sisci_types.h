/*
 * sisci_types.h - the types of the SISCI API, as implemented by Lanes.
 *
 * Handles are opaque pointers. Lanes keeps a process-wide registry of live handles: a handle
 * that was removed, closed or never returned by the library is detected and refused with
 * SCI_ERR_ILLEGAL_PARAMETER instead of being dereferenced.
 */
#ifndef LANES_SISCI_TYPES_H
#define LANES_SISCI_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "sisci_api_macros.h"
#include "sisci_error.h"
#include "dis/dis_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sci_desc                  *sci_desc_t;
typedef struct sci_local_segment         *sci_local_segment_t;
typedef struct sci_remote_segment        *sci_remote_segment_t;
typedef struct sci_map                   *sci_map_t;
typedef struct sci_sequence              *sci_sequence_t;
typedef struct sci_dma_queue             *sci_dma_queue_t;
typedef struct sci_dma_channel           *sci_dma_channel_t;
typedef struct sci_local_interrupt       *sci_local_interrupt_t;
typedef struct sci_remote_interrupt      *sci_remote_interrupt_t;
typedef struct sci_local_data_interrupt  *sci_local_data_interrupt_t;
typedef struct sci_remote_data_interrupt *sci_remote_data_interrupt_t;
typedef struct sci_smartio_device        *sci_smartio_device_t; /* a borrowed SmartIO device */
typedef sci_smartio_device_t              sci_device_t;         /* older name */

/* An address on the I/O bus (API 2.x: 64 bits). */
typedef uint64_t sci_ioaddr_t;

/* An address in the global SCI address space (SCIConnectSCISpace). */
typedef struct {
    unsigned short nodeId;  /* the node */
    unsigned short offsHi;  /* high bits of the offset */
    unsigned int   offsLo;  /* low bits of the offset */
} sci_address_t;

/* One element of a DMA vector (SCIStartDmaTransferVec): `size` bytes from `local_offset` of
 * the local segment to (or, with SCI_FLAG_DMA_READ, from) `remote_offset` of the remote
 * one. The members are unsigned int, as in the vendor's header. */
typedef struct {
    unsigned int size;
    unsigned int local_offset;
    unsigned int remote_offset;
    unsigned int flags;
} dis_dma_vec_t;

/* ---- SmartIO (device lending) ------------------------------------------------------------
 * On Lanes no physical device exists: SCIGetDeviceList finds none and SCIBorrowDevice fails
 * with SCI_ERR_NO_SUCH_FDID, unless LANES_SISCI_FAKE_DEVICES describes devices backed by
 * ordinary memory (sisci_api.h, "SmartIO"). */

/* What SCI_Q_DEVICE / SCI_Q_DEVICE_INFO reports of a device; also the filter of
 * SCIGetDeviceList (members left 0 match every device). */
typedef struct {
    unsigned long long fdid;                    /* fabric device id */
    unsigned short     pci_device_id;
    unsigned short     pci_vendor_id;
    unsigned int       pci_class;               /* class code, e.g. 0x010802 (NVMe) */
    unsigned short     pci_subsystem_device_id;
    unsigned short     pci_subsystem_vendor_id;
    unsigned long long pci_serial_number;
    unsigned short     remote_bdf;              /* bus/device/function where the device is */
    unsigned short     local_bdf;               /* ... and as this node sees it */
    unsigned int       adapter;                 /* the local adapter that reaches it */
    unsigned int       nodeid;                  /* the node the device is in */
    int                physical_slot;           /* -1: unknown */
    char               user_name[64];
    char               uuid[37];
} sci_smartio_device_info_t;

/* Kinds of device memory (SCIConnectDeviceSegment, SCICreateDeviceSegment). */
#define SCI_MEMTYPE_BAR                 0x00000001U  /* a BAR of the device; segment id = BAR number */
#define SCI_MEMTYPE_PRIVATE             0x00000002U  /* memory for this borrower and the device */
#define SCI_MEMTYPE_SHARED              0x00000004U  /* memory every borrower can connect to */

/* Access hints of device segments (SCICreateDeviceSegment). */
#define SCI_MEMACCESS_DEVICE_READ       0x00000001U
#define SCI_MEMACCESS_DEVICE_WRITE      0x00000002U
#define SCI_MEMACCESS_HOST_READ         0x00000004U
#define SCI_MEMACCESS_HOST_WRITE        0x00000008U
#define SCI_MEMACCESS_MULTIHOST_READ    (0x00000010U | SCI_MEMACCESS_HOST_READ)
#define SCI_MEMACCESS_MULTIHOST_WRITE   (0x00000010U | SCI_MEMACCESS_HOST_WRITE)
#define SCI_MEMACCESS_P2P_READ          (0x00000020U | SCI_MEMACCESS_DEVICE_READ)
#define SCI_MEMACCESS_P2P_WRITE         (0x00000020U | SCI_MEMACCESS_DEVICE_WRITE)

/* What a callback asks for next. */
typedef enum {
    SCI_CALLBACK_CANCEL   = 1, /* remove the callback */
    SCI_CALLBACK_CONTINUE = 2  /* keep calling it */
} sci_callback_action_t;

/* Why a segment callback or event wait returned. */
typedef enum {
    SCI_CB_CONNECT         = 1, /* local segment: a peer connected */
    SCI_CB_DISCONNECT      = 2, /* local: a peer disconnected; remote: the owner removed it */
    SCI_CB_NOT_OPERATIONAL = 3, /* remote: the owner made the segment unavailable */
    SCI_CB_OPERATIONAL     = 4, /* remote: available again */
    SCI_CB_LOST            = 5  /* the peer (local) or the owner (remote) died */
} sci_segment_cb_reason_t;

typedef enum {
    SCI_DMAQUEUE_IDLE    = 0,
    SCI_DMAQUEUE_GATHER  = 1,
    SCI_DMAQUEUE_POSTED  = 2,
    SCI_DMAQUEUE_DONE    = 3,
    SCI_DMAQUEUE_ABORTED = 4,
    SCI_DMAQUEUE_ERROR   = 5
} sci_dma_queue_state_t;

typedef enum {
    SCI_SEQ_OK            = 0,
    SCI_SEQ_RETRIABLE     = 1,
    SCI_SEQ_NOT_RETRIABLE = 2,
    SCI_SEQ_PENDING       = 3
} sci_sequence_status_t;

typedef enum {
    SCI_DMA_TYPE_DONTCARE    = 1,
    SCI_DMA_TYPE_ADAPTER     = 2,
    SCI_DMA_TYPE_GLOBAL      = 3,
    SCI_DMA_TYPE_SYSTEM      = 4,
    SCI_DMA_TYPE_TRANSPARENT = 5
} sci_dma_type_t;

#define SCI_DMA_CHANNEL_ID_DONTCARE 0xFFFFFFFFU

/* Callbacks run on a library thread; their return value says whether to keep them. */
typedef sci_callback_action_t (*sci_cb_local_segment_t)(void *arg,
                                                        sci_local_segment_t segment,
                                                        sci_segment_cb_reason_t reason,
                                                        unsigned int nodeId,
                                                        unsigned int localAdapterNo,
                                                        sci_error_t error);

typedef sci_callback_action_t (*sci_cb_remote_segment_t)(void *arg,
                                                         sci_remote_segment_t segment,
                                                         sci_segment_cb_reason_t reason,
                                                         sci_error_t error);

typedef sci_callback_action_t (*sci_cb_dma_t)(void *arg, sci_dma_queue_t queue, sci_error_t status);

typedef sci_callback_action_t (*sci_cb_interrupt_t)(void *arg,
                                                    sci_local_interrupt_t interrupt,
                                                    sci_error_t status);

typedef sci_callback_action_t (*sci_cb_data_interrupt_t)(void *arg,
                                                         sci_local_data_interrupt_t interrupt,
                                                         void *data,
                                                         unsigned int length,
                                                         sci_error_t status);

#ifdef __cplusplus
}
#endif

#endif /* LANES_SISCI_TYPES_H */
