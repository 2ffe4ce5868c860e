#include "sockconf.h"

/* ------------------------------------------------------------------------------------------
 * Cases: urgent data and the receive low-water mark on a connection that has carried data
 * both ways first (under the library its directions are then in ring mode: the receiver's
 * first read that catches up switches them)
 * ---------------------------------------------------------------------------------------- */

static void warm_server(int s)
{
    char b[4];
    if (read_full(s, b, 4) != 4 || write_all(s, "pong", 4) != 4)
        die("warm-up (server)");
}

static void warm_client(int fd)
{
    char b[4];
    /* Small sends leave at once (the library sets TCP_NODELAY on an accelerated socket's
     * kernel side and reports the program's own setting, see "nodelay"). */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (write_all(fd, "ping", 4) != 4 || read_full(fd, b, 4) != 4)
        die("warm-up (client)");
}

/* Every readiness call once, timeout 0, for input and exceptional conditions. */
static void say_ready_all(const char *when, int fd)
{
    struct pollfd p = {fd, POLLIN | POLLPRI, 0};
    const char *r = res(poll(&p, 1, 0));
    say("%s: poll POLLIN|POLLPRI %s revents %s", when, r, revstr(p.revents));
    p.events = POLLPRI;
    p.revents = 0;
    r = res(poll(&p, 1, 0));
    say("%s: poll POLLPRI %s revents %s", when, r, revstr(p.revents));
    struct timespec ts = {0, 0};
    sigset_t none;
    sigemptyset(&none);
    p.events = POLLIN | POLLPRI;
    p.revents = 0;
    r = res(ppoll(&p, 1, &ts, &none));
    say("%s: ppoll POLLIN|POLLPRI %s revents %s", when, r, revstr(p.revents));
    for (int k = 0; k < 2; k++) {
        fd_set rd, ex;
        FD_ZERO(&rd);
        FD_ZERO(&ex);
        FD_SET(fd, &rd);
        FD_SET(fd, &ex);
        struct timeval tv = {0, 0};
        int n = k == 0 ? select(fd + 1, &rd, NULL, &ex, &tv) : pselect(fd + 1, &rd, NULL, &ex, &ts, &none);
        say("%s: %s read+except %s read %d except %d", when, k == 0 ? "select" : "pselect", res(n),
            n >= 0 ? FD_ISSET(fd, &rd) : -1, n >= 0 ? FD_ISSET(fd, &ex) : -1);
        FD_ZERO(&ex);
        FD_SET(fd, &ex);
        n = k == 0 ? select(fd + 1, NULL, NULL, &ex, &tv) : pselect(fd + 1, NULL, NULL, &ex, &ts, &none);
        say("%s: %s except only %s except %d", when, k == 0 ? "select" : "pselect", res(n),
            n >= 0 ? FD_ISSET(fd, &ex) : -1);
    }
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0 || ep_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLPRI, 1) < 0)
        die("epoll");
    say("%s: epoll EPOLLIN|EPOLLPRI %s", when, epw(ep, 0));
    if (ep_ctl(ep, EPOLL_CTL_MOD, fd, EPOLLPRI, 1) < 0)
        die("epoll mod");
    say("%s: epoll EPOLLPRI %s", when, epw(ep, 0));
    close(ep);
}

static void say_atmark(const char *when, int fd)
{
    int m = -1;
    const char *r = res(ioctl(fd, SIOCATMARK, &m));
    say("%s: SIOCATMARK %s value %d", when, r, m);
}

static volatile sig_atomic_t sigurgs;
static void on_sigurg(int s)
{
    (void)s;
    sigurgs++;
}

/* Reads what is there (poll first, so nothing blocks), one read per line. */
static void read_what_is_there(const char *when, int fd)
{
    for (int i = 0; i < 8; i++) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 0) != 1)
            break;
        char b[64];
        say("%s: read %s", when, got(read(fd, b, sizeof b), b));
    }
}

void oob_ring_server(void)
{
    char b[64];
    /* 1: urgent byte behind ring bytes: readiness, the mark, MSG_OOB, reads stop at the mark. */
    int s = accept_one();
    warm_server(s);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigurg;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGURG, &sa, NULL);
    say("F_SETOWN %s", res(fcntl(s, F_SETOWN, getpid())));
    sync_send('a');
    sync_expect('1');
    say("SIGURG arrived: %s", yes(sigurgs > 0));
    say_ready_all("1", s);
    say_atmark("1", s);
    say_fionread("1: FIONREAD", s);
    say("1: recv MSG_OOB|MSG_PEEK %s", got(recv(s, b, sizeof b, MSG_OOB | MSG_PEEK), b));
    say("1: recv MSG_OOB %s", got(recv(s, b, sizeof b, MSG_OOB), b));
    say("1: recv MSG_OOB again %s", res(recv(s, b, sizeof b, MSG_OOB)));
    say_ready_all("1, urgent byte read", s);
    say("1: read %s", got(read(s, b, sizeof b), b));
    say_atmark("1, at the mark", s);
    say("1: read %s", got(read(s, b, sizeof b), b));
    say_atmark("1, past the mark", s);
    say_ready_all("1, all read", s);
    sync_send('x'); /* the client closes only now: its FIN must not race the checks */
    close(s);

    /* 2: MSG_WAITALL stops at the mark; reading past it without MSG_OOB. */
    s = accept_one();
    warm_server(s);
    sync_send('b');
    sync_expect('2');
    say("2: recv MSG_WAITALL 8 %s", got(recv(s, b, 8, MSG_WAITALL), b));
    say_atmark("2", s);
    say_ready_all("2, at the mark", s);
    say("2: read %s", got(read(s, b, sizeof b), b));
    say("2: recv MSG_OOB after reading past %s", got(recv(s, b, sizeof b, MSG_OOB), b));
    say_ready_all("2, all read", s);
    sync_send('x');
    close(s);

    /* 3: a second urgent byte before the first was read (the first one is next in the stream,
     * so the kernel drops it: see tcp_check_urg). Under the library, a byte sent through the
     * ring before the first urgent byte and still unread would make the kernel think the
     * reader is at the first mark: not covered (docs/design/sockets.md). */
    s = accept_one();
    warm_server(s);
    sync_send('c');
    sync_expect('3');
    say_atmark("3", s);
    say("3: recv MSG_OOB %s", got(recv(s, b, sizeof b, MSG_OOB), b));
    read_what_is_there("3", s);
    say("3: recv MSG_OOB at the end %s", got(recv(s, b, sizeof b, MSG_OOB), b));
    sync_send('x');
    close(s);

    /* 4: SO_OOBINLINE: the urgent byte stays in the stream, reads still stop at the mark. */
    s = accept_one();
    int one = 1;
    say("4: SO_OOBINLINE %s", res(setsockopt(s, SOL_SOCKET, SO_OOBINLINE, &one, sizeof one)));
    warm_server(s);
    sync_send('d');
    sync_expect('4');
    say_ready_all("4", s);
    say_atmark("4", s);
    say("4: recv MSG_OOB %s", got(recv(s, b, sizeof b, MSG_OOB), b));
    say("4: read %s", got(read(s, b, sizeof b), b));
    say_atmark("4, at the mark", s);
    say("4: read %s", got(read(s, b, sizeof b), b));
    say_ready_all("4, all read", s);

    /* 5: no urgent data at all (the other direction): recv MSG_OOB is EINVAL, data stays. */
    say("5: write %s", res(write(s, "zz", 2)));
    sync_send('e');
    sync_expect('5');
    close(s);

    /* 6: sendmsg/recvmsg with MSG_OOB (msg_flags says MSG_OOB), MSG_DONTWAIT reads. */
    s = accept_one();
    warm_server(s);
    sync_send('f');
    sync_expect('6');
    say("6: recv MSG_PEEK|MSG_DONTWAIT %s", got(recv(s, b, sizeof b, MSG_PEEK | MSG_DONTWAIT), b));
    struct iovec v = {b, sizeof b};
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = &v;
    m.msg_iovlen = 1;
    ssize_t n = recvmsg(s, &m, MSG_OOB);
    say("6: recvmsg MSG_OOB %s msg_flags MSG_OOB %s", got(n, b), yes(n >= 0 && (m.msg_flags & MSG_OOB)));
    memset(&m, 0, sizeof m);
    m.msg_iov = &v;
    m.msg_iovlen = 1;
    n = recvmsg(s, &m, MSG_DONTWAIT);
    say("6: recvmsg %s msg_flags %d", got(n, b), n >= 0 ? m.msg_flags : -1);
    say("6: recv MSG_DONTWAIT %s", got(recv(s, b, sizeof b, MSG_DONTWAIT), b));
    say("6: recv MSG_DONTWAIT %s", got(recv(s, b, sizeof b, MSG_DONTWAIT), b));
    sync_send('x');
    close(s);
}

void oob_ring_client(void)
{
    char b[64];
    int fd = connect_one();
    warm_client(fd);
    sync_expect('a');
    say("1: send %s", res(send(fd, "ab", 2, 0)));
    say("1: send MSG_OOB %s", res(send(fd, "X", 1, MSG_OOB)));
    say("1: send %s", res(send(fd, "cd", 2, 0)));
    sleep_ms(50);
    sync_send('1');
    sync_expect('x');
    close(fd);

    fd = connect_one();
    warm_client(fd);
    sync_expect('b');
    say("2: send %s", res(send(fd, "ef", 2, 0)));
    say("2: send MSG_OOB %s", res(send(fd, "gY", 2, MSG_OOB)));
    say("2: send %s", res(send(fd, "hi", 2, 0)));
    sleep_ms(50);
    sync_send('2');
    sync_expect('x');
    close(fd);

    fd = connect_one();
    warm_client(fd);
    sync_expect('c');
    say("3: send MSG_OOB %s", res(send(fd, "J", 1, MSG_OOB)));
    say("3: send %s", res(send(fd, "k", 1, 0)));
    say("3: send MSG_OOB %s", res(send(fd, "L", 1, MSG_OOB)));
    say("3: send %s", res(send(fd, "m", 1, 0)));
    sleep_ms(50);
    sync_send('3');
    sync_expect('x');
    close(fd);

    fd = connect_one();
    warm_client(fd);
    sync_expect('d');
    say("4: send %s", res(send(fd, "n", 1, 0)));
    say("4: send MSG_OOB %s", res(send(fd, "O", 1, MSG_OOB)));
    say("4: send %s", res(send(fd, "p", 1, 0)));
    sleep_ms(50);
    sync_send('4');
    sync_expect('e');
    sleep_ms(20);
    say("5: recv MSG_OOB %s", got(recv(fd, b, sizeof b, MSG_OOB), b));
    say_atmark("5", fd);
    say("5: read %s", got(read(fd, b, sizeof b), b));
    sync_send('5');
    close(fd);

    fd = connect_one();
    warm_client(fd);
    sync_expect('f');
    say("6: send %s", res(send(fd, "qr", 2, 0)));
    struct iovec v[2] = {{(void *)"st", 2}, {(void *)"uV", 2}};
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = v;
    m.msg_iovlen = 2;
    say("6: sendmsg MSG_OOB %s", res(sendmsg(fd, &m, MSG_OOB)));
    say("6: send %s", res(send(fd, "wx", 2, 0)));
    sleep_ms(50);
    sync_send('6');
    sync_expect('x');
    close(fd);
}

/* SO_RCVLOWAT: readiness and blocking receives wait for that many bytes (or the end). */
void rcvlowat_server(void)
{
    char b[64];
    int s = accept_one();
    warm_server(s);
    int v = 5;
    say("SO_RCVLOWAT 5 %s", res(setsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v)));
    socklen_t l = sizeof v;
    v = -1;
    const char *r = res(getsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, &l));
    say("getsockopt SO_RCVLOWAT %s value %d", r, v);
    sync_send('a');
    sync_expect('1'); /* 3 bytes sent */
    say_ready_all("3 bytes", s);
    say_fionread("3 bytes: FIONREAD", s);
    say("3 bytes: recv MSG_PEEK|MSG_DONTWAIT %s", got(recv(s, b, sizeof b, MSG_PEEK | MSG_DONTWAIT), b));
    say("3 bytes: recv 2 (blocking) %s", got(recv(s, b, 2, 0), b));
    sync_send('b');
    sync_expect('2'); /* 4 more */
    say_ready_all("5 bytes", s);
    say("5 bytes: read %s", got(read(s, b, sizeof b), b));
    /* Blocking calls while the peer sends 2 bytes, then 3 more a moment later. */
    sync_send('c');
    say("blocking recv %s", got(recv(s, b, sizeof b, 0), b));
    sync_send('d');
    struct pollfd p = {s, POLLIN, 0};
    say_poll("blocking poll", &p, 5000);
    say_fionread("after blocking poll: FIONREAD", s);
    say("read %s", got(read(s, b, sizeof b), b));
    sync_send('e');
    fd_set rd;
    FD_ZERO(&rd);
    FD_SET(s, &rd);
    struct timeval tv = {5, 0};
    int n = select(s + 1, &rd, NULL, NULL, &tv);
    say("blocking select %s read %d", res(n), n >= 0 ? FD_ISSET(s, &rd) : -1);
    say_fionread("after blocking select: FIONREAD", s);
    say("read %s", got(read(s, b, sizeof b), b));
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0 || ep_ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 1) < 0)
        die("epoll");
    sync_send('f');
    say("blocking epoll_wait %s", epw(ep, 5000));
    say_fionread("after blocking epoll_wait: FIONREAD", s);
    say("read %s", got(read(s, b, sizeof b), b));
    close(ep);
    /* Fewer bytes than the mark, then the end of the stream: readable. */
    sync_send('g');
    p.revents = 0;
    say_poll("poll, 2 bytes and the end", &p, 5000);
    say("read %s", got(read(s, b, sizeof b), b));
    say("read %s", res(read(s, b, sizeof b)));
    close(s);

    /* A low-water mark the accepted socket inherits from the listener. */
    v = 3;
    say("listener SO_RCVLOWAT 3 %s", res(setsockopt(C.lfd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v)));
    sync_send('h');
    s = accept_one();
    v = -1;
    l = sizeof v;
    r = res(getsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, &l));
    say("accepted getsockopt SO_RCVLOWAT %s value %d", r, v);
    v = 1;
    setsockopt(C.lfd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v);
    warm_server(s); /* 4 bytes: more than the mark */
    sync_send('i');
    say("blocking read %s", got(read(s, b, sizeof b), b));
    close(s);
}

void rcvlowat_client(void)
{
    int fd = connect_one();
    warm_client(fd);
    sync_expect('a');
    say("send %s", res(send(fd, "abc", 3, 0)));
    sleep_ms(20);
    sync_send('1');
    sync_expect('b');
    say("send %s", res(send(fd, "defg", 4, 0)));
    sleep_ms(20);
    sync_send('2');
    for (char c = 'c'; c <= 'f'; c++) {
        sync_expect(c);
        sleep_ms(50);
        say("send %s", res(send(fd, "hi", 2, 0)));
        sleep_ms(50);
        say("send %s", res(send(fd, "jkl", 3, 0)));
    }
    sync_expect('g');
    sleep_ms(50);
    say("send %s", res(send(fd, "mn", 2, 0)));
    say("shutdown SHUT_WR %s", res(shutdown(fd, SHUT_WR)));
    close(fd);
    sync_expect('h');
    fd = connect_one();
    warm_client(fd);
    sync_expect('i');
    sleep_ms(50);
    say("send %s", res(send(fd, "o", 1, 0)));
    sleep_ms(50);
    say("send %s", res(send(fd, "pq", 2, 0)));
    close(fd);
}

/* SO_RCVLOWAT set while bytes sent before it are unread (under the library: in the ring). */
void rcvlowat_unread_server(void)
{
    char b[64];
    int s = accept_one();
    warm_server(s);
    sync_send('a');
    sync_expect('1'); /* "abc" sent */
    int v = 5;
    say("SO_RCVLOWAT 5 %s", res(setsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v)));
    socklen_t l = sizeof v;
    v = -1;
    const char *r = res(getsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, &l));
    say("getsockopt SO_RCVLOWAT %s value %d", r, v);
    say_ready_all("3 bytes", s);
    say_fionread("3 bytes: FIONREAD", s);
    sync_send('b');
    sync_expect('2'); /* "de" sent */
    say_ready_all("5 bytes", s);
    say("5 bytes: recv MSG_PEEK|MSG_DONTWAIT %s", got(recv(s, b, sizeof b, MSG_PEEK | MSG_DONTWAIT), b));
    say("5 bytes: read %s", got(read(s, b, sizeof b), b));
    sync_send('x');
    close(s);
    /* Blocking calls with 2 bytes unread and a mark of 4, while the peer sends 1 byte, then
     * more a moment later. A wait is woken when the 4th byte arrives. A blocking receive
     * takes the 2 bytes and sleeps, and the kernel wakes it only once the bytes that came
     * after its sleep began reach the mark on their own (tcp_data_ready counts the queue,
     * not what the sleeper has taken): it is sent 4 more, not 1. */
    for (int mode = 0; mode < 5; mode++) {
        s = accept_one();
        warm_server(s);
        sync_send('c');
        sync_expect('3'); /* "ab" sent */
        v = 4;
        if (setsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v) < 0)
            die("SO_RCVLOWAT");
        sync_send('d');
        if (mode == 0) {
            say("blocking recv %s", got(recv(s, b, sizeof b, 0), b));
        } else if (mode == 1) {
            say("blocking read %s", got(read(s, b, sizeof b), b));
        } else if (mode == 2) {
            struct pollfd p = {s, POLLIN, 0};
            say_poll("blocking poll", &p, 5000);
        } else if (mode == 3) {
            fd_set rd;
            FD_ZERO(&rd);
            FD_SET(s, &rd);
            struct timeval tv = {5, 0};
            int n = select(s + 1, &rd, NULL, NULL, &tv);
            say("blocking select %s read %d", res(n), n >= 0 ? FD_ISSET(s, &rd) : -1);
        } else {
            int ep = epoll_create1(EPOLL_CLOEXEC);
            if (ep < 0 || ep_ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 1) < 0)
                die("epoll");
            say("blocking epoll_wait %s", epw(ep, 5000));
            close(ep);
        }
        say_fionread("then FIONREAD", s);
        if (mode >= 2)
            say("then read %s", got(read(s, b, sizeof b), b));
        sync_send('x');
        close(s);
    }
}

void rcvlowat_unread_client(void)
{
    int fd = connect_one();
    warm_client(fd);
    sync_expect('a');
    say("send %s", res(send(fd, "abc", 3, 0)));
    sleep_ms(20);
    sync_send('1');
    sync_expect('b');
    say("send %s", res(send(fd, "de", 2, 0)));
    sleep_ms(20);
    sync_send('2');
    sync_expect('x');
    close(fd);
    for (int mode = 0; mode < 5; mode++) {
        fd = connect_one();
        warm_client(fd);
        sync_expect('c');
        say("send %s", res(send(fd, "ab", 2, 0)));
        sleep_ms(20);
        sync_send('3');
        sync_expect('d');
        sleep_ms(50);
        say("send %s", res(send(fd, "c", 1, 0)));
        sleep_ms(50);
        say("send %s", res(mode < 2 ? send(fd, "defg", 4, 0) : send(fd, "d", 1, 0)));
        sync_expect('x');
        close(fd);
    }
}

/* Zero-length and degenerate calls. read/readv of 0 bytes return 0 at once (the socket layer
 * answers before TCP sees them); recv/recvfrom/recvmsg of 0 bytes go to TCP, which waits for
 * data or the end of the stream like any receive (a blocking one is only made here when
 * bytes or the end are there), then returns 0 without consuming anything. */
static void zero_calls(int fd, const char *when, bool recv_may_block)
{
    char b[8];
    struct iovec none[2] = {{b, 0}, {b + 1, 0}};
    struct msghdr mh;
    say("%s: read 0 %s", when, res(read(fd, b, 0)));
    say("%s: read NULL 0 %s", when, res(read(fd, NULL, 0)));
    say("%s: readv no iovecs %s", when, res(readv(fd, none, 0)));
    say("%s: readv two empty iovecs %s", when, res(readv(fd, none, 2)));
    say("%s: recv 0 MSG_DONTWAIT %s", when, res(recv(fd, b, 0, MSG_DONTWAIT)));
    say("%s: recv 0 MSG_PEEK|MSG_DONTWAIT %s", when, res(recv(fd, b, 0, MSG_PEEK | MSG_DONTWAIT)));
    memset(&mh, 0, sizeof mh);
    say("%s: recvmsg no buffers MSG_DONTWAIT %s", when, res(recvmsg(fd, &mh, MSG_DONTWAIT)));
    if (recv_may_block) {
        say("%s: recv 0 %s", when, res(recv(fd, b, 0, 0)));
        say("%s: recv NULL 0 %s", when, res(recv(fd, NULL, 0, 0)));
        say("%s: recv 0 MSG_WAITALL %s", when, res(recv(fd, b, 0, MSG_WAITALL)));
        say("%s: recvfrom 0 %s", when, res(recvfrom(fd, b, 0, 0, NULL, NULL)));
        memset(&mh, 0, sizeof mh);
        say("%s: recvmsg no buffers %s", when, res(recvmsg(fd, &mh, 0)));
        mh.msg_iov = none;
        mh.msg_iovlen = 2;
        say("%s: recvmsg two empty iovecs MSG_WAITALL %s", when, res(recvmsg(fd, &mh, MSG_WAITALL)));
    }
    say("%s: write 0 %s", when, res(write(fd, b, 0)));
    say("%s: write NULL 0 %s", when, res(write(fd, NULL, 0)));
    say("%s: send 0 %s", when, res(send(fd, b, 0, 0)));
    say("%s: writev no iovecs %s", when, res(writev(fd, none, 0)));
    say("%s: writev two empty iovecs %s", when, res(writev(fd, none, 2)));
    memset(&mh, 0, sizeof mh);
    say("%s: sendmsg no buffers %s", when, res(sendmsg(fd, &mh, 0)));
}

void zero_server(void)
{
    int s = accept_one();
    char b[8];
    say("ping %s", res(write(s, "p", 1)));
    say("pong %s", got(read_full(s, b, 1), b));
    sync_expect('a');
    say("write %s", res(write(s, "hello", 5)));
    sync_expect('b');
    say("write %s", res(write(s, "x", 1)));
    sync_expect('c');
    say("close %s", res(close(s)));
}

void zero_client(void)
{
    int fd = connect_one();
    char b[8];
    say("ping %s", got(read_full(fd, b, 1), b));
    say("pong %s", res(write(fd, "q", 1)));
    zero_calls(fd, "nothing pending", false);
    set_nonblock(fd, true);
    zero_calls(fd, "nothing pending, O_NONBLOCK", true);
    set_nonblock(fd, false);
    sync_send('a');
    struct pollfd p = {fd, POLLIN, 0};
    say_poll("poll", &p, 5000);
    zero_calls(fd, "5 bytes pending", true);
    say("read_full 5 %s", got(read_full(fd, b, 5), b));
    sync_send('b');
    say("read 1 %s", got(read(fd, b, 1), b));
    zero_calls(fd, "read all", false);
    sync_send('c');
    say("read at end %s", res(read(fd, b, sizeof b)));
    zero_calls(fd, "at end", true);
    close(fd);
}

/* A seccomp sandbox like OpenSSH's pre-authentication child's: from here on the process is
 * killed (SIGSYS) by any socket call other than read and write (recvmsg, sendmsg, recvfrom,
 * sendto, and ioctl, getsockopt, setsockopt, socket, connect) and by poll (the case waits
 * with ppoll); everything else stays allowed. */
static void enter_rw_sandbox(void)
{
#define KILL_ON(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), \
                    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS)
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        KILL_ON(__NR_recvmsg), KILL_ON(__NR_sendmsg), KILL_ON(__NR_recvfrom),
        KILL_ON(__NR_sendto), KILL_ON(__NR_ioctl), KILL_ON(__NR_getsockopt),
        KILL_ON(__NR_setsockopt), KILL_ON(__NR_socket), KILL_ON(__NR_connect),
        KILL_ON(__NR_recvmmsg), KILL_ON(__NR_sendmmsg), KILL_ON(__NR_poll),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
#undef KILL_ON
    struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
    say("prctl PR_SET_NO_NEW_PRIVS %s", res(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)));
    say("prctl PR_SET_SECCOMP %s", res(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)));
}

/* Both ways at once, non-blocking, waiting in ppoll, with read and write only (the way
 * OpenSSH's packet layer moves its bytes). */
static void rw_duplex(int fd, uint64_t total, uint64_t seed_out, uint64_t seed_in)
{
    static unsigned char out[32768], in[65536];
    uint64_t sent = 0, rcvd = 0, sizes = seed_out * 7 + 1;
    bool bad = false, eof = false;
    set_nonblock(fd, true);
    while ((sent < total || rcvd < total) && !eof) {
        struct pollfd p = {fd, (short)(POLLIN | (sent < total ? POLLOUT : 0)), 0};
        struct timespec ts = {10, 0};
        int r = ppoll(&p, 1, &ts, NULL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            die("ppoll %d", r);
        if (p.revents & POLLIN) {
            ssize_t n = read(fd, in, sizeof in);
            if (n == 0)
                eof = true;
            else if (n < 0 && errno != EAGAIN && errno != EINTR)
                die("read");
            else if (n > 0) {
                if (pattern_check(in, rcvd, (size_t)n, seed_in) >= 0)
                    bad = true;
                rcvd += (uint64_t)n;
            }
        }
        if (sent < total && (p.revents & POLLOUT)) {
            size_t n = rnd_size(&sizes, sizeof out);
            if (n > total - sent)
                n = (size_t)(total - sent);
            pattern(out, sent, n, seed_out);
            ssize_t w = write(fd, out, n);
            if (w < 0 && errno != EAGAIN && errno != EINTR)
                die("write");
            if (w > 0)
                sent += (uint64_t)w;
        }
    }
    set_nonblock(fd, false);
    say("duplex: sent %s, received %s, pattern %s", yes(sent == total), yes(rcvd == total),
        bad ? "MISMATCH" : "ok");
}

void seccomp_server(void)
{
    int s = accept_one();
    char b[4];
    say("ping %s", res(write(s, "p", 1)));
    say("pong %s", got(read_full(s, b, 1), b));
    enter_rw_sandbox();
    struct rstat st = recv_pattern(M_RW, s, 91, 92, 65536, 4 * MIB);
    say_rstat("read 4 MiB", st);
    say("write 4 MiB %s", res(send_pattern(M_RW, s, 4 * MIB, 93, 94, 65536, NULL)));
    rw_duplex(s, 4 * MIB, 95, 96);
    say("read at end %s", res(read(s, b, sizeof b)));
    close(s);
}

void seccomp_client(void)
{
    int fd = connect_one();
    char b[4];
    say("ping %s", got(read_full(fd, b, 1), b));
    say("pong %s", res(write(fd, "q", 1)));
    enter_rw_sandbox();
    say("write 4 MiB %s", res(send_pattern(M_RW, fd, 4 * MIB, 91, 97, 65536, NULL)));
    struct rstat st = recv_pattern(M_RW, fd, 93, 98, 65536, 4 * MIB);
    say_rstat("read 4 MiB", st);
    rw_duplex(fd, 4 * MIB, 96, 95);
    say("shutdown SHUT_WR %s", res(shutdown(fd, SHUT_WR)));
    say("read at end %s", res(read(fd, b, sizeof b)));
    close(fd);
}

/* MSG_TRUNC on TCP: the bytes are discarded, not copied. */
void trunc_server(void)
{
    int s = accept_one();
    sync_expect('a');
    say("write %s", res(write(s, "0123456789", 10)));
    sync_expect('b');
    say("write %s", res(write(s, "abcdef", 6)));
    say("close %s", res(close(s)));
}

void trunc_client(void)
{
    int fd = connect_one();
    char b[16];
    sync_send('a');
    long long t0 = now_ms();
    ssize_t n = -1;
    while (now_ms() - t0 < 5000 && (n = recv(fd, b, 10, MSG_PEEK | MSG_DONTWAIT)) != 10)
        sleep_ms(1);
    say("peek until 10 bytes %s", got(n, b));
    say("recv NULL 4 MSG_TRUNC %s", res(recv(fd, NULL, 4, MSG_TRUNC)));
    say("recv 3 MSG_TRUNC|MSG_PEEK %s", res(recv(fd, b, 3, MSG_TRUNC | MSG_PEEK)));
    say("read_full 6 %s", got(read_full(fd, b, 6), b));
    sync_send('b');
    char big[100];
    say("recv 100 MSG_TRUNC|MSG_WAITALL, the peer sends 6 and closes %s",
        res(recv(fd, big, sizeof big, MSG_TRUNC | MSG_WAITALL)));
    say("read at end %s", res(read(fd, b, sizeof b)));
    close(fd);
}

/* MSG_ZEROCOPY and the error queue on a connection that carried data both ways (in ring
 * mode under the library): a receive from the error queue never returns bytes of the
 * stream, and every zero-copy send is completed there, with its control message. */
void zerocopy_server(void)
{
    int s = accept_one();
    char b[65536];
    warm_up_server(s);
    say("write %s", res(write(s, "data", 4)));
    sync_send('a');
    long total = 0;
    while (total < 10 * 4096) {
        ssize_t r = read(s, b, sizeof b);
        if (r <= 0)
            break;
        total += r;
    }
    say("read %ld", total);
    sync_expect('b');
    say("close %s", res(close(s)));
}

void zerocopy_client(void)
{
    int fd = connect_one();
    char b[64];
    warm_up_client(fd);
    sync_expect('a');
    long long t0 = now_ms();
    int avail = 0;
    while (now_ms() - t0 < 5000 && (ioctl(fd, FIONREAD, &avail) != 0 || avail < 4))
        sleep_ms(1);
    say("recv MSG_ERRQUEUE|MSG_DONTWAIT, the stream's bytes waiting %s",
        res(recv(fd, b, sizeof b, MSG_ERRQUEUE | MSG_DONTWAIT)));
    struct msghdr m;
    memset(&m, 0, sizeof m);
    say("recvmsg MSG_ERRQUEUE|MSG_DONTWAIT %s", res(recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT)));
    int one = 1;
    say("SO_ZEROCOPY %s", res(setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one)));
    static char buf[4096];
    memset(buf, 'z', sizeof buf);
    int sent = 0;
    for (int i = 0; i < 10; i++)
        sent += send(fd, buf, sizeof buf, MSG_ZEROCOPY) == (ssize_t)sizeof buf;
    say("MSG_ZEROCOPY sends of 4096 %d", sent);
    /* Completions name ranges of sends (the kernel may merge them), in order. */
    unsigned next = 0;
    bool with_cmsg = true;
    t0 = now_ms();
    while (next < 10 && now_ms() - t0 < 5000) {
        struct pollfd p = {fd, 0, 0};
        if (poll(&p, 1, 100) <= 0 || !(p.revents & POLLERR))
            continue;
        char cb[256];
        memset(&m, 0, sizeof m);
        m.msg_control = cb;
        m.msg_controllen = sizeof cb;
        if (recvmsg(fd, &m, MSG_ERRQUEUE) < 0)
            continue;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        if (!cm) {
            with_cmsg = false;
            break;
        }
        struct sock_extended_err e;
        memcpy(&e, CMSG_DATA(cm), sizeof e);
        if (e.ee_origin == SO_EE_ORIGIN_ZEROCOPY && e.ee_errno == 0 && e.ee_info == next)
            next = e.ee_data + 1;
    }
    say("completions cover sends 0..%u of 10, each with its control message: %s", next, yes(with_cmsg));
    say("read_full %s", got(read_full(fd, b, 4), b));
    sync_send('b');
    say("read at end %s", res(read(fd, b, sizeof b)));
    close(fd);
}

/* Features only the kernel's own queues have, turned on after the connection carried
 * data both ways (in ring mode under the library): a peek offset moves with peeks and
 * reads; receive timestamps come as control messages; the stream continues both ways. */
void kernel_features_server(void)
{
    int s = accept_one();
    char b[64];
    warm_up_server(s);
    sync_expect('a');
    say("write %s", res(write(s, "abcdefgh", 8)));
    sync_expect('b');
    say("write %s", res(write(s, "ts", 2)));
    say("read_full %s", got(read_full(s, b, 3), b));
    sync_expect('c');
    say("close %s", res(close(s)));
}

static void await_readable(int fd, int n)
{
    long long t0 = now_ms();
    int avail = 0;
    while (now_ms() - t0 < 5000 && (ioctl(fd, FIONREAD, &avail) != 0 || avail < n))
        sleep_ms(1);
}

/* One recvmsg of n bytes with a control buffer: its bytes, and whether a receive
 * timestamp came with them. */
static void say_stamped_recv(int fd, size_t n)
{
    char b[64];
    struct iovec v = {b, n};
    char cb[256];
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = &v;
    m.msg_iovlen = 1;
    m.msg_control = cb;
    m.msg_controllen = sizeof cb;
    ssize_t r = recvmsg(fd, &m, 0);
    bool stamped = false;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm))
        stamped |= cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS;
    say("recvmsg %s, a timestamp control message: %s", got(r, b), yes(stamped));
}

void kernel_features_client(void)
{
    /* The kernel turns receive timestamps on system-wide a moment after the first socket
     * asks (a deferred static key): a socket of its own asks long before the one read. */
    int one = 1, early = socket(AF_INET, SOCK_STREAM, 0);
    if (early < 0 || setsockopt(early, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) != 0)
        die("timestamps");
    int fd = connect_one();
    char b[64];
    warm_up_client(fd);
    int off = 0;
    say("SO_PEEK_OFF 0 %s", res(setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &off, sizeof off)));
    sync_send('a');
    await_readable(fd, 8);
    say("peek 3 %s", got(recv(fd, b, 3, MSG_PEEK), b));
    say("peek 3 again, from the offset %s", got(recv(fd, b, 3, MSG_PEEK), b));
    socklen_t len = sizeof off;
    say("SO_PEEK_OFF %s value %d", res(getsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &off, &len)), off);
    say("read 2 %s", got(read(fd, b, 2), b));
    say("peek 2, the offset moved back by the read %s", got(recv(fd, b, 2, MSG_PEEK), b));
    say("read 6 %s", got(read_full(fd, b, 6), b));
    say("SO_TIMESTAMPNS %s", res(setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one)));
    sync_send('b');
    await_readable(fd, 2);
    say_stamped_recv(fd, 2);
    say("write %s", res(write(fd, "bye", 3)));
    sync_send('c');
    say("read at end %s", res(read(fd, b, sizeof b)));
    close(fd);
    close(early);
}

/* Receive timestamps turned on before the connection carried anything: on a socket before
 * its connect, and on one right after it (under the library, before its set-up is done).
 * Data then goes both ways long enough for any ring to be taken, and each read of the
 * server's last bytes still comes with its timestamp. */
void kernel_features_early_server(void)
{
    int s1 = accept_one(), s2 = accept_one();
    char b[64];
    warm_up_server(s1);
    warm_up_server(s2);
    sync_expect('a');
    warm_up_server(s1);
    warm_up_server(s2);
    sync_expect('b');
    say("write %s", res(write(s1, "t1", 2)));
    say("write %s", res(write(s2, "t2", 2)));
    say("read_full %s", got(read_full(s1, b, 3), b));
    say("read_full %s", got(read_full(s2, b, 3), b));
    sync_expect('c');
    close(s1);
    close(s2);
}

void kernel_features_early_client(void)
{
    int one = 1, early = socket(AF_INET, SOCK_STREAM, 0);
    if (early < 0 || setsockopt(early, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) != 0)
        die("timestamps");
    int before = tcp_socket(0);
    say("SO_TIMESTAMPNS before connect %s", res(setsockopt(before, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one)));
    struct sockaddr_storage ss;
    socklen_t l = loop_addr(C.family, C.port, &ss);
    if (connect(before, (struct sockaddr *)&ss, l) < 0)
        die("connect");
    int after = connect_one();
    say("SO_TIMESTAMPNS right after connect %s",
        res(setsockopt(after, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one)));
    warm_up_client(before);
    warm_up_client(after);
    /* Long enough for a stream to be set up and a ring granted. */
    sleep_ms(300);
    sync_send('a');
    warm_up_client(before);
    warm_up_client(after);
    sync_send('b');
    await_readable(before, 2);
    await_readable(after, 2);
    say_stamped_recv(before, 2);
    say_stamped_recv(after, 2);
    say("write %s", res(write(before, "bye", 3)));
    say("write %s", res(write(after, "bye", 3)));
    sync_send('c');
    close(before);
    close(after);
    close(early);
}

/* TCP_INQ: each recvmsg with a control buffer carries TCP_CM_INQ, the bytes still queued
 * after it (after a peek: with the peeked ones; at the end of the stream: 1, "read on");
 * too small a control buffer gets MSG_CTRUNC. Turned on after data went both ways (in ring
 * mode under the library), and once before the connection on the server's listener, whose
 * accepted sockets inherit it. */
static void say_inq(const char *what, int fd, size_t want, int flags, socklen_t control)
{
    char b[64];
    union {
        char buf[256];
        struct cmsghdr align;
    } cb;
    struct iovec v = {b, want};
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = &v;
    m.msg_iovlen = 1;
    m.msg_control = cb.buf;
    m.msg_controllen = control;
    ssize_t r = recvmsg(fd, &m, flags);
    int inq = -1;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm))
        if (cm->cmsg_level == SOL_TCP && cm->cmsg_type == TCP_CM_INQ && cm->cmsg_len >= CMSG_LEN(sizeof inq))
            memcpy(&inq, CMSG_DATA(cm), sizeof inq);
    say("%s %s, TCP_CM_INQ %d, control %d, MSG_CTRUNC %s", what, got(r, b), inq, (int)m.msg_controllen,
        yes(m.msg_flags & MSG_CTRUNC));
}

void tcp_inq_server(void)
{
    int one = 1;
    say("TCP_INQ on the listener %s", res(setsockopt(C.lfd, SOL_TCP, TCP_INQ, &one, sizeof one)));
    sync_send('l');
    int s = accept_one();
    warm_up_server(s);
    int v = 0;
    socklen_t len = sizeof v;
    int r = getsockopt(s, SOL_TCP, TCP_INQ, &v, &len);
    say("TCP_INQ inherited %s value %d", res(r), v);
    sync_send('a');
    await_readable(s, 4);
    say_inq("server recvmsg 3", s, 3, 0, 256);
    say_inq("server recvmsg 8", s, 8, 0, 256);
    sync_expect('b');
    say("write %s", res(write(s, "abcdefgh", 8)));
    sync_expect('c');
    say("write %s", res(write(s, "xy", 2)));
    sync_expect('d');
    say("close %s", res(close(s)));
}

void tcp_inq_client(void)
{
    sync_expect('l');
    int fd = connect_one();
    warm_up_client(fd);
    int one = 1;
    say("TCP_INQ %s", res(setsockopt(fd, SOL_TCP, TCP_INQ, &one, sizeof one)));
    sync_expect('a');
    say("write %s", res(write(fd, "wxyz", 4)));
    sync_send('b');
    await_readable(fd, 8);
    say_inq("recvmsg 3", fd, 3, 0, 256);
    say_inq("peek 2", fd, 2, MSG_PEEK, 256);
    say_inq("recvmsg 1, a control buffer too small for the message", fd, 1, 0, 8);
    say_inq("recvmsg 1, the message cut", fd, 1, 0, (socklen_t)CMSG_LEN(2));
    say_inq("recvmsg 8", fd, 8, 0, 256);
    say_inq("recvmsg 8 without waiting", fd, 8, MSG_DONTWAIT, 256);
    int zero = 0;
    say("TCP_INQ off %s", res(setsockopt(fd, SOL_TCP, TCP_INQ, &zero, sizeof zero)));
    sync_send('c');
    await_readable(fd, 2);
    say_inq("recvmsg 1, TCP_INQ off", fd, 1, 0, 256);
    say("TCP_INQ on again %s", res(setsockopt(fd, SOL_TCP, TCP_INQ, &one, sizeof one)));
    say_inq("recvmsg 1", fd, 1, 0, 256);
    sync_send('d');
    struct pollfd p = {fd, POLLRDHUP, 0};
    say("poll for the end %s", res(poll(&p, 1, 5000)));
    say_inq("recvmsg at the end", fd, 8, 0, 256);
    close(fd);
}

/* TCP_ULP "tls" (kernel TLS; ENOENT on a kernel without the module) asked mid-stream, after
 * round trips (in ring mode under the library), once with bytes unread and once with
 * everything read: the stream goes on in order both ways. The answers go to standard error
 * (the library refuses the first, as a kernel without the module would, where a kernel
 * with it would take it). */
void tcp_ulp_server(void)
{
    int s = accept_one();
    warm_up_server(s);
    sync_expect('a');
    say("write %s", res(write(s, "abcdefgh", 8)));
    sync_send('b');
    sync_expect('c');
    uint64_t h = 0;
    say("sent %s", res(send_pattern(M_RW, s, 300000, 41, 5, 20000, &h)));
    struct rstat st = recv_pattern(M_RW, s, 42, 6, 20000, 300000);
    say_rstat("received", st);
    close(s);
}

void tcp_ulp_client(void)
{
    int fd = connect_one();
    char b[64];
    warm_up_client(fd);
    sync_send('a');
    sync_expect('b');
    await_readable(fd, 8);
    int r = setsockopt(fd, SOL_TCP, TCP_ULP, "tls", 3);
    fprintf(stderr, "TCP_ULP tls with 8 bytes unread: %s\n", res(r));
    say("read %s", got(read_full(fd, b, 8), b));
    r = setsockopt(fd, SOL_TCP, TCP_ULP, "tls", 3);
    fprintf(stderr, "TCP_ULP tls with nothing unread: %s\n", res(r));
    sync_send('c');
    struct rstat st = recv_pattern(M_RW, fd, 41, 7, 20000, 300000);
    say_rstat("received", st);
    uint64_t h = 0;
    say("sent %s", res(send_pattern(M_RW, fd, 300000, 42, 8, 20000, &h)));
    close(fd);
}

/* The peer is SIGKILLed while bytes sent to it are unread: its kernel resets the connection
 * (RST, not FIN), so the survivor's next read fails with ECONNRESET, later ones return 0,
 * and writes fail with EPIPE. With `reap_after`, the survivor reads before it reaps the
 * peer: an exited process not yet reaped (a zombie) holds no sockets, so the answer is the
 * same. */
static void killed_unread(bool reap_after)
{
    int s = accept_one();
    char b[256];
    say("ping %s", res(write(s, "p", 1)));
    say("pong %s", got(read_full(s, b, 1), b));
    sync_expect('r');
    memset(b, 'u', sizeof b);
    say("write 100 the peer will not read %s", res(write(s, b, 100)));
    sleep_ms(100);
    say("SIGKILL the peer %s", res(kill(C.peer, SIGKILL)));
    C.peer_killed = true;
    int st;
    if (reap_after) {
        siginfo_t info;
        memset(&info, 0, sizeof info);
        say("wait for its exit, not reaping it %s", res(waitid(P_PID, (id_t)C.peer, &info, WEXITED | WNOWAIT)));
    } else {
        wait_pid(C.peer, &st);
        say("peer %s", status_str(st));
    }
    sleep_ms(100);
    say("read %s", res(read(s, b, sizeof b)));
    say("read again %s", res(read(s, b, sizeof b)));
    say("send MSG_NOSIGNAL %s", res(send(s, "x", 1, MSG_NOSIGNAL)));
    if (reap_after) {
        wait_pid(C.peer, &st);
        say("peer %s", status_str(st));
    }
    close(s);
}

void killed_unread_server(void) { killed_unread(false); }
void killed_unreaped_server(void) { killed_unread(true); }

void killed_unread_client(void)
{
    int fd = connect_one();
    char b[4];
    say("ping %s", got(read_full(fd, b, 1), b));
    say("pong %s", res(write(fd, "q", 1)));
    sync_send('r');
    for (;;)
        pause();
}

static volatile sig_atomic_t alarms;
void catch_alarm(int flags);
void timer_ms(int ms);

/* epoll_pwait and ppoll with SIGALRM blocked for the call only: the timer does not interrupt
 * them, the handler runs when they return; epoll_pwait2 with a timespec timeout. */
void pwait_server(void)
{
    int s = accept_one();
    for (int i = 0; i < 2; i++) {
        sync_expect('a');
        sleep_ms(500);
        say("write %s", res(write(s, "tick", 4)));
    }
    sync_expect('z');
    close(s);
}

void pwait_client(void)
{
    int fd = connect_one();
    int ep = epoll_create1(0);
    ep_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLIN, 1);
    catch_alarm(0);
    alarms = 0;
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGALRM);
    struct epoll_event ev;
    struct timespec ts = {0, 100 * 1000000L};
    long long t0 = now_ms();
    int r = epoll_pwait2(ep, &ev, 1, &ts, NULL);
    say("epoll_pwait2 100 ms, nothing %s, waited >= 90 ms: %s", res(r), yes(now_ms() - t0 >= 90));
    timer_ms(150);
    sync_send('a');
    r = epoll_pwait(ep, &ev, 1, 5000, &block);
    say("epoll_pwait 5 s, SIGALRM blocked for the call, timer at 150 ms, data at 500 ms %s", res(r));
    say("SIGALRM handled when the call returned: count %d", (int)alarms);
    char b[8];
    say("read_full %s", got(read_full(fd, b, 4), b));
    alarms = 0;
    timer_ms(150);
    sync_send('a');
    struct pollfd p = {fd, POLLIN, 0};
    struct timespec five = {5, 0};
    r = ppoll(&p, 1, &five, &block);
    const char *rs = res(r);
    say("ppoll 5 s, SIGALRM blocked for the call %s revents %s", rs, revstr(p.revents));
    say("SIGALRM handled when the call returned: count %d", (int)alarms);
    say("read_full %s", got(read_full(fd, b, 4), b));
    arm_watchdog();
    sync_send('z');
    close(ep);
    close(fd);
}

/* O_ASYNC: SIGIO to the owner when data arrives. */
static volatile sig_atomic_t sigios;
static void on_sigio(int s)
{
    (void)s;
    sigios++;
}

const char *const sigio_script[] = {"io"};
void sigio_client(void)
{
    int fd = connect_one();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigio;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGIO, &sa, NULL);
    say("F_SETOWN %s", res(fcntl(fd, F_SETOWN, getpid())));
    say("F_GETOWN is us: %s", yes(fcntl(fd, F_GETOWN) == getpid()));
    int fl = fcntl(fd, F_GETFL);
    say("F_SETFL O_ASYNC %s", res(fcntl(fd, F_SETFL, fl | O_ASYNC)));
    say("O_ASYNC set: %s", yes((fcntl(fd, F_GETFL) & O_ASYNC) != 0));
    sync_send('a');
    long long t0 = now_ms();
    while (!sigios && now_ms() - t0 < 5000)
        sleep_ms(1);
    say("SIGIO after the peer wrote: %s", yes(sigios > 0));
    char b[8];
    say("read_full %s", got(read_full(fd, b, 2), b));
    sync_send('z');
    close(fd);
}

/* posix_spawn of a program that uses the inherited socket. */
void spawn_client(void)
{
    int fd = connect_one();
    int cx = fcntl(fd, F_DUPFD_CLOEXEC, 50);
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        die("pipe2");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    char a[16], b[16];
    snprintf(a, sizeof a, "%d", fd);
    snprintf(b, sizeof b, "%d", cx);
    char *argv[] = {(char *)"sockconf", (char *)"--exec-child", a, b, NULL};
    extern char **environ;
    pid_t pid = -1;
    int r = posix_spawn(&pid, C.self, &fa, NULL, argv, environ);
    say("posix_spawn %d", r);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    const char *r1 = res(close(fd));
    say("close both copies in the parent %s %s", r1, res(close(cx)));
    slurp_into_log(p[0]);
    close(p[0]);
    int st = 0;
    if (r == 0)
        wait_pid(pid, &st);
    say("spawned child %s", status_str(st));
}

/* Lengths the compiler cannot see: with _FORTIFY_SOURCE these calls become __read_chk,
 * __recv_chk, __recvfrom_chk, __poll_chk and __ppoll_chk (the harness checks the imports). */
static volatile size_t vlen = 5;
static volatile nfds_t vnfds = 1;
const char *const chk_script[] = {"read1", "recv2", "from3", "ppol4"};

static void chk_read(const char *what, int kind, int fd)
{
    char b[16];
    ssize_t r;
    /* The whole buffer as the first argument: what fortification needs to see. */
    if (kind == 0)
        r = read(fd, b, vlen);
    else if (kind == 1)
        r = recv(fd, b, vlen, 0);
    else
        r = recvfrom(fd, b, vlen, 0, NULL, NULL);
    if (r > 0 && (size_t)r < vlen) {
        ssize_t more = read_full(fd, b + r, vlen - (size_t)r);
        r = more < 0 ? more : r + more;
    }
    say("%s %s", what, r <= 0 ? res(r) : got(r, b));
}

void chk_client(void)
{
    int fd = connect_one();
    struct pollfd p[2] = {{fd, POLLIN, 0}, {-1, 0, 0}};
    const char *r = res(poll(p, vnfds, 0));
    say("poll, nothing there %s revents %s", r, revstr(p[0].revents));
    sync_send('a');
    r = res(poll(p, vnfds, 5000));
    say("poll %s revents %s", r, revstr(p[0].revents));
    chk_read("read", 0, fd);
    sync_send('b');
    chk_read("recv", 1, fd);
    sync_send('c');
    chk_read("recvfrom", 2, fd);
    sync_send('d');
    struct timespec ts = {5, 0};
    r = res(ppoll(p, vnfds, &ts, NULL));
    say("ppoll %s revents %s", r, revstr(p[0].revents));
    chk_read("read", 0, fd);
    sync_send('z');
    char c;
    say("read at end %s", res(read(fd, &c, 1)));
    close(fd);
}
