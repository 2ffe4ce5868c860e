#include "sockconf.h"

/* ------------------------------------------------------------------------------------------
 * Cases: processes and threads
 * ---------------------------------------------------------------------------------------- */

void forkshare_server(void)
{
    int s = accept_one();
    static char b[8192];
    ssize_t n = read_full(s, b, sizeof b);
    int cs = 0, ps = 0, other = 0;
    for (ssize_t i = 0; i < n; i++) {
        if (b[i] == 'c')
            cs++;
        else if (b[i] == 'p')
            ps++;
        else
            other++;
    }
    say("read_full %s: child bytes %d parent bytes %d other %d", res(n), cs, ps, other);
    say("write %s", res(write(s, "reply", 5)));
    say("read at end (both closed) %s", res(read(s, b, sizeof b)));
    close(s);
}

void forkshare_client(void)
{
    int fd = connect_one();
    char b[1024];
    struct sub s = sub_start("client/child");
    if (s.pid == 0) {
        memset(b, 'c', sizeof b);
        int ok = 0;
        for (int i = 0; i < 4; i++)
            ok += write_all(fd, b, sizeof b) == (ssize_t)sizeof b;
        say("4 writes of 1024: %d ok", ok);
        say("read_full %s", got(read_full(fd, b, 5), b));
        say("close %s", res(close(fd)));
        sub_exit();
    }
    memset(b, 'p', sizeof b);
    int ok = 0;
    for (int i = 0; i < 4; i++)
        ok += write_all(fd, b, sizeof b) == (ssize_t)sizeof b;
    say("4 writes of 1024: %d ok", ok);
    say("close %s", res(close(fd)));
    say("child %s", status_str(sub_finish(s)));
}

void exec_server(void)
{
    int s = accept_one();
    char b[16];
    say("read_full %s", got(read_full(s, b, 9), b));
    say("write %s", res(write(s, "to exec'd", 9)));
    say("read at end %s", res(read(s, b, sizeof b)));
    close(s);
}

void exec_client(void)
{
    int fd = connect_one();
    int cx = fcntl(fd, F_DUPFD_CLOEXEC, 50);
    say("FD_CLOEXEC of the socket %d, of its F_DUPFD_CLOEXEC copy %d", cloexec_of(fd),
        cloexec_of(cx));
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        die("pipe2");
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        dup2(p[1], 1);
        char a[16], b[16];
        snprintf(a, sizeof a, "%d", fd);
        snprintf(b, sizeof b, "%d", cx);
        execl(C.self, "sockconf", "--exec-child", a, b, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    say("close both copies in the parent %s %s", res(close(fd)), res(close(cx)));
    slurp_into_log(p[0]);
    close(p[0]);
    int st;
    wait_pid(pid, &st);
    say("exec'd child %s", status_str(st));
}

int exec_child_main(int argc, char **argv)
{
    role = "client/exec";
    out_fd = 1;
    arm_watchdog();
    if (argc < 4)
        die("usage: --exec-child FD CLOEXEC_FD");
    int fd = atoi(argv[2]), cx = atoi(argv[3]);
    say("inherited socket FD_CLOEXEC %d", cloexec_of(fd));
    say("F_GETFD of the close-on-exec copy %s", res(fcntl(cx, F_GETFD)));
    int v = -1;
    socklen_t l = sizeof v;
    getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &l);
    say("SO_TYPE %s", v == SOCK_STREAM ? "SOCK_STREAM" : "other");
    say("write %s", res(write(fd, "from exec", 9)));
    char b[16];
    say("read_full %s", got(read_full(fd, b, 9), b));
    say("close %s", res(close(fd)));
    flush_log();
    return 0;
}

/* Hand-off (inetd style): a forked child execs a program with an emptied environment, so
 * without the library, and that program reads what the server sent before the exec. The
 * program is this one, or SOCKCONF_HANDOFF_IMAGE (a static build, which cannot load the
 * library). */
#define HANDOFF_BYTES (64 * 1024)
#define HANDOFF_SEED 0x5eedULL

void handoff_server(void)
{
    int s = accept_one();
    char b[16];
    for (int i = 0; i < 3; i++) {
        say("ping %d %s", i, got(read_full(s, b, 4), b));
        say("write %s", res(write(s, "pong", 4)));
    }
    unsigned char *buf = malloc(HANDOFF_BYTES);
    if (!buf)
        die("malloc");
    pattern(buf, 0, HANDOFF_BYTES, HANDOFF_SEED);
    say("sent %s", res(write_all(s, buf, HANDOFF_BYTES)));
    free(buf);
    sync_send('W');
    char reply[16];
    say("reply %s", got(read_full(s, reply, 8), reply));
    say("read at end %s", res(read(s, b, sizeof b)));
    close(s);
}

enum exec_form { FORM_EXECVE, FORM_EXECLE, FORM_EXECVEAT, FORM_FEXECVE };

static void handoff_client(enum exec_form form)
{
    int fd = connect_one();
    char b[16];
    for (int i = 0; i < 3; i++) {
        say("write %s", res(write(fd, "ping", 4)));
        say("pong %d %s", i, got(read_full(fd, b, 4), b));
    }
    sync_expect('W');
    const char *image = getenv("SOCKCONF_HANDOFF_IMAGE");
    if (!image || !*image)
        image = C.self;
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        die("pipe2");
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        dup2(p[1], 1);
        char a[16];
        snprintf(a, sizeof a, "%d", fd);
        char *envp[] = {NULL};
        char *argv[] = {(char *)"sockconf", (char *)"--handoff-child", a, NULL};
        switch (form) {
        case FORM_EXECLE:
            execle(image, "sockconf", "--handoff-child", a, (char *)NULL, envp);
            break;
        case FORM_EXECVEAT:
            execveat(AT_FDCWD, image, argv, envp, 0);
            break;
        case FORM_FEXECVE: {
            int exe = open(image, O_RDONLY | O_CLOEXEC);
            if (exe >= 0)
                fexecve(exe, argv, envp);
            break;
        }
        case FORM_EXECVE:
            execve(image, argv, envp);
            break;
        }
        _exit(127);
    }
    close(p[1]);
    say("close in the parent %s", res(close(fd)));
    slurp_into_log(p[0]);
    close(p[0]);
    int st;
    wait_pid(pid, &st);
    say("handed-off child %s", status_str(st));
}

void handoff_client_execve(void) { handoff_client(FORM_EXECVE); }
void handoff_client_execle(void) { handoff_client(FORM_EXECLE); }
void handoff_client_execveat(void) { handoff_client(FORM_EXECVEAT); }
void handoff_client_fexecve(void) { handoff_client(FORM_FEXECVE); }

int handoff_child_main(int argc, char **argv)
{
    role = "client/handoff";
    out_fd = 1;
    arm_watchdog();
    if (argc < 3)
        die("usage: --handoff-child FD");
    extern char **environ;
    int vars = 0;
    for (char **e = environ; e && *e; e++)
        vars++;
    say("environment: %d variables", vars);
    int fd = atoi(argv[2]);
    unsigned char *buf = malloc(HANDOFF_BYTES);
    if (!buf)
        die("malloc");
    ssize_t r = read_full(fd, buf, HANDOFF_BYTES);
    say("read_full %s, pattern %s", res(r),
        r == HANDOFF_BYTES && pattern_check(buf, 0, HANDOFF_BYTES, HANDOFF_SEED) < 0 ? "ok" : "BAD");
    free(buf);
    say("send %s", res(send(fd, "received", 8, MSG_NOSIGNAL)));
    say("close %s", res(close(fd)));
    flush_log();
    return 0;
}

static void *thread_sender(void *arg)
{
    struct thr *t = arg;
    static __thread char b[65536];
    memset(b, t->letter, sizeof b);
    size_t left = MIB;
    uint64_t s = t->seed;
    t->ok = 1;
    while (left) {
        size_t n = rnd_size(&s, sizeof b);
        if (n > left)
            n = left;
        if (send_all(t->fd, b, n, 0) != (ssize_t)n) {
            t->ok = 0;
            break;
        }
        left -= n;
    }
    return NULL;
}

void threads_server(void)
{
    int s = accept_one();
    static char b[65536];
    uint64_t total = 0, as = 0, bs = 0, other = 0;
    for (;;) {
        ssize_t n = read(s, b, sizeof b);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++) {
            if (b[i] == 'A')
                as++;
            else if (b[i] == 'B')
                bs++;
            else
                other++;
        }
        total += (uint64_t)n;
    }
    say("received %llu bytes: A %llu B %llu other %llu", (unsigned long long)total,
        (unsigned long long)as, (unsigned long long)bs, (unsigned long long)other);
    say("write %s", res(write(s, "ok", 2)));
    close(s);
}

void threads_client(void)
{
    int fd = connect_one();
    pthread_t a, b;
    struct thr ta = {fd, 'A', 31, 0}, tb = {fd, 'B', 32, 0};
    if (pthread_create(&a, NULL, thread_sender, &ta) || pthread_create(&b, NULL, thread_sender, &tb))
        die("pthread_create");
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    say("two threads sent 1 MiB each: %s %s", yes(ta.ok), yes(tb.ok));
    say("shutdown SHUT_WR %s", res(shutdown(fd, SHUT_WR)));
    char r[4];
    say("read_full %s", got(read_full(fd, r, 2), r));
    close(fd);
}

#define BIG (64ull * MIB)
#define HUGE (4096ull * MIB)
void no_hashing(void) { hash_streams = false; }

/* Four GiB in random sizes up to 1 MiB, every byte checked against the pattern. */
void stream_gib_server(void)
{
    int s = accept_one();
    struct rstat st = recv_pattern(M_RW, s, 51, 52, 1 << 20, UINT64_MAX);
    say_rstat("4 GiB stream", st);
    say("write the byte count back %s", res(write_all(s, &st.total, sizeof st.total)));
    close(s);
}

void stream_gib_client(void)
{
    int fd = connect_one();
    say("sent %s", res(send_pattern(M_RW, fd, HUGE, 51, 53, 1 << 20, NULL)));
    say("shutdown SHUT_WR %s", res(shutdown(fd, SHUT_WR)));
    uint64_t peer = 0;
    const char *r = res(read_full(fd, &peer, sizeof peer));
    say("read_full %s, the peer received all 4 GiB: %s", r, yes(peer == HUGE));
    close(fd);
}

void stream_server(void)
{
    int s = accept_one();
    struct rstat st = recv_pattern(M_RW, s, 41, 42, 262144, UINT64_MAX);
    say_rstat("64 MiB stream", st);
    say("write the hash back %s", res(write_all(s, &st.hash, sizeof st.hash)));
    close(s);
}

void stream_client(void)
{
    int fd = connect_one();
    uint64_t h = 0;
    say("sent %s", res(send_pattern(M_RW, fd, BIG, 41, 43, 262144, &h)));
    say("fnv %016llx", (unsigned long long)h);
    say("shutdown SHUT_WR %s", res(shutdown(fd, SHUT_WR)));
    uint64_t peer = 0;
    const char *r = res(read_full(fd, &peer, sizeof peer));
    say("read_full %s, the peer's hash matches: %s", r, yes(peer == h));
    close(fd);
}

/* Both directions at once, non-blocking, poll-driven, random sizes. */
#define DUPLEX (16ull * MIB)
static void duplex(int fd, uint64_t seed_out, uint64_t seed_in)
{
    set_nonblock(fd, true);
    static unsigned char wb[131072], rb[131072];
    uint64_t sent = 0, got_ = 0, sizes = seed_out * 7 + 1, bad = 0;
    int eagain = 0;
    size_t pending = 0, pend_off = 0;
    bool eof_early = false, failed = false;
    while ((got_ < DUPLEX || sent < DUPLEX) && !failed) {
        struct pollfd p = {fd, (short)((got_ < DUPLEX ? POLLIN : 0) | (sent < DUPLEX ? POLLOUT : 0)), 0};
        int r = poll(&p, 1, 5000);
        if (r == 0) {
            say("duplex: poll timed out at sent %llu received %llu", (unsigned long long)sent,
                (unsigned long long)got_);
            failed = true;
            break;
        }
        if (r < 0) {
            if (errno == EINTR)
                continue;
            die("poll");
        }
        if (p.revents & POLLIN) {
            ssize_t n = read(fd, rb, rnd_size(&sizes, sizeof rb));
            if (n > 0) {
                if (!bad && pattern_check(rb, got_, (size_t)n, seed_in) >= 0)
                    bad = 1;
                got_ += (uint64_t)n;
            } else if (n == 0) {
                eof_early = true;
                failed = true;
            } else if (errno != EAGAIN && errno != EINTR) {
                say("duplex: read %s", res(n));
                failed = true;
            }
        }
        if ((p.revents & POLLOUT) && sent < DUPLEX) {
            if (!pending) {
                pending = rnd_size(&sizes, sizeof wb);
                if (pending > DUPLEX - sent)
                    pending = (size_t)(DUPLEX - sent);
                pattern(wb, sent, pending, seed_out);
                pend_off = 0;
            }
            ssize_t n = write(fd, wb + pend_off, pending - pend_off);
            if (n > 0) {
                pend_off += (size_t)n;
                sent += (uint64_t)n;
                if (pend_off == pending)
                    pending = 0;
            } else if (n < 0 && errno == EAGAIN) {
                eagain = 1;
            } else if (n < 0 && errno != EINTR) {
                say("duplex: write %s", res(n));
                failed = true;
            }
        }
        if ((p.revents & (POLLERR | POLLHUP | POLLNVAL)) && !(p.revents & POLLIN)) {
            say("duplex: revents %s", revstr(p.revents));
            failed = true;
        }
    }
    (void)eagain;
    say("duplex: sent %llu received %llu pattern %s%s", (unsigned long long)sent,
        (unsigned long long)got_, bad ? "MISMATCH" : "ok", eof_early ? " (early end of stream)" : "");
    set_nonblock(fd, false);
    say("shutdown SHUT_WR %s", res(shutdown(fd, SHUT_WR)));
    char c;
    say("read at end %s", res(read(fd, &c, 1)));
}

void duplex_server(void)
{
    int s = accept_one();
    duplex(s, 51, 52);
    close(s);
}

void duplex_client(void)
{
    int fd = connect_one();
    duplex(fd, 52, 51);
    close(fd);
}

void send_eagain_server(void)
{
    int s = accept_one();
    uint64_t total = 0;
    sync_wait_buf(&total, sizeof total);
    struct rstat st = recv_pattern(M_RW, s, 61, 62, 65536, total);
    /* How much fits before EAGAIN depends on buffer sizes: only its class is printed. */
    say("drained what the peer wrote before EAGAIN: %s bytes, pattern %s, all it wrote: %s",
        st.total > 0 ? "> 0" : "0", st.bad_at < 0 ? "ok" : "MISMATCH", yes(st.total == total));
    sync_send('d');
    char b[16];
    say("read_full %s", got(read_full(s, b, 10), b));
    say("read at end %s", res(read(s, b, sizeof b)));
    close(s);
}

void send_eagain_client(void)
{
    int fd = connect_one();
    set_nonblock(fd, true);
    static unsigned char b[65536];
    uint64_t total = 0;
    ssize_t r = 0;
    int e = 0;
    while (total < 1024ull * MIB) {
        pattern(b, total, sizeof b, 61);
        r = write(fd, b, sizeof b);
        if (r < 0) {
            e = errno;
            break;
        }
        total += (uint64_t)r;
    }
    errno = e;
    say("non-blocking writes until one fails: %s, %s written", res(r), total > 0 ? "> 0" : "0");
    sync_send_buf(&total, sizeof total);
    sync_expect('d');
    struct pollfd p = {fd, POLLOUT, 0};
    say_poll("poll POLLOUT after the peer drained", &p, 5000);
    say("write %s", res(write(fd, "0123456789", 10)));
    close(fd);
}

/* Rounds of: the client writes 1.5 MiB without blocking (with the library: the ring fills,
 * the rest goes through the kernel), then the server reads it with a buffer larger than
 * both, so a read takes ring bytes and then kernel bytes in one call, and the direction goes
 * from ring to kernel and back (or parks) round after round. */
#define RING_KERNEL_ROUNDS 8

void ring_kernel_server(void)
{
    int s = accept_one();
    static unsigned char b[4 * MIB];
    uint64_t at = 0;
    bool ok = true;
    for (int round = 0; round < RING_KERNEL_ROUNDS; round++) {
        uint64_t total = 0;
        sync_wait_buf(&total, sizeof total);
        uint64_t end = at + total;
        while (at < end) {
            ssize_t r = read(s, b, (size_t)(end - at));
            if (r <= 0) {
                say("round %d: read %s after %llu of %llu bytes", round, res(r),
                    (unsigned long long)(total - (end - at)), (unsigned long long)total);
                ok = false;
                break;
            }
            if (pattern_check(b, at, (size_t)r, 71) >= 0)
                ok = false;
            at += (uint64_t)r;
        }
        sync_send('d');
    }
    say("%d rounds of ring then kernel bytes read whole, pattern %s", RING_KERNEL_ROUNDS, ok ? "ok" : "MISMATCH");
    char c;
    say("read at end %s", res(read(s, &c, 1)));
    close(s);
}

void ring_kernel_client(void)
{
    int fd = connect_one();
    set_nonblock(fd, true);
    static unsigned char b[65536];
    uint64_t at = 0;
    for (int round = 0; round < RING_KERNEL_ROUNDS; round++) {
        uint64_t total = 0;
        while (total < 3 * MIB / 2) {
            pattern(b, at, sizeof b, 71);
            ssize_t r = write(fd, b, sizeof b);
            if (r < 0)
                break; /* EAGAIN: the kernel's buffers are smaller here; the peer reads what went */
            at += (uint64_t)r;
            total += (uint64_t)r;
        }
        sync_send_buf(&total, sizeof total);
        sync_expect('d');
    }
    close(fd);
}

void timeo_server(void)
{
    int s = accept_one();
    sync_expect('d');
    /* Drain what the client wrote until its send timed out, then its end of stream. */
    static char b[65536];
    while (read(s, b, sizeof b) > 0) {
    }
    close(s);
}

void timeo_client(void)
{
    int fd = connect_one();
    struct timeval tv = {0, 200000};
    say("SO_RCVTIMEO 200 ms %s", res(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv)));
    memset(&tv, 0, sizeof tv);
    socklen_t l = sizeof tv;
    const char *rs = res(getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &l));
    say("getsockopt SO_RCVTIMEO %s %ld.%06ld", rs, (long)tv.tv_sec, (long)tv.tv_usec);
    char b[16];
    long long t0 = now_ms();
    ssize_t r = recv(fd, b, sizeof b, 0);
    say("recv %s, waited >= 190 ms: %s", res(r), yes(now_ms() - t0 >= 190));
    tv = (struct timeval){0, 200000};
    say("SO_SNDTIMEO 200 ms %s", res(setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv)));
    static char big[65536];
    long long t1 = 0;
    int e = 0;
    uint64_t total = 0;
    t0 = now_ms();
    while (now_ms() - t0 < 10000) {
        t1 = now_ms();
        r = send(fd, big, sizeof big, MSG_NOSIGNAL);
        if (r < 0) {
            e = errno;
            break;
        }
        total += (uint64_t)r;
    }
    errno = e;
    say("blocking sends until one fails (eventually) %s, the failing one waited >= 190 ms: %s", res(r),
        yes(now_ms() - t1 >= 190));
    sync_send('d');
    close(fd);
}

/* A multi-threaded process forks while its other threads are inside socket calls: each
 * child, which has only the forking thread, must be able to close its copies of the
 * sockets and wait on an epoll set of them (Python's multiprocessing with the fork start
 * method, a threaded server forking helpers). Locks a vanished thread held at the fork
 * would leave them blocked for good. */
#define BUSY_PAIRS 12
#define BUSY_FORKS 32
static int busy_fds[2 * BUSY_PAIRS];
static int busy_epfd;
static atomic_int busy_stop;

static void *busy_thread(void *arg)
{
    int first = *(int *)arg;
    char b[64];
    struct epoll_event ev[4];
    for (unsigned i = (unsigned)first; !atomic_load(&busy_stop); i++) {
        /* More sockets than a thread's cache of lookups holds: every call looks in the
         * table. */
        (void)recv(busy_fds[i % (2 * BUSY_PAIRS)], b, sizeof b, MSG_DONTWAIT);
        if (i % 4 == 0)
            (void)epoll_wait(busy_epfd, ev, 4, 0);
    }
    return NULL;
}

void forkbusy_server(void)
{
    int s = accept_one();
    char b[8];
    say("read_full %s", got(read_full(s, b, 4), b));
    say("write %s", res(write(s, "ok", 2)));
    close(s);
}

void forkbusy_client(void)
{
    int fd = connect_one();
    int l = listen_socket(C.family, 0);
    busy_epfd = epoll_create1(EPOLL_CLOEXEC);
    for (int i = 0; i < BUSY_PAIRS; i++) {
        struct sockaddr_storage ss;
        socklen_t len = loop_addr(C.family, bound_port(l), &ss);
        int c = tcp_socket(0);
        if (connect(c, (struct sockaddr *)&ss, len) < 0)
            die("connect (pair)");
        int a = accept(l, NULL, NULL);
        if (a < 0)
            die("accept (pair)");
        busy_fds[2 * i] = c;
        busy_fds[2 * i + 1] = a;
        char b[2];
        for (int k = 0; k < 20; k++) /* enough calls for the pair to be set up */
            if (write_all(c, "hi", 2) != 2 || read_full(a, b, 2) != 2 || write_all(a, "ok", 2) != 2 ||
                read_full(c, b, 2) != 2)
                die("exchange (pair)");
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = a};
        epoll_ctl(busy_epfd, EPOLL_CTL_ADD, a, &ev);
    }
    close(l);
    pthread_t t[2];
    int firsts[2] = {0, 7};
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, busy_thread, &firsts[i]))
            die("pthread_create");
    int exited = 0, hung = 0;
    for (int k = 0; k < BUSY_FORKS; k++) {
        pid_t pid = fork();
        if (pid < 0)
            die("fork");
        if (pid == 0) {
            struct epoll_event ev[4];
            (void)epoll_wait(busy_epfd, ev, 4, 0);
            for (int i = 0; i < 2 * BUSY_PAIRS; i++)
                close(busy_fds[i]);
            _exit(0);
        }
        int st = 0;
        long long until = now_ms() + 3000;
        pid_t r;
        while ((r = waitpid(pid, &st, WNOHANG)) == 0 && now_ms() < until)
            sleep_ms(1);
        if (r == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            exited++;
        } else {
            hung++;
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            break; /* one is enough, and the watchdog bounds the case */
        }
    }
    atomic_store(&busy_stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    say("forks beside two busy threads: %d children closed their sockets and exited, %d hung",
        exited, hung);
    for (int i = 0; i < 2 * BUSY_PAIRS; i++)
        close(busy_fds[i]);
    close(busy_epfd);
    say("write %s", res(write(fd, "done", 4)));
    char b[4];
    say("read_full %s", got(read_full(fd, b, 2), b));
    close(fd);
}

/* An accepted socket passed to another process over a Unix socket (SCM_RIGHTS), its own
 * copy closed at once: the receiver carries on the stream, every byte included (a
 * pre-forked worker pool fed by an acceptor). The worker is forked before the accept, so
 * the socket reaches it only through the message. */
static void pass_fd(int via, int fd)
{
    char byte = 'F';
    struct iovec iov = {&byte, 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = u.buf;
    m.msg_controllen = sizeof u.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (sendmsg(via, &m, 0) != 1)
        die("sendmsg SCM_RIGHTS");
}

static int take_fd(int via)
{
    char byte;
    struct iovec iov = {&byte, 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = u.buf;
    m.msg_controllen = sizeof u.buf;
    if (recvmsg(via, &m, 0) != 1)
        return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    if (!c || c->cmsg_type != SCM_RIGHTS)
        return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

void passfd_server(void)
{
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
        die("socketpair");
    pid_t worker = fork();
    if (worker < 0)
        die("fork");
    if (worker == 0) {
        close(sp[0]);
        int s = take_fd(sp[1]);
        char b[64];
        int handled = 0;
        for (;;) {
            ssize_t n = read(s, b, sizeof b);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            char r[80];
            int k = snprintf(r, sizeof r, "W:%.*s", (int)n, b);
            if (write_all(s, r, (size_t)k) != k)
                break;
            handled++;
        }
        _exit(handled > 0 ? 0 : 1);
    }
    close(sp[1]);
    int s = accept_one();
    warm_up_server(s);
    sleep_ms(200); /* the client's next requests wait in the ring meanwhile */
    pass_fd(sp[0], s);
    say("close after passing %s", res(close(s)));
    int st = 0;
    wait_pid(worker, &st);
    say("worker %s", status_str(st));
    close(sp[0]);
}

void passfd_client(void)
{
    int fd = connect_one();
    warm_up_client(fd);
    int right = 0;
    for (int i = 0; i < 30; i++) {
        char q[16], want[24], b[24];
        int k = snprintf(q, sizeof q, "n%02d", i);
        snprintf(want, sizeof want, "W:%s", q);
        if (write_all(fd, q, (size_t)k) != k)
            break;
        if (read_full(fd, b, (size_t)k + 2) != k + 2)
            break;
        right += memcmp(b, want, (size_t)k + 2) == 0;
    }
    say("30 requests after the hand-off, answered by the worker: %d", right);
    say("close %s", res(close(fd)));
}

/* exit-handlers: exit() destroys the main thread's thread-local storage before it runs the
 * program's atexit handlers, and programs close and shut down their sockets there (socat
 * does): the calls must behave there as anywhere else. */
static int exit_fd = -1, exit_ep = -1;

static void exit_handler(void)
{
    char b[8];
    struct epoll_event ev;
    say("send in the exit handler %s", res(send(exit_fd, "bye", 3, 0)));
    say("shutdown(SHUT_WR) in the exit handler %s", res(shutdown(exit_fd, SHUT_WR)));
    say("epoll_wait in the exit handler %s", res(epoll_wait(exit_ep, &ev, 1, 5000)));
    say("recv in the exit handler %s", got(recv(exit_fd, b, sizeof b, 0), b));
    say("read at end in the exit handler %s", res(read(exit_fd, b, sizeof b)));
    say("close in the exit handler %s", res(close(exit_fd)));
    flush_log();
}

void exit_handlers_server(void)
{
    int s = accept_one();
    char b[8];
    say("read_full %s", got(read_full(s, b, 5), b));
    say("write %s", res(write(s, "hi", 2)));
    say("read_full %s", got(read_full(s, b, 3), b));
    say("read at end %s", res(read(s, b, sizeof b)));
    say("write %s", res(write(s, "ok", 2)));
    close(s);
}

void exit_handlers_client(void)
{
    int fd = connect_one();
    char b[8];
    say("write %s", res(write(fd, "hello", 5)));
    say("read_full %s", got(read_full(fd, b, 2), b));
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    say("epoll_ctl ADD %s", res(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)));
    say("epoll_wait 0 %s", res(epoll_wait(ep, &ev, 1, 0)));
    exit_fd = fd;
    exit_ep = ep;
    say("atexit %s", res(atexit(exit_handler)));
    exit(0);
}
