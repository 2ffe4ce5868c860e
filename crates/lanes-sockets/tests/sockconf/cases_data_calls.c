#include "sockconf.h"

/* ------------------------------------------------------------------------------------------
 * Cases: the data calls
 * ---------------------------------------------------------------------------------------- */

static const char *const mode_names[] = {"read/write", "recv/send", "recvfrom/sendto",
                                         "recvmsg/sendmsg", "readv/writev", "recvmmsg/sendmmsg", "preadv2/pwritev2",
                                         "preadv2/pwritev2 and read/write"};
enum iomode io_mode;

/* preadv2/pwritev2 where a socket answers without moving a byte: at an offset (ESPIPE),
 * with a flag sockets refuse (RWF_ATOMIC: EOPNOTSUPP). */
static void v2_edges(int fd)
{
    unsigned char b[8];
    struct iovec iov = {b, sizeof b};
    say("preadv2 at offset 0 %s", res(preadv2(fd, &iov, 1, 0, 0)));
    say("pwritev2 at offset 0 %s", res(pwritev2(fd, &iov, 1, 0, 0)));
    say("preadv2 RWF_ATOMIC %s", res(preadv2(fd, &iov, 1, -1, 0x40)));
    say("pwritev2 RWF_ATOMIC %s", res(pwritev2(fd, &iov, 1, -1, 0x40)));
}

void io_server(void)
{
    int s = accept_one();
    struct rstat st = recv_pattern(io_mode, s, 11, 77, 70000, UINT64_MAX);
    say_rstat(mode_names[io_mode], st);
    if (io_mode == M_TO)
        say("recvfrom addrlen %d", last_addrlen);
    if (io_mode == M_MSG)
        say("recvmsg namelen %d flags %d", last_namelen, last_msgflags);
    uint64_t h = 0;
    int r = send_pattern(io_mode, s, 256 * 1024 + 3, 12, 78, 50000, &h);
    say("sent back %s fnv %016llx", res(r), (unsigned long long)h);
    say("send of 0 bytes %s", res(x_send(io_mode, s, (const unsigned char *)"", 0)));
    if (io_mode == M_V2 || io_mode == M_V2MIX)
        v2_edges(s);
    close(s);
}

void io_client(void)
{
    int fd = connect_one();
    if (io_mode == M_V2 || io_mode == M_V2MIX) {
        /* Nothing sent yet by the server: RWF_NOWAIT finds nothing to read. */
        unsigned char b[8];
        struct iovec iov = {b, sizeof b};
        say("preadv2 RWF_NOWAIT before data %s", res(preadv2(fd, &iov, 1, -1, RWF_NOWAIT)));
        v2_edges(fd);
    }
    uint64_t h = 0;
    int r = send_pattern(io_mode, fd, MIB + 7, 11, 79, 65536, &h);
    say("sent %s fnv %016llx", res(r), (unsigned long long)h);
    if (io_mode == M_TO) {
        /* A destination on a connected stream socket is ignored by TCP. */
        struct sockaddr_storage ss;
        socklen_t l = loop_addr(C.family, 9, &ss);
        unsigned char b[5];
        pattern(b, MIB + 7, 5, 11);
        ssize_t w = sendto(fd, b, 5, 0, (struct sockaddr *)&ss, l);
        say("sendto with an address on a connected socket %s", res(w));
    }
    say("shutdown SHUT_WR %s", res(shutdown(fd, SHUT_WR)));
    struct rstat st = recv_pattern(io_mode, fd, 12, 80, 33000, UINT64_MAX);
    say_rstat(mode_names[io_mode], st);
    close(fd);
}

/* Ping-pong in read/write first (in ring mode under the library), then in preadv2/pwritev2:
 * the later calls find the bytes where the earlier ones left them. */
#define V2_WARM 2000
#define V2_TRIPS 200

void v2_ring_server(void)
{
    int s = accept_one();
    int bad = -1;
    for (int i = 0; i < V2_WARM + V2_TRIPS && bad < 0; i++) {
        unsigned char b[8], e[8];
        size_t got = 0;
        while (got < sizeof b) {
            struct iovec v = {b + got, sizeof b - got};
            ssize_t n = i < V2_WARM ? read(s, b + got, sizeof b - got) : preadv2(s, &v, 1, -1, 0);
            if (n <= 0) {
                say("receive %d: %s", i, res(n));
                bad = i;
                break;
            }
            got += (size_t)n;
        }
        pattern(e, (uint64_t)i * 8, 8, 31);
        if (bad < 0 && memcmp(b, e, 8) != 0)
            bad = i;
        struct iovec r = {"a", 1};
        if (bad < 0 && (i < V2_WARM ? write(s, "a", 1) : pwritev2(s, &r, 1, -1, 0)) != 1)
            bad = i;
    }
    say("%d round trips in read/write, then %d in preadv2/pwritev2: %s", V2_WARM, V2_TRIPS,
        bad < 0 ? "all in order" : "broken");
    close(s);
}

void v2_ring_client(void)
{
    int fd = connect_one();
    for (int i = 0; i < V2_WARM + V2_TRIPS; i++) {
        unsigned char b[8];
        pattern(b, (uint64_t)i * 8, 8, 31);
        if (write(fd, b, 8) != 8 || read(fd, b, 1) != 1) {
            say("round trip %d failed", i);
            break;
        }
    }
    close(fd);
}

void peek_server(void)
{
    int s = accept_one();
    sync_expect('g');
    say("write %s", res(write(s, "abcdef", 6)));
    sync_expect('d');
    close(s);
}

void peek_client(void)
{
    int fd = connect_one();
    char b[32];
    say("recv MSG_PEEK|MSG_DONTWAIT before data %s", res(recv(fd, b, 6, MSG_PEEK | MSG_DONTWAIT)));
    sync_send('g');
    /* Peek until all six bytes are there (bounded). */
    ssize_t n = -1;
    long long t0 = now_ms();
    while (now_ms() - t0 < 5000) {
        n = recv(fd, b, 6, MSG_PEEK | MSG_DONTWAIT);
        if (n == 6)
            break;
        sleep_ms(1);
    }
    say("recv MSG_PEEK until 6 bytes %s", got(n, b));
    say("recv MSG_PEEK 3 %s", got(recv(fd, b, 3, MSG_PEEK), b));
    say("recv MSG_PEEK 10 (blocking, data there) %s", got(recv(fd, b, 10, MSG_PEEK), b));
    say("read 4 %s", got(read(fd, b, 4), b));
    say("recv MSG_PEEK|MSG_DONTWAIT 10 %s", got(recv(fd, b, 10, MSG_PEEK | MSG_DONTWAIT), b));
    say("read 10 %s", got(read(fd, b, 10), b));
    say("recv MSG_PEEK|MSG_DONTWAIT empty %s", res(recv(fd, b, 10, MSG_PEEK | MSG_DONTWAIT)));
    sync_send('d');
    say("recv MSG_PEEK at end %s", res(recv(fd, b, 10, MSG_PEEK)));
    say("read at end %s", res(read(fd, b, 10)));
    close(fd);
}

void dontwait_server(void)
{
    int s = accept_one();
    sync_expect('g');
    say("write %s", res(write(s, "xyz", 3)));
    char b[8];
    say("read_full %s", got(read_full(s, b, 2), b));
    sync_expect('d');
    close(s);
}

void dontwait_client(void)
{
    int fd = connect_one();
    char b[16];
    say("recv MSG_DONTWAIT on empty %s", res(recv(fd, b, sizeof b, MSG_DONTWAIT)));
    say("recvfrom MSG_DONTWAIT on empty %s", res(recvfrom(fd, b, sizeof b, MSG_DONTWAIT, NULL, NULL)));
    struct iovec iov = {b, sizeof b};
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    say("recvmsg MSG_DONTWAIT on empty %s", res(recvmsg(fd, &mh, MSG_DONTWAIT)));
    say("O_NONBLOCK still %d", nonblock_of(fd));
    sync_send('g');
    struct pollfd p = {fd, POLLIN, 0};
    int r = poll(&p, 1, 5000);
    say("poll %s revents %s", res(r), revstr(p.revents));
    size_t total = 0;
    long long t0 = now_ms();
    while (total < 3 && now_ms() - t0 < 5000) {
        ssize_t n = recv(fd, b + total, sizeof b - total, MSG_DONTWAIT);
        if (n > 0)
            total += (size_t)n;
        else
            sleep_ms(1);
    }
    say("recv MSG_DONTWAIT until 3 bytes %s", got((ssize_t)total, b));
    say("recv MSG_DONTWAIT again %s", res(recv(fd, b, sizeof b, MSG_DONTWAIT)));
    say("send MSG_DONTWAIT %s", res(send(fd, "ok", 2, MSG_DONTWAIT)));
    sync_send('d');
    close(fd);
}

void waitall_server(void)
{
    int s = accept_one();
    char chunk[100];
    sync_expect('g');
    int ok = 0;
    for (int i = 0; i < 10; i++) {
        memset(chunk, 'a' + i, sizeof chunk);
        if (write_all(s, chunk, sizeof chunk) == (ssize_t)sizeof chunk)
            ok++;
        sleep_ms(20);
    }
    say("10 writes of 100 bytes, 20 ms apart: %d ok", ok);
    sync_expect('h');
    for (int i = 0; i < 5; i++) {
        memset(chunk, 'A' + i, sizeof chunk);
        if (write_all(s, chunk, sizeof chunk) < 0)
            die("write");
        sleep_ms(20);
    }
    say("5 more writes, then close %s", res(close(s)));
}

void waitall_client(void)
{
    int fd = connect_one();
    static char b[1000];
    sync_send('g');
    ssize_t n = recv(fd, b, sizeof b, MSG_WAITALL);
    bool right = n == 1000;
    for (int i = 0; right && i < 1000; i++)
        right = b[i] == 'a' + i / 100;
    say("recv MSG_WAITALL 1000 %s, content right: %s", res(n), yes(right));
    sync_send('h');
    n = recv(fd, b, sizeof b, MSG_WAITALL);
    right = n == 500;
    for (int i = 0; right && i < 500; i++)
        right = b[i] == 'A' + i / 100;
    say("recv MSG_WAITALL 1000 with the peer closing after 500 %s, content right: %s", res(n),
        yes(right));
    say("recv at end %s", res(recv(fd, b, sizeof b, MSG_WAITALL)));
    close(fd);
}

static volatile sig_atomic_t sigpipes;
static void on_sigpipe(int s)
{
    (void)s;
    sigpipes++;
}

static void catch_sigpipe(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigpipe;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPIPE, &sa, NULL);
}

void closer_server(void)
{
    int s = accept_one();
    say("close %s", res(close(s)));
}

/* Writes one byte at a time until a write fails: the first returns 1, a later one EPIPE. */
static void write_until_epipe(int fd, bool nosignal)
{
    ssize_t first = nosignal ? send(fd, "x", 1, MSG_NOSIGNAL) : write(fd, "x", 1);
    say("first %s after the peer closed %s", nosignal ? "send MSG_NOSIGNAL" : "write", res(first));
    ssize_t r = 0;
    int e = 0;
    long long t0 = now_ms();
    while (now_ms() - t0 < 5000) {
        r = nosignal ? send(fd, "x", 1, MSG_NOSIGNAL) : write(fd, "x", 1);
        if (r < 0) {
            e = errno;
            break;
        }
        sleep_ms(1);
    }
    errno = e;
    say("a later one (eventually) %s", res(r));
    errno = 0;
    r = nosignal ? send(fd, "x", 1, MSG_NOSIGNAL) : write(fd, "x", 1);
    say("and the next %s", res(r));
}

void nosignal_client(void)
{
    catch_sigpipe();
    int fd = connect_one();
    char b[8];
    say("read (peer closed) %s", res(read(fd, b, sizeof b)));
    write_until_epipe(fd, true);
    say("SIGPIPE count %d", (int)sigpipes);
    close(fd);
}

void sigpipe_client(void)
{
    catch_sigpipe();
    int fd = connect_one();
    char b[8];
    say("read (peer closed) %s", res(read(fd, b, sizeof b)));
    write_until_epipe(fd, false);
    say("SIGPIPE count %d", (int)sigpipes);
    say("send without MSG_NOSIGNAL %s", res(send(fd, "x", 1, 0)));
    say("SIGPIPE count %d", (int)sigpipes);
    struct sub s = sub_start("client/child");
    if (s.pid == 0) {
        signal(SIGPIPE, SIG_DFL);
        say("write with the default SIGPIPE action");
        flush_log();
        if (write(fd, "x", 1) < 0)
            say("survived: write %s", res(-1));
        sub_exit();
    }
    say("child %s", status_str(sub_finish(s)));
    close(fd);
}

void shutwr_server(void)
{
    int s = accept_one();
    char b[16];
    say("read_full %s", got(read_full(s, b, 7), b));
    say("read (peer shut down writing) %s", res(read(s, b, sizeof b)));
    struct pollfd p = {s, POLLIN | POLLOUT | POLLRDHUP, 0};
    say_poll("poll", &p, 0);
    say("write back %s", res(write(s, "response", 8)));
    say("close %s", res(close(s)));
}

void shutwr_client(void)
{
    int fd = connect_one();
    say("write %s", res(write(fd, "request", 7)));
    say("shutdown SHUT_WR %s", res(shutdown(fd, SHUT_WR)));
    say("send after SHUT_WR %s", res(send(fd, "x", 1, MSG_NOSIGNAL)));
    char b[16];
    say("read_full %s", got(read_full(fd, b, 8), b));
    say("read at end %s", res(read(fd, b, sizeof b)));
    struct pollfd p = {fd, POLLIN | POLLOUT | POLLRDHUP, 0};
    say_poll("poll", &p, 0);
    say("shutdown SHUT_WR again %s", res(shutdown(fd, SHUT_WR)));
    close(fd);
}

void shutmisc_server(void)
{
    int s = accept_one();
    char b[16];
    sync_expect('g');
    say("shutdown SHUT_RDWR %s", res(shutdown(s, SHUT_RDWR)));
    say("read after SHUT_RDWR %s", res(read(s, b, sizeof b)));
    say("send after SHUT_RDWR %s", res(send(s, "x", 1, MSG_NOSIGNAL)));
    struct pollfd p = {s, POLLIN | POLLOUT | POLLRDHUP, 0};
    say_poll("poll", &p, 0);
    sync_expect('d');
    close(s);
}

void shutmisc_client(void)
{
    int s = tcp_socket(0);
    say("shutdown on an unconnected socket %s", res(shutdown(s, SHUT_WR)));
    close(s);
    int fd = connect_one();
    say("shutdown with how 99 %s", res(shutdown(fd, 99)));
    sync_send('g');
    char b[16];
    say("read (peer shut down both ways) %s", res(read(fd, b, sizeof b)));
    say("shutdown SHUT_RD %s", res(shutdown(fd, SHUT_RD)));
    say("read after own SHUT_RD %s", res(read(fd, b, sizeof b)));
    sync_send('d');
    close(fd);
}

void unread_server(void)
{
    int s = accept_one();
    char b[1000];
    memset(b, 'u', sizeof b);
    say("write %s", res(write(s, b, sizeof b)));
    sync_expect('c');
    struct pollfd p = {s, POLLIN, 0};
    say_poll("poll", &p, 5000);
    say("read %s", res(read(s, b, sizeof b)));
    say("read again %s", res(read(s, b, sizeof b)));
    say("send %s", res(send(s, "x", 1, MSG_NOSIGNAL)));
    close(s);
}

void unread_client(void)
{
    int fd = connect_one();
    struct pollfd p = {fd, POLLIN, 0};
    say_poll("poll", &p, 5000);
    say("close with unread data %s", res(close(fd)));
    sync_send('c');
}

void linger_server(void)
{
    int s = accept_one();
    char b[16];
    say("read_full %s", got(read_full(s, b, 2), b));
    sync_expect('c');
    say("read %s", res(read(s, b, sizeof b)));
    say("read again %s", res(read(s, b, sizeof b)));
    close(s);
}

void linger_client(void)
{
    int fd = connect_one();
    struct linger lg = {1, 0};
    say("SO_LINGER {1,0} %s", res(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg)));
    memset(&lg, 0xff, sizeof lg);
    socklen_t l = sizeof lg;
    const char *r = res(getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &l));
    say("getsockopt SO_LINGER %s onoff %d linger %d", r, lg.l_onoff, lg.l_linger);
    say("write %s", res(write(fd, "hi", 2)));
    say("close %s", res(close(fd)));
    sync_send('c');
}

/* sendmmsg and recvmmsg mixed with the other calls on a connection that carried data both
 * ways first (in ring mode under the library): the stream keeps its order. */
void mmsg_mixed_server(void)
{
    int s = accept_one();
    char b[64];
    warm_up_server(s);
    int in_order = 0;
    for (int round = 0; round < 20; round++) {
        /* Both sends are made while this end waits elsewhere (not in a socket call). */
        sync_expect('r');
        if (read_full(s, b, 8) != 8)
            die("read");
        in_order += memcmp(b, "mmsgwrit", 8) == 0;
        sync_send('k');
    }
    say("rounds in order (sendmmsg then write): %d of 20", in_order);
    sync_expect('a');
    struct iovec iv[2] = {{b, 4}, {b + 4, 4}};
    struct mmsghdr mm[2];
    memset(mm, 0, sizeof mm);
    mm[0].msg_hdr.msg_iov = &iv[0];
    mm[0].msg_hdr.msg_iovlen = 1;
    mm[1].msg_hdr.msg_iov = &iv[1];
    mm[1].msg_hdr.msg_iovlen = 1;
    int r = recvmmsg(s, mm, 2, MSG_WAITFORONE, NULL);
    int total = r > 0 ? (int)mm[0].msg_len + (r > 1 ? (int)mm[1].msg_len : 0) : r;
    if (r > 1 && mm[0].msg_len != 4)
        memmove(b + mm[0].msg_len, b + 4, mm[1].msg_len);
    say("recvmmsg, written bytes waiting: %s", got(total, b));
    say("close %s", res(close(s)));
}

void mmsg_mixed_client(void)
{
    int fd = connect_one();
    char b[64];
    warm_up_client(fd);
    for (int round = 0; round < 20; round++) {
        struct iovec iov = {(void *)"mmsg", 4};
        struct mmsghdr mm;
        memset(&mm, 0, sizeof mm);
        mm.msg_hdr.msg_iov = &iov;
        mm.msg_hdr.msg_iovlen = 1;
        if (sendmmsg(fd, &mm, 1, 0) != 1 || mm.msg_len != 4)
            die("sendmmsg");
        if (write_all(fd, "writ", 4) != 4)
            die("write");
        sync_send('r');
        sync_expect('k');
    }
    say("write %s", res(write(fd, "rest", 4)));
    sync_send('a');
    say("read at end %s", res(read(fd, b, sizeof b)));
    close(fd);
}
