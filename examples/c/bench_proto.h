/* The protocol between bench_initiator and bench_peer: the numbers both sides agree on, the
 * order/reply message carried by data interrupts, and the layouts of the segments. */
#ifndef LANES_EXAMPLES_BENCH_PROTO_H
#define LANES_EXAMPLES_BENCH_PROTO_H

#include <sched.h>
#include <stddef.h>
#include <stdint.h>

/* Fixed interrupt numbers, segment ids and the reflective group id. */
#define BENCH_CTRL_INTNO    400U    /* data interrupt of each peer: orders from the initiator */
#define BENCH_REPLY_INTNO   401U    /* data interrupt of the initiator: replies of the peers */
#define BENCH_PEER_INTNO    402U    /* interrupt of each peer (round trips) */
#define BENCH_INIT_INTNO    403U    /* interrupt of the initiator (round trips) */
#define BENCH_PEER_SEG      0x4200U /* each peer's segment: ping words, DMA target */
#define BENCH_INIT_SEG      0x4201U /* the initiator's segment: one pong line per peer */
#define BENCH_DMA_SEG       0x4202U /* the initiator's DMA source */
#define BENCH_GROUP         0x4247U /* the reflective group every peer creates */
#define BENCH_GROUP_SIZE    65536U

#define BENCH_MAX_PEERS     16
#define BENCH_MAX_PING      1024U   /* largest ping-pong payload */

/* A peer's segment: the ping sequence word, its payload, the DMA area. */
#define PEER_PING_OFF       0U
#define PEER_PAYLOAD_OFF    64U
#define PEER_DMA_OFF        4096U

/* The initiator's segment: one line per peer; the pong sequence word and its payload. */
#define INIT_LINE_BYTES     2048U
#define INIT_PONG_OFF       0U
#define INIT_PAYLOAD_OFF    64U

/* The reflective group: the round word, then the payload. */
#define GROUP_ROUND_OFF     0U
#define GROUP_PAYLOAD_OFF   64U

#define BENCH_MAGIC         0x424e4348U /* "BNCH" */

enum bench_cmd {
    CMD_HELLO = 1,    /* a: the peer's line offset, b: reply intno, c: segment id, d: interrupt no */
    CMD_PINGPONG,     /* a: round trips, b: payload bytes, c: the sequence number before the first */
    CMD_IRQ_RESET,    /* zero the interrupt count */
    CMD_IRQ_COUNT,    /* reply a: interrupts seen since the reset */
    CMD_DMA_CHECK,    /* a: offset, b: bytes, c: seed of the pattern expected */
    CMD_BCAST_CHECK,  /* a: the round, b: payload bytes (seed = the round) */
    CMD_EXIT,         /* disconnect from the initiator, reply, exit */
    REP_READY = 101,  /* a: segment id, b: its size, c: interrupt no, d: reflective group id */
    REP_DONE,         /* status: BENCH_OK or BENCH_BAD; a: a count */
    REP_BYE
};

enum { BENCH_OK = 0, BENCH_BAD = 1 };

/* One order or reply: the payload of a data interrupt. */
struct bench_msg {
    uint32_t magic;
    uint32_t cmd;
    uint32_t node;    /* the sender's node id */
    uint32_t status;
    uint64_t a, b, c, d;
};

/* The byte at offset i of a pattern: both sides compute it. */
static inline uint8_t bench_pattern(uint64_t seed, size_t i)
{
    return (uint8_t)((i * 131U + seed * 7U + 3U) ^ (i >> 9));
}

/* Waits until the word at `w` holds `want`, giving the CPU away now and then; 0 when it
 * does, -1 past `deadline_us` (now_us() of common.h). */
static inline int spin_until(const volatile void *w, uint64_t want, double deadline_us)
{
    const volatile uint64_t *p = (const volatile uint64_t *)w;
    for (unsigned int n = 1;; n++) {
        if (__atomic_load_n(p, __ATOMIC_ACQUIRE) == want) return 0;
        if (n % 64 == 0) {
            if (now_us() > deadline_us) return -1;
            sched_yield();
        }
    }
}

static inline void store_word(volatile void *base, size_t off, uint64_t v)
{
    __atomic_store_n((volatile uint64_t *)((volatile char *)base + off), v, __ATOMIC_RELEASE);
}

#endif
