/* UDP call sequences whose transcript must not depend on whether liblanes_sockets.so is
 * preloaded (crates/lanes-sockets/tests/udp.rs runs it with and without the library and
 * compares). Each case prints return values, errno names, lengths, flags, checksums and
 * source addresses relative to the sockets involved (ports change from run to run).
 *
 * usage: udpconf [CASE...]     all cases, or the ones named
 *        udpconf --plain-sender HOST PORT COUNT TAG   (a sender re-executed without the
 *                                                       library, for the mixed case)
 *        udpconf --plain-member GROUP PORT FD         (a group member without the library,
 *                                                       for the mcast-mixed case)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *self_path;

static const char *ename(int e) {
    switch (e) {
    case 0: return "0";
    case EAGAIN: return "EAGAIN";
    case EINTR: return "EINTR";
    case EMSGSIZE: return "EMSGSIZE";
    case ECONNREFUSED: return "ECONNREFUSED";
    case EDESTADDRREQ: return "EDESTADDRREQ";
    case EINVAL: return "EINVAL";
    case ENOTCONN: return "ENOTCONN";
    case EAFNOSUPPORT: return "EAFNOSUPPORT";
    case ENETUNREACH: return "ENETUNREACH";
    case EBADF: return "EBADF";
    case EADDRINUSE: return "EADDRINUSE";
    case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
    case ENOBUFS: return "ENOBUFS";
    case ENODEV: return "ENODEV";
    default: return strerror(e);
    }
}

#define SHOW(what, expr)                                                                  \
    do {                                                                                  \
        errno = 0;                                                                        \
        long r_ = (long)(expr);                                                           \
        printf("%s = %ld%s%s\n", what, r_, r_ < 0 ? " " : "", r_ < 0 ? ename(errno) : ""); \
    } while (0)

static uint32_t sum(const void *p, size_t n) {
    const unsigned char *b = p;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 16777619u;
    return h;
}

static void fill(char *b, size_t n, int seed) {
    for (size_t i = 0; i < n; i++) b[i] = (char)(i * 7 + seed);
}

static int udp(int family) {
    int fd = socket(family, SOCK_DGRAM, 0);
    if (fd < 0) { perror("socket"); exit(2); }
    return fd;
}

static void bind_to(int fd, int family, const char *host) {
    struct sockaddr_storage st; memset(&st, 0, sizeof st);
    socklen_t len;
    if (family == AF_INET) {
        struct sockaddr_in *a = (void *)&st; a->sin_family = AF_INET; inet_pton(AF_INET, host, &a->sin_addr);
        len = sizeof *a;
    } else {
        struct sockaddr_in6 *a = (void *)&st; a->sin6_family = AF_INET6; inet_pton(AF_INET6, host, &a->sin6_addr);
        len = sizeof *a;
    }
    if (bind(fd, (void *)&st, len) != 0) { perror("bind"); exit(2); }
}

static struct sockaddr_storage name(int fd, socklen_t *len) {
    struct sockaddr_storage st; memset(&st, 0, sizeof st);
    socklen_t l = sizeof st;
    getsockname(fd, (void *)&st, &l);
    if (len) *len = l;
    return st;
}

static int port_of(const struct sockaddr_storage *st) {
    if (st->ss_family == AF_INET) return ntohs(((struct sockaddr_in *)st)->sin_port);
    return ntohs(((struct sockaddr_in6 *)st)->sin6_port);
}

/* Where to send to reach fd, spelled for a sender of `family` (an IPv4 address as
 * IPv4-mapped for an IPv6 sender). */
static struct sockaddr_storage target(int fd, int family, const char *host, socklen_t *len) {
    struct sockaddr_storage me = name(fd, NULL), st;
    memset(&st, 0, sizeof st);
    if (family == AF_INET) {
        struct sockaddr_in *a = (void *)&st; a->sin_family = AF_INET; a->sin_port = htons(port_of(&me));
        inet_pton(AF_INET, host, &a->sin_addr); *len = sizeof *a;
    } else {
        struct sockaddr_in6 *a = (void *)&st; a->sin6_family = AF_INET6; a->sin6_port = htons(port_of(&me));
        inet_pton(AF_INET6, host, &a->sin6_addr); *len = sizeof *a;
    }
    return st;
}

/* A source address as the receiver got it, relative to the sockets that may have sent it. */
static void show_src(const char *what, const struct sockaddr_storage *src, socklen_t len, int *senders, int nsenders) {
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (src->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)src; inet_ntop(AF_INET, &a->sin_addr, host, sizeof host); port = ntohs(a->sin_port);
    } else if (src->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)src; inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host); port = ntohs(a->sin6_port);
        printf("%s flowinfo=%u scope=%u ", what, a->sin6_flowinfo, a->sin6_scope_id);
    }
    int who = -1;
    for (int i = 0; i < nsenders; i++) {
        struct sockaddr_storage s = name(senders[i], NULL);
        if (port_of(&s) == port) who = i;
    }
    printf("%s family=%d len=%u host=%s port=sender%d\n", what, src->ss_family, (unsigned)len, host, who);
}

static void recv_one(const char *what, int fd, size_t buflen, int flags, int *senders, int n) {
    char buf[70000];
    struct sockaddr_storage src; memset(&src, 0, sizeof src);
    socklen_t slen = sizeof src;
    errno = 0;
    ssize_t r = recvfrom(fd, buf, buflen, flags, (void *)&src, &slen);
    if (r < 0) { printf("%s = -1 %s\n", what, ename(errno)); return; }
    size_t got = (size_t)r < buflen ? (size_t)r : buflen;
    printf("%s = %zd sum=%08x\n", what, r, sum(buf, got));
    show_src(what, &src, slen, senders, n);
}

static void send_n(int fd, const struct sockaddr_storage *to, socklen_t tolen, size_t len, int seed) {
    char buf[70000];
    fill(buf, len, seed);
    errno = 0;
    ssize_t r = sendto(fd, buf, len, 0, (const void *)to, tolen);
    printf("sendto %zu = %zd%s%s\n", len, r, r < 0 ? " " : "", r < 0 ? ename(errno) : "");
}

/* ---- cases ------------------------------------------------------------------------------ */

static void basic(int family, const char *host) {
    int r = udp(family), s = udp(family);
    bind_to(r, family, host);
    socklen_t tl; struct sockaddr_storage to = target(r, family, host, &tl);
    recv_one("empty", r, 100, MSG_DONTWAIT, &s, 1);
    size_t sizes[] = {0, 1, 5, 197, 1000, 1472, 9000, 65000};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) send_n(s, &to, tl, sizes[i], (int)i);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) recv_one("recvfrom", r, 70000, MSG_DONTWAIT, &s, 1);
    recv_one("drained", r, 100, MSG_DONTWAIT, &s, 1);
    SHOW("too large", sendto(s, (char[65536]){0}, family == AF_INET ? 65508 : 65528, 0, (void *)&to, tl));
    close(r); close(s);
}

static void case_basic4(void) { basic(AF_INET, "127.0.0.1"); }
static void case_basic6(void) { basic(AF_INET6, "::1"); }

static void case_trunc_peek(void) {
    int r = udp(AF_INET), s = udp(AF_INET);
    bind_to(r, AF_INET, "127.0.0.1");
    socklen_t tl; struct sockaddr_storage to = target(r, AF_INET, "127.0.0.1", &tl);
    recv_one("first", r, 10, MSG_DONTWAIT, &s, 1);
    for (int i = 0; i < 6; i++) send_n(s, &to, tl, 100 + i, i);
    recv_one("short", r, 10, MSG_DONTWAIT, &s, 1);
    recv_one("trunc flag", r, 10, MSG_DONTWAIT | MSG_TRUNC, &s, 1);
    recv_one("peek", r, 200, MSG_DONTWAIT | MSG_PEEK, &s, 1);
    recv_one("peek trunc", r, 3, MSG_DONTWAIT | MSG_PEEK | MSG_TRUNC, &s, 1);
    int n = -1;
    SHOW("FIONREAD", ioctl(r, FIONREAD, &n));
    printf("FIONREAD n = %d\n", n);
    recv_one("after peek", r, 200, MSG_DONTWAIT, &s, 1);
    char buf[64];
    struct iovec iov[2] = {{buf, 8}, {buf + 8, 8}};
    char nm[4];
    struct msghdr m = {.msg_name = nm, .msg_namelen = sizeof nm, .msg_iov = iov, .msg_iovlen = 2};
    m.msg_flags = 12345;
    SHOW("recvmsg short name", recvmsg(r, &m, MSG_DONTWAIT));
    printf("msg_namelen=%u msg_flags=%#x family=%d sum=%08x\n", (unsigned)m.msg_namelen, m.msg_flags, (int)(unsigned char)nm[0] | (int)(unsigned char)nm[1] << 8, sum(buf, 16));
    struct msghdr m2 = {.msg_name = NULL, .msg_namelen = 77, .msg_iov = iov, .msg_iovlen = 2};
    SHOW("recvmsg no name", recvmsg(r, &m2, MSG_DONTWAIT));
    printf("msg_namelen=%u msg_flags=%#x\n", (unsigned)m2.msg_namelen, m2.msg_flags);
    SHOW("read", read(r, buf, sizeof buf));
    SHOW("FIONREAD empty", ioctl(r, FIONREAD, &n));
    printf("FIONREAD n = %d\n", n);
    close(r); close(s);
}

static void case_connected(void) {
    int r = udp(AF_INET), s = udp(AF_INET), other = udp(AF_INET);
    bind_to(r, AF_INET, "127.0.0.1");
    bind_to(s, AF_INET, "127.0.0.1");
    bind_to(other, AF_INET, "127.0.0.1");
    socklen_t tl, sl; struct sockaddr_storage to = target(r, AF_INET, "127.0.0.1", &tl);
    struct sockaddr_storage back = target(s, AF_INET, "127.0.0.1", &sl);
    int senders[] = {s, other};
    SHOW("send unconnected", send(s, "x", 1, 0));
    SHOW("connect s", connect(s, (void *)&to, tl));
    SHOW("connect r", connect(r, (void *)&back, sl));
    recv_one("empty", r, 10, MSG_DONTWAIT, senders, 2);
    SHOW("send", send(s, "hello", 5, 0));
    SHOW("write", write(s, "world!", 6));
    struct iovec iov[3] = {{"ab", 2}, {"", 0}, {"cde", 3}};
    SHOW("writev", writev(s, iov, 3));
    send_n(other, &to, tl, 7, 1); /* filtered by the kernel: r is connected to s */
    char buf[32];
    SHOW("recv", recv(r, buf, sizeof buf, MSG_DONTWAIT));
    SHOW("read", read(r, buf, sizeof buf));
    struct iovec in[2] = {{buf, 1}, {buf + 1, 10}};
    SHOW("readv", readv(r, in, 2));
    printf("readv sum=%08x\n", sum(buf, 5));
    recv_one("not from other", r, 10, MSG_DONTWAIT, senders, 2);
    SHOW("sendto explicit", sendto(s, "zz", 2, 0, (void *)&to, tl));
    recv_one("explicit", r, 10, MSG_DONTWAIT, senders, 2);
    close(r);
    /* The receiver is gone: the kernel answers with ICMP port unreachable. */
    SHOW("send after peer closed", send(s, "a", 1, 0));
    SHOW("send again", send(s, "b", 1, 0));
    SHOW("recv error", recv(s, buf, sizeof buf, MSG_DONTWAIT));
    close(s); close(other);
}

/* A receiver that connects after a sender found it: that sender's datagrams stop arriving. */
static void case_connect_later(void) {
    int r = udp(AF_INET), s = udp(AF_INET), other = udp(AF_INET);
    bind_to(r, AF_INET, "127.0.0.1");
    bind_to(s, AF_INET, "127.0.0.1");
    int senders[] = {s, other};
    socklen_t tl, sl; struct sockaddr_storage to = target(r, AF_INET, "127.0.0.1", &tl);
    struct sockaddr_storage back = target(s, AF_INET, "127.0.0.1", &sl);
    recv_one("empty", r, 10, MSG_DONTWAIT, senders, 2);
    send_n(other, &to, tl, 3, 1);
    recv_one("before connect", r, 10, MSG_DONTWAIT, senders, 2);
    SHOW("connect r", connect(r, (void *)&back, sl));
    send_n(other, &to, tl, 4, 2);
    send_n(s, &to, tl, 5, 3);
    recv_one("after connect", r, 10, MSG_DONTWAIT, senders, 2);
    recv_one("nothing more", r, 10, MSG_DONTWAIT, senders, 2);
    struct sockaddr_in unspec = {.sin_family = AF_UNSPEC};
    SHOW("disconnect r", connect(r, (void *)&unspec, sizeof unspec));
    send_n(other, &to, tl, 6, 4);
    recv_one("after disconnect", r, 10, MSG_DONTWAIT, senders, 2);
    close(r); close(s); close(other);
}

static void case_dual_stack(void) {
    int r6 = udp(AF_INET6), s4 = udp(AF_INET), s6 = udp(AF_INET6);
    int off = 0;
    setsockopt(r6, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    bind_to(r6, AF_INET6, "::");
    int senders[] = {s4, s6};
    recv_one("empty", r6, 10, MSG_DONTWAIT, senders, 2);
    socklen_t tl4, tl6, tlm;
    struct sockaddr_storage to4 = target(r6, AF_INET, "127.0.0.1", &tl4);
    struct sockaddr_storage to6 = target(r6, AF_INET6, "::1", &tl6);
    struct sockaddr_storage tom = target(r6, AF_INET6, "::ffff:127.0.0.1", &tlm);
    send_n(s4, &to4, tl4, 10, 1);
    send_n(s6, &to6, tl6, 11, 2);
    send_n(s6, &tom, tlm, 12, 3);
    for (int i = 0; i < 3; i++) recv_one("dual", r6, 100, MSG_DONTWAIT, senders, 2);
    /* v4-only receiver from an IPv6 sender through a mapped address */
    int r4 = udp(AF_INET);
    bind_to(r4, AF_INET, "127.0.0.1");
    recv_one("empty4", r4, 10, MSG_DONTWAIT, senders, 2);
    struct sockaddr_storage m4 = target(r4, AF_INET6, "::ffff:127.0.0.1", &tlm);
    send_n(s6, &m4, tlm, 13, 4);
    recv_one("mapped to v4", r4, 100, MSG_DONTWAIT, senders, 2);
    close(r6); close(s4); close(s6); close(r4);
}

static void case_mmsg(void) {
    int r = udp(AF_INET), s = udp(AF_INET);
    bind_to(r, AF_INET, "127.0.0.1");
    socklen_t tl; struct sockaddr_storage to = target(r, AF_INET, "127.0.0.1", &tl);
    recv_one("empty", r, 10, MSG_DONTWAIT, &s, 1);
    char data[5][32];
    struct iovec iov[5];
    struct mmsghdr out[5];
    memset(out, 0, sizeof out);
    for (int i = 0; i < 5; i++) {
        fill(data[i], 32, i);
        iov[i].iov_base = data[i]; iov[i].iov_len = 10 + i;
        out[i].msg_hdr.msg_iov = &iov[i]; out[i].msg_hdr.msg_iovlen = 1;
        out[i].msg_hdr.msg_name = &to; out[i].msg_hdr.msg_namelen = tl;
    }
    SHOW("sendmmsg", sendmmsg(s, out, 5, 0));
    for (int i = 0; i < 5; i++) printf("sent[%d].msg_len=%u\n", i, out[i].msg_len);
    char bufs[8][16];
    struct iovec riov[8];
    struct sockaddr_storage srcs[8];
    struct mmsghdr in[8];
    memset(in, 0, sizeof in);
    for (int i = 0; i < 8; i++) {
        riov[i].iov_base = bufs[i]; riov[i].iov_len = 12;
        in[i].msg_hdr.msg_iov = &riov[i]; in[i].msg_hdr.msg_iovlen = 1;
        in[i].msg_hdr.msg_name = &srcs[i]; in[i].msg_hdr.msg_namelen = sizeof srcs[i];
    }
    SHOW("recvmmsg", recvmmsg(r, in, 8, MSG_DONTWAIT, NULL));
    for (int i = 0; i < 5; i++) {
        printf("got[%d].msg_len=%u flags=%#x sum=%08x ", i, in[i].msg_len, in[i].msg_hdr.msg_flags, sum(bufs[i], in[i].msg_len < 12 ? in[i].msg_len : 12));
        show_src("from", &srcs[i], in[i].msg_hdr.msg_namelen, &s, 1);
    }
    SHOW("recvmmsg empty", recvmmsg(r, in, 8, MSG_DONTWAIT, NULL));
    close(r); close(s);
}

static void case_rcvbuf(void) {
    int sizes[] = {1, 5000};
    for (int k = 0; k < 2; k++) {
        int r = udp(AF_INET), s = udp(AF_INET);
        int want = 4096;
        setsockopt(r, SOL_SOCKET, SO_RCVBUF, &want, sizeof want);
        bind_to(r, AF_INET, "127.0.0.1");
        socklen_t tl; struct sockaddr_storage to = target(r, AF_INET, "127.0.0.1", &tl);
        recv_one("empty", r, 10, MSG_DONTWAIT, &s, 1);
        char buf[8192]; memset(buf, 1, sizeof buf);
        int ok = 0;
        for (int i = 0; i < 40; i++) ok += sendto(s, buf, sizes[k], 0, (void *)&to, tl) == sizes[k];
        int got = 0;
        while (recv(r, buf, sizeof buf, MSG_DONTWAIT) >= 0) got++;
        printf("size %d: sent ok %d, received %d\n", sizes[k], ok, got);
        close(r); close(s);
    }
}

static void case_readiness(void) {
    int r = udp(AF_INET), s = udp(AF_INET);
    bind_to(r, AF_INET, "127.0.0.1");
    socklen_t tl; struct sockaddr_storage to = target(r, AF_INET, "127.0.0.1", &tl);
    struct pollfd p = {r, POLLIN, 0};
    SHOW("poll empty", poll(&p, 1, 0));
    send_n(s, &to, tl, 3, 1);
    p.revents = 0;
    SHOW("poll", poll(&p, 1, 1000));
    printf("revents=%#x\n", p.revents);
    fd_set rs; FD_ZERO(&rs); FD_SET(r, &rs);
    struct timeval tv = {1, 0};
    SHOW("select", select(r + 1, &rs, NULL, NULL, &tv));
    printf("isset=%d\n", FD_ISSET(r, &rs));
    int lt = epoll_create1(0), et = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 42};
    SHOW("ctl lt", epoll_ctl(lt, EPOLL_CTL_ADD, r, &ev));
    ev.events = EPOLLIN | EPOLLET; ev.data.u64 = 43;
    SHOW("ctl et", epoll_ctl(et, EPOLL_CTL_ADD, r, &ev));
    struct epoll_event out[4];
    SHOW("lt wait", epoll_wait(lt, out, 4, 1000));
    printf("data=%llu events=%#x\n", (unsigned long long)out[0].data.u64, out[0].events);
    SHOW("et wait", epoll_wait(et, out, 4, 1000));
    printf("data=%llu events=%#x\n", (unsigned long long)out[0].data.u64, out[0].events);
    SHOW("et again", epoll_wait(et, out, 4, 0));
    SHOW("lt again", epoll_wait(lt, out, 4, 0));
    send_n(s, &to, tl, 4, 2);
    SHOW("et new datagram", epoll_wait(et, out, 4, 1000));
    recv_one("read", r, 100, MSG_DONTWAIT, &s, 1);
    recv_one("read", r, 100, MSG_DONTWAIT, &s, 1);
    SHOW("lt drained", epoll_wait(lt, out, 4, 0));
    p.revents = 0;
    SHOW("poll drained", poll(&p, 1, 0));
    /* A datagram sent while the wait sleeps wakes it. */
    pid_t pid = fork();
    if (pid == 0) {
        usleep(50000);
        sendto(s, "late", 4, 0, (void *)&to, tl);
        _exit(0);
    }
    SHOW("lt wait sleeping", epoll_wait(lt, out, 4, 5000));
    p.revents = 0;
    SHOW("poll after", poll(&p, 1, 0));
    recv_one("late", r, 100, MSG_DONTWAIT, &s, 1);
    waitpid(pid, NULL, 0);
    close(lt); close(et); close(r); close(s);
}

static void case_blocking(void) {
    int r = udp(AF_INET), s = udp(AF_INET);
    bind_to(r, AF_INET, "127.0.0.1");
    bind_to(s, AF_INET, "127.0.0.1");
    socklen_t tl; struct sockaddr_storage to = target(r, AF_INET, "127.0.0.1", &tl);
    recv_one("empty", r, 10, MSG_DONTWAIT, &s, 1);
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; i < 200; i++) {
            char b[64]; fill(b, sizeof b, i);
            sendto(s, b, 1 + i % 60, 0, (void *)&to, tl);
            if (i % 50 == 0) usleep(20000);
        }
        _exit(0);
    }
    uint32_t h = 0; int n = 0, bytes = 0;
    for (int i = 0; i < 200; i++) {
        char b[64];
        ssize_t got = recv(r, b, sizeof b, 0);
        if (got < 0) { printf("recv %d = -1 %s\n", i, ename(errno)); break; }
        h = h * 31 + sum(b, got); n++; bytes += got;
    }
    printf("blocking: %d datagrams, %d bytes, sum=%08x\n", n, bytes, h);
    waitpid(pid, NULL, 0);
    struct timeval tv = {0, 100000};
    SHOW("SO_RCVTIMEO", setsockopt(r, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));
    char b[8];
    SHOW("recv timeout", recv(r, b, sizeof b, 0));
    int fl = fcntl(r, F_GETFL);
    fcntl(r, F_SETFL, fl | O_NONBLOCK);
    SHOW("recv nonblocking", recv(r, b, sizeof b, 0));
    close(r); close(s);
}

static void case_pktinfo(void) {
    int r = udp(AF_INET), s = udp(AF_INET);
    bind_to(r, AF_INET, "127.0.0.1");
    socklen_t tl; struct sockaddr_storage to = target(r, AF_INET, "127.0.0.1", &tl);
    /* Set before anything arrives, as programs do (dnsmasq): the socket stays kernel. */
    int on = 1;
    SHOW("IP_PKTINFO", setsockopt(r, IPPROTO_IP, IP_PKTINFO, &on, sizeof on));
    recv_one("empty", r, 10, MSG_DONTWAIT, &s, 1);
    send_n(s, &to, tl, 5, 1);
    send_n(s, &to, tl, 6, 2);
    for (int i = 0; i < 2; i++) {
        char buf[16], ctl[256];
        struct iovec iov = {buf, sizeof buf};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
        SHOW("recvmsg", recvmsg(r, &m, MSG_DONTWAIT));
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) printf("cmsg level=%d type=%d\n", c->cmsg_level, c->cmsg_type);
    }
    close(r); close(s);
}

static void case_dup_fork(void) {
    int r = udp(AF_INET), s = udp(AF_INET);
    bind_to(r, AF_INET, "127.0.0.1");
    socklen_t tl; struct sockaddr_storage to = target(r, AF_INET, "127.0.0.1", &tl);
    recv_one("empty", r, 10, MSG_DONTWAIT, &s, 1);
    int d = dup(r);
    send_n(s, &to, tl, 20, 1);
    close(r);
    recv_one("via dup", d, 100, MSG_DONTWAIT, &s, 1);
    send_n(s, &to, tl, 21, 2);
    pid_t pid = fork();
    if (pid == 0) {
        recv_one("child", d, 100, MSG_DONTWAIT, &s, 1);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    recv_one("parent after child", d, 100, MSG_DONTWAIT, &s, 1);
    send_n(s, &to, tl, 22, 3);
    recv_one("parent", d, 100, MSG_DONTWAIT, &s, 1);
    close(d); close(s);
}

/* Datagrams of a sender without the library and of one with it, to one receiver: each
 * sender's in order, none lost. */
static void case_mixed(void) {
    int r = udp(AF_INET), s = udp(AF_INET);
    int big = 200000; /* the kernel doubles it: room for all 200, and a ring holds that much */
    setsockopt(r, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    bind_to(r, AF_INET, "127.0.0.1");
    socklen_t tl; struct sockaddr_storage to = target(r, AF_INET, "127.0.0.1", &tl);
    recv_one("empty", r, 10, MSG_DONTWAIT, &s, 1);
    char port[16]; snprintf(port, sizeof port, "%d", port_of(&to));
    pid_t pid = fork();
    if (pid == 0) {
        unsetenv("LD_PRELOAD");
        execl(self_path, self_path, "--plain-sender", "127.0.0.1", port, "100", "k", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 100; i++) {
        char b[16]; int n = snprintf(b, sizeof b, "r%d", i);
        sendto(s, b, n, 0, (void *)&to, tl);
        if (i % 10 == 0) usleep(1000);
    }
    int status;
    waitpid(pid, &status, 0);
    int next_k = 0, next_r = 0, bad = 0;
    for (;;) {
        char b[16];
        ssize_t n = recv(r, b, sizeof b - 1, MSG_DONTWAIT);
        if (n < 0) break;
        b[n] = 0;
        int v = atoi(b + 1);
        if (b[0] == 'k') { bad += v != next_k; next_k = v + 1; }
        else { bad += v != next_r; next_r = v + 1; }
    }
    printf("mixed: plain sender exit %d, k up to %d, r up to %d, out of order %d\n", WEXITSTATUS(status), next_k, next_r, bad);
    close(r); close(s);
}

/* Four sender processes against one receiver that sleeps now and then (so its ring turns
 * off and on): datagrams may be dropped when its buffer is full, never corrupted,
 * duplicated or reordered per sender. */
static void case_stress(void) {
    enum { SENDERS = 4, EACH = 20000 };
    int r = udp(AF_INET);
    int buf = 150000;
    setsockopt(r, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    bind_to(r, AF_INET, "127.0.0.1");
    socklen_t tl; struct sockaddr_storage to = target(r, AF_INET, "127.0.0.1", &tl);
    recv_one("empty", r, 10, MSG_DONTWAIT, NULL, 0);
    pid_t pids[SENDERS];
    for (int k = 0; k < SENDERS; k++) {
        pids[k] = fork();
        if (pids[k] == 0) {
            int s = udp(AF_INET);
            for (int i = 0; i < EACH; i++) {
                char b[1500];
                int len = 8 + (i * 37 + k * 11) % 1400;
                memcpy(b, &k, 4); memcpy(b + 4, &i, 4);
                fill(b + 8, len - 8, i + k);
                sendto(s, b, len, 0, (void *)&to, tl);
                if (i % 2000 == 0) usleep(2000);
            }
            for (int j = 0; j < 3; j++) {
                usleep(10000);
                char d[8] = "done"; d[4] = (char)k;
                sendto(s, d, 5, 0, (void *)&to, tl);
            }
            _exit(0);
        }
    }
    int next[SENDERS] = {0}, done = 0, corrupt = 0, reordered = 0, got = 0;
    while (done != (1 << SENDERS) - 1) {
        struct pollfd p = {r, POLLIN, 0};
        if (poll(&p, 1, 2000) <= 0) break; /* a sender's three "done" were all dropped */
        char b[1500], want[1500];
        ssize_t n = recv(r, b, sizeof b, 0);
        if (n == 5 && memcmp(b, "done", 4) == 0 && b[4] >= 0 && b[4] < SENDERS) { done |= 1 << b[4]; continue; }
        if (n < 8) { corrupt++; continue; }
        int k, i;
        memcpy(&k, b, 4); memcpy(&i, b + 4, 4);
        if (k < 0 || k >= SENDERS || n != 8 + (i * 37 + k * 11) % 1400) { corrupt++; continue; }
        fill(want, n - 8, i + k);
        corrupt += memcmp(b + 8, want, n - 8) != 0;
        reordered += i < next[k];
        next[k] = i + 1;
        if (++got % 5000 == 0) usleep(3000);
    }
    for (int k = 0; k < SENDERS; k++) waitpid(pids[k], NULL, 0);
    printf("stress: some received %d, corrupt %d, reordered or duplicated %d\n", got > 0, corrupt, reordered);
    close(r);
}

static int plain_sender(const char *host, int port, int count, const char *tag) {
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, host, &a.sin_addr);
    for (int i = 0; i < count; i++) {
        char b[16]; int n = snprintf(b, sizeof b, "%s%d", tag, i);
        if (sendto(s, b, n, 0, (void *)&a, sizeof a) != n) return 1;
        if (i % 10 == 0) usleep(1000);
    }
    return 0;
}

static int bind_port(int port) {
    int r = udp(AF_INET);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (bind(r, (void *)&a, sizeof a) != 0) { perror("bind"); exit(2); }
    return r;
}

/* A receiver killed (no close) and a new socket bound to its port at once: the next
 * datagram is the new socket's. */
static void case_killed_receiver(void) {
    int s = udp(AF_INET);
    int probe = bind_port(0);
    struct sockaddr_storage at = name(probe, NULL);
    int port = port_of(&at);
    close(probe);
    int ready[2];
    if (pipe(ready) != 0) exit(2);
    pid_t pid = fork();
    if (pid == 0) {
        int r = bind_port(port);
        char b[8];
        recv(r, b, sizeof b, MSG_DONTWAIT);
        if (write(ready[1], "r", 1) != 1) _exit(1);
        pause();
        _exit(0);
    }
    char c;
    if (read(ready[0], &c, 1) != 1) exit(2);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    send_n(s, (void *)&to, sizeof to, 10, 1);
    send_n(s, (void *)&to, sizeof to, 11, 2);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    int r2 = bind_port(port);
    send_n(s, (void *)&to, sizeof to, 12, 3);
    recv_one("new socket", r2, 100, MSG_DONTWAIT, &s, 1);
    recv_one("nothing else", r2, 100, MSG_DONTWAIT, &s, 1);
    close(r2); close(s); close(ready[0]); close(ready[1]);
}

/* Datagrams waiting for a socket that an exec'd image inherits are that image's. */
static void case_exec(void) {
    int r = udp(AF_INET), s = udp(AF_INET);
    bind_to(r, AF_INET, "127.0.0.1");
    socklen_t tl; struct sockaddr_storage to = target(r, AF_INET, "127.0.0.1", &tl);
    recv_one("empty", r, 10, MSG_DONTWAIT, &s, 1);
    for (int i = 0; i < 3; i++) send_n(s, &to, tl, 30 + i, i);
    char fd[16]; snprintf(fd, sizeof fd, "%d", r);
    pid_t pid = fork();
    if (pid == 0) {
        execl(self_path, self_path, "--exec-reader", fd, (char *)NULL);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    printf("reader exit %d\n", WEXITSTATUS(status));
    send_n(s, &to, tl, 40, 9);
    recv_one("parent again", r, 100, MSG_DONTWAIT, &s, 1);
    close(r); close(s);
}

static int exec_reader(int fd) {
    for (int i = 0; i < 4; i++) recv_one("inherited", fd, 100, MSG_DONTWAIT, NULL, 0);
    return 0;
}

/* Leaves a receiving socket open at exit, so the test can read what its record counted. */
static void case_leave_record(void) {
    int r = udp(AF_INET), s = udp(AF_INET);
    bind_to(r, AF_INET, "127.0.0.1");
    socklen_t tl; struct sockaddr_storage to = target(r, AF_INET, "127.0.0.1", &tl);
    recv_one("empty", r, 10, MSG_DONTWAIT, &s, 1);
    for (int i = 0; i < 10; i++) send_n(s, &to, tl, 8, i);
    for (int i = 0; i < 10; i++) recv_one("got", r, 10, MSG_DONTWAIT, &s, 1);
    fflush(stdout);
    _exit(0);
}

/* ---- multicast -------------------------------------------------------------------------- */

static int free_port(void) {
    int p = bind_port(0);
    struct sockaddr_storage at = name(p, NULL);
    close(p);
    return port_of(&at);
}

/* A socket of `family` bound to host:port beside others (SO_REUSEADDR). */
static int member(int family, const char *host, int port) {
    int fd = udp(family), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_storage st; memset(&st, 0, sizeof st);
    socklen_t len;
    if (family == AF_INET) {
        struct sockaddr_in *a = (void *)&st; a->sin_family = AF_INET; a->sin_port = htons(port);
        inet_pton(AF_INET, host, &a->sin_addr); len = sizeof *a;
    } else {
        struct sockaddr_in6 *a = (void *)&st; a->sin6_family = AF_INET6; a->sin6_port = htons(port);
        inet_pton(AF_INET6, host, &a->sin6_addr); len = sizeof *a;
    }
    if (bind(fd, (void *)&st, len) != 0) { perror("bind member"); exit(2); }
    return fd;
}

static int mreq4(int fd, int opt, const char *group) {
    struct ip_mreq m; memset(&m, 0, sizeof m);
    inet_pton(AF_INET, group, &m.imr_multiaddr);
    return setsockopt(fd, IPPROTO_IP, opt, &m, sizeof m);
}

static int mreq4_source(int fd, int opt, const char *group, struct in_addr source) {
    struct ip_mreq_source m; memset(&m, 0, sizeof m);
    inet_pton(AF_INET, group, &m.imr_multiaddr);
    m.imr_sourceaddr = source;
    return setsockopt(fd, IPPROTO_IP, opt, &m, sizeof m);
}

static int mreq6(int fd, int opt, const char *group) {
    struct ipv6_mreq m; memset(&m, 0, sizeof m);
    inet_pton(AF_INET6, group, &m.ipv6mr_multiaddr);
    return setsockopt(fd, IPPROTO_IPV6, opt, &m, sizeof m);
}

static struct sockaddr_storage group_at(int family, const char *group, int port, socklen_t *len) {
    struct sockaddr_storage st; memset(&st, 0, sizeof st);
    if (family == AF_INET) {
        struct sockaddr_in *a = (void *)&st; a->sin_family = AF_INET; a->sin_port = htons(port);
        inet_pton(AF_INET, group, &a->sin_addr); *len = sizeof *a;
    } else {
        struct sockaddr_in6 *a = (void *)&st; a->sin6_family = AF_INET6; a->sin6_port = htons(port);
        inet_pton(AF_INET6, group, &a->sin6_addr); *len = sizeof *a;
    }
    return st;
}

/* The source address the kernel gives a datagram to the group (the route's interface). */
static struct in_addr route_source4(const char *group) {
    int p = udp(AF_INET);
    socklen_t l; struct sockaddr_storage g = group_at(AF_INET, group, 9, &l);
    if (connect(p, (void *)&g, l) != 0) { perror("connect probe"); exit(2); }
    struct sockaddr_storage me = name(p, NULL);
    close(p);
    return ((struct sockaddr_in *)&me)->sin_addr;
}

/* Everything waiting on fd: count, sizes and contents in order, the first source. */
static void drain(const char *what, int fd, int *senders, int n) {
    char buf[70000];
    uint32_t h = 2166136261u;
    int count = 0;
    struct sockaddr_storage first; memset(&first, 0, sizeof first);
    socklen_t flen = 0;
    for (;;) {
        struct sockaddr_storage src; socklen_t slen = sizeof src;
        ssize_t r = recvfrom(fd, buf, sizeof buf, MSG_DONTWAIT, (void *)&src, &slen);
        if (r < 0) {
            printf("%s: %d datagrams sum=%08x, then %s\n", what, count, h, ename(errno));
            break;
        }
        if (count++ == 0) { first = src; flen = slen; }
        h = (h ^ (uint32_t)r) * 16777619u;
        h = (h ^ sum(buf, r)) * 16777619u;
    }
    if (count > 0) show_src(what, &first, flen, senders, n);
}

static void send_group(int s, const struct sockaddr_storage *to, socklen_t tl, int count, int seed) {
    int ok = 0;
    for (int i = 0; i < count; i++) {
        char buf[2000];
        size_t len = (size_t)(1 + (i * 137 + seed) % 1500);
        fill(buf, len, seed + i);
        ok += sendto(s, buf, len, 0, (const void *)to, tl) == (ssize_t)len;
    }
    printf("sent %d of %d\n", ok, count);
}

/* IPv4 groups: membership errors, who gets what (bound to the group or the wildcard,
 * joined or not, IP_MULTICAST_ALL), loopback off, TTL 0, source filters, leaving. */
static void case_mcast4(void) {
    const char *G = "239.255.42.1", *G2 = "239.255.42.2";
    int port = free_port();
    int r[4] = {member(AF_INET, G, port), member(AF_INET, "0.0.0.0", port), member(AF_INET, "0.0.0.0", port),
                member(AF_INET, "0.0.0.0", port)};
    int zero = 0, one = 1, v = -1;
    socklen_t vl = sizeof v;
    SHOW("r3 IP_MULTICAST_ALL 0", setsockopt(r[3], IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof zero));
    SHOW("r0 join", mreq4(r[0], IP_ADD_MEMBERSHIP, G));
    SHOW("r0 join again", mreq4(r[0], IP_ADD_MEMBERSHIP, G));
    SHOW("r0 drop a group not joined", mreq4(r[0], IP_DROP_MEMBERSHIP, G2));
    SHOW("r0 join a unicast address", mreq4(r[0], IP_ADD_MEMBERSHIP, "10.1.2.3"));
    SHOW("r1 join", mreq4(r[1], IP_ADD_MEMBERSHIP, G));
    int many = udp(AF_INET), joined = 0, e = 0;
    for (int i = 0; i < 100; i++) {
        char g[32]; snprintf(g, sizeof g, "239.255.43.%d", i);
        if (mreq4(many, IP_ADD_MEMBERSHIP, g) != 0) { e = errno; break; }
        joined++;
    }
    printf("one socket joined %d groups, then %s\n", joined, ename(e));
    close(many);
    int s = udp(AF_INET);
    socklen_t tl; struct sockaddr_storage to = group_at(AF_INET, G, port, &tl);
    for (int i = 0; i < 4; i++) recv_one("empty", r[i], 10, MSG_DONTWAIT, &s, 1);
    send_group(s, &to, tl, 20, 1);
    const char *names[4] = {"on group, joined", "wildcard, joined", "wildcard, not joined", "wildcard, not joined, ALL 0"};
    for (int i = 0; i < 4; i++) drain(names[i], r[i], &s, 1);
    SHOW("loop off", setsockopt(s, IPPROTO_IP, IP_MULTICAST_LOOP, &zero, sizeof zero));
    SHOW("loop read", getsockopt(s, IPPROTO_IP, IP_MULTICAST_LOOP, &v, &vl));
    printf("loop = %d\n", v & 0xff);
    send_group(s, &to, tl, 3, 2);
    for (int i = 0; i < 4; i++) drain(names[i], r[i], &s, 1);
    SHOW("loop on", setsockopt(s, IPPROTO_IP, IP_MULTICAST_LOOP, &one, sizeof one));
    SHOW("ttl 0", setsockopt(s, IPPROTO_IP, IP_MULTICAST_TTL, &zero, sizeof zero));
    send_group(s, &to, tl, 3, 3);
    for (int i = 0; i < 4; i++) drain(names[i], r[i], &s, 1);
    /* Source filters: the sender's source blocked on r1, admitted by a source-specific
     * member, refused by one for another source. */
    struct in_addr me = route_source4(G), other;
    inet_pton(AF_INET, "10.9.9.9", &other);
    SHOW("r1 block the sender", mreq4_source(r[1], IP_BLOCK_SOURCE, G, me));
    SHOW("r1 block it again", mreq4_source(r[1], IP_BLOCK_SOURCE, G, me));
    int ssm = member(AF_INET, "0.0.0.0", port), ssm_other = member(AF_INET, "0.0.0.0", port);
    SHOW("ssm join", mreq4_source(ssm, IP_ADD_SOURCE_MEMBERSHIP, G, me));
    SHOW("ssm then any-source", mreq4(ssm, IP_ADD_MEMBERSHIP, G));
    SHOW("ssm other join", mreq4_source(ssm_other, IP_ADD_SOURCE_MEMBERSHIP, G, other));
    recv_one("empty", ssm, 10, MSG_DONTWAIT, &s, 1);
    recv_one("empty", ssm_other, 10, MSG_DONTWAIT, &s, 1);
    send_group(s, &to, tl, 5, 4);
    for (int i = 0; i < 4; i++) drain(names[i], r[i], &s, 1);
    drain("source-specific, the sender", ssm, &s, 1);
    drain("source-specific, another source", ssm_other, &s, 1);
    SHOW("r1 unblock", mreq4_source(r[1], IP_UNBLOCK_SOURCE, G, me));
    SHOW("ssm drop source", mreq4_source(ssm, IP_DROP_SOURCE_MEMBERSHIP, G, me));
    SHOW("ssm drop it again", mreq4_source(ssm, IP_DROP_SOURCE_MEMBERSHIP, G, me));
    SHOW("r0 drop", mreq4(r[0], IP_DROP_MEMBERSHIP, G));
    SHOW("r0 drop again", mreq4(r[0], IP_DROP_MEMBERSHIP, G));
    send_group(s, &to, tl, 4, 5);
    for (int i = 0; i < 4; i++) drain(names[i], r[i], &s, 1);
    drain("source-specific, dropped", ssm, &s, 1);
    SHOW("r1 drop", mreq4(r[1], IP_DROP_MEMBERSHIP, G));
    SHOW("ssm other drop", mreq4(ssm_other, IP_DROP_MEMBERSHIP, G));
    send_group(s, &to, tl, 2, 6);
    for (int i = 0; i < 4; i++) drain(names[i], r[i], &s, 1);
    for (int i = 0; i < 4; i++) close(r[i]);
    close(ssm); close(ssm_other); close(s);
}

/* IPv6 groups: join errors, delivery, loopback off, hops 0, a dual-stack sender. */
static void case_mcast6(void) {
    const char *G = "ff15::4c61:6e65", *G2 = "ff15::4c61:6e66";
    int port = free_port();
    int r[3] = {member(AF_INET6, G, port), member(AF_INET6, "::", port), member(AF_INET6, "::", port)};
    int zero = 0, one = 1;
    SHOW("r0 join", mreq6(r[0], IPV6_JOIN_GROUP, G));
    SHOW("r0 join again", mreq6(r[0], IPV6_JOIN_GROUP, G));
    SHOW("r0 leave a group not joined", mreq6(r[0], IPV6_LEAVE_GROUP, G2));
    SHOW("r0 join a unicast address", mreq6(r[0], IPV6_JOIN_GROUP, "fd00::77"));
    SHOW("r1 join", mreq6(r[1], IPV6_JOIN_GROUP, G));
    int s = udp(AF_INET6);
    socklen_t tl; struct sockaddr_storage to = group_at(AF_INET6, G, port, &tl);
    for (int i = 0; i < 3; i++) recv_one("empty", r[i], 10, MSG_DONTWAIT, &s, 1);
    send_group(s, &to, tl, 20, 1);
    const char *names[3] = {"on group, joined", "wildcard, joined", "wildcard, not joined"};
    for (int i = 0; i < 3; i++) drain(names[i], r[i], &s, 1);
    SHOW("loop off", setsockopt(s, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, &zero, sizeof zero));
    send_group(s, &to, tl, 3, 2);
    for (int i = 0; i < 3; i++) drain(names[i], r[i], &s, 1);
    SHOW("loop on", setsockopt(s, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, &one, sizeof one));
    SHOW("hops 0", setsockopt(s, IPPROTO_IPV6, IPV6_MULTICAST_HOPS, &zero, sizeof zero));
    send_group(s, &to, tl, 3, 3);
    for (int i = 0; i < 3; i++) drain(names[i], r[i], &s, 1);
    SHOW("r0 leave", mreq6(r[0], IPV6_LEAVE_GROUP, G));
    SHOW("r1 leave", mreq6(r[1], IPV6_LEAVE_GROUP, G));
    send_group(s, &to, tl, 2, 4);
    for (int i = 0; i < 3; i++) drain(names[i], r[i], &s, 1);
    for (int i = 0; i < 3; i++) close(r[i]);
    close(s);
}

/* The interface a membership and a sender name (IP_MULTICAST_IF by address and by index,
 * ip_mreqn), MCAST_JOIN_GROUP, a member connected to the sender and one connected
 * elsewhere, and a sender that is a member itself. */
static void case_mcast_more(void) {
    const char *G = "239.255.42.5";
    int port = free_port();
    int lo_member = member(AF_INET, "0.0.0.0", port), any_member = member(AF_INET, "0.0.0.0", port);
    int zero = 0;
    setsockopt(lo_member, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof zero);
    setsockopt(any_member, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof zero);
    struct ip_mreqn mn; memset(&mn, 0, sizeof mn);
    inet_pton(AF_INET, G, &mn.imr_multiaddr);
    mn.imr_ifindex = 1; /* lo */
    SHOW("join on lo by index", setsockopt(lo_member, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mn, sizeof mn));
    struct group_req gr; memset(&gr, 0, sizeof gr);
    gr.gr_interface = 0;
    struct sockaddr_in *ga = (void *)&gr.gr_group;
    ga->sin_family = AF_INET; inet_pton(AF_INET, G, &ga->sin_addr);
    SHOW("MCAST_JOIN_GROUP on the route's interface", setsockopt(any_member, IPPROTO_IP, MCAST_JOIN_GROUP, &gr, sizeof gr));
    SHOW("MCAST_JOIN_GROUP again", setsockopt(any_member, IPPROTO_IP, MCAST_JOIN_GROUP, &gr, sizeof gr));
    int s = member(AF_INET, "0.0.0.0", port); /* the sender is bound to the port: a member too */
    setsockopt(s, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof zero);
    SHOW("sender joins", mreq4(s, IP_ADD_MEMBERSHIP, G));
    int conn_other = member(AF_INET, "0.0.0.0", port), conn_sender = member(AF_INET, "0.0.0.0", port);
    SHOW("member connected elsewhere joins", mreq4(conn_other, IP_ADD_MEMBERSHIP, G));
    SHOW("member connected to the sender joins", mreq4(conn_sender, IP_ADD_MEMBERSHIP, G));
    struct sockaddr_in elsewhere = {.sin_family = AF_INET, .sin_port = htons(9)};
    inet_pton(AF_INET, "127.0.0.1", &elsewhere.sin_addr);
    SHOW("connect elsewhere", connect(conn_other, (void *)&elsewhere, sizeof elsewhere));
    struct sockaddr_in me = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr = route_source4(G)};
    SHOW("connect to the sender", connect(conn_sender, (void *)&me, sizeof me));
    int all[5] = {lo_member, any_member, s, conn_other, conn_sender};
    const char *names[5] = {"joined on lo", "joined on the route's interface", "the sender itself",
                            "connected elsewhere", "connected to the sender"};
    for (int i = 0; i < 5; i++) recv_one("empty", all[i], 10, MSG_DONTWAIT, &s, 1);
    socklen_t tl; struct sockaddr_storage to = group_at(AF_INET, G, port, &tl);
    send_group(s, &to, tl, 6, 1);
    for (int i = 0; i < 5; i++) drain(names[i], all[i], &s, 1);
    struct in_addr loaddr; inet_pton(AF_INET, "127.0.0.1", &loaddr);
    SHOW("sender IP_MULTICAST_IF lo by address", setsockopt(s, IPPROTO_IP, IP_MULTICAST_IF, &loaddr, sizeof loaddr));
    send_group(s, &to, tl, 4, 2);
    for (int i = 0; i < 5; i++) drain(names[i], all[i], &s, 1);
    /* What lo sends comes back to it, loopback option or not. */
    SHOW("loop off", setsockopt(s, IPPROTO_IP, IP_MULTICAST_LOOP, &zero, sizeof zero));
    send_group(s, &to, tl, 2, 4);
    for (int i = 0; i < 5; i++) drain(names[i], all[i], &s, 1);
    int one = 1;
    SHOW("loop on", setsockopt(s, IPPROTO_IP, IP_MULTICAST_LOOP, &one, sizeof one));
    struct ip_mreqn out; memset(&out, 0, sizeof out);
    out.imr_ifindex = 0;
    SHOW("sender IP_MULTICAST_IF back to the route", setsockopt(s, IPPROTO_IP, IP_MULTICAST_IF, &out, sizeof out));
    send_group(s, &to, tl, 3, 3);
    for (int i = 0; i < 5; i++) drain(names[i], all[i], &s, 1);
    for (int i = 0; i < 5; i++) close(all[i]);
}

/* Broadcast: refused without SO_BROADCAST; with it, looped back to this host's sockets
 * on the port whatever IP_MULTICAST_LOOP says (so the library leaves it to the kernel). */
static void case_broadcast(void) {
    int port = free_port();
    int r = member(AF_INET, "0.0.0.0", port), s = udp(AF_INET), one = 1, zero = 0;
    recv_one("empty", r, 10, MSG_DONTWAIT, &s, 1);
    socklen_t tl; struct sockaddr_storage to = group_at(AF_INET, "255.255.255.255", port, &tl);
    send_group(s, &to, tl, 2, 1);
    SHOW("SO_BROADCAST", setsockopt(s, SOL_SOCKET, SO_BROADCAST, &one, sizeof one));
    send_group(s, &to, tl, 3, 2);
    drain("wildcard member", r, &s, 1);
    SHOW("loop off", setsockopt(s, IPPROTO_IP, IP_MULTICAST_LOOP, &zero, sizeof zero));
    send_group(s, &to, tl, 3, 3);
    drain("wildcard member, loop off", r, &s, 1);
    close(r); close(s);
}

/* A member without the library joins beside members with it: each gets every datagram
 * once, in order. */
static void case_mcast_mixed(void) {
    const char *G = "239.255.42.3";
    int port = free_port();
    int r[2] = {member(AF_INET, "0.0.0.0", port), member(AF_INET, G, port)};
    for (int i = 0; i < 2; i++) mreq4(r[i], IP_ADD_MEMBERSHIP, G);
    int s = udp(AF_INET);
    for (int i = 0; i < 2; i++) recv_one("empty", r[i], 10, MSG_DONTWAIT, &s, 1);
    socklen_t tl; struct sockaddr_storage to = group_at(AF_INET, G, port, &tl);
    send_group(s, &to, tl, 10, 1);
    int ready[2], done[2];
    if (pipe(ready) != 0 || pipe(done) != 0) exit(2);
    char portarg[16], fdarg[16];
    snprintf(portarg, sizeof portarg, "%d", port);
    snprintf(fdarg, sizeof fdarg, "%d", ready[1]);
    pid_t pid = fork();
    if (pid == 0) {
        unsetenv("LD_PRELOAD");
        dup2(done[0], 0);
        execl(self_path, self_path, "--plain-member", G, portarg, fdarg, (char *)NULL);
        _exit(127);
    }
    char c;
    if (read(ready[0], &c, 1) != 1) exit(2);
    /* A library sender learns of a member without the library when it next asks the kernel
     * (at most 10 ms later; docs/design/udp-acceleration.md): step over that. */
    usleep(50000);
    send_group(s, &to, tl, 30, 2);
    if (write(done[1], "d", 1) != 1) exit(2);
    int status;
    waitpid(pid, &status, 0);
    printf("plain member exit %d\n", WEXITSTATUS(status));
    drain("with the library, wildcard", r[0], &s, 1);
    drain("with the library, on group", r[1], &s, 1);
    send_group(s, &to, tl, 5, 3);
    drain("wildcard, after", r[0], &s, 1);
    drain("on group, after", r[1], &s, 1);
    close(r[0]); close(r[1]); close(s);
    close(ready[0]); close(ready[1]); close(done[0]); close(done[1]);
}

static int plain_member(const char *group, int port, int ready) {
    int r = member(AF_INET, "0.0.0.0", port);
    if (mreq4(r, IP_ADD_MEMBERSHIP, group) != 0) return 1;
    if (write(ready, "r", 1) != 1) return 1;
    char c;
    if (read(0, &c, 1) != 1) return 1;
    drain("without the library", r, NULL, 0);
    return 0;
}

/* Leaves an IPv4 and an IPv6 group member open at exit, so the test can read what their
 * records counted. */
static void case_mcast_leave_record(void) {
    const char *G = "239.255.42.4", *G6 = "ff15::4c61:6e67";
    /* Two ports: an IPv6 socket on the wildcard may take IPv4 (unless IPV6_V6ONLY, which
     * a sender cannot see), so an IPv4 group's datagrams would go through the kernel. */
    int port = free_port(), port6;
    do port6 = free_port(); while (port6 == port);
    int r = member(AF_INET, "0.0.0.0", port), r6 = member(AF_INET6, "::", port6);
    SHOW("join", mreq4(r, IP_ADD_MEMBERSHIP, G));
    SHOW("join6", mreq6(r6, IPV6_JOIN_GROUP, G6));
    int s = udp(AF_INET), s6 = udp(AF_INET6);
    recv_one("empty", r, 10, MSG_DONTWAIT, &s, 1);
    recv_one("empty6", r6, 10, MSG_DONTWAIT, &s6, 1);
    socklen_t tl; struct sockaddr_storage to = group_at(AF_INET, G, port, &tl);
    send_group(s, &to, tl, 10, 1);
    to = group_at(AF_INET6, G6, port6, &tl);
    send_group(s6, &to, tl, 10, 2);
    drain("member", r, &s, 1);
    drain("member6", r6, &s6, 1);
    fflush(stdout);
    _exit(0);
}

struct test { const char *name; void (*run)(void); };
static const struct test tests[] = {
    {"basic4", case_basic4}, {"basic6", case_basic6}, {"trunc-peek", case_trunc_peek},
    {"connected", case_connected}, {"connect-later", case_connect_later}, {"dual-stack", case_dual_stack}, {"mmsg", case_mmsg},
    {"rcvbuf", case_rcvbuf}, {"readiness", case_readiness}, {"blocking", case_blocking},
    {"pktinfo", case_pktinfo}, {"dup-fork", case_dup_fork}, {"exec", case_exec}, {"killed-receiver", case_killed_receiver}, {"mixed", case_mixed}, {"stress", case_stress},
    {"mcast4", case_mcast4}, {"mcast6", case_mcast6}, {"mcast-more", case_mcast_more}, {"mcast-mixed", case_mcast_mixed},
    {"broadcast", case_broadcast},
    {"leave-record", case_leave_record}, {"mcast-leave-record", case_mcast_leave_record},
};

int main(int argc, char **argv) {
    self_path = argv[0];
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 6 && strcmp(argv[1], "--plain-sender") == 0) return plain_sender(argv[2], atoi(argv[3]), atoi(argv[4]), argv[5]);
    if (argc == 3 && strcmp(argv[1], "--exec-reader") == 0) return exec_reader(atoi(argv[2]));
    if (argc == 5 && strcmp(argv[1], "--plain-member") == 0) return plain_member(argv[2], atoi(argv[3]), atoi(argv[4]));
    for (size_t i = 0; i < sizeof tests / sizeof *tests; i++) {
        int wanted = argc == 1 && strstr(tests[i].name, "leave-record") == NULL;
        for (int a = 1; a < argc; a++) wanted |= strcmp(argv[a], tests[i].name) == 0;
        if (!wanted) continue;
        printf("== %s\n", tests[i].name);
        tests[i].run();
    }
    return 0;
}
