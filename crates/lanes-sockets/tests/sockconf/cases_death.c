#include "sockconf.h"

/* ------------------------------------------------------------------------------------------
 * Cases: death and signals
 * ---------------------------------------------------------------------------------------- */

void killed_writer_server(void)
{
    int s = accept_one();
    struct rstat st = recv_pattern(M_RW, s, 71, 72, 65536, MIB);
    say("read 1 MiB: %s, pattern %s", yes(st.total == MIB), st.bad_at < 0 ? "ok" : "MISMATCH");
    say("SIGKILL the writer %s", res(kill(C.peer, SIGKILL)));
    C.peer_killed = true;
    int stt;
    wait_pid(C.peer, &stt);
    say("writer %s", status_str(stt));
    static unsigned char b[65536];
    uint64_t off = st.total;
    bool bad = false;
    ssize_t n;
    for (;;) {
        n = read(s, b, sizeof b);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (pattern_check(b, off, (size_t)n, 71) >= 0)
            bad = true;
        off += (uint64_t)n;
    }
    say("read until the end: %s, data before it %s",
        (n == 0 || errno == ECONNRESET) ? "eof-or-reset" : res(n), bad ? "MISMATCH" : "ok");
    close(s);
}

void killed_writer_client(void)
{
    int fd = connect_one();
    send_pattern(M_RW, fd, UINT64_MAX / 2, 71, 73, 65536, NULL);
    say("UNREACHABLE: the writer was not killed");
}

void killed_reader_server(void)
{
    int s = accept_one();
    static unsigned char b[65536];
    uint64_t off = 0;
    bool killed = false;
    ssize_t r = 0;
    int e = 0;
    long long t0 = 0;
    /* Write until the reader says it has read 1 MiB; then kill it and go on writing. */
    for (;;) {
        if (!killed) {
            struct pollfd p[2] = {{s, POLLOUT, 0}, {sync_rfd, POLLIN, 0}};
            if (poll(p, 2, 5000) <= 0)
                die("poll");
            if (p[1].revents) {
                sync_expect('k');
                say("SIGKILL the reader %s", res(kill(C.peer, SIGKILL)));
                C.peer_killed = true;
                int st;
                wait_pid(C.peer, &st);
                say("reader %s", status_str(st));
                killed = true;
                t0 = now_ms();
                continue;
            }
            if (!(p[0].revents & POLLOUT))
                continue;
            pattern(b, off, sizeof b, 81);
            r = send(s, b, sizeof b, MSG_NOSIGNAL | MSG_DONTWAIT);
        } else {
            if (now_ms() - t0 > 5000)
                break;
            pattern(b, off, sizeof b, 81);
            r = send(s, b, sizeof b, MSG_NOSIGNAL);
        }
        if (r < 0) {
            e = errno;
            if (e == EAGAIN || e == EINTR)
                continue;
            break;
        }
        off += (uint64_t)r;
    }
    say("sends after the kill end with: %s",
        r < 0 && (e == EPIPE || e == ECONNRESET) ? "epipe-or-reset" : (errno = e, res(r)));
    r = read(s, b, sizeof b);
    say("read after that: %s", r == 0 || (r < 0 && errno == ECONNRESET) ? "eof-or-reset" : res(r));
    close(s);
}

void killed_reader_client(void)
{
    int fd = connect_one();
    struct rstat st = recv_pattern(M_RW, fd, 81, 82, 65536, MIB);
    (void)st;
    sync_send('k');
    for (;;)
        pause();
}

static volatile sig_atomic_t alarms;
static void on_alarm(int s)
{
    (void)s;
    alarms++;
}

/* SIGALRM runs `handler`, with these sigaction flags. */
static void alarm_runs(void (*handler)(int), int flags)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
}

void catch_alarm(int flags)
{
    alarm_runs(on_alarm, flags);
}

void timer_ms(int ms)
{
    struct itimerval it;
    memset(&it, 0, sizeof it);
    it.it_value.tv_sec = ms / 1000;
    it.it_value.tv_usec = (ms % 1000) * 1000;
    setitimer(ITIMER_REAL, &it, NULL);
}

const char *const late_script[] = {"late"};

void eintr_client(void)
{
    int fd = connect_one();
    catch_alarm(0);
    alarms = 0;
    alarm(1);
    long long t0 = now_ms();
    char b[16];
    ssize_t r = recv(fd, b, sizeof b, 0);
    say("recv, alarm after 1 s, no SA_RESTART %s", res(r));
    say("waited >= 900 ms: %s, SIGALRM count %d", yes(now_ms() - t0 >= 900), (int)alarms);
    arm_watchdog();
    sync_send('a');
    say("read_full %s", got(read_full(fd, b, 4), b));
    sync_send('z');
    close(fd);
}

void restart_server(void)
{
    int s = accept_one();
    sync_expect('a');
    sleep_ms(1500);
    say("write %s", res(write(s, "late", 4)));
    sync_expect('z');
    close(s);
}

void restart_client(void)
{
    int fd = connect_one();
    catch_alarm(SA_RESTART);
    alarms = 0;
    alarm(1);
    sync_send('a');
    long long t0 = now_ms();
    char b[16];
    ssize_t r = recv(fd, b, sizeof b, 0);
    say("recv, alarm after 1 s, SA_RESTART, data after 1.5 s %s", got(r, b));
    say("waited >= 1400 ms: %s, SIGALRM count %d", yes(now_ms() - t0 >= 1400), (int)alarms);
    arm_watchdog();
    sync_send('z');
    close(fd);
}

void eintr_wait_client(void)
{
    int fd = connect_one();
    catch_alarm(SA_RESTART);
    alarms = 0;
    int ep = epoll_create1(0);
    ep_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLIN, 1);
    timer_ms(300);
    long long t0 = now_ms();
    say("epoll_wait 5 s, SA_RESTART timer 300 ms %s", epw(ep, 5000));
    say("waited >= 250 ms: %s", yes(now_ms() - t0 >= 250));
    struct pollfd p = {fd, POLLIN, 0};
    timer_ms(300);
    t0 = now_ms();
    int r = poll(&p, 1, 5000);
    say("poll 5 s %s, waited >= 250 ms: %s", res(r), yes(now_ms() - t0 >= 250));
    fd_set set;
    FD_ZERO(&set);
    FD_SET(fd, &set);
    struct timeval tv = {5, 0};
    timer_ms(300);
    t0 = now_ms();
    r = select(fd + 1, &set, NULL, NULL, &tv);
    say("select 5 s %s, waited >= 250 ms: %s", res(r), yes(now_ms() - t0 >= 250));
    struct timeval to = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &to, sizeof to);
    timer_ms(300);
    t0 = now_ms();
    char b[16];
    ssize_t n = recv(fd, b, sizeof b, 0);
    say("recv with SO_RCVTIMEO 5 s, SA_RESTART %s, waited >= 250 ms: %s", res(n),
        yes(now_ms() - t0 >= 250));
    say("SIGALRM count %d", (int)alarms);
    arm_watchdog();
    sync_send('a');
    say("read_full %s", got(read_full(fd, b, 4), b));
    sync_send('z');
    close(ep);
    close(fd);
}

/* A signal that lands while the call still spins on the ring, before its kernel sleep: the
 * call must end with EINTR as the kernel's would (the handler ran during the call), not
 * sleep on until the next event. The case asks the library for a 500 ms spin, also on a
 * busy machine (unless the run sets LANES_POLL_US itself), and each wait runs on a new
 * thread, whose spin budget is that whole 500 ms: a 50 ms timer then lands inside the
 * spin, and inside the kernel's sleep without the library (a timer much shorter could
 * expire before the call, on a loaded machine, with or without the library). */
void spin_signal_setup(void)
{
    setenv("LANES_POLL_US", "500000", 0);
    setenv("LANES_SPIN_GATE", "0", 0);
}

void spin_signal_server(void)
{
    int s = accept_one();
    warm_up_server(s);
    sync_expect('a');
    say("write %s", res(write(s, "late", 4)));
    sync_expect('z');
    close(s);
}

enum spin_wait { SW_EPOLL, SW_POLL, SW_RECV };
struct spin_job {
    enum spin_wait kind;
    int fd, ep;
    int eintr;
};

static void *spin_wait_thread(void *arg)
{
    struct spin_job *j = arg;
    sigset_t alrm;
    sigemptyset(&alrm);
    sigaddset(&alrm, SIGALRM);
    pthread_sigmask(SIG_UNBLOCK, &alrm, NULL);
    timer_ms(50);
    int r;
    struct epoll_event ev;
    struct pollfd p = {j->fd, POLLIN, 0};
    char b[16];
    switch (j->kind) {
    case SW_EPOLL:
        r = epoll_wait(j->ep, &ev, 1, 5000);
        break;
    case SW_POLL:
        r = poll(&p, 1, 5000);
        break;
    default:
        r = (int)recv(j->fd, b, sizeof b, 0);
        break;
    }
    j->eintr = r < 0 && errno == EINTR;
    pthread_sigmask(SIG_BLOCK, &alrm, NULL);
    return NULL;
}

void spin_signal_client(void)
{
    int fd = connect_one();
    warm_up_client(fd);
    catch_alarm(0);
    alarms = 0;
    /* The program's own handler and flags come back, whatever the library installed. */
    struct sigaction q;
    sigaction(SIGALRM, NULL, &q);
    say("sigaction reports the handler: %s, flags %#x", yes(q.sa_handler == on_alarm), (unsigned)q.sa_flags);
    say("signal returns the handler: %s", yes(signal(SIGALRM, on_alarm) == on_alarm));
    catch_alarm(0);
    /* SIGALRM goes to the waiting thread only. */
    sigset_t alrm;
    sigemptyset(&alrm);
    sigaddset(&alrm, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &alrm, NULL);
    int ep = epoll_create1(0);
    ep_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLIN, 1);
    enum { ROUNDS = 3 };
    int eintr[3] = {0, 0, 0};
    for (int i = 0; i < ROUNDS; i++) {
        for (int k = SW_EPOLL; k <= SW_RECV; k++) {
            struct spin_job j = {(enum spin_wait)k, fd, ep, 0};
            pthread_t t;
            if (pthread_create(&t, NULL, spin_wait_thread, &j))
                die("pthread_create");
            pthread_join(t, NULL);
            eintr[k] += j.eintr;
        }
    }
    say("timer 50 ms, no SA_RESTART, %d rounds: epoll_wait EINTR %d, poll EINTR %d, recv EINTR %d", ROUNDS,
        eintr[SW_EPOLL], eintr[SW_POLL], eintr[SW_RECV]);
    /* SA_RESTART restarts a receive, but not on a socket with a receive timeout. */
    catch_alarm(SA_RESTART);
    struct timeval to = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &to, sizeof to);
    int timed_eintr = 0;
    for (int i = 0; i < ROUNDS; i++) {
        struct spin_job j = {SW_RECV, fd, ep, 0};
        pthread_t t;
        if (pthread_create(&t, NULL, spin_wait_thread, &j))
            die("pthread_create");
        pthread_join(t, NULL);
        timed_eintr += j.eintr;
    }
    say("SA_RESTART, SO_RCVTIMEO 5 s, %d rounds: recv EINTR %d", ROUNDS, timed_eintr);
    say("SIGALRM count %d", (int)alarms);
    arm_watchdog();
    sync_send('a');
    char b[16];
    say("read_full %s", got(read_full(fd, b, 4), b));
    sync_send('z');
    close(ep);
    close(fd);
}

/* A blocking send waiting for room while its reader reads slowly (256 bytes every 200 us,
 * so the reader always makes progress): a 100 ms timer without SA_RESTART ends it with the
 * count it moved, as the kernel's send, asleep for room, ends. The library's sender waits
 * for ring room there, not in the kernel. */
enum { SLOW_SEND_BYTES = 64 << 20 };

/* Set up at once (not put off), so that the send meets a full ring. */
void slow_reader_setup(void)
{
    setenv("LANES_SOCKETS_DEFER", "0", 0);
}

void slow_reader_server(void)
{
    int s = accept_one();
    warm_up_server(s);
    sync_expect('s');
    char b[1 << 16];
    unsigned long long got = 0;
    long long t0 = now_ms();
    while (now_ms() - t0 < 1000) {
        ssize_t r = recv(s, b, 256, 0);
        if (r <= 0)
            die("slow read: %zd", r);
        got += (unsigned long long)r;
        usleep(200);
    }
    for (;;) {
        ssize_t r = recv(s, b, sizeof b, 0);
        if (r < 0)
            die("drain: %s", errname(errno));
        if (r == 0)
            break;
        got += (unsigned long long)r;
    }
    say("write count %s", res(write(s, &got, sizeof got)));
    sync_expect('z');
    close(s);
}

void slow_reader_client(void)
{
    int fd = connect_one();
    warm_up_client(fd);
    catch_alarm(0);
    alarms = 0;
    char *big = calloc(1, SLOW_SEND_BYTES);
    if (!big)
        die("calloc");
    sync_send('s');
    timer_ms(100);
    long long t0 = now_ms();
    ssize_t n = send(fd, big, SLOW_SEND_BYTES, 0);
    long long took = now_ms() - t0;
    arm_watchdog();
    say("send 64 MiB to a slow reader, timer 100 ms: partial %s, ended within 800 ms %s, SIGALRM count %d",
        yes(n > 0 && n < SLOW_SEND_BYTES), yes(took < 800), (int)alarms);
    shutdown(fd, SHUT_WR);
    unsigned long long got = 0;
    say("read count %s", res(read_full(fd, &got, sizeof got)));
    say("the reader got what send said: %s", yes(n > 0 && got == (unsigned long long)n));
    sync_send('z');
    free(big);
    close(fd);
}

/* A signal handler that sends on the connection while the program is blocked in a read of a
 * pipe (async-signal-safe, and programs do it: a heartbeat from a SIGALRM handler): the
 * handler's bytes take their place in the stream between what was sent before and after. */
static int handler_fd = -1, handler_pipe = -1;

static void send_from_handler(int s)
{
    (void)s;
    int e = errno;
    if (send(handler_fd, "b", 1, 0) != 1 || write(handler_pipe, "x", 1) != 1)
        _exit(3);
    errno = e;
}

enum { HANDLER_ROUNDS = 10 };

void handler_send_server(void)
{
    int s = accept_one();
    warm_up_server(s);
    /* Everything is written before anything is read: the bytes wait where they went. */
    sync_expect('d');
    int right = 0;
    for (int i = 0; i < HANDLER_ROUNDS; i++) {
        char b[4];
        if (read_full(s, b, 3) != 3)
            break;
        right += memcmp(b, "abc", 3) == 0;
    }
    say("rounds read in order: %d of %d", right, HANDLER_ROUNDS);
    char b[4];
    say("read at end %s", res(read(s, b, sizeof b)));
    close(s);
}

void handler_send_client(void)
{
    int fd = connect_one();
    warm_up_client(fd);
    int p[2];
    if (pipe(p) != 0)
        die("pipe");
    handler_fd = fd;
    handler_pipe = p[1];
    alarm_runs(send_from_handler, SA_RESTART);
    int sent = 0;
    for (int i = 0; i < HANDLER_ROUNDS; i++) {
        char x;
        if (write(fd, "a", 1) != 1)
            break;
        timer_ms(20);
        if (read(p[0], &x, 1) != 1 || write(fd, "c", 1) != 1)
            break;
        sent++;
    }
    say("rounds sent, the middle byte from a SIGALRM handler during a read of a pipe: %d", sent);
    sync_send('d');
    say("close %s", res(close(fd)));
    close(p[0]);
    close(p[1]);
}
