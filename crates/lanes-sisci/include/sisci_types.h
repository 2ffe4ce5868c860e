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
typedef struct sci_smartio_device        *sci_smartio_device_t;
typedef sci_smartio_device_t              sci_device_t;

/* An address on the I/O bus (API 2.x: 64 bits). */
typedef uint64_t sci_ioaddr_t;

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
