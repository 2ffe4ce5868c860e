/*
 * dataintr - data interrupt ping-pong between two nodes: interrupts that carry a message.
 *
 * The server creates data interrupt -int N (default 200) and the client N+1; each connects
 * to the other's. The client sends messages of each size (up to 4096 bytes) holding a
 * sequence number and a pattern; the server checks each one and sends it back, from its
 * main loop or, with -callback, from the callback the library runs on its own thread. The
 * client checks the echo and prints per size the round-trip time and its half.
 *
 *   LANES_NODE_ID=8 ./dataintr -server -rn 4 [-callback]
 *   LANES_NODE_ID=4 ./dataintr -client -rn 8 [-sizes 8,64,1024,4096] [-iter 2000]
 *
 * Exit status: 0 done, 1 usage, 2 SISCI error (including a timeout), 3 corrupt message.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sisci_api.h>

#define NO_FLAGS 0
#define MAX_MSG 4096

static const char *prog = "dataintr";
#include "common.h"

static void usage(void)
{
    printf("Usage: %s -server -rn NODE [-int N] [-callback] [-timeout MS]\n"
           "       %s -client -rn NODE [-int N] [-sizes LIST] [-iter N] [-timeout MS]\n"
           "Data interrupt ping-pong latency, with every message checked.\n"
           "  -rn NODE       the other side's node id\n"
           "  -int N         the server's data interrupt number; the client's is N+1 (default 200)\n"
           "  -sizes LIST    message sizes, comma separated, 8..4096 (default 8,64,512,4096)\n"
           "  -iter N        round trips per size (default 2000)\n"
           "  -callback      server: echo from a data interrupt callback (library thread)\n"
           "  -timeout MS    longest wait for the peer or a message (default 30000)\n"
           "  -h             this help\n",
           prog, prog);
}

/* A message: its sequence number, then pattern bytes derived from it. */
static void fill(uint8_t *m, unsigned int len, uint64_t seq)
{
    memcpy(m, &seq, 8);
    for (unsigned int i = 8; i < len; i++) m[i] = (uint8_t)(seq * 31 + i);
}

static int valid(const uint8_t *m, unsigned int len, uint64_t *seq)
{
    if (len < 8) return 0;
    memcpy(seq, m, 8);
    for (unsigned int i = 8; i < len; i++)
        if (m[i] != (uint8_t)(*seq * 31 + i)) return 0;
    return 1;
}

struct echo {
    sci_remote_data_interrupt_t peer;
    volatile unsigned long count;
    volatile int bad;
};

/* Runs on a library thread for every message: checks it and sends it back. */
static sci_callback_action_t on_message(void *arg, sci_local_data_interrupt_t irq, void *data, unsigned int length,
                                        sci_error_t status)
{
    struct echo *e = arg;
    sci_error_t err;
    uint64_t seq;
    (void)irq;
    if (status != SCI_ERR_OK) return SCI_CALLBACK_CANCEL;
    if (!valid(data, length, &seq)) {
        e->bad = 1;
        return SCI_CALLBACK_CANCEL;
    }
    sci_remote_data_interrupt_t peer;
    while ((peer = __atomic_load_n(&e->peer, __ATOMIC_ACQUIRE)) == NULL) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    /* Count the echo before it leaves: the client may finish and exit the instant it
       arrives, and the main thread then reports the count at once. */
    __atomic_fetch_add(&e->count, 1, __ATOMIC_SEQ_CST);
    SCITriggerDataInterrupt(peer, data, length, NO_FLAGS, &err);
    if (err != SCI_ERR_OK) {
        __atomic_fetch_sub(&e->count, 1, __ATOMIC_SEQ_CST);
        return SCI_CALLBACK_CANCEL;
    }
    return SCI_CALLBACK_CONTINUE;
}

int main(int argc, char **argv)
{
    int server = 0, client = 0, callback = 0;
    unsigned int rn = 0, intno = 200, timeout = 30000;
    unsigned long iters = 2000;
    unsigned int sizes[32] = {8, 64, 512, 4096};
    int nsizes = 4;
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
        else if (v && !strcmp(a, "-sizes")) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            nsizes = 0;
            for (char *t = strtok(buf, ","); t && nsizes < 32; t = strtok(NULL, ",")) {
                unsigned long s = strtoul(t, NULL, 0);
                if (s < 8 || s > MAX_MSG) { fprintf(stderr, "%s: size %s: 8..%d\n", prog, t, MAX_MSG); return 1; }
                sizes[nsizes++] = (unsigned int)s;
            }
            i++;
        }
        else { fprintf(stderr, "%s: unknown or incomplete option %s\n", prog, a); usage(); return 1; }
    }
    if (server == client || rn == 0 || nsizes == 0 || iters == 0 || (callback && client)) { usage(); return 1; }

    sci_error_t err;
    sci_desc_t sd;
    sci_local_data_interrupt_t mine;
    sci_remote_data_interrupt_t peer;
    struct echo echo;
    unsigned int my_no = server ? intno : intno + 1, peer_no = server ? intno + 1 : intno;
    memset(&echo, 0, sizeof echo);

    SCIInitialize(NO_FLAGS, &err);
    CHECK("SCIInitialize");
    SCIOpen(&sd, NO_FLAGS, &err);
    CHECK("SCIOpen");
    SCICreateDataInterrupt(sd, &mine, 0, &my_no, callback ? on_message : NULL, &echo,
                           SCI_FLAG_FIXED_INTNO | (callback ? SCI_FLAG_USE_CALLBACK : 0), &err);
    CHECK("SCICreateDataInterrupt");
    fprintf(stderr, "%s: data interrupt %u created; connecting to %u of node %u\n", prog, my_no, peer_no, rn);
    SCIConnectDataInterrupt(sd, &peer, rn, 0, peer_no, timeout, NO_FLAGS, &err);
    CHECK("SCIConnectDataInterrupt");
    __atomic_store_n(&echo.peer, peer, __ATOMIC_RELEASE);

    uint8_t msg[MAX_MSG], back[MAX_MSG];
    int rc = 0;
    if (server) {
        /* Echo until the client's node is gone. */
        double idle = 0;
        for (;;) {
            unsigned int len = sizeof msg;
            if (callback) {
                struct timespec ts = {0, 10 * 1000000};
                nanosleep(&ts, NULL);
                err = SCI_ERR_TIMEOUT;
                if (echo.bad) break;
            } else {
                SCIWaitForDataInterrupt(mine, msg, &len, 100, NO_FLAGS, &err);
            }
            if (err == SCI_ERR_TIMEOUT) {
                sci_error_t perr;
                unsigned long before = echo.count;
                idle += callback ? 10 : 100;
                if (!SCIProbeNode(sd, 0, rn, NO_FLAGS, &perr)) break;
                if (echo.count != before) idle = 0;
                if (idle >= timeout && echo.count == before) die_sci("waiting for the client", SCI_ERR_TIMEOUT);
                continue;
            }
            CHECK("SCIWaitForDataInterrupt");
            idle = 0;
            uint64_t seq;
            if (!valid(msg, len, &seq)) { echo.bad = 1; break; }
            SCITriggerDataInterrupt(peer, msg, len, NO_FLAGS, &err);
            if (err == SCI_ERR_NOT_CONNECTED) break;
            CHECK("SCITriggerDataInterrupt");
            echo.count++;
        }
        if (echo.bad) { fprintf(stderr, "%s: a corrupt message arrived\n", prog); rc = 3; }
        printf("%s: echoed %lu messages%s\n", prog, echo.count, callback ? " from the callback" : "");
    } else {
        unsigned int me = 0;
        SCIGetLocalNodeId(0, &me, NO_FLAGS, &err);
        CHECK("SCIGetLocalNodeId");
        printf("%s: node %u <-> node %u, %lu round trips per size\n", prog, me, rn, iters);
        printf("%8s %12s %12s %10s %10s\n", "size", "rtt avg(us)", "1-way(us)", "min(us)", "max(us)");
        uint64_t seq = 0;
        for (int k = 0; k < nsizes && rc == 0; k++) {
            double min = 1e30, max = 0, sum = 0;
            for (unsigned long i = 0; i < iters; i++) {
                fill(msg, sizes[k], ++seq);
                unsigned int len = sizeof back;
                double t0 = now_us();
                SCITriggerDataInterrupt(peer, msg, sizes[k], NO_FLAGS, &err);
                CHECK("SCITriggerDataInterrupt");
                SCIWaitForDataInterrupt(mine, back, &len, timeout, NO_FLAGS, &err);
                CHECK("SCIWaitForDataInterrupt");
                double t = now_us() - t0;
                uint64_t got;
                if (len != sizes[k] || !valid(back, len, &got) || got != seq) {
                    fprintf(stderr, "%s: echo %llu of %u bytes came back wrong (%u bytes)\n", prog,
                            (unsigned long long)seq, sizes[k], len);
                    rc = 3;
                    break;
                }
                sum += t;
                if (t < min) min = t;
                if (t > max) max = t;
            }
            if (rc == 0)
                printf("%8u %12.3f %12.3f %10.3f %10.3f\n", sizes[k], sum / (double)iters, sum / (double)iters / 2,
                       min / 2, max / 2);
        }
        printf("(min/max are one-way: round trip / 2)\n");
    }
    SCIDisconnectDataInterrupt(peer, NO_FLAGS, &err);
    CHECK("SCIDisconnectDataInterrupt");
    SCIRemoveDataInterrupt(mine, NO_FLAGS, &err);
    CHECK("SCIRemoveDataInterrupt");
    SCIClose(sd, NO_FLAGS, &err);
    CHECK("SCIClose");
    SCITerminate();
    return rc;
}
