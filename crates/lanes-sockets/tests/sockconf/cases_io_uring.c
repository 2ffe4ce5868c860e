#include "sockconf.h"
#include <linux/io_uring.h>
#include <sys/mman.h>

/* ------------------------------------------------------------------------------------------
 * Cases: io_uring
 *
 * io-uring-epoll: the server puts its connection into an epoll set through an io_uring
 * (IORING_OP_EPOLL_CTL), as libuv does for every epoll_ctl ADD and MOD, then answers 200
 * messages, each after epoll_wait said the socket was readable. The ring is set up with
 * the C library's syscall(), as libuv does.
 * ---------------------------------------------------------------------------------------- */

struct uring {
    int fd;
    unsigned *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
};

static bool uring_init(struct uring *u)
{
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    u->fd = (int)syscall(__NR_io_uring_setup, 8, &p);
    if (u->fd < 0)
        return false;
    size_t sqlen = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cqlen = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    char *sq = mmap(0, sqlen > cqlen ? sqlen : cqlen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, u->fd,
                    IORING_OFF_SQ_RING);
    u->sqes = mmap(0, p.sq_entries * sizeof *u->sqes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, u->fd,
                   IORING_OFF_SQES);
    if (sq == MAP_FAILED || u->sqes == MAP_FAILED)
        die("mmap of the io_uring");
    /* One mapping holds both rings (IORING_FEAT_SINGLE_MMAP, every kernel with
     * IORING_OP_EPOLL_CTL). */
    u->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    u->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    u->sq_array = (unsigned *)(sq + p.sq_off.array);
    u->cq_head = (unsigned *)(sq + p.cq_off.head);
    u->cq_tail = (unsigned *)(sq + p.cq_off.tail);
    u->cq_mask = (unsigned *)(sq + p.cq_off.ring_mask);
    u->cqes = (struct io_uring_cqe *)(sq + p.cq_off.cqes);
    return true;
}

/* epoll_ctl(epfd, op, fd, ev) through the ring: its result, as epoll_ctl's (-1, errno). */
static int uring_epoll_ctl(struct uring *u, int epfd, int op, int fd, struct epoll_event *ev)
{
    unsigned tail = *u->sq_tail, idx = tail & *u->sq_mask;
    struct io_uring_sqe *sqe = &u->sqes[idx];
    memset(sqe, 0, sizeof *sqe);
    sqe->opcode = IORING_OP_EPOLL_CTL;
    sqe->fd = epfd;
    sqe->addr = (uintptr_t)ev;
    sqe->len = (unsigned)op;
    sqe->off = (unsigned)fd;
    u->sq_array[idx] = idx;
    __atomic_store_n(u->sq_tail, tail + 1, __ATOMIC_RELEASE);
    if (syscall(__NR_io_uring_enter, u->fd, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) != 1)
        return -1;
    unsigned head = *u->cq_head;
    if (head == __atomic_load_n(u->cq_tail, __ATOMIC_ACQUIRE)) {
        errno = EIO;
        return -1;
    }
    int res = u->cqes[head & *u->cq_mask].res;
    __atomic_store_n(u->cq_head, head + 1, __ATOMIC_RELEASE);
    if (res < 0) {
        errno = -res;
        return -1;
    }
    return 0;
}

void uring_epoll_server(void)
{
    struct uring u;
    if (!uring_init(&u)) {
        /* A kernel without io_uring (or with it disabled): nothing to compare. */
        say("io_uring_setup unavailable");
        close(accept_one());
        return;
    }
    int s = accept_one();
    int ep = epoll_create1(EPOLL_CLOEXEC);
    static struct epoll_event ev;
    ev.events = EPOLLIN;
    ev.data.fd = s;
    say("IORING_OP_EPOLL_CTL ADD %s", res(uring_epoll_ctl(&u, ep, EPOLL_CTL_ADD, s, &ev)));
    int answered = 0, timeouts = 0;
    char b[16];
    for (int i = 0; i < 200; i++) {
        struct epoll_event out;
        int n = epoll_wait(ep, &out, 1, 5000);
        if (n != 1 || out.data.fd != s) {
            timeouts++;
            break;
        }
        if (read_full(s, b, 5) != 5 || memcmp(b, "ping", 5) != 0)
            break;
        if (write_all(s, "pong", 5) != 5)
            break;
        answered++;
    }
    say("answered %d, epoll_wait missed %d", answered, timeouts);
    say("read at end %s", res(read(s, b, sizeof b)));
    close(s);
    close(ep);
}

void uring_epoll_client(void)
{
    int fd = connect_one();
    char b[16];
    int ok = 0;
    for (int i = 0; i < 200; i++) {
        if (write_all(fd, "ping", 5) != 5 || read_full(fd, b, 5) != 5 || memcmp(b, "pong", 5) != 0)
            break;
        ok++;
    }
    say("%d round trips", ok);
    say("close %s", res(close(fd)));
}
