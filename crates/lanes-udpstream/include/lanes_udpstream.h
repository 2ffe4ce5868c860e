/*
 * lanes_udpstream.h: the UDP streaming API of liblanes_udpstream.so.
 *
 * A sender hands a block and a datagram size; the library sends the block as ordinary UDP
 * datagrams (any UDP receiver gets them). A receiver hands a buffer; the library fills it
 * with the datagrams' payloads, back to back, headers stripped. The kernel path is chosen
 * at run time (UDP GSO / GRO, sendmmsg / recvmmsg, one call per datagram) with fall-backs.
 * When both ends use the library on one host, the datagrams go through a shared-memory ring
 * the receiver publishes (path "shm"); a plain UDP peer at either end sees ordinary UDP.
 * LANES_UDPSTREAM_PATH=plain|mmsg|gso|uring|shm forces one for a process (all but shm
 * without the ring), LUS_FORCE_* for one handle.
 *
 * Errors: functions returning int or int64_t return a negative errno; functions returning a
 * handle return NULL. Either way lus_last_error() and lus_last_error_message() tell what
 * failed in this thread. A handle is used by one thread at a time.
 *
 * The optional sequence header (LUS_SEQUENCE_HEADER), 16 bytes in front of each payload:
 *   bytes 0..3   'L' 'U' 'S'    magic
 *   byte  3      1              version
 *   bytes 4..8   stream id      uint32, big-endian
 *   bytes 8..16  sequence       uint64, big-endian, 0 for a sender's first datagram, +1 each
 */
#ifndef LANES_UDPSTREAM_H
#define LANES_UDPSTREAM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Flags of lus_sender_open and lus_receiver_open. */
#define LUS_SEQUENCE_HEADER 0x1u  /* put (sender) or expect and strip (receiver) the header */
#define LUS_FORCE_PLAIN     0x10u /* one system call per datagram */
#define LUS_FORCE_MMSG      0x20u /* sendmmsg / recvmmsg */
#define LUS_FORCE_FAST      0x40u /* UDP GSO / UDP GRO (falls back if the kernel refuses) */
#define LUS_FORCE_SHM       0x80u /* the shared-memory ring where the peer has one, else FAST
                                     (what no flag does too, unless LANES_UDPSTREAM_PATH says) */
#define LUS_FORCE_URING     0x100u /* FAST through io_uring (else FAST, if io_uring is refused) */

/* Paths, as reported. */
#define LUS_PATH_PLAIN 0
#define LUS_PATH_MMSG  1
#define LUS_PATH_GSO   2
#define LUS_PATH_GRO   3
#define LUS_PATH_SHM   4
#define LUS_PATH_URING 5

/* The largest UDP payload over IPv4; less 16 with the sequence header. */
#define LUS_MAX_DATAGRAM 65507
#define LUS_HEADER_LEN   16

typedef struct lus_sender lus_sender;
typedef struct lus_receiver lus_receiver;

struct lus_send_report {
    uint64_t datagrams;      /* datagrams sent */
    uint64_t bytes;          /* payload bytes sent */
    uint64_t system_calls;
    uint64_t first_sequence; /* the sequence number of the block's first datagram */
    int path;                /* LUS_PATH_* actually used */
    uint64_t dropped;        /* datagrams dropped: the receiver's ring stayed full (shm) */
};

struct lus_recv_report {
    uint64_t bytes;          /* payload bytes at the front of the buffer */
    uint64_t datagrams;      /* datagrams whose payload is there */
    uint64_t gaps;           /* sequence numbers skipped over (lost or not yet arrived) */
    uint64_t reordered;      /* datagrams older than one already received */
    uint64_t rejected;       /* dropped: no valid header (with LUS_SEQUENCE_HEADER) */
    uint64_t truncated;      /* dropped: payload longer than datagram_size */
    uint64_t system_calls;
    uint64_t next_sequence;  /* the sequence number expected next (if has_stream) */
    uint32_t stream_id;      /* the stream followed (if has_stream) */
    int has_stream;          /* a header has been seen */
    int path;                /* LUS_PATH_* */
};

/* A sender to host:port (a name or an address); datagram_size payload bytes per datagram. */
lus_sender *lus_sender_open(const char *host, uint16_t port, size_t datagram_size, uint32_t flags);
/* Sends len bytes as datagrams, blocking while the socket buffer is full: the number of
 * datagrams sent, or a negative errno. report may be NULL. */
int64_t lus_send_block(lus_sender *s, const void *block, size_t len, struct lus_send_report *report);
/* The sequence number of the next datagram, and setting it (resuming a stream). */
uint64_t lus_sender_sequence(lus_sender *s);
int lus_sender_set_sequence(lus_sender *s, uint64_t next);
int lus_sender_path(lus_sender *s);
void lus_sender_close(lus_sender *s);

/* A receiver bound to addr (NULL: 0.0.0.0) and port (0: ephemeral, see lus_receiver_port);
 * datagram_size is the largest payload expected. */
lus_receiver *lus_receiver_open(const char *addr, uint16_t port, size_t datagram_size, uint32_t flags);
int lus_receiver_port(lus_receiver *r);
/* The socket, to poll(2) for POLLIN before a polled lus_recv_block. */
int lus_receiver_fd(lus_receiver *r);
int lus_receiver_path(lus_receiver *r);
/* Once a block's first datagram came, the block ends after this long without one (5000). */
int lus_receiver_set_idle_us(lus_receiver *r, uint32_t idle_us);
/* Fills buf (len >= datagram_size) until less than one datagram of room is left, the stream
 * goes idle, or timeout_ms passes: the bytes written, or a negative errno. timeout_ms < 0
 * waits for ever; 0 polls (0 when nothing had arrived); > 0 gives -ETIMEDOUT when nothing
 * came. report may be NULL. */
int64_t lus_recv_block(lus_receiver *r, void *buf, size_t len, int timeout_ms, struct lus_recv_report *report);
void lus_receiver_close(lus_receiver *r);

/* This thread's last error (a negative errno, 0 if none) and its message. */
int lus_last_error(void);
const char *lus_last_error_message(void);
/* Text for an error code (negative or positive errno); valid until this thread's next call. */
const char *lus_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif /* LANES_UDPSTREAM_H */
