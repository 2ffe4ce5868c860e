#include "sockconf.h"

/* ------------------------------------------------------------------------------------------
 * Cases: ioctl, names, options
 * ---------------------------------------------------------------------------------------- */

void fionread_server(void)
{
    int v = -1;
    say("FIONREAD on the listener %s", res(ioctl(C.lfd, FIONREAD, &v)));
    int s = accept_one();
    v = -1;
    say_fionread("FIONREAD on an idle connection", s);
    sync_expect('a');
    static unsigned char b[20000];
    pattern(b, 0, sizeof b, 5);
    say("write %s", res(write_all(s, b, sizeof b)));
    sync_expect('d');
    close(s);
}

void fionread_client(void)
{
    int fd = connect_one();
    int v = -1;
    say_fionread("FIONREAD", fd);
    sync_send('a');
    long long t0 = now_ms();
    do {
        if (ioctl(fd, FIONREAD, &v) < 0)
            die("FIONREAD");
        if (v >= 20000)
            break;
        sleep_ms(1);
    } while (now_ms() - t0 < 5000);
    say("FIONREAD reached %d", v);
    static unsigned char b[20000];
    say("read_full 5000 %s", res(read_full(fd, b, 5000)));
    say_fionread("FIONREAD", fd);
    say("read_full 15000 %s", res(read_full(fd, b + 5000, 15000)));
    say_fionread("FIONREAD", fd);
    say("data right: %s", yes(pattern_check(b, 0, sizeof b, 5) < 0));
    say("unknown ioctl %s", res(ioctl(fd, 0x54ff, &v)));
    sync_send('d');
    close(fd);
}

void names_server(void)
{
    struct names s, c;
    struct sockaddr_storage acc, lis;
    socklen_t al = sizeof acc, ll = sizeof lis;
    int fd = accept(C.lfd, (struct sockaddr *)&acc, &al);
    if (fd < 0)
        die("accept");
    s.sl = s.pl = sizeof s.sock;
    say("getsockname %s", res(getsockname(fd, (struct sockaddr *)&s.sock, &s.sl)));
    say("getpeername %s", res(getpeername(fd, (struct sockaddr *)&s.peer, &s.pl)));
    getsockname(C.lfd, (struct sockaddr *)&lis, &ll);
    sync_wait_buf(&c, sizeof c);
    say("own name %s, peer %s", addr_str(&s.sock, s.sl), addr_str(&s.peer, s.pl));
    say("accept's address == getpeername: %s", yes(al == s.pl && same_addr(&acc, &s.peer)));
    say("listener's port == getsockname's: %s", yes(port_of(&lis) == port_of(&s.sock)));
    say("client's getsockname == our getpeername: %s",
        yes(c.sl == s.pl && same_addr(&c.sock, &s.peer)));
    say("client's getpeername == our getsockname: %s",
        yes(c.pl == s.sl && same_addr(&c.peer, &s.sock)));
    say("ports non-zero: %s", yes(port_of(&s.sock) && port_of(&s.peer)));
    close(fd);
}

void names_client(void)
{
    int u = tcp_socket(0);
    struct sockaddr_storage ss;
    socklen_t l = sizeof ss;
    say("getpeername unconnected %s", res(getpeername(u, (struct sockaddr *)&ss, &l)));
    l = sizeof ss;
    const char *r = res(getsockname(u, (struct sockaddr *)&ss, &l));
    say("getsockname unbound %s port %d", r, port_of(&ss));
    close(u);
    int fd = connect_one();
    struct names c;
    c.sl = c.pl = sizeof c.sock;
    say("getsockname %s", res(getsockname(fd, (struct sockaddr *)&c.sock, &c.sl)));
    say("getpeername %s", res(getpeername(fd, (struct sockaddr *)&c.peer, &c.pl)));
    say("own name %s, peer %s", addr_str(&c.sock, c.sl), addr_str(&c.peer, c.pl));
    socklen_t small = 4;
    r = res(getsockname(fd, (struct sockaddr *)&ss, &small));
    say("getsockname into 4 bytes %s, length reported %u", r, (unsigned)small);
    sync_send_buf(&c, sizeof c);
    close(fd);
}

void sockopt_server(void)
{
    int v = -1;
    socklen_t l = sizeof v;
    const char *r = res(getsockopt(C.lfd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l));
    say("SO_ACCEPTCONN on the listener %s value %d", r, v);
    int s = accept_one();
    char b[8];
    say("read_full %s", got(read_full(s, b, 4), b));
    say("write %s", res(write(s, b, 4)));
    say("read at end %s", res(read(s, b, sizeof b)));
    close(s);
}

static int getint(int fd, int level, int opt, int *v)
{
    socklen_t l = sizeof *v;
    *v = -1;
    return getsockopt(fd, level, opt, v, &l);
}

/* Echoes 3-byte messages until the client closes. */
void echo_until_eof_server(void)
{
    int s = accept_one();
    char b[8];
    int echoed = 0;
    while (read_full(s, b, 3) == 3 && write_all(s, b, 3) == 3)
        echoed++;
    say("echoed %d messages", echoed);
    close(s);
}

/* TCP_NODELAY as the program set it, also after traffic (the library keeps Nagle's
 * algorithm off in the kernel socket of an accelerated connection, and must report the
 * program's setting), including short option lengths. */
void nodelay_client(void)
{
    int fd = connect_one();
    int v, one = 1, zero = 0;
    int r = getint(fd, IPPROTO_TCP, TCP_NODELAY, &v);
    say("TCP_NODELAY %s value %d", res(r), v);
    say("round trip %s", roundtrip(fd, fd, "abc") ? "ok" : "FAILED");
    r = getint(fd, IPPROTO_TCP, TCP_NODELAY, &v);
    say("after traffic: TCP_NODELAY %s value %d", res(r), v);
    say("set TCP_NODELAY 1 %s", res(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one)));
    say("round trip %s", roundtrip(fd, fd, "def") ? "ok" : "FAILED");
    r = getint(fd, IPPROTO_TCP, TCP_NODELAY, &v);
    say("TCP_NODELAY %s value %d", res(r), v);
    say("set TCP_NODELAY 0 %s", res(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &zero, sizeof zero)));
    r = getint(fd, IPPROTO_TCP, TCP_NODELAY, &v);
    say("TCP_NODELAY %s value %d", res(r), v);
    for (int i = 0; i < 20; i++)
        if (!roundtrip(fd, fd, "ghi")) {
            say("round trip %d FAILED", i);
            break;
        }
    say("set TCP_NODELAY with 2 bytes %s", res(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, 2)));
    say("set TCP_NODELAY 1 again %s", res(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one)));
    short half = -1;
    socklen_t l = sizeof half;
    r = getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &half, &l);
    say("TCP_NODELAY into 2 bytes %s value %d length %u", res(r), half, (unsigned)l);
    say("close %s", res(close(fd)));
}

/* A one-way stream of small writes: the peer's bytes never come, so the kernel socket keeps
 * Nagle's algorithm as the program left it (the library forces TCP_NODELAY only once the
 * peer's bytes may come through its ring). Asked with the raw system call, which sees the
 * kernel socket itself. */
void nagle_one_way_server(void)
{
    int s = accept_one();
    static char b[65536];
    uint64_t total = 0;
    ssize_t r;
    while ((r = read(s, b, sizeof b)) > 0)
        total += (uint64_t)r;
    say("read %llu bytes, then %s", (unsigned long long)total, res(r));
    close(s);
}

void nagle_one_way_client(void)
{
    int fd = connect_one();
    bool ok = true;
    for (int i = 0; i < 2000 && ok; i++)
        ok = write(fd, "0123456789", 10) == 10;
    say("2000 writes of 10 bytes %s", ok ? "ok" : "FAILED");
    int v = -1;
    socklen_t l = sizeof v;
    long r = syscall(SYS_getsockopt, fd, IPPROTO_TCP, TCP_NODELAY, &v, &l);
    say("the kernel socket's TCP_NODELAY %s value %d", res((int)r), v);
    say("close %s", res(close(fd)));
}

void sockopt_client(void)
{
    int fd = connect_one();
    int v, one = 1, zero = 0;
    int r = getint(fd, IPPROTO_TCP, TCP_NODELAY, &v);
    say("TCP_NODELAY %s value %d", res(r), v);
    say("set TCP_NODELAY 1 %s", res(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one)));
    r = getint(fd, IPPROTO_TCP, TCP_NODELAY, &v);
    say("TCP_NODELAY %s value %d", res(r), v);
    say("set TCP_NODELAY 0 %s", res(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &zero, sizeof zero)));
    r = getint(fd, IPPROTO_TCP, TCP_NODELAY, &v);
    say("TCP_NODELAY %s value %d", res(r), v);
    r = getint(fd, SOL_SOCKET, SO_KEEPALIVE, &v);
    say("SO_KEEPALIVE %s value %d", res(r), v);
    say("set SO_KEEPALIVE 1 %s", res(setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one)));
    r = getint(fd, SOL_SOCKET, SO_KEEPALIVE, &v);
    say("SO_KEEPALIVE %s value %d", res(r), v);
    int sz = 65536;
    say("set SO_RCVBUF 64K %s", res(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz)));
    r = getint(fd, SOL_SOCKET, SO_RCVBUF, &v);
    say("SO_RCVBUF %s %s", res(r), v >= 65536 ? "ok" : "TOO SMALL");
    say("set SO_SNDBUF 64K %s", res(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz)));
    r = getint(fd, SOL_SOCKET, SO_SNDBUF, &v);
    say("SO_SNDBUF %s %s", res(r), v >= 65536 ? "ok" : "TOO SMALL");
    r = getint(fd, SOL_SOCKET, SO_TYPE, &v);
    say("SO_TYPE %s %s", res(r), v == SOCK_STREAM ? "SOCK_STREAM" : "other");
    r = getint(fd, SOL_SOCKET, SO_DOMAIN, &v);
    say("SO_DOMAIN %s %s", res(r), v == AF_INET ? "AF_INET" : v == AF_INET6 ? "AF_INET6" : "other");
    r = getint(fd, SOL_SOCKET, SO_PROTOCOL, &v);
    say("SO_PROTOCOL %s %s", res(r), v == IPPROTO_TCP ? "IPPROTO_TCP" : "other");
    r = getint(fd, SOL_SOCKET, SO_ACCEPTCONN, &v);
    say("SO_ACCEPTCONN %s value %d", res(r), v);
    r = getint(fd, SOL_SOCKET, SO_ERROR, &v);
    say("SO_ERROR %s value %d", res(r), v);
    r = getint(fd, IPPROTO_TCP, TCP_MAXSEG, &v);
    say("TCP_MAXSEG %s %s", res(r), v > 0 ? "> 0" : "not positive");
    struct tcp_info ti;
    socklen_t tl = sizeof ti;
    memset(&ti, 0, sizeof ti);
    r = getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl);
    say("TCP_INFO %s state %s", res(r), ti.tcpi_state == TCP_ESTABLISHED ? "ESTABLISHED" : "other");
    r = getint(fd, IPPROTO_TCP, 9999, &v);
    say("unknown TCP option %s", res(r));
    socklen_t tiny = 0;
    const char *rs = res(getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &tiny));
    say("SO_TYPE into 0 bytes %s length %u", rs, (unsigned)tiny);
    say("set SO_RCVBUF with a short length %s", res(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, 2)));
    say("write %s", res(write(fd, "opts", 4)));
    char b[8];
    say("read_full %s", got(read_full(fd, b, 4), b));
    close(fd);
}
