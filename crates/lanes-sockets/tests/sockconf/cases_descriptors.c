#include "sockconf.h"

/* ------------------------------------------------------------------------------------------
 * Cases: descriptors
 * ---------------------------------------------------------------------------------------- */

static void echo3_server(int n)
{
    int s = accept_one();
    char b[8];
    int echoed = 0;
    for (int i = 0; i < n; i++) {
        if (read_full(s, b, 3) != 3 || write_all(s, b, 3) != 3)
            break;
        echoed++;
    }
    say("echoed %d messages", echoed);
    sync_expect('k');
    struct pollfd p = {s, POLLIN, 0};
    say_poll("poll with one duplicate still open", &p, 200);
    sync_send('a');
    say("read_full %s", got(read_full(s, b, 4), b));
    say("read at end %s", res(read(s, b, sizeof b)));
    close(s);
}

void dup_server(void) { echo3_server(6); }

bool roundtrip(int wfd, int rfd, const char *msg)
{
    char b[8];
    return write_all(wfd, msg, 3) == 3 && read_full(rfd, b, 3) == 3 && memcmp(b, msg, 3) == 0;
}

void dup_client(void)
{
    int fd = connect_one();
    int d1 = dup(fd);
    say("dup %s FD_CLOEXEC %d", d1 >= 0 ? "ok" : res(d1), cloexec_of(d1));
    const char *r = res(dup2(fd, 100));
    say("dup2 to 100 %s FD_CLOEXEC %d", r, cloexec_of(100));
    r = res(dup3(fd, 101, O_CLOEXEC));
    say("dup3 to 101 O_CLOEXEC %s FD_CLOEXEC %d", r, cloexec_of(101));
    int d4 = fcntl(fd, F_DUPFD, 200);
    say("F_DUPFD 200 %s FD_CLOEXEC %d", d4 >= 200 ? ">= 200" : res(d4), cloexec_of(d4));
    int d5 = fcntl(fd, F_DUPFD_CLOEXEC, 300);
    say("F_DUPFD_CLOEXEC 300 %s FD_CLOEXEC %d", d5 >= 300 ? ">= 300" : res(d5), cloexec_of(d5));
    say("dup3 onto itself %s", res(dup3(fd, fd, 0)));
    say("dup2 onto itself returns the fd: %s", yes(dup2(fd, fd) == fd));
    say("close the original %s", res(close(fd)));
    say("I/O after the close: dup -> 100 %s", yes(roundtrip(d1, 100, "m1a")));
    say("I/O: 100 -> 101 %s", yes(roundtrip(100, 101, "m2b")));
    say("I/O: 101 -> F_DUPFD %s", yes(roundtrip(101, d4, "m3c")));
    say("I/O: F_DUPFD -> F_DUPFD_CLOEXEC %s", yes(roundtrip(d4, d5, "m4d")));
    int p[2];
    if (pipe(p) < 0)
        die("pipe");
    say("dup2 over a pipe's read end %s", yes(dup2(d1, p[0]) == p[0]));
    say("I/O through it %s", yes(roundtrip(p[0], p[0], "m5e")));
    say("close the pipe's write end %s", res(close(p[1])));
    say("I/O again %s", yes(roundtrip(d5, p[0], "m6f")));
    int closed = 0;
    closed += close(d1) == 0;
    closed += close(100) == 0;
    closed += close(101) == 0;
    closed += close(d4) == 0;
    closed += close(p[0]) == 0;
    say("closed 5 of 6 duplicates: %d ok", closed);
    say("write on a closed duplicate %s", res(write(100, "x", 1)));
    sync_send('k');
    sync_expect('a');
    say("write on the last %s", res(write(d5, "last", 4)));
    say("close the last %s", res(close(d5)));
}

void close_range_server(void) { echo3_server(1); }

void close_range_client(void)
{
    int fd = connect_one();
    say("dup2 to 400 401 402: %s", yes(dup2(fd, 400) == 400 && dup2(fd, 401) == 401 &&
                                      dup2(fd, 402) == 402));
    say("close_range 402 402 CLOSE_RANGE_CLOEXEC %s",
        res(close_range(402, 402, CLOSE_RANGE_CLOEXEC)));
    say("FD_CLOEXEC of 402 %d, of 400 %d", cloexec_of(402), cloexec_of(400));
    say("close the original %s", res(close(fd)));
    say("close_range 400 401 %s", res(close_range(400, 401, 0)));
    say("F_GETFD 400 %s", res(fcntl(400, F_GETFD)));
    say("F_GETFD 401 %s", res(fcntl(401, F_GETFD)));
    say("I/O through 402 %s", yes(roundtrip(402, 402, "cr1")));
    sync_send('k');
    sync_expect('a');
    say("write %s", res(write(402, "last", 4)));
    say("close_range 402 ~0 %s", res(close_range(402, ~0U, 0)));
    say("F_GETFD 402 %s", res(fcntl(402, F_GETFD)));
}

void nbtoggle_server(void)
{
    int s = accept4(C.lfd, NULL, NULL, SOCK_NONBLOCK);
    if (s < 0)
        die("accept4");
    char b[8];
    say("accept4 SOCK_NONBLOCK: O_NONBLOCK %d", nonblock_of(s));
    say("read on empty %s", res(read(s, b, sizeof b)));
    sync_expect('g');
    sleep_ms(100);
    say("write %s", res(send(s, "data", 4, 0)));
    sync_expect('d');
    close(s);
}

void nbtoggle_client(void)
{
    int fd = connect_one();
    char b[8];
    struct iovec iov = {b, sizeof b};
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    say("O_NONBLOCK %d", nonblock_of(fd));
    int fl = fcntl(fd, F_GETFL);
    say("F_SETFL O_NONBLOCK %s", res(fcntl(fd, F_SETFL, fl | O_NONBLOCK)));
    say("O_NONBLOCK %d", nonblock_of(fd));
    say("read %s", res(read(fd, b, sizeof b)));
    say("recv %s", res(recv(fd, b, sizeof b, 0)));
    say("readv %s", res(readv(fd, &iov, 1)));
    say("recvmsg %s", res(recvmsg(fd, &mh, 0)));
    say("F_SETFL without O_NONBLOCK %s", res(fcntl(fd, F_SETFL, fl & ~O_NONBLOCK)));
    say("O_NONBLOCK %d", nonblock_of(fd));
    int on = 1;
    say("ioctl FIONBIO 1 %s", res(ioctl(fd, FIONBIO, &on)));
    say("O_NONBLOCK %d", nonblock_of(fd));
    say("read %s", res(read(fd, b, sizeof b)));
    on = 0;
    say("ioctl FIONBIO 0 %s", res(ioctl(fd, FIONBIO, &on)));
    say("O_NONBLOCK %d", nonblock_of(fd));
    sync_send('g');
    say("blocking read_full %s", got(read_full(fd, b, 4), b));
    sync_send('d');
    close(fd);
}

void cloexec_server(void)
{
    int s = accept4(C.lfd, NULL, NULL, SOCK_CLOEXEC);
    say("accept4 SOCK_CLOEXEC: FD_CLOEXEC %d O_NONBLOCK %d", cloexec_of(s), nonblock_of(s));
    int s2 = accept(C.lfd, NULL, NULL);
    say("accept: FD_CLOEXEC %d", cloexec_of(s2));
    char b[8];
    say("read_full %s", got(read_full(s, b, 2), b));
    say("read_full second %s", got(read_full(s2, b, 2), b));
    close(s);
    close(s2);
}

void cloexec_client(void)
{
    int fd = tcp_socket(SOCK_CLOEXEC);
    say("socket SOCK_CLOEXEC: FD_CLOEXEC %d", cloexec_of(fd));
    const char *r = res(fcntl(fd, F_SETFD, 0));
    say("F_SETFD 0 %s FD_CLOEXEC %d", r, cloexec_of(fd));
    r = res(fcntl(fd, F_SETFD, FD_CLOEXEC));
    say("F_SETFD FD_CLOEXEC %s FD_CLOEXEC %d", r, cloexec_of(fd));
    struct sockaddr_storage ss;
    socklen_t l = loop_addr(C.family, C.port, &ss);
    say("connect %s", res(connect(fd, (struct sockaddr *)&ss, l)));
    say("after connect FD_CLOEXEC %d", cloexec_of(fd));
    int fd2 = tcp_socket(0);
    say("socket: FD_CLOEXEC %d", cloexec_of(fd2));
    say("connect %s", res(connect(fd2, (struct sockaddr *)&ss, l)));
    say("write %s", res(write(fd, "c1", 2)));
    say("write %s", res(write(fd2, "c2", 2)));
    close(fd);
    close(fd2);
}

/* A descriptor closed with syscall(SYS_close), as libuv (Node.js) closes, and its number
 * given to the next accepted connection: B's stream is B's alone, and A's late bytes go
 * nowhere near it. */
void rawclose_server(void)
{
    int a = accept_one();
    warm_up_server(a);
    say("close A with syscall(SYS_close) %s", res(syscall(SYS_close, a)));
    sync_send('c');
    int b = accept_one();
    say("B took A's number: %s", yes(b == a));
    char buf[128];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf && (r = read(b, buf + n, sizeof buf - n)) > 0)
        n += (size_t)r;
    say("B's stream %s", got((ssize_t)n, buf));
    say("answer B %s", res(write(b, "for-B", 5)));
    sync_expect('d');
    close(b);
}

void rawclose_client(void)
{
    int a = connect_one();
    warm_up_client(a);
    sync_expect('c');
    sleep_ms(50);
    say("late write on A %s", res(write(a, "A-LATE", 6)));
    int b = connect_one();
    sleep_ms(50);
    say("write on B %s", res(write(b, "B-hello", 7)));
    say("shutdown B SHUT_WR %s", res(shutdown(b, SHUT_WR)));
    char buf[16];
    ssize_t r = read_full(b, buf, 5);
    say("B's answer %s", got(r, buf));
    sync_send('d');
    close(a);
    close(b);
}

/* Bytes written with syscall(SYS_write), which the library does not see, before the
 * connection's set-up (its eighth data call): the stream that follows must still arrive
 * whole and in order, so the set-up must not start from counts that miss them. */
#define UNSEEN_STREAM (8ull * MIB)
void unseen_write_server(void)
{
    int s = accept_one();
    char buf[16];
    say("first bytes %s", got(read_full(s, buf, 10), buf));
    struct rstat st = recv_pattern(M_RW, s, 61, 62, 65536, UINT64_MAX);
    say_rstat("8 MiB stream", st);
    say("write the hash back %s", res(write_all(s, &st.hash, sizeof st.hash)));
    close(s);
}

void unseen_write_client(void)
{
    int fd = connect_one();
    say("write %s", res(write(fd, "seen", 4)));
    say("syscall(SYS_write) %s", res(syscall(SYS_write, fd, "UNSEEN", 6)));
    uint64_t h = 0;
    say("sent %s", res(send_pattern(M_RW, fd, UNSEEN_STREAM, 61, 63, 65536, &h)));
    say("shutdown SHUT_WR %s", res(shutdown(fd, SHUT_WR)));
    uint64_t peer = 0;
    const char *r = res(read_full(fd, &peer, sizeof peer));
    say("read_full %s, the peer's hash matches: %s", r, yes(peer == h));
    close(fd);
}

/* A call that succeeds leaves errno as the program had it, as the C library's calls do
 * (gRPC reads errno after an epoll_ctl that follows a non-blocking connect). The server
 * accepts only after the client's epoll_ctl: until then it has no record to find. */
void errno_kept_server(void)
{
    sync_expect('a');
    int s = accept_one();
    char buf[16];
    ssize_t n = read_full(s, buf, 12);
    say("read_full %s", got(n, buf));
    say("write %s", res(write(s, buf, n > 0 ? (size_t)n : 0)));
    say("read at end %s", res(read(s, buf, sizeof buf)));
    close(s);
}

void errno_kept_client(void)
{
    int fd = tcp_socket(SOCK_NONBLOCK);
    struct sockaddr_storage ss;
    socklen_t l = loop_addr(C.family, C.port, &ss);
    int r = connect(fd, (struct sockaddr *)&ss, l);
    int e = errno;
    say("non-blocking connect %s", r == 0 ? "0" : errname(e));
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.fd = fd};
    errno = e;
    r = epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    say("epoll_ctl ADD %s, errno after it %s", res(r), errname(errno));
    sync_send('a');
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    poll(&p, 1, 5000);
    errno = EINPROGRESS;
    int err = -1;
    socklen_t el = sizeof err;
    r = getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    say("SO_ERROR %s (%d), errno after it %s", res(r), err, errname(errno));
    set_nonblock(fd, false);
    errno = EAGAIN;
    r = (int)write(fd, "hello world!", 12);
    say("write %s, errno after it %s", res(r), errname(errno));
    char b[16];
    errno = EINTR;
    ssize_t n = read_full(fd, b, 12);
    say("read %s, errno after it %s", got(n, b), errname(errno));
    errno = ENOENT;
    r = epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    say("epoll_ctl DEL %s, errno after it %s", res(r), errname(errno));
    errno = EBUSY;
    r = close(fd);
    say("close %s, errno after it %s", res(r), errname(errno));
    close(ep);
}
