/*
 * interrupts - remote interrupt ping-pong between two nodes.
 *
 * Each side creates a local interrupt and connects to the other's: the server's number is
 * -int N (default 100), the client's N+1. The client triggers the server's interrupt and
 * waits for its own; the server waits and triggers back, either from its main loop or, with
 * -callback, from an interrupt callback the library runs on its own thread. The client
 * prints the round-trip time and its half (the interrupt latency).
 *
 *   LANES_NODE_ID=8 ./interrupts -server -rn 4 [-callback]
 *   LANES_NODE_ID=4 ./interrupts -client -rn 8 [-iter 10000]
 *
 * Exit status: 0 done, 1 usage, 2 SISCI error (including a timeout).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sisci_api.h>

#define NO_FLAGS 0

static const char *prog = "interrupts";
#include "common.h"

static void usage(void)
{
    printf("Usage: %s -server -rn NODE [-int N] [-iter N] [-callback] [-timeout MS]\n"
           "       %s -client -rn NODE [-int N] [-iter N] [-timeout MS]\n"
           "Remote interrupt ping-pong latency.\n"
           "  -rn NODE       the other side's node id\n"
           "  -int N         the server's interrupt number; the client's is N+1 (default 100)\n"
           "  -iter N        round trips (client default 10000; the server serves until the client's\n"
           "                 node is gone unless given)\n"
           "  -callback      server: answer from an interrupt callback (library thread)\n"
           "  -timeout MS    longest wait for the peer or an interrupt (default 30000)\n"
           "  -h             this help\n",
           prog, prog);
}

struct answer {
    sci_remote_interrupt_t peer;
    volatile unsigned long count;
    unsigned long want;
};

/* Runs on a library thread for every interrupt: triggers the client's interrupt back. */
static sci_callback_action_t on_interrupt(void *arg, sci_local_interrupt_t irq, sci_error_t status)
{
    struct answer *a = arg;
    sci_error_t err;
    (void)irq;
    if (status != SCI_ERR_OK) return SCI_CALLBACK_CANCEL;
    /* The client may trigger before this side has connected back: wait for the connection. */
    sci_remote_interrupt_t peer;
    while ((peer = __atomic_load_n(&a->peer, __ATOMIC_ACQUIRE)) == NULL) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    SCITriggerInterrupt(peer, NO_FLAGS, &err);
    if (err != SCI_ERR_OK) return SCI_CALLBACK_CANCEL;
    a->count++;
    return a->want && a->count >= a->want ? SCI_CALLBACK_CANCEL : SCI_CALLBACK_CONTINUE;
}

int main(int argc, char **argv)
{
    int server = 0, client = 0, callback = 0;
    unsigned int rn = 0, intno = 100, timeout = 30000;
    unsigned long iters = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "-help") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "-server")) server = 1;
        else if (!strcmp(a, "-client")) client = 1;
        else if (!strcmp(a, "-callback")) callback = 1;
        else if (v && !strcmp(a, "-rn")) { rn = (unsigned int)strtoul(v, NULL, 0); i++; }
        else if (v && !strcmp(a, "-int")) { intno = (unsigned int)strtoul(v, NULL, 0); i++; }
        else if (v && !strcmp(a, "-iter")) { iters = strtoul(v, NULL, 0); i++; }
        else if (v && !strcmp(a, "-timeout")) { timeout = (unsigned int)strtoul(v, NULL, 0); i++; }
        else { fprintf(stderr, "%s: unknown or incomplete option %s\n", prog, a); usage(); return 1; }
    }
    if (server == client || rn == 0 || (callback && client)) { usage(); return 1; }
    if (client && iters == 0) iters = 10000;

    sci_error_t err;
    sci_desc_t sd;
    sci_local_interrupt_t mine;
    sci_remote_interrupt_t peer;
    struct answer ans;
    unsigned int my_no = server ? intno : intno + 1, peer_no = server ? intno + 1 : intno;
    memset(&ans, 0, sizeof ans);
    ans.want = iters;

    SCIInitialize(NO_FLAGS, &err);
    CHECK("SCIInitialize");
    SCIOpen(&sd, NO_FLAGS, &err);
    CHECK("SCIOpen");
    SCICreateInterrupt(sd, &mine, 0, &my_no, callback ? on_interrupt : NULL, &ans,
                       SCI_FLAG_FIXED_INTNO | (callback ? SCI_FLAG_USE_CALLBACK : 0), &err);
    CHECK("SCICreateInterrupt");
    fprintf(stderr, "%s: interrupt %u created; connecting to interrupt %u of node %u\n", prog, my_no, peer_no, rn);
    SCIConnectInterrupt(sd, &peer, rn, 0, peer_no, timeout, NO_FLAGS, &err);
    CHECK("SCIConnectInterrupt");
    __atomic_store_n(&ans.peer, peer, __ATOMIC_RELEASE);

    if (server) {
        /* Serve until -iter round trips are answered or the client's node is gone. */
        double idle = 0;
        for (;;) {
            if (iters && ans.count >= iters) break;
            if (callback) {
                struct timespec ts = {0, 10 * 1000000};
                nanosleep(&ts, NULL);
                err = SCI_ERR_TIMEOUT;
            } else {
                SCIWaitForInterrupt(mine, 100, NO_FLAGS, &err);
            }
            if (err == SCI_ERR_TIMEOUT) {
                sci_error_t perr;
                unsigned long before = ans.count;
                idle += callback ? 10 : 100;
                if (!SCIProbeNode(sd, 0, rn, NO_FLAGS, &perr)) break;
                if (ans.count != before) idle = 0;
                if (idle >= timeout && ans.count == before) die_sci("waiting for the client", SCI_ERR_TIMEOUT);
                continue;
            }
            CHECK("SCIWaitForInterrupt");
            idle = 0;
            SCITriggerInterrupt(peer, NO_FLAGS, &err);
            if (err == SCI_ERR_NOT_CONNECTED) break;
            CHECK("SCITriggerInterrupt");
            ans.count++;
        }
        printf("%s: answered %lu interrupts%s\n", prog, ans.count, callback ? " from the callback" : "");
    } else {
        double min = 1e30, max = 0, sum = 0;
        for (unsigned long i = 0; i < iters; i++) {
            double t0 = now_us();
            SCITriggerInterrupt(peer, NO_FLAGS, &err);
            CHECK("SCITriggerInterrupt");
            SCIWaitForInterrupt(mine, timeout, NO_FLAGS, &err);
            CHECK("SCIWaitForInterrupt");
            double t = now_us() - t0;
            sum += t;
            if (t < min) min = t;
            if (t > max) max = t;
        }
        unsigned int me = 0;
        SCIGetLocalNodeId(0, &me, NO_FLAGS, &err);
        CHECK("SCIGetLocalNodeId");
        printf("%s: node %u <-> node %u, %lu round trips\n", prog, me, rn, iters);
        printf("round trip: avg %.3f us, min %.3f, max %.3f\n", sum / (double)iters, min, max);
        printf("interrupt latency (one-way): avg %.3f us, min %.3f, max %.3f\n", sum / (double)iters / 2, min / 2,
               max / 2);
    }
    SCIDisconnectInterrupt(peer, NO_FLAGS, &err);
    CHECK("SCIDisconnectInterrupt");
    SCIRemoveInterrupt(mine, NO_FLAGS, &err);
    CHECK("SCIRemoveInterrupt");
    SCIClose(sd, NO_FLAGS, &err);
    CHECK("SCIClose");
    SCITerminate();
    return 0;
}
