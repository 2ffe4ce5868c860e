#include "sockconf.h"

/* ------------------------------------------------------------------------------------------
 * Transcript
 * ---------------------------------------------------------------------------------------- */

static char logbuf[1 << 16];
size_t loglen;
static bool logfull;
const char *role = "main";
int out_fd = 1;          /* where this process's transcript goes when it ends */
pid_t watch_child = -1;  /* killed by the watchdog and by die() */

void write_all_raw(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        c += w;
        n -= (size_t)w;
    }
}

void log_raw(const char *s, size_t n)
{
    if (loglen + n > sizeof logbuf) {
        logfull = true;
        return;
    }
    memcpy(logbuf + loglen, s, n);
    loglen += n;
}

void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void say(const char *fmt, ...)
{
    char line[1024];
    int n = snprintf(line, sizeof line, "%s: ", role);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len++] = '\n';
    log_raw(line, len);
}

void flush_log(void)
{
    if (logfull) {
        static const char m[] = "LOG OVERFLOW\n";
        log_raw(m, 0);
        write_all_raw(out_fd, logbuf, loglen);
        write_all_raw(out_fd, m, sizeof m - 1);
    } else {
        write_all_raw(out_fd, logbuf, loglen);
    }
    loglen = 0;
    logfull = false;
}

static void on_watchdog(int sig)
{
    static const char m[] = ": TIMEOUT\n";
    (void)sig;
    write_all_raw(out_fd, logbuf, loglen);
    write_all_raw(out_fd, role, strlen(role));
    write_all_raw(out_fd, m, sizeof m - 1);
    if (watch_child > 0)
        kill(watch_child, SIGKILL);
    _exit(3);
}

void arm_watchdog(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_watchdog;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    alarm(WATCHDOG_SECS);
}

const char *errname(int e)
{
    switch (e) {
    case 0: return "0";
    case EAGAIN: return "EAGAIN";
    case EINPROGRESS: return "EINPROGRESS";
    case EALREADY: return "EALREADY";
    case ECONNREFUSED: return "ECONNREFUSED";
    case ECONNRESET: return "ECONNRESET";
    case ECONNABORTED: return "ECONNABORTED";
    case EPIPE: return "EPIPE";
    case EINTR: return "EINTR";
    case EBADF: return "EBADF";
    case EINVAL: return "EINVAL";
    case ENOTCONN: return "ENOTCONN";
    case EISCONN: return "EISCONN";
    case ENOENT: return "ENOENT";
    case EEXIST: return "EEXIST";
    case ENOTSOCK: return "ENOTSOCK";
    case EFAULT: return "EFAULT";
    case EMFILE: return "EMFILE";
    case ETIMEDOUT: return "ETIMEDOUT";
    case EADDRINUSE: return "EADDRINUSE";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case ENOPROTOOPT: return "ENOPROTOOPT";
    case ESPIPE: return "ESPIPE";
    case ENOSYS: return "ENOSYS";
    case EPERM: return "EPERM";
    case ENOTTY: return "ENOTTY";
    case EDESTADDRREQ: return "EDESTADDRREQ";
    case EMSGSIZE: return "EMSGSIZE";
    default: {
        static char b[4][16];
        static int k;
        char *s = b[k++ & 3];
        snprintf(s, 16, "E%d", e);
        return s;
    }
    }
}

/* "N" for a result >= 0, "-1 ENAME" for a failure (errno read on entry). */
const char *res(long r)
{
    int e = errno;
    static char bufs[8][48];
    static int k;
    char *b = bufs[k++ & 7];
    if (r < 0)
        snprintf(b, 48, "%ld %s", r, errname(e));
    else
        snprintf(b, 48, "%ld", r);
    return b;
}

void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void die(const char *fmt, ...)
{
    int e = errno;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    say("FATAL: %s (errno %s)", msg, errname(e));
    flush_log();
    if (watch_child > 0)
        kill(watch_child, SIGKILL);
    _exit(2);
}

const char *flagstr(int ev, bool epoll)
{
    static const struct { int bit; const char *pn; const char *en; } t[] = {
        {POLLIN, "POLLIN", "EPOLLIN"},       {POLLPRI, "POLLPRI", "EPOLLPRI"},
        {POLLOUT, "POLLOUT", "EPOLLOUT"},    {POLLERR, "POLLERR", "EPOLLERR"},
        {POLLHUP, "POLLHUP", "EPOLLHUP"},    {POLLNVAL, "POLLNVAL", "EPOLLNVAL"},
        {POLLRDNORM, "POLLRDNORM", "EPOLLRDNORM"}, {POLLRDBAND, "POLLRDBAND", "EPOLLRDBAND"},
        {POLLWRNORM, "POLLWRNORM", "EPOLLWRNORM"}, {POLLWRBAND, "POLLWRBAND", "EPOLLWRBAND"},
        {POLLRDHUP, "POLLRDHUP", "EPOLLRDHUP"},
    };
    static char bufs[8][192];
    static int k;
    char *b = bufs[k++ & 7];
    b[0] = 0;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (ev & t[i].bit) {
            if (b[0])
                strcat(b, "|");
            strcat(b, epoll ? t[i].en : t[i].pn);
            ev &= ~t[i].bit;
        }
    }
    if (ev) {
        char x[24];
        snprintf(x, sizeof x, "%s0x%x", b[0] ? "|" : "", (unsigned)ev);
        strcat(b, x);
    }
    if (!b[0])
        strcpy(b, "0");
    return b;
}

/* poll() one pollfd, then say "WHAT N revents FLAGS". */
void say_poll(const char *what, struct pollfd *p, int timeout)
{
    const char *r = res(poll(p, 1, timeout));
    say("%s %s revents %s", what, r, revstr(p->revents));
}

void say_fionread(const char *what, int fd)
{
    int v = -1;
    const char *r = res(ioctl(fd, FIONREAD, &v));
    say("%s %s value %d", what, r, v);
}

const char *yes(bool b) { return b ? "yes" : "no"; }

long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}
