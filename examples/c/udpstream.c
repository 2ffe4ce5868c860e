/*
 * udpstream: a generated signal streamed with the UDP streaming API (lanes_udpstream.h)
 * and checked byte by byte at the receiver, which reports sequence gaps.
 *
 *   udpstream selftest [options]          receiver here, sender in a forked child
 *   udpstream recv PORT [options]         receive --bytes and check them
 *   udpstream send HOST PORT [options]    send --bytes
 *   udpstream errors                      check that bad input gives clear errors
 *
 * options: --bytes N (default 16M)  --block N (256K)  --datagram N (1400)
 *          --no-header  --skip N (after the first block, skip N sequence numbers)
 *          --force plain|mmsg|fast|shm|uring  --gap-us N (send: pause between blocks)
 *
 * Build: cc -O2 -Wall -Wextra -I crates/lanes-udpstream/include examples/c/udpstream.c \
 *          -L target/release -llanes_udpstream -Wl,-rpath,target/release -o udpstream
 *
 * In selftest the receiver acknowledges each block over a pipe before the sender sends the
 * next, so nothing is lost to a full socket buffer; a clean run reports gaps == --skip.
 * Standard output ends with one line:
 *   udpstream: ok bytes=B datagrams=D gaps=G reordered=R recv_path=Q send_path=P
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lanes_udpstream.h"

struct opts {
    size_t bytes, block, datagram;
    int header;
    uint64_t skip;
    uint32_t force;
    unsigned gap_us;
};

/* The signal: byte i of the stream. Not periodic in any datagram size. */
static uint8_t signal_at(uint64_t i) {
    uint64_t x = i * 0x9e3779b97f4a7c15ull;
    return (uint8_t)((x >> 56) ^ (i >> 12));
}

static const char *path_name(int p) {
    switch (p) {
    case LUS_PATH_PLAIN: return "plain";
    case LUS_PATH_MMSG: return "mmsg";
    case LUS_PATH_GSO: return "gso";
    case LUS_PATH_GRO: return "gro";
    case LUS_PATH_SHM: return "shm";
    case LUS_PATH_URING: return "uring";
    default: return "?";
    }
}

static size_t parse_size(const char *s) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end == 'K' || *end == 'k') v <<= 10;
    else if (*end == 'M' || *end == 'm') v <<= 20;
    return (size_t)v;
}

static void usage(void) {
    fprintf(stderr, "usage: udpstream selftest|recv PORT|send HOST PORT [--bytes N] [--block N] "
                    "[--datagram N] [--no-header] [--skip N] [--force plain|mmsg|fast|shm|uring] [--gap-us N]\n");
    exit(2);
}

static uint32_t flags_of(const struct opts *o) {
    return (o->header ? LUS_SEQUENCE_HEADER : 0) | o->force;
}

/* Sends o->bytes in blocks; with ack_fd >= 0 waits for one byte per block first. */
static int run_sender(const char *host, uint16_t port, const struct opts *o, int ack_fd) {
    lus_sender *s = lus_sender_open(host, port, o->datagram, flags_of(o));
    if (!s) {
        fprintf(stderr, "udpstream: sender: %s\n", lus_last_error_message());
        return 1;
    }
    uint8_t *block = malloc(o->block);
    if (!block) return 1;
    uint64_t off = 0, calls = 0, dgrams = 0;
    int path = lus_sender_path(s);
    for (size_t n = 0; off < o->bytes; n++) {
        size_t len = o->bytes - off < o->block ? (size_t)(o->bytes - off) : o->block;
        for (size_t i = 0; i < len; i++) block[i] = signal_at(off + i);
        struct lus_send_report rep;
        int64_t rc = lus_send_block(s, block, len, &rep);
        if (rc < 0) {
            fprintf(stderr, "udpstream: send: %s\n", lus_strerror((int)rc));
            return 1;
        }
        calls += rep.system_calls;
        dgrams += rep.datagrams;
        path = rep.path;
        off += len;
        if (n == 0 && o->skip) lus_sender_set_sequence(s, lus_sender_sequence(s) + o->skip);
        if (o->gap_us) usleep(o->gap_us);
        if (ack_fd >= 0) {
            char c;
            if (read(ack_fd, &c, 1) != 1) {
                fprintf(stderr, "udpstream: the receiver went away\n");
                return 1;
            }
        }
    }
    fprintf(stderr, "udpstream: sent %llu bytes in %llu datagrams, %llu system calls, path %s\n",
            (unsigned long long)off, (unsigned long long)dgrams, (unsigned long long)calls, path_name(path));
    printf("send_path=%s\n", path_name(path));
    fflush(stdout);
    free(block);
    lus_sender_close(s);
    return 0;
}

/* Receives o->bytes and checks them; with ack_fd >= 0 writes one byte per block taken. */
static char summary[256];

static int run_receiver(lus_receiver *r, const struct opts *o, int ack_fd) {
    uint8_t *buf = malloc(o->block);
    if (!buf) return 1;
    uint64_t got = 0, dgrams = 0, gaps = 0, reordered = 0, acked = 0, bad = 0;
    int path = lus_receiver_path(r);
    while (got < o->bytes) {
        struct lus_recv_report rep;
        int64_t n = lus_recv_block(r, buf, o->block, 10000, &rep);
        if (n < 0) {
            fprintf(stderr, "udpstream: receive after %llu bytes: %s\n", (unsigned long long)got,
                    lus_strerror((int)n));
            return 1;
        }
        for (int64_t i = 0; i < n; i++)
            if (buf[i] != signal_at(got + (uint64_t)i) && bad++ == 0)
                fprintf(stderr, "udpstream: byte %llu differs\n", (unsigned long long)(got + (uint64_t)i));
        got += (uint64_t)n;
        dgrams += rep.datagrams;
        gaps += rep.gaps;
        reordered += rep.reordered;
        path = rep.path;
        while (ack_fd >= 0 && (acked + 1) * o->block <= got) {
            acked++;
            if (write(ack_fd, "a", 1) != 1) return 1;
        }
    }
    if (ack_fd >= 0 && acked * o->block < got && write(ack_fd, "a", 1) != 1) return 1;
    if (bad) {
        fprintf(stderr, "udpstream: %llu bytes differ\n", (unsigned long long)bad);
        return 1;
    }
    snprintf(summary, sizeof summary, "udpstream: ok bytes=%llu datagrams=%llu gaps=%llu reordered=%llu",
             (unsigned long long)got, (unsigned long long)dgrams, (unsigned long long)gaps,
             (unsigned long long)reordered);
    fprintf(stderr, "udpstream: received on path %s\n", path_name(path));
    snprintf(summary + strlen(summary), sizeof summary - strlen(summary), " recv_path=%s", path_name(path));
    free(buf);
    return 0;
}

/* `udpstream errors`: bad input gives a clear error, never a crash. */
static int check_errors(void) {
    int failed = 0;
#define EXPECT(cond, what)                                                                     \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "udpstream: errors: %s (last error %d: %s)\n", what, lus_last_error(), \
                    lus_last_error_message());                                                 \
            failed = 1;                                                                        \
        }                                                                                      \
    } while (0)
    EXPECT(!lus_sender_open("127.0.0.1", 9, 0, 0) && lus_last_error() == -EINVAL, "datagram size 0");
    EXPECT(strstr(lus_last_error_message(), "datagram size") != NULL, "the message names the size");
    EXPECT(!lus_sender_open("127.0.0.1", 9, LUS_MAX_DATAGRAM + 1, 0) && lus_last_error() == -EINVAL,
           "datagram size above the UDP maximum");
    EXPECT(!lus_sender_open("127.0.0.1", 9, LUS_MAX_DATAGRAM, LUS_SEQUENCE_HEADER), "the largest size with the header");
    EXPECT(!lus_sender_open("127.0.0.1", 9, 1000, 0x8000) && lus_last_error() == -EINVAL, "unknown flags");
    EXPECT(!lus_sender_open("127.0.0.1", 9, 1000, LUS_FORCE_PLAIN | LUS_FORCE_MMSG), "two forced paths");
    EXPECT(!lus_sender_open(NULL, 9, 1000, 0) && lus_last_error() == -EINVAL, "a null host");
    EXPECT(lus_send_block(NULL, "x", 1, NULL) == -EINVAL, "a null sender");
    lus_receiver *r = lus_receiver_open("127.0.0.1", 0, 4096, 0);
    EXPECT(r != NULL, "a receiver");
    if (r) {
        char small[100];
        EXPECT(lus_recv_block(r, small, sizeof small, 10, NULL) == -EINVAL, "a buffer smaller than a datagram");
        EXPECT(strstr(lus_strerror(lus_last_error()), "cannot take one datagram") != NULL, "lus_strerror");
        char buf[8192];
        EXPECT(lus_recv_block(r, buf, sizeof buf, 0, NULL) == 0, "polled, nothing there");
        EXPECT(lus_recv_block(r, buf, sizeof buf, 20, NULL) == -ETIMEDOUT, "a timeout");
        EXPECT(lus_receiver_port(r) > 0, "the bound port");
        lus_receiver_close(r);
    }
    EXPECT(strlen(lus_strerror(-ECONNREFUSED)) > 0, "lus_strerror of any errno");
    lus_sender_close(NULL);
    lus_receiver_close(NULL);
    if (!failed) printf("udpstream: ok errors\n");
    return failed;
}

int main(int argc, char **argv) {
    if (argc < 2) usage();
    if (!strcmp(argv[1], "errors")) return check_errors();
    struct opts o = {16u << 20, 256u << 10, 1400, 1, 0, 0, 0};
    const char *mode = argv[1], *host = "127.0.0.1";
    int port = 0, a = 2;
    if (!strcmp(mode, "recv")) {
        if (argc < 3) usage();
        port = atoi(argv[2]);
        a = 3;
    } else if (!strcmp(mode, "send")) {
        if (argc < 4) usage();
        host = argv[2];
        port = atoi(argv[3]);
        a = 4;
    } else if (strcmp(mode, "selftest")) {
        usage();
    }
    for (; a < argc; a++) {
        const char *v = a + 1 < argc ? argv[a + 1] : NULL;
        if (!strcmp(argv[a], "--no-header")) o.header = 0;
        else if (!v) usage();
        else if (!strcmp(argv[a], "--bytes")) o.bytes = parse_size(v), a++;
        else if (!strcmp(argv[a], "--block")) o.block = parse_size(v), a++;
        else if (!strcmp(argv[a], "--datagram")) o.datagram = parse_size(v), a++;
        else if (!strcmp(argv[a], "--skip")) o.skip = parse_size(v), a++;
        else if (!strcmp(argv[a], "--gap-us")) o.gap_us = (unsigned)parse_size(v), a++;
        else if (!strcmp(argv[a], "--force")) {
            o.force = !strcmp(v, "plain") ? LUS_FORCE_PLAIN : !strcmp(v, "mmsg") ? LUS_FORCE_MMSG
                    : !strcmp(v, "fast") ? LUS_FORCE_FAST : !strcmp(v, "shm") ? LUS_FORCE_SHM
                    : !strcmp(v, "uring") ? LUS_FORCE_URING : 0;
            if (!o.force) usage();
            a++;
        } else usage();
    }
    if (!strcmp(mode, "send")) return run_sender(host, (uint16_t)port, &o, -1);

    /* recv listens on every IPv4 address; selftest on loopback only. */
    const char *bind_addr = strcmp(mode, "recv") ? "127.0.0.1" : NULL;
    lus_receiver *r = lus_receiver_open(bind_addr, (uint16_t)port, o.datagram, flags_of(&o));
    if (!r) {
        fprintf(stderr, "udpstream: receiver: %s (%d)\n", lus_last_error_message(), lus_last_error());
        return 1;
    }
    if (!strcmp(mode, "recv")) {
        int rc = run_receiver(r, &o, -1);
        if (!rc) printf("%s\n", summary);
        lus_receiver_close(r);
        return rc;
    }

    /* selftest: the child sends, the parent receives and acknowledges over a pipe; the
     * child's path comes back over a second pipe. */
    int acks[2], paths[2];
    if (pipe(acks) || pipe(paths)) return 1;
    int rport = lus_receiver_port(r);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        close(acks[1]);
        close(paths[0]);
        if (dup2(paths[1], STDOUT_FILENO) < 0) _exit(1);
        _exit(run_sender("127.0.0.1", (uint16_t)rport, &o, acks[0]));
    }
    close(acks[0]);
    close(paths[1]);
    char line[64] = "send_path=?";
    int rc = run_receiver(r, &o, acks[1]);
    close(acks[1]);
    int status = 0;
    waitpid(pid, &status, 0);
    ssize_t n = read(paths[0], line, sizeof line - 1);
    line[n > 0 ? n : 0] = 0;
    line[strcspn(line, "\n")] = 0;
    if (!rc) printf("%s %s\n", summary, line);
    lus_receiver_close(r);
    if (!WIFEXITED(status) || WEXITSTATUS(status)) {
        fprintf(stderr, "udpstream: the sender failed\n");
        return 1;
    }
    return rc;
}
