#include "sockconf.h"

/* ------------------------------------------------------------------------------------------
 * Cases: readiness
 * ---------------------------------------------------------------------------------------- */

enum waitmode wait_mode;

static const char *waitfd(int fd, bool write, int timeout_ms)
{
    static char bufs[4][96];
    static int k;
    char *b = bufs[k++ & 3];
    sigset_t none;
    sigemptyset(&none);
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
    if (wait_mode == W_POLL || wait_mode == W_PPOLL) {
        struct pollfd p = {fd, (short)(write ? POLLOUT : POLLIN), 0};
        int r = wait_mode == W_POLL ? poll(&p, 1, timeout_ms) : ppoll(&p, 1, &ts, &none);
        snprintf(b, 96, "%s revents %s", res(r), revstr(p.revents));
    } else {
        fd_set set;
        FD_ZERO(&set);
        FD_SET(fd, &set);
        struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
        int r = wait_mode == W_SELECT
                    ? select(fd + 1, write ? NULL : &set, write ? &set : NULL, NULL, &tv)
                    : pselect(fd + 1, write ? NULL : &set, write ? &set : NULL, NULL, &ts, &none);
        snprintf(b, 96, "%s set %d", res(r), r >= 0 ? FD_ISSET(fd, &set) : -1);
    }
    return b;
}

void wait_server(void)
{
    int s = accept_one();
    sync_expect('a');
    say("write %s", res(write(s, "ping", 4)));
    sync_expect('b');
    say("close %s", res(close(s)));
}

void wait_client(void)
{
    int fd = connect_one();
    say("readable, timeout 0: %s", waitfd(fd, false, 0));
    long long t0 = now_ms();
    const char *r = waitfd(fd, false, 100);
    say("readable, timeout 100 ms: %s, waited >= 90 ms: %s", r, yes(now_ms() - t0 >= 90));
    say("writable, timeout 0: %s", waitfd(fd, true, 0));
    sync_send('a');
    say("readable, timeout 5 s, peer wrote: %s", waitfd(fd, false, 5000));
    char b[8];
    say("read_full %s", got(read_full(fd, b, 4), b));
    say("readable after reading, timeout 0: %s", waitfd(fd, false, 0));
    sync_send('b');
    say("readable, peer closed: %s", waitfd(fd, false, 5000));
    say("read %s", res(read(fd, b, sizeof b)));
    close(fd);
    /* An fd that is not open (inside the fd table: select ignores numbers beyond it): poll
     * says POLLNVAL, select fails with EBADF. */
    int gone = dup(0);
    close(gone);
    say("an fd that is not open: %s", waitfd(gone, false, 0));
}

int temp_file(void);

const char *epw(int ep, int timeout)
{
    struct epoll_event ev[16];
    int n = epoll_wait(ep, ev, 16, timeout);
    static char bufs[4][512];
    static int k;
    char *b = bufs[k++ & 3];
    if (n < 0) {
        snprintf(b, 512, "%s", res(n));
        return b;
    }
    for (int i = 1; i < n; i++) /* by tag: the kernel's order of ready items is not ours */
        for (int j = i; j > 0 && ev[j - 1].data.u64 > ev[j].data.u64; j--) {
            struct epoll_event t = ev[j];
            ev[j] = ev[j - 1];
            ev[j - 1] = t;
        }
    int off = snprintf(b, 512, "%d", n);
    for (int i = 0; i < n && off < 400; i++)
        off += snprintf(b + off, 512 - (size_t)off, " [%llu:%s]",
                        (unsigned long long)ev[i].data.u64, epstr(ev[i].events));
    return b;
}

int ep_ctl(int ep, int op, int fd, uint32_t events, uint64_t tag)
{
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = events;
    ev.data.u64 = tag;
    return epoll_ctl(ep, op, fd, &ev);
}

/* A server that writes each message when told: 'a' -> msgs[0], 'b' -> msgs[1], ...; 'z'
 * closes. */
const char *const *script;
void script_server(void)
{
    int s = accept_one();
    for (;;) {
        char c = sync_wait();
        if (c == 'z')
            break;
        const char *m = script[c - 'a'];
        if (write_all(s, m, strlen(m)) < 0)
            die("write");
    }
    say("close %s", res(close(s)));
}

const char *const lt_script[] = {"0123456789"};
void epoll_lt_client(void)
{
    int fd = connect_one();
    int ep = epoll_create1(EPOLL_CLOEXEC);
    say("epoll_create1 %s FD_CLOEXEC %d", ep >= 0 ? "ok" : res(ep), cloexec_of(ep));
    say("ADD EPOLLIN %s", res(ep_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLIN, 1)));
    say("wait 0 %s", epw(ep, 0));
    sync_send('a');
    say("wait 5 s %s", epw(ep, 5000));
    say("wait 0 again, nothing read %s", epw(ep, 0));
    char b[16];
    say("read_full 4 %s", got(read_full(fd, b, 4), b));
    say("wait 1 s after a partial read %s", epw(ep, 1000));
    say("read_full 6 %s", got(read_full(fd, b, 6), b));
    say("wait 0 after reading all %s", epw(ep, 0));
    say("MOD EPOLLIN|EPOLLOUT %s", res(ep_ctl(ep, EPOLL_CTL_MOD, fd, EPOLLIN | EPOLLOUT, 1)));
    say("wait 0 %s", epw(ep, 0));
    say("MOD EPOLLIN|EPOLLRDHUP %s", res(ep_ctl(ep, EPOLL_CTL_MOD, fd, EPOLLIN | EPOLLRDHUP, 1)));
    sync_send('z');
    say("wait 5 s, peer closed %s", epw(ep, 5000));
    say("read %s", res(read(fd, b, sizeof b)));
    close(ep);
    close(fd);
}

const char *const et_script[] = {"first", "second", "third"};
void epoll_et_client(void)
{
    int fd = connect_one();
    int ep = epoll_create(4);
    say("ADD EPOLLIN|EPOLLET %s", res(ep_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLET, 7)));
    say("wait 0 %s", epw(ep, 0));
    sync_send('a');
    say("wait 5 s, one arrival %s", epw(ep, 5000));
    say("wait 0, nothing new %s", epw(ep, 0));
    say("wait 100 ms, nothing new %s", epw(ep, 100));
    sync_send('b');
    say("wait 5 s, second arrival %s", epw(ep, 5000));
    say("wait 0 %s", epw(ep, 0));
    char b[32];
    say("read_full 11 %s", got(read_full(fd, b, 11), b));
    say("recv MSG_DONTWAIT %s", res(recv(fd, b, sizeof b, MSG_DONTWAIT)));
    say("wait 0 after draining %s", epw(ep, 0));
    sync_send('c');
    say("wait 5 s, third arrival %s", epw(ep, 5000));
    say("read_full 5 %s", got(read_full(fd, b, 5), b));
    sync_send('z');
    say("wait 5 s, peer closed %s", epw(ep, 5000));
    /* No "wait 0" here: the kernel wakes the set twice for a FIN (the socket's state
     * change, then its data-ready), and a wait that took the first edge before the second
     * came sees a second one; a waiter that spins (the library's) catches that window now
     * and then, a sleeping one almost never. */
    say("read %s", res(read(fd, b, sizeof b)));
    close(ep);
    close(fd);
}

const char *const oneshot_script[] = {"one", "two", "three"};
void epoll_oneshot_client(void)
{
    int fd = connect_one();
    int ep = epoll_create1(0);
    say("ADD EPOLLIN|EPOLLONESHOT %s",
        res(ep_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLONESHOT, 3)));
    sync_send('a');
    say("wait 5 s %s", epw(ep, 5000));
    say("wait 0, disarmed %s", epw(ep, 0));
    sync_send('b');
    say("wait 200 ms, more data but disarmed %s", epw(ep, 200));
    say("MOD re-arm %s", res(ep_ctl(ep, EPOLL_CTL_MOD, fd, EPOLLIN | EPOLLONESHOT, 3)));
    say("wait 1 s %s", epw(ep, 1000));
    say("wait 0 %s", epw(ep, 0));
    char b[16];
    say("read_full 6 %s", got(read_full(fd, b, 6), b));
    say("MOD re-arm %s", res(ep_ctl(ep, EPOLL_CTL_MOD, fd, EPOLLIN | EPOLLONESHOT, 3)));
    say("wait 0, nothing pending %s", epw(ep, 0));
    sync_send('c');
    say("wait 5 s %s", epw(ep, 5000));
    say("read_full 5 %s", got(read_full(fd, b, 5), b));
    sync_send('z');
    close(ep);
    close(fd);
}

const char *const del_script[] = {"x"};
void epoll_del_client(void)
{
    int fd = connect_one();
    int ep = epoll_create1(0);
    say("ADD %s", res(ep_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLIN, 1)));
    say("ADD again %s", res(ep_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLIN, 1)));
    say("DEL %s", res(ep_ctl(ep, EPOLL_CTL_DEL, fd, 0, 0)));
    say("DEL again %s", res(ep_ctl(ep, EPOLL_CTL_DEL, fd, 0, 0)));
    say("MOD after DEL %s", res(ep_ctl(ep, EPOLL_CTL_MOD, fd, EPOLLIN, 1)));
    sync_send('a');
    say("wait 200 ms, data arrives, not in the set %s", epw(ep, 200));
    say("ADD %s", res(ep_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLIN, 1)));
    say("wait 1 s %s", epw(ep, 1000));
    int d = dup(fd);
    say("ADD a duplicate %s", res(ep_ctl(ep, EPOLL_CTL_ADD, d, EPOLLIN, 2)));
    say("wait 0 %s", epw(ep, 0));
    say("close the duplicate %s", res(close(d)));
    say("wait 0, the description is still open %s", epw(ep, 0));
    say("DEL the closed duplicate %s", res(ep_ctl(ep, EPOLL_CTL_DEL, d, 0, 0)));
    say("ADD epfd to itself %s", res(ep_ctl(ep, EPOLL_CTL_ADD, ep, EPOLLIN, 9)));
    say("ADD an fd that is not open %s", res(ep_ctl(ep, EPOLL_CTL_ADD, 1000, EPOLLIN, 9)));
    int f = temp_file();
    say("ADD a regular file %s", res(ep_ctl(ep, EPOLL_CTL_ADD, f, EPOLLIN, 9)));
    close(f);
    char b[4];
    say("read_full %s", got(read_full(fd, b, 1), b));
    say("wait 0 %s", epw(ep, 0));
    sync_send('z');
    close(ep);
    close(fd);
}

/* Accepts two connections; each 'a' writes one byte to the second. */
void two_conns_server(void)
{
    int s1 = accept_one();
    int s2 = accept_one();
    for (;;) {
        char c = sync_wait();
        if (c == 'z')
            break;
        if (write_all(s2, "y", 1) < 0)
            die("write");
    }
    close(s1);
    close(s2);
}

/* Registrations changed between waits (a DEL and an ADD, as redis-benchmark does per
 * request), and an fd closed without DEL whose number a new socket reuses (as nginx does
 * with keep-alive connections): the new socket's ADD succeeds and its events arrive. */
void epoll_reuse_client(void)
{
    int fd = connect_one();
    int ep = epoll_create1(0);
    say("ADD %s", res(ep_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLIN, 1)));
    say("DEL %s", res(ep_ctl(ep, EPOLL_CTL_DEL, fd, 0, 0)));
    say("ADD EPOLLOUT %s", res(ep_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLOUT, 2)));
    say("ADD again %s", res(ep_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLOUT, 2)));
    say("wait 0 %s", epw(ep, 0));
    say("MOD EPOLLIN %s", res(ep_ctl(ep, EPOLL_CTL_MOD, fd, EPOLLIN, 3)));
    say("wait 0 %s", epw(ep, 0));
    int n = fd;
    say("close without DEL %s", res(close(fd)));
    say("MOD the closed fd %s", res(ep_ctl(ep, EPOLL_CTL_MOD, n, EPOLLIN, 4)));
    int fd2 = connect_one();
    say("the second connection reuses the number: %s", yes(fd2 == n));
    say("ADD the new socket %s", res(ep_ctl(ep, EPOLL_CTL_ADD, fd2, EPOLLIN, 5)));
    say("wait 0 %s", epw(ep, 0));
    sync_send('a');
    say("wait 1 s %s", epw(ep, 1000));
    char b[4];
    say("read_full %s", got(read_full(fd2, b, 1), b));
    say("DEL %s", res(ep_ctl(ep, EPOLL_CTL_DEL, fd2, 0, 0)));
    say("MOD after DEL %s", res(ep_ctl(ep, EPOLL_CTL_MOD, fd2, EPOLLIN, 6)));
    sync_send('a');
    say("wait 200 ms, not in the set %s", epw(ep, 200));
    sync_send('z');
    close(ep);
    close(fd2);
}

const char *const mixed_script[] = {"s"};
void epoll_mixed_client(void)
{
    int fd = connect_one();
    int p[2];
    if (pipe(p) < 0)
        die("pipe");
    int ep = epoll_create1(0);
    say("ADD socket %s", res(ep_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLIN, 1)));
    say("ADD pipe %s", res(ep_ctl(ep, EPOLL_CTL_ADD, p[0], EPOLLIN, 2)));
    say("wait 0 %s", epw(ep, 0));
    say("write pipe %s", res(write(p[1], "p", 1)));
    say("wait 1 s %s", epw(ep, 1000));
    char b[8];
    say("read pipe %s", res(read(p[0], b, 1)));
    sync_send('a');
    say("wait 5 s, socket data %s", epw(ep, 5000));
    say("write pipe %s", res(write(p[1], "q", 1)));
    say("wait 0, both %s", epw(ep, 0));
    say("read socket %s", got(read_full(fd, b, 1), b));
    say("wait 0, pipe only %s", epw(ep, 0));
    say("read pipe %s", res(read(p[0], b, 1)));
    say("wait 0 %s", epw(ep, 0));
    say("ADD pipe write end EPOLLOUT %s", res(ep_ctl(ep, EPOLL_CTL_ADD, p[1], EPOLLOUT, 3)));
    say("ADD socket EPOLLOUT via a duplicate %s",
        res(ep_ctl(ep, EPOLL_CTL_ADD, dup(fd), EPOLLOUT, 4)));
    say("wait 0 %s", epw(ep, 0));
    sync_send('z');
    close(ep);
    close(fd);
}

const char *const nested_script[] = {"nest", "more"};
void epoll_nested_client(void)
{
    int fd = connect_one();
    int inner = epoll_create1(0), outer = epoll_create1(0);
    int p[2];
    if (pipe(p) < 0)
        die("pipe");
    say("inner ADD socket %s", res(ep_ctl(inner, EPOLL_CTL_ADD, fd, EPOLLIN, 1)));
    say("outer ADD inner %s", res(ep_ctl(outer, EPOLL_CTL_ADD, inner, EPOLLIN, 9)));
    say("outer ADD pipe %s", res(ep_ctl(outer, EPOLL_CTL_ADD, p[0], EPOLLIN, 2)));
    say("outer wait 0 %s", epw(outer, 0));
    sync_send('a');
    say("outer wait 5 s %s", epw(outer, 5000));
    struct pollfd pf = {inner, POLLIN, 0};
    say_poll("poll inner", &pf, 0);
    say("inner wait 0 %s", epw(inner, 0));
    char b[8];
    say("read_full %s", got(read_full(fd, b, 4), b));
    say("outer wait 0 %s", epw(outer, 0));
    say("inner wait 0 %s", epw(inner, 0));
    say("outer MOD inner EPOLLIN|EPOLLET %s",
        res(ep_ctl(outer, EPOLL_CTL_MOD, inner, EPOLLIN | EPOLLET, 9)));
    sync_send('b');
    say("outer wait 5 s %s", epw(outer, 5000));
    say("outer wait 0, edge consumed %s", epw(outer, 0));
    say("inner wait 0, level %s", epw(inner, 0));
    say("read_full %s", got(read_full(fd, b, 4), b));
    say("write pipe %s", res(write(p[1], "p", 1)));
    say("outer wait 0 %s", epw(outer, 0));
    sync_send('z');
    close(outer);
    close(inner);
    close(fd);
}

/* An epoll set's own fd waited for by poll, ppoll, select and epoll_pwait2, with the
 * socket's data arriving during each wait (programs poll the fd of a library's set). */
const char *const polled_script[] = {"poll", "ppol", "slct", "pwt2"};
void epoll_polled_client(void)
{
    int fd = connect_one();
    int ep = epoll_create1(0);
    char b[8];
    say("ADD socket %s", res(ep_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLIN, 1)));
    struct pollfd p = {ep, POLLIN, 0};
    say_poll("poll the set, nothing yet", &p, 0);
    sync_send('a');
    say_poll("poll the set 5 s", &p, 5000);
    say("wait 0 %s", epw(ep, 0));
    say("read_full %s", got(read_full(fd, b, 4), b));
    say_poll("poll the set after the read", &p, 0);
    sync_send('b');
    struct timespec five = {5, 0};
    p.revents = 0;
    int r = ppoll(&p, 1, &five, NULL);
    const char *rs = res(r);
    say("ppoll the set 5 s %s revents %s", rs, revstr(p.revents));
    say("read_full %s", got(read_full(fd, b, 4), b));
    sync_send('c');
    fd_set readable;
    FD_ZERO(&readable);
    FD_SET(ep, &readable);
    struct timeval tv = {5, 0};
    r = select(ep + 1, &readable, NULL, NULL, &tv);
    rs = res(r);
    say("select the set 5 s %s readable %s", rs, yes(FD_ISSET(ep, &readable)));
    say("read_full %s", got(read_full(fd, b, 4), b));
    sync_send('d');
    struct epoll_event ev[4];
    r = epoll_pwait2(ep, ev, 4, &five, NULL);
    rs = res(r);
    say("epoll_pwait2 5 s %s tag %llu", rs, r == 1 ? (unsigned long long)ev[0].data.u64 : 0ULL);
    say("read_full %s", got(read_full(fd, b, 4), b));
    sync_send('z');
    close(ep);
    close(fd);
}

const char *const twosets_script[] = {"data", "more"};
void epoll_twosets_client(void)
{
    int fd = connect_one();
    int lt = epoll_create1(0), et = epoll_create1(0);
    say("ADD to LT set %s", res(ep_ctl(lt, EPOLL_CTL_ADD, fd, EPOLLIN, 1)));
    say("ADD to ET set %s", res(ep_ctl(et, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLET, 2)));
    sync_send('a');
    say("LT wait 5 s %s", epw(lt, 5000));
    say("ET wait 1 s %s", epw(et, 1000));
    say("LT wait 0 %s", epw(lt, 0));
    say("ET wait 0 %s", epw(et, 0));
    say("DEL from LT set %s", res(ep_ctl(lt, EPOLL_CTL_DEL, fd, 0, 0)));
    sync_send('b');
    say("ET wait 5 s %s", epw(et, 5000));
    say("LT wait 0 %s", epw(lt, 0));
    char b[16];
    say("read_full %s", got(read_full(fd, b, 8), b));
    sync_send('z');
    close(lt);
    close(et);
    close(fd);
}

const char *const eforked_script[] = {"forked", "parent"};
void epoll_fork_client(void)
{
    int fd = connect_one();
    int ep = epoll_create1(0);
    say("ADD %s", res(ep_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLIN, 5)));
    struct sub s = sub_start("client/child");
    if (s.pid == 0) {
        say("wait 5 s in the child %s", epw(ep, 5000));
        char b[8];
        say("read_full %s", got(read_full(fd, b, 6), b));
        say("wait 0 %s", epw(ep, 0));
        sub_exit();
    }
    sync_send('a');
    say("child %s", status_str(sub_finish(s)));
    say("wait 0 in the parent, the child read it all %s", epw(ep, 0));
    sync_send('b');
    say("wait 5 s %s", epw(ep, 5000));
    char b[8];
    say("read_full %s", got(read_full(fd, b, 6), b));
    sync_send('z');
    close(ep);
    close(fd);
}

/* Urgent data: the byte sent with MSG_OOB leaves the stream, POLLPRI, SIOCATMARK. */
void oob_server(void)
{
    int s = accept_one();
    struct pollfd p = {s, POLLPRI, 0};
    say_poll("poll POLLPRI", &p, 5000);
    sync_expect('s');
    p.events = POLLIN | POLLPRI;
    say_poll("poll POLLIN|POLLPRI", &p, 0);
    int m = -1;
    const char *r = res(ioctl(s, SIOCATMARK, &m));
    say("SIOCATMARK %s value %d", r, m);
    char b[16];
    say("recv MSG_OOB %s", got(recv(s, b, sizeof b, MSG_OOB), b));
    say("recv MSG_OOB again %s", res(recv(s, b, sizeof b, MSG_OOB)));
    say("read (stops at the mark) %s", got(read(s, b, sizeof b), b));
    m = -1;
    r = res(ioctl(s, SIOCATMARK, &m));
    say("SIOCATMARK %s value %d", r, m);
    say("read %s", got(read(s, b, sizeof b), b));
    p.events = POLLIN | POLLPRI;
    say_poll("poll after reading all", &p, 0);
    int one = 1;
    say("SO_OOBINLINE %s", res(setsockopt(s, SOL_SOCKET, SO_OOBINLINE, &one, sizeof one)));
    sync_send('i');
    say("read_full, urgent byte inline %s", got(read_full(s, b, 5), b));
    say("read at end %s", res(read(s, b, sizeof b)));
    close(s);
}

void oob_client(void)
{
    int fd = connect_one();
    say("send %s", res(send(fd, "ab", 2, 0)));
    say("send MSG_OOB %s", res(send(fd, "X", 1, MSG_OOB)));
    say("send %s", res(send(fd, "cd", 2, 0)));
    /* All five bytes must have arrived before the server looks: wait for its ack of POLLPRI
     * and give the last two bytes a moment (they were written after the urgent one). */
    sleep_ms(50);
    sync_send('s');
    sync_expect('i');
    say("send %s", res(send(fd, "mn", 2, 0)));
    say("send MSG_OOB %s", res(send(fd, "Y", 1, MSG_OOB)));
    say("send %s", res(send(fd, "op", 2, 0)));
    close(fd);
}

/* A socket added to an epoll set while another thread sleeps in epoll_wait on it, with a
 * request already waiting (Apache's event MPM hands an idle keep-alive connection to its
 * listener thread so): the sleeper wakes with it at once, not at its timeout. */
struct late_add {
    int ep;
    const char *got;
    double took;
};

static void *late_add_waiter(void *p)
{
    struct late_add *w = p;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    w->got = epw(w->ep, 5000);
    clock_gettime(CLOCK_MONOTONIC, &b);
    w->took = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    return NULL;
}

void late_add_server(void)
{
    int s = accept_one();
    warm_up_server(s);
    struct late_add w = {epoll_create1(0), NULL, 0};
    pthread_t t;
    pthread_create(&t, NULL, late_add_waiter, &w);
    sleep_ms(200); /* the waiter sleeps on an empty set */
    sync_send('g');
    sync_expect('s'); /* the client's request was sent */
    sleep_ms(100);
    say("ADD EPOLLIN %s", res(ep_ctl(w.ep, EPOLL_CTL_ADD, s, EPOLLIN, 9)));
    pthread_join(t, NULL);
    say("the sleeping wait: %s, within 2 s: %s", w.got, yes(w.took < 2.0));
    char b[16];
    say("read %s", got(read(s, b, 6), b));
    say("write %s", res(write(s, "answer", 6)));
    sync_expect('z');
    close(w.ep);
    close(s);
}

void late_add_client(void)
{
    int fd = connect_one();
    warm_up_client(fd);
    sync_expect('g');
    say("write %s", res(write(fd, "req-2!", 6)));
    sync_send('s');
    char b[16];
    say("read %s", got(read_full(fd, b, 6), b));
    sync_send('z');
    close(fd);
}
