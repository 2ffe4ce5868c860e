/* Conditional and named interrupts between two node processes (issue 28, item 6).
 *
 *   cond_intr -server     (node 8) a segment 0xC0 with a conditional interrupt flag at
 *                         offset 64, an unconditional one with a callback at offset 128, and a
 *                         named interrupt 0x4242; checks what arrives, step by step
 *   cond_intr -client     (node 4) reads the flags' interrupt numbers from the segment and
 *                         triggers them when the server says so
 *
 * The server and client talk through words of the segment: [0] ready, [1] client's trigger
 * count, [2] go for the third round, [3] go for the fourth, [4] done. Each check prints
 * "ok NAME" or "FAIL NAME ..."; "0 failures" ends a good run. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sisci_api.h>
#include <sisci_error.h>
#include <sisci_types.h>

#include "checks.h"

#define NO_FLAGS 0U
#define SEGMENT 0xC0U
#define NAMED 0x4242U

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void nap(void)
{
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
}

/* Waits up to 20 s for word[i] to reach want. */
static int await_word(volatile uint32_t *word, unsigned int i, uint32_t want)
{
    double t0 = now_ms();
    while (__atomic_load_n(&word[i], __ATOMIC_ACQUIRE) < want) {
        if (now_ms() - t0 > 20000) return 0;
        nap();
    }
    return 1;
}

static void post(volatile uint32_t *word, unsigned int i, uint32_t v)
{
    __atomic_store_n(&word[i], v, __ATOMIC_RELEASE);
    SCIFlush(NULL, NO_FLAGS);
}

/* Waits up to 10 s for the flag's trigger count to reach want. */
static unsigned int await_count(sci_local_interrupt_t flag, unsigned int want)
{
    unsigned int n = 0;
    sci_error_t err;
    double t0 = now_ms();
    for (;;) {
        SCIGetConditionalInterruptTrigCounter(flag, &n, NO_FLAGS, &err);
        if (err != SCI_ERR_OK || n >= want || now_ms() - t0 > 10000) return n;
        nap();
    }
}

static volatile int callbacks;

static sci_callback_action_t flag_cb(void *arg, sci_local_interrupt_t li, sci_error_t status)
{
    (void)arg;
    (void)li;
    if (status == SCI_ERR_OK) __atomic_add_fetch(&callbacks, 1, __ATOMIC_RELEASE);
    return SCI_CALLBACK_CONTINUE;
}

static void server(sci_desc_t sd)
{
    sci_error_t err;
    sci_local_segment_t seg;
    sci_map_t map;
    sci_local_interrupt_t flag, plain, named;
    unsigned int no = NAMED, n = 0;

    SCICreateSegment(sd, &seg, SEGMENT, 4096, NULL, NULL, NO_FLAGS, &err);
    check("SCICreateSegment", err, SCI_ERR_OK);
    SCIPrepareSegment(seg, 0, NO_FLAGS, &err);
    volatile uint32_t *w = (volatile uint32_t *)SCIMapLocalSegment(seg, &map, 0, 4096, NULL, NO_FLAGS, &err);
    check("SCIMapLocalSegment", err, SCI_ERR_OK);
    SCIRegisterInterruptFlag(0, &flag, seg, 64, NULL, NULL, SCI_FLAG_CONDITIONAL_INTERRUPT, &err);
    check("SCIRegisterInterruptFlag(SCI_FLAG_CONDITIONAL_INTERRUPT)", err, SCI_ERR_OK);
    SCIRegisterInterruptFlag(0, &plain, seg, 128, flag_cb, NULL, SCI_FLAG_USE_CALLBACK, &err);
    check("SCIRegisterInterruptFlag(SCI_FLAG_USE_CALLBACK), unconditional", err, SCI_ERR_OK);
    SCICreateNamedInterrupt(sd, &named, 0, &no, NULL, NULL, NO_FLAGS, &err);
    check("SCICreateNamedInterrupt(0x4242)", err, SCI_ERR_OK);
    truth("the flag words hold interrupt numbers", w[16] != 0 && w[32] != 0 && w[16] != w[32]);
    SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err);
    check("SCISetSegmentAvailable", err, SCI_ERR_OK);
    post(w, 0, 1);

    SCIWaitForInterrupt(named, 20000, NO_FLAGS, &err);
    check("the named interrupt arrives", err, SCI_ERR_OK);

    /* Round 1: three triggers; the first is delivered and disables the flag. */
    SCIWaitForInterrupt(flag, 20000, NO_FLAGS, &err);
    check("the first trigger of the flag is delivered", err, SCI_ERR_OK);
    truth("the client triggered three times", await_word(w, 1, 3));
    n = await_count(flag, 3);
    truth("all three are counted", n == 3);
    SCIWaitForInterrupt(flag, 300, NO_FLAGS, &err);
    check("the other two are not delivered", err, SCI_ERR_TIMEOUT);
    SCIEnableConditionalInterrupt(flag, NO_FLAGS, &err);
    check("enabling after missed triggers", err, SCI_ERR_COND_INT_RACE_PROBLEM);
    SCIGetConditionalInterruptTrigCounter(flag, &n, NO_FLAGS, &err);
    truth("enabling reset the count", err == SCI_ERR_OK && n == 0);
    SCIEnableConditionalInterrupt(flag, NO_FLAGS, &err);
    check("enabling again", err, SCI_ERR_OK);

    /* Round 2: one trigger, delivered. */
    post(w, 2, 1);
    SCIWaitForInterrupt(flag, 20000, NO_FLAGS, &err);
    check("a trigger after enabling is delivered", err, SCI_ERR_OK);
    SCIEnableConditionalInterrupt(flag, NO_FLAGS, &err);
    check("enabling after handling it", err, SCI_ERR_OK);
    SCIDisableConditionalInterrupt(flag, NO_FLAGS, &err);
    check("SCIDisableConditionalInterrupt", err, SCI_ERR_OK);

    /* Round 3: one trigger while disabled: counted, not delivered. */
    post(w, 3, 1);
    truth("the client triggered again", await_word(w, 1, 4));
    n = await_count(flag, 1);
    truth("the trigger while disabled is counted", n == 1);
    SCIWaitForInterrupt(flag, 300, NO_FLAGS, &err);
    check("and not delivered", err, SCI_ERR_TIMEOUT);
    SCIDisableConditionalInterrupt(flag, NO_FLAGS, &err);
    SCIEnableConditionalInterrupt(flag, NO_FLAGS, &err);
    check("enabling after a disable", err, SCI_ERR_OK);

    /* The unconditional flag: both triggers reach the callback. */
    double t0 = now_ms();
    while (__atomic_load_n(&callbacks, __ATOMIC_ACQUIRE) < 2 && now_ms() - t0 < 10000) nap();
    truth("the unconditional flag's callback ran for both triggers", callbacks == 2);
    SCIGetConditionalInterruptTrigCounter(plain, &n, NO_FLAGS, &err);
    truth("and counted them", err == SCI_ERR_OK && n == 2);
    SCIWaitForInterrupt(plain, 100, NO_FLAGS, &err);
    check("a flag with a callback is not waited for", err, SCI_ERR_ILLEGAL_OPERATION);

    SCIRemoveInterrupt(flag, NO_FLAGS, &err);
    check("SCIRemoveInterrupt (conditional flag)", err, SCI_ERR_OK);
    SCIRemoveInterrupt(plain, NO_FLAGS, &err);
    check("SCIRemoveInterrupt (unconditional flag)", err, SCI_ERR_OK);
    SCIRemoveInterrupt(named, NO_FLAGS, &err);
    check("SCIRemoveInterrupt (named)", err, SCI_ERR_OK);
    post(w, 4, 1);
    SCIUnmapSegment(map, NO_FLAGS, &err);
    t0 = now_ms();
    do {
        SCIRemoveSegment(seg, NO_FLAGS, &err);
        if (err == SCI_ERR_BUSY) nap();
    } while (err == SCI_ERR_BUSY && now_ms() - t0 < 20000);
    check("SCIRemoveSegment once the client is gone", err, SCI_ERR_OK);
}

static void client(sci_desc_t sd)
{
    sci_error_t err;
    sci_remote_segment_t seg;
    sci_map_t map;
    sci_remote_interrupt_t flag, plain, named;
    int i;

    SCIConnectSegment(sd, &seg, 8, SEGMENT, 0, NULL, NULL, 20000, NO_FLAGS, &err);
    check("SCIConnectSegment", err, SCI_ERR_OK);
    volatile uint32_t *w = (volatile uint32_t *)SCIMapRemoteSegment(seg, &map, 0, 4096, NULL, NO_FLAGS, &err);
    check("SCIMapRemoteSegment", err, SCI_ERR_OK);
    truth("the server is ready", await_word(w, 0, 1));
    SCIConnectInterrupt(sd, &named, 8, 0, NAMED, 20000, NO_FLAGS, &err);
    check("SCIConnectInterrupt(0x4242)", err, SCI_ERR_OK);
    SCIConnectInterrupt(sd, &flag, 8, 0, w[16], 20000, NO_FLAGS, &err);
    check("SCIConnectInterrupt(the conditional flag's number)", err, SCI_ERR_OK);
    SCIConnectInterrupt(sd, &plain, 8, 0, w[32], 20000, NO_FLAGS, &err);
    check("SCIConnectInterrupt(the unconditional flag's number)", err, SCI_ERR_OK);

    SCITriggerInterrupt(named, NO_FLAGS, &err);
    check("trigger the named interrupt", err, SCI_ERR_OK);
    for (i = 0; i < 3; i++) {
        SCITriggerInterrupt(flag, NO_FLAGS, &err);
        check("trigger the conditional flag", err, SCI_ERR_OK);
    }
    SCITriggerInterrupt(plain, NO_FLAGS, &err);
    SCITriggerInterrupt(plain, NO_FLAGS, &err);
    check("trigger the unconditional flag twice", err, SCI_ERR_OK);
    post(w, 1, 3);
    truth("round 2", await_word(w, 2, 1));
    SCITriggerInterrupt(flag, NO_FLAGS, &err);
    check("trigger once", err, SCI_ERR_OK);
    truth("round 3", await_word(w, 3, 1));
    SCITriggerInterrupt(flag, NO_FLAGS, &err);
    check("trigger while it is disabled", err, SCI_ERR_OK);
    post(w, 1, 4);
    truth("the server is done", await_word(w, 4, 1));

    SCIDisconnectInterrupt(named, NO_FLAGS, &err);
    SCIDisconnectInterrupt(flag, NO_FLAGS, &err);
    SCIDisconnectInterrupt(plain, NO_FLAGS, &err);
    SCIUnmapSegment(map, NO_FLAGS, &err);
    SCIDisconnectSegment(seg, NO_FLAGS, &err);
    check("SCIDisconnectSegment", err, SCI_ERR_OK);
}

int main(int argc, char **argv)
{
    sci_error_t err;
    sci_desc_t sd;
    if (argc != 2 || (strcmp(argv[1], "-server") != 0 && strcmp(argv[1], "-client") != 0)) {
        fprintf(stderr, "Usage: %s -server|-client\n", argv[0]);
        return 1;
    }
    SCIInitialize(NO_FLAGS, &err);
    SCIOpen(&sd, NO_FLAGS, &err);
    check("SCIOpen", err, SCI_ERR_OK);
    if (strcmp(argv[1], "-server") == 0) {
        server(sd);
    } else {
        client(sd);
    }
    SCIClose(sd, NO_FLAGS, &err);
    check("SCIClose", err, SCI_ERR_OK);
    SCITerminate();
    printf("%d failures\n", failures);
    return failures > 100 ? 100 : failures;
}
