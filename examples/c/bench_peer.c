/*
 * bench_peer - a peer of the benchmark suite: serves the experiments bench_initiator drives.
 *
 * A peer creates its resources and waits for orders: a segment (ping words and a DMA
 * area), an interrupt whose callback triggers the initiator's interrupt back (interrupt
 * round trips), the reflective group BENCH_GROUP (every peer creates the broadcast segment
 * with the same id: the first creates the group, the others join it), and the control data
 * interrupt whose callback receives the initiator's orders and hands them to the main
 * thread. The orders (bench_proto.h): HELLO (connect back to the initiator: its reply data
 * interrupt, its segment, its interrupt), PINGPONG (answer each ping written into our
 * segment with a pong written into the initiator's, through a map with a sequence),
 * IRQ_RESET / IRQ_COUNT, DMA_CHECK (verify what the initiator's DMA wrote), BCAST_CHECK
 * (verify a round the initiator stored into the group), EXIT. Every order is answered with a
 * data interrupt to the initiator.
 *
 *   LANES_NODE_ID=8  ./bench_peer &
 *   LANES_NODE_ID=12 ./bench_peer &
 *   LANES_NODE_ID=4  ./bench_initiator -peers 8,12
 *
 * Exit status: 0 told to exit, 1 usage, 2 SISCI error, 3 no order within the timeout or a
 * malformed order.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sisci_api.h>
#include <sisci_error.h>
#include <sisci_types.h>
#include <dis_types.h>

#define NO_FLAGS    0
#define NO_CALLBACK NULL
#define NO_ARG      NULL
#define ADAPTER_NO  0
#define QUEUE_LEN   16

static const char *prog = "bench_peer";
#include "common.h"
#include "bench_proto.h"

static void usage(void)
{
    printf("Usage: %s [-size BYTES] [-timeout MS]\n"
           "A peer of the benchmark suite: creates its segment (id 0x%x), interrupt %u, control\n"
           "data interrupt %u and joins reflective group 0x%x, then serves bench_initiator's orders\n"
           "until it is told to exit.\n"
           "  -size BYTES   the segment: ping area and DMA target (default 1M, at least 8K)\n"
           "  -timeout MS   longest wait for an order or a ping (default 30000)\n"
           "  -h            this help\n",
           prog, BENCH_PEER_SEG, BENCH_PEER_INTNO, BENCH_CTRL_INTNO, BENCH_GROUP);
}

/* Orders the control callback received, for the main thread. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct bench_msg q[QUEUE_LEN];
    unsigned int head, tail;
    int bad;
} orders = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {{0, 0, 0, 0, 0, 0, 0, 0}}, 0, 0, 0};

/* Runs on a library thread for every order. */
static sci_callback_action_t on_order(void *arg, sci_local_data_interrupt_t irq, void *data, unsigned int length,
                                      sci_error_t status)
{
    (void)arg;
    (void)irq;
    pthread_mutex_lock(&orders.mu);
    if (status != SCI_ERR_OK || length != sizeof(struct bench_msg) || orders.tail - orders.head == QUEUE_LEN) {
        orders.bad = 1;
    } else {
        struct bench_msg m;
        memcpy(&m, data, sizeof m);
        if (m.magic != BENCH_MAGIC) orders.bad = 1;
        else orders.q[orders.tail++ % QUEUE_LEN] = m;
    }
    pthread_cond_signal(&orders.cv);
    pthread_mutex_unlock(&orders.mu);
    return status == SCI_ERR_OK ? SCI_CALLBACK_CONTINUE : SCI_CALLBACK_CANCEL;
}

/* Takes the next order; 0, or -1 when none came within timeout_ms or one was malformed. */
static int next_order(struct bench_msg *m, unsigned int timeout_ms)
{
    struct timespec deadline;
    int rc = 0;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)(timeout_ms / 1000);
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&orders.mu);
    while (orders.head == orders.tail && !orders.bad && rc == 0)
        rc = pthread_cond_timedwait(&orders.cv, &orders.mu, &deadline);
    if (orders.bad) {
        rc = -1;
    } else if (orders.head != orders.tail) {
        *m = orders.q[orders.head++ % QUEUE_LEN];
        rc = 0;
    } else {
        rc = -1;
    }
    pthread_mutex_unlock(&orders.mu);
    return rc;
}

/* The interrupt round trip: every trigger of ours triggers the initiator's interrupt. */
static struct {
    sci_remote_interrupt_t back;   /* set once HELLO connected it */
    unsigned long count;
    int bad;
} ping;

static sci_callback_action_t on_interrupt(void *arg, sci_local_interrupt_t irq, sci_error_t status)
{
    sci_error_t err;
    (void)arg;
    (void)irq;
    if (status != SCI_ERR_OK) return SCI_CALLBACK_CANCEL;
    sci_remote_interrupt_t back = __atomic_load_n(&ping.back, __ATOMIC_ACQUIRE);
    __atomic_add_fetch(&ping.count, 1, __ATOMIC_SEQ_CST);
    if (back == NULL) {
        __atomic_store_n(&ping.bad, 1, __ATOMIC_SEQ_CST);
        return SCI_CALLBACK_CONTINUE;
    }
    SCITriggerInterrupt(back, NO_FLAGS, &err);
    if (err != SCI_ERR_OK) __atomic_store_n(&ping.bad, 1, __ATOMIC_SEQ_CST);
    return SCI_CALLBACK_CONTINUE;
}

/* What connects us to the initiator, made by HELLO. */
static struct {
    int connected;
    unsigned int node;
    size_t line;                      /* our line in its segment */
    sci_remote_data_interrupt_t reply;
    sci_remote_segment_t seg;
    sci_map_t map;
    volatile void *base;
    sci_sequence_t seq;
} init;

static unsigned int my_node;

static void reply(uint32_t cmd, uint32_t status, uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    sci_error_t err;
    struct bench_msg m = {BENCH_MAGIC, cmd, my_node, status, a, b, c, d};
    SCITriggerDataInterrupt(init.reply, &m, sizeof m, NO_FLAGS, &err);
    CHECK("SCITriggerDataInterrupt (reply)");
}

static int check_pattern(const volatile uint8_t *p, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != bench_pattern(seed, i)) return 0;
    return 1;
}

int main(int argc, char **argv)
{
    size_t size = 1 << 20;
    unsigned int timeout = 30000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "-help") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (v && !strcmp(a, "-size")) {
            if (parse_size(v, &size) != 0 || size < 8192) { fprintf(stderr, "%s: bad size %s\n", prog, v); return 1; }
            i++;
        }
        else if (v && !strcmp(a, "-timeout")) { timeout = (unsigned int)strtoul(v, NULL, 0); i++; }
        else { fprintf(stderr, "%s: unknown or incomplete option %s\n", prog, a); usage(); return 1; }
    }
    if (timeout == 0) { usage(); return 1; }

    sci_error_t err;
    sci_desc_t sd;
    sci_local_segment_t seg, group;
    sci_map_t segmap, groupmap;
    sci_local_interrupt_t irq;
    sci_local_data_interrupt_t ctrl;
    unsigned int irq_no = BENCH_PEER_INTNO, ctrl_no = BENCH_CTRL_INTNO;

    SCIInitialize(NO_FLAGS, &err);
    CHECK("SCIInitialize");
    SCIOpen(&sd, NO_FLAGS, &err);
    CHECK("SCIOpen");
    SCIGetLocalNodeId(ADAPTER_NO, &my_node, NO_FLAGS, &err);
    CHECK("SCIGetLocalNodeId");

    SCICreateSegment(sd, &seg, BENCH_PEER_SEG, size, NO_CALLBACK, NO_ARG, NO_FLAGS, &err);
    CHECK("SCICreateSegment");
    SCIPrepareSegment(seg, ADAPTER_NO, NO_FLAGS, &err);
    CHECK("SCIPrepareSegment");
    volatile uint8_t *mem = SCIMapLocalSegment(seg, &segmap, 0, size, NULL, NO_FLAGS, &err);
    CHECK("SCIMapLocalSegment");
    SCISetSegmentAvailable(seg, ADAPTER_NO, NO_FLAGS, &err);
    CHECK("SCISetSegmentAvailable");

    /* Reflective memory: every receiver creates the group's segment with the same id. */
    SCICreateSegment(sd, &group, BENCH_GROUP, BENCH_GROUP_SIZE, NO_CALLBACK, NO_ARG, SCI_FLAG_BROADCAST, &err);
    CHECK("SCICreateSegment(SCI_FLAG_BROADCAST)");
    SCIPrepareSegment(group, ADAPTER_NO, SCI_FLAG_BROADCAST, &err);
    CHECK("SCIPrepareSegment(group)");
    SCISetSegmentAvailable(group, ADAPTER_NO, SCI_FLAG_BROADCAST, &err);
    CHECK("SCISetSegmentAvailable(group)");
    volatile uint8_t *gmem = SCIMapLocalSegment(group, &groupmap, 0, BENCH_GROUP_SIZE, NULL, NO_FLAGS, &err);
    CHECK("SCIMapLocalSegment(group)");

    SCICreateInterrupt(sd, &irq, ADAPTER_NO, &irq_no, on_interrupt, NO_ARG,
                       SCI_FLAG_FIXED_INTNO | SCI_FLAG_USE_CALLBACK, &err);
    CHECK("SCICreateInterrupt");
    /* Last: once the control interrupt exists the initiator may send orders. */
    SCICreateDataInterrupt(sd, &ctrl, ADAPTER_NO, &ctrl_no, on_order, NO_ARG,
                           SCI_FLAG_FIXED_INTNO | SCI_FLAG_USE_CALLBACK, &err);
    CHECK("SCICreateDataInterrupt");
    printf("%s: node %u ready: segment 0x%x (%zu bytes), interrupt %u, control data interrupt %u, group 0x%x\n",
           prog, my_node, BENCH_PEER_SEG, size, irq_no, ctrl_no, BENCH_GROUP);
    fflush(stdout);

    unsigned long served = 0;
    int done = 0, rc = 0;
    while (!done) {
        struct bench_msg m;
        if (next_order(&m, timeout) != 0) {
            fprintf(stderr, "%s: node %u: no order within %u ms, or a malformed one\n", prog, my_node, timeout);
            rc = 3;
            break;
        }
        served++;
        if (!init.connected && m.cmd != CMD_HELLO) {
            fprintf(stderr, "%s: order %u before HELLO\n", prog, m.cmd);
            rc = 3;
            break;
        }
        switch (m.cmd) {
        case CMD_HELLO: {
            if (init.connected) { fprintf(stderr, "%s: a second HELLO\n", prog); rc = 3; done = 1; break; }
            init.node = m.node;
            init.line = (size_t)m.a;
            SCIConnectDataInterrupt(sd, &init.reply, m.node, ADAPTER_NO, (unsigned int)m.b, timeout, NO_FLAGS, &err);
            CHECK("SCIConnectDataInterrupt (initiator)");
            SCIConnectSegment(sd, &init.seg, m.node, (unsigned int)m.c, ADAPTER_NO, NO_CALLBACK, NO_ARG, timeout,
                              NO_FLAGS, &err);
            CHECK("SCIConnectSegment (initiator)");
            if (SCIGetRemoteSegmentSize(init.seg) < init.line + INIT_LINE_BYTES) {
                fprintf(stderr, "%s: the initiator's segment has no line at %zu\n", prog, init.line);
                rc = 3;
                done = 1;
                break;
            }
            init.base = SCIMapRemoteSegment(init.seg, &init.map, init.line, INIT_LINE_BYTES, NULL, NO_FLAGS, &err);
            CHECK("SCIMapRemoteSegment (initiator)");
            SCICreateMapSequence(init.map, &init.seq, NO_FLAGS, &err);
            CHECK("SCICreateMapSequence");
            sci_remote_interrupt_t back;
            SCIConnectInterrupt(sd, &back, m.node, ADAPTER_NO, (unsigned int)m.d, timeout, NO_FLAGS, &err);
            CHECK("SCIConnectInterrupt (initiator)");
            __atomic_store_n(&ping.back, back, __ATOMIC_RELEASE);
            init.connected = 1;
            printf("%s: node %u: initiator is node %u\n", prog, my_node, m.node);
            fflush(stdout);
            reply(REP_READY, BENCH_OK, BENCH_PEER_SEG, size, irq_no, BENCH_GROUP);
            break;
        }
        case CMD_PINGPONG: {
            uint64_t iters = m.a, base = m.c;
            size_t len = (size_t)m.b;
            uint32_t status = BENCH_OK;
            uint64_t answered = 0;
            uint8_t buf[BENCH_MAX_PING];
            sci_sequence_status_t ss;
            if (len > BENCH_MAX_PING) { status = BENCH_BAD; reply(REP_DONE, status, 0, 0, 0, 0); break; }
            int tries = 0;
            do {
                ss = SCIStartSequence(init.seq, NO_FLAGS, &err);
            } while (ss == SCI_SEQ_RETRIABLE && ++tries < 1000);
            if (ss != SCI_SEQ_OK) { fprintf(stderr, "%s: SCIStartSequence: %d\n", prog, (int)ss); status = BENCH_BAD; }
            for (uint64_t i = 1; i <= iters && status == BENCH_OK; i++) {
                uint64_t s = base + i;
                if (spin_until(mem + PEER_PING_OFF, s, now_us() + timeout * 1000.0) != 0) {
                    fprintf(stderr, "%s: ping %llu never came\n", prog, (unsigned long long)s);
                    status = BENCH_BAD;
                    break;
                }
                if (!check_pattern(mem + PEER_PAYLOAD_OFF, len, s)) {
                    fprintf(stderr, "%s: ping %llu: wrong payload\n", prog, (unsigned long long)s);
                    status = BENCH_BAD;
                    break;
                }
                for (size_t k = 0; k < len; k++) buf[k] = bench_pattern(s ^ 0xA5U, k);
                if (len > 0) {
                    SCIMemCpy(init.seq, buf, init.map, INIT_PAYLOAD_OFF, len, NO_FLAGS, &err);
                    CHECK("SCIMemCpy (pong payload)");
                }
                store_word(init.base, INIT_PONG_OFF, s);
                SCIFlush(init.seq, SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY);
                answered++;
            }
            ss = SCICheckSequence(init.seq, NO_FLAGS, &err);
            if (ss != SCI_SEQ_OK) { fprintf(stderr, "%s: SCICheckSequence: %d\n", prog, (int)ss); status = BENCH_BAD; }
            reply(REP_DONE, status, answered, 0, 0, 0);
            break;
        }
        case CMD_IRQ_RESET:
            __atomic_store_n(&ping.count, 0, __ATOMIC_SEQ_CST);
            __atomic_store_n(&ping.bad, 0, __ATOMIC_SEQ_CST);
            reply(REP_DONE, BENCH_OK, 0, 0, 0, 0);
            break;
        case CMD_IRQ_COUNT:
            reply(REP_DONE, __atomic_load_n(&ping.bad, __ATOMIC_SEQ_CST) ? BENCH_BAD : BENCH_OK,
                  __atomic_load_n(&ping.count, __ATOMIC_SEQ_CST), 0, 0, 0);
            break;
        case CMD_DMA_CHECK: {
            int ok = m.a + m.b <= size && check_pattern(mem + m.a, (size_t)m.b, m.c);
            reply(REP_DONE, ok ? BENCH_OK : BENCH_BAD, m.b, 0, 0, 0);
            break;
        }
        case CMD_BCAST_CHECK: {
            int ok = GROUP_PAYLOAD_OFF + m.b <= BENCH_GROUP_SIZE &&
                     spin_until(gmem + GROUP_ROUND_OFF, m.a, now_us() + timeout * 1000.0) == 0 &&
                     check_pattern(gmem + GROUP_PAYLOAD_OFF, (size_t)m.b, m.a);
            if (!ok) fprintf(stderr, "%s: broadcast round %llu: wrong or missing\n", prog, (unsigned long long)m.a);
            reply(REP_DONE, ok ? BENCH_OK : BENCH_BAD, m.a, 0, 0, 0);
            break;
        }
        case CMD_EXIT: {
            /* Leave the initiator's resources before answering: it removes them next. */
            sci_remote_interrupt_t back = __atomic_exchange_n(&ping.back, NULL, __ATOMIC_ACQ_REL);
            SCIDisconnectInterrupt(back, NO_FLAGS, &err);
            CHECK("SCIDisconnectInterrupt");
            SCIRemoveSequence(init.seq, NO_FLAGS, &err);
            CHECK("SCIRemoveSequence");
            SCIUnmapSegment(init.map, NO_FLAGS, &err);
            CHECK("SCIUnmapSegment (initiator)");
            SCIDisconnectSegment(init.seg, NO_FLAGS, &err);
            CHECK("SCIDisconnectSegment (initiator)");
            reply(REP_BYE, BENCH_OK, served, 0, 0, 0);
            SCIDisconnectDataInterrupt(init.reply, NO_FLAGS, &err);
            CHECK("SCIDisconnectDataInterrupt");
            init.connected = 0;
            done = 1;
            break;
        }
        default:
            fprintf(stderr, "%s: unknown order %u\n", prog, m.cmd);
            rc = 3;
            done = 1;
        }
    }

    if (rc != 0) {
        /* Whatever is still connected or mapped goes with the descriptor. */
        SCIClose(sd, SCI_FLAG_FORCE_REMOVE, &err);
        SCITerminate();
        printf("%s: node %u: served %lu orders, giving up\n", prog, my_node, served);
        return rc;
    }
    SCIRemoveDataInterrupt(ctrl, NO_FLAGS, &err);
    CHECK("SCIRemoveDataInterrupt");
    SCIRemoveInterrupt(irq, NO_FLAGS, &err);
    CHECK("SCIRemoveInterrupt");
    SCIUnmapSegment(groupmap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment (group)");
    SCIRemoveSegment(group, NO_FLAGS, &err);
    CHECK("SCIRemoveSegment (group)");
    SCIUnmapSegment(segmap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment");
    SCIRemoveSegment(seg, NO_FLAGS, &err);
    CHECK("SCIRemoveSegment");
    SCIClose(sd, NO_FLAGS, &err);
    CHECK("SCIClose");
    SCITerminate();
    printf("%s: node %u: served %lu orders, exiting\n", prog, my_node, served);
    return 0;
}
