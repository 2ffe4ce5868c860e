#include "sockconf.h"

/* ------------------------------------------------------------------------------------------
 * Sockets
 * ---------------------------------------------------------------------------------------- */

struct ctx C;

/* The address of port `port` on this host (loopback), or, for the server's port in split
 * mode across hosts, on the server's host. */
socklen_t loop_addr(int family, int port, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    bool server = C.split && port == C.port && port > 0;
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        a->sin6_addr = in6addr_loopback;
        if (server && C.host6 && inet_pton(AF_INET6, C.host6, &a->sin6_addr) != 1)
            die("--host6 %s", C.host6);
        return sizeof *a;
    }
    struct sockaddr_in *a = (struct sockaddr_in *)ss;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (server && C.host4 && inet_pton(AF_INET, C.host4, &a->sin_addr) != 1)
        die("--host4 %s", C.host4);
    return sizeof *a;
}

int port_of(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    return ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

/* Family and address, never the port. */
const char *addr_str(const struct sockaddr_storage *ss, socklen_t len)
{
    static char bufs[4][96];
    static int k;
    char *b = bufs[k++ & 3];
    char a[INET6_ADDRSTRLEN] = "?";
    if (ss->ss_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, a, sizeof a);
        snprintf(b, 96, "AF_INET %s", a);
    } else if (ss->ss_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ss)->sin6_addr, a, sizeof a);
        snprintf(b, 96, "AF_INET6 %s", a);
    } else {
        snprintf(b, 96, "family %d len %u", ss->ss_family, (unsigned)len);
    }
    return b;
}

bool same_addr(const struct sockaddr_storage *x, const struct sockaddr_storage *y)
{
    if (x->ss_family != y->ss_family)
        return false;
    if (x->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)x, *b = (const void *)y;
        return a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
    }
    if (x->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)x, *b = (const void *)y;
        return a->sin6_port == b->sin6_port &&
               memcmp(&a->sin6_addr, &b->sin6_addr, sizeof a->sin6_addr) == 0;
    }
    return false;
}

int tcp_socket(int flags)
{
    int fd = socket(C.family, SOCK_STREAM | flags, 0);
    if (fd < 0)
        die("socket");
    return fd;
}

int listen_socket(int family, int port)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die("socket (listen)");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_storage ss;
    socklen_t l = loop_addr(family, port, &ss);
    if (bind(fd, (struct sockaddr *)&ss, l) < 0)
        die("bind");
    if (listen(fd, 128) < 0)
        die("listen");
    return fd;
}

int bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t l = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &l) < 0)
        die("getsockname");
    return port_of(&ss);
}

int connect_one(void)
{
    int fd = tcp_socket(0);
    struct sockaddr_storage ss;
    socklen_t l = loop_addr(C.family, C.port, &ss);
    if (connect(fd, (struct sockaddr *)&ss, l) < 0)
        die("connect");
    return fd;
}

int accept_one(void)
{
    for (;;) {
        int fd = accept(C.lfd, NULL, NULL);
        if (fd >= 0)
            return fd;
        if (errno != EINTR)
            die("accept");
    }
}

void set_nonblock(int fd, bool on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        die("F_GETFL");
    fl = on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK;
    if (fcntl(fd, F_SETFL, fl) < 0)
        die("F_SETFL");
}

int nonblock_of(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : !!(fl & O_NONBLOCK);
}

int cloexec_of(int fd)
{
    int f = fcntl(fd, F_GETFD);
    return f < 0 ? -1 : !!(f & FD_CLOEXEC);
}

ssize_t write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, p + done, n - done);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        done += (size_t)w;
    }
    return (ssize_t)done;
}

ssize_t send_all(int fd, const void *buf, size_t n, int flags)
{
    const char *p = buf;
    size_t done = 0;
    while (done < n) {
        ssize_t w = send(fd, p + done, n - done, flags);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        done += (size_t)w;
    }
    return (ssize_t)done;
}

/* Reads until n bytes or end of stream; -1 on an error. */
ssize_t read_full(int fd, void *buf, size_t n)
{
    char *p = buf;
    size_t done = 0;
    while (done < n) {
        ssize_t r = read(fd, p + done, n - done);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

/* "N 'text'" for a read_full of printable text. */
const char *got(ssize_t n, const char *buf)
{
    static char bufs[4][160];
    static int k;
    char *b = bufs[k++ & 3];
    if (n < 0)
        return res(n);
    int o = snprintf(b, 160, "%zd '", n);
    for (ssize_t i = 0; i < n && i < 100 && o < 150; i++) {
        unsigned char ch = (unsigned char)buf[i];
        if (ch == '\n') {
            b[o++] = '\\';
            b[o++] = 'n';
        } else {
            b[o++] = ch >= 32 && ch < 127 ? (char)ch : '.';
        }
    }
    b[o++] = '\'';
    b[o] = 0;
    return b;
}

const char *status_str(int st)
{
    static char b[64];
    if (WIFEXITED(st))
        snprintf(b, sizeof b, "exit %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(b, sizeof b, "killed by %s", WTERMSIG(st) == SIGPIPE ? "SIGPIPE"
                                              : WTERMSIG(st) == SIGKILL ? "SIGKILL"
                                              : WTERMSIG(st) == SIGSEGV ? "SIGSEGV"
                                              : WTERMSIG(st) == SIGABRT ? "SIGABRT"
                                                                        : "another signal");
    else
        snprintf(b, sizeof b, "status 0x%x", st);
    return b;
}

pid_t wait_pid(pid_t pid, int *st)
{
    for (;;) {
        pid_t r = waitpid(pid, st, 0);
        if (r >= 0 || errno != EINTR)
            return r;
    }
}

/* Reads fd to its end into the transcript (lines of a child process). */
void slurp_into_log(int fd)
{
    char b[4096];
    for (;;) {
        ssize_t r = read(fd, b, sizeof b);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        log_raw(b, (size_t)r);
    }
}

struct sub sub_start(const char *subrole)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        die("pipe2");
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        close(p[0]);
        out_fd = p[1];
        loglen = 0;
        role = subrole;
        watch_child = -1;
        arm_watchdog();
        return (struct sub){0, -1};
    }
    close(p[1]);
    return (struct sub){pid, p[0]};
}

void sub_exit(void)
{
    flush_log();
    _exit(0);
}

int sub_finish(struct sub s)
{
    slurp_into_log(s.rfd);
    close(s.rfd);
    int st = 0;
    if (wait_pid(s.pid, &st) < 0)
        die("waitpid");
    return st;
}

/* Round trips of 2 bytes, the client's "hi" answered with "ok" (in ring mode under the
 * library afterwards), before a case's own calls. */
void warm_up_client(int fd)
{
    char b[2];
    for (int i = 0; i < 20; i++)
        if (write_all(fd, "hi", 2) != 2 || read_full(fd, b, 2) != 2)
            die("exchange");
}

void warm_up_server(int s)
{
    char b[2];
    for (int i = 0; i < 20; i++)
        if (read_full(s, b, 2) != 2 || write_all(s, "ok", 2) != 2)
            die("exchange");
}
