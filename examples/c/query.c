/*
 * query - what the SISCI library says about this node: vendor and API strings, the
 * adapter's properties, DMA availability and capabilities, and which nodes answer a probe.
 *
 *   ./query                       everything about adapter 0
 *   ./query -probe 4,8,12         also probe these nodes
 *   ./query -host NAME            also look up the node id of host NAME
 *
 * Exit status: 0 done, 1 usage, 2 SISCI error, 4 a probed node did not answer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sisci_api.h>
#include <dis_types.h>

#define NO_FLAGS 0

static const char *prog = "query";
#include "common.h"

static void usage(void)
{
    printf("Usage: %s [-a ADAPTER] [-probe NODE,NODE,...] [-host NAME]\n"
           "Prints what SCIQuery, SCIGetLocalNodeId and SCIProbeNode report.\n"
           "  -a ADAPTER     adapter number (default 0)\n"
           "  -probe LIST    probe these node ids; exit 4 if one is unreachable\n"
           "  -host NAME     look up the node id of host NAME (SCIGetNodeIdByAdapterName)\n"
           "  -h             this help\n",
           prog);
}

static void adapter_value(unsigned int adapter, unsigned int sub, const char *name)
{
    sci_query_adapter_t q;
    sci_error_t err;
    unsigned int v = 0;
    q.localAdapterNo = adapter;
    q.portNo = 0;
    q.subcommand = sub;
    q.data = &v;
    SCIQuery(SCI_Q_ADAPTER, &q, NO_FLAGS, &err);
    if (err == SCI_ERR_OK)
        printf("  %-28s %u\n", name, v);
    else
        printf("  %-28s (%s)\n", name, SCIGetErrorString(err));
}

static void dma_engine(unsigned int adapter, unsigned int flag, const char *name)
{
    sci_query_dma_t q;
    sci_error_t err;
    unsigned int avail = 0;
    sci_dma_capabilities_t caps;
    q.localAdapterNo = adapter;
    q.subcommand = SCI_Q_DMA_AVAILABLE;
    q.data = &avail;
    SCIQuery(SCI_Q_DMA, &q, flag, &err);
    if (err != SCI_ERR_OK) {
        printf("  %-10s (%s)\n", name, SCIGetErrorString(err));
        return;
    }
    printf("  %-10s %s\n", name, avail ? "available" : "not available");
    if (!avail) return;
    q.subcommand = SCI_Q_DMA_CAPABILITIES;
    q.data = &caps;
    SCIQuery(SCI_Q_DMA, &q, flag, &err);
    CHECK("SCIQuery(SCI_Q_DMA_CAPABILITIES)");
    printf("    channels %u, max transfer %u bytes, max vector %u, alignment %u (suggested %u)\n",
           caps.num_channels, caps.max_transfer_size, caps.max_vector_length, caps.min_align_bytes,
           caps.suggested_align_bytes);
}

int main(int argc, char **argv)
{
    unsigned int adapter = 0;
    const char *probe = NULL, *host = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "-help") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (v && !strcmp(a, "-a")) { adapter = (unsigned int)strtoul(v, NULL, 0); i++; }
        else if (v && !strcmp(a, "-probe")) { probe = v; i++; }
        else if (v && !strcmp(a, "-host")) { host = v; i++; }
        else { fprintf(stderr, "%s: unknown or incomplete option %s\n", prog, a); usage(); return 1; }
    }

    sci_error_t err;
    sci_desc_t sd;
    char buf[256];
    sci_query_string_t qs;
    SCIInitialize(NO_FLAGS, &err);
    CHECK("SCIInitialize");
    SCIOpen(&sd, NO_FLAGS, &err);
    CHECK("SCIOpen");

    qs.str = buf;
    qs.length = sizeof buf;
    SCIQuery(SCI_Q_VENDORID, &qs, NO_FLAGS, &err);
    CHECK("SCIQuery(SCI_Q_VENDORID)");
    printf("vendor: %s\n", buf);
    SCIQuery(SCI_Q_API, &qs, NO_FLAGS, &err);
    CHECK("SCIQuery(SCI_Q_API)");
    printf("api: %s\n", buf);

    unsigned int node = 0;
    SCIGetLocalNodeId(adapter, &node, NO_FLAGS, &err);
    CHECK("SCIGetLocalNodeId");
    printf("local node id (adapter %u): %u\n", adapter, node);

    printf("adapter %u:\n", adapter);
    adapter_value(adapter, SCI_Q_ADAPTER_NODEID, "node id");
    adapter_value(adapter, SCI_Q_ADAPTER_CARD_TYPE, "card type");
    adapter_value(adapter, SCI_Q_ADAPTER_CONFIGURED, "configured");
    adapter_value(adapter, SCI_Q_ADAPTER_LINK_OPERATIONAL, "link operational");
    adapter_value(adapter, SCI_Q_ADAPTER_NUMBER_OF_LINKS, "links");
    adapter_value(adapter, SCI_Q_ADAPTER_ATT_PAGE_SIZE, "page size");
    adapter_value(adapter, SCI_Q_ADAPTER_DMA_MTU, "DMA MTU");
    adapter_value(adapter, SCI_Q_ADAPTER_DMA_SIZE_ALIGNMENT, "DMA size alignment");
    adapter_value(adapter, SCI_Q_ADAPTER_DMA_OFFSET_ALIGNMENT, "DMA offset alignment");
    adapter_value(adapter, SCI_Q_ADAPTER_SUGGESTED_MIN_DMA_SIZE, "suggested min DMA size");
    adapter_value(adapter, SCI_Q_ADAPTER_MCAST_MAX_GROUPS, "multicast groups");

    printf("DMA engines:\n");
    dma_engine(adapter, SCI_FLAG_DMA_ADAPTER, "adapter");
    dma_engine(adapter, SCI_FLAG_DMA_SYSDMA, "system");
    dma_engine(adapter, SCI_FLAG_DMA_GLOBAL, "global");

    int rc = 0;
    if (probe) {
        char list[256];
        snprintf(list, sizeof list, "%s", probe);
        for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
            unsigned int n = (unsigned int)strtoul(t, NULL, 0);
            int up = SCIProbeNode(sd, adapter, n, NO_FLAGS, &err);
            printf("probe node %u: %s", n, up ? "reachable" : "not reachable");
            if (err != SCI_ERR_OK) printf(" (%s)", SCIGetErrorString(err));
            printf("\n");
            if (!up) rc = 4;
        }
    }
    if (host) {
        dis_nodeId_list_t ids;
        dis_virt_adapter_t type;
        char name[256];
        snprintf(name, sizeof name, "%s", host);
        SCIGetNodeIdByAdapterName(name, &ids, &type, NO_FLAGS, &err);
        if (err == SCI_ERR_OK)
            printf("host %s: node %u\n", host, ids[0]);
        else
            printf("host %s: %s\n", host, SCIGetErrorString(err));
    }
    SCIClose(sd, NO_FLAGS, &err);
    CHECK("SCIClose");
    SCITerminate();
    return rc;
}
