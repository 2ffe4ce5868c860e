/*
 * dis_types.h - basic types shared by the SISCI API and its tools, as implemented by Lanes.
 * Programs include it as <dis_types.h> with -I<prefix>/include/dis (or -I<prefix>/include,
 * where a forwarding header of the same name lives).
 */
#ifndef LANES_DIS_TYPES_H
#define LANES_DIS_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The node id that addresses every member of a reflective-memory (multicast) group: with
 * SCI_FLAG_BROADCAST, SCIConnectSegment to it joins the group named by the segment id. */
#define DIS_BROADCAST_NODEID_GROUP_ALL 252

/* Adapters per node that SCIGetNodeIdByAdapterName() can report. */
#define DIS_MAX_NSCIS 4

/* The longest vector SCIStartDmaTransferVec() accepts (dis_dma_vec_t is in sisci_types.h,
 * where the vendor declares it). */
#define DIS_DMA_MAX_VECLEN 256

/* Node ids found for an adapter name; unused entries are 0. */
typedef unsigned int dis_nodeId_list_t[DIS_MAX_NSCIS];

/* The kind of (virtual) adapter a node id was found on (SCIGetNodeIdByAdapterName,
 * SCIGetNodeInfoByAdapterName). */
typedef enum {
    DIS_VIRT_ADAPTER_UNKNOWN = 0,
    DIS_VIRT_ADAPTER_PCIE    = 1,
    DIS_VIRT_ADAPTER_LANES   = 2  /* the Lanes software fabric */
} dis_virt_adapter_t;

/* Older name of the same thing. */
typedef dis_virt_adapter_t dis_adapter_type_t;

#ifdef __cplusplus
}
#endif

#endif /* LANES_DIS_TYPES_H */
