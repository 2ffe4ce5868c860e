/*
 * sockconf: named conformance cases for TCP sockets over loopback.
 *
 *   sockconf --list                          every case: name, split|fork-only, what it checks
 *   sockconf CASE                            server and client of CASE in one program (fork)
 *   sockconf CASE --role server --port P     the server half alone, listening on port P
 *   sockconf CASE --role client --port P     the client half alone, connecting to port P
 *   ... --host4 A --host6 B                  split across hosts: the server's addresses
 *                                            (it listens on them, the client connects)
 *
 * Each case prints a canonical transcript on stdout: return values, errno names, revents,
 * byte counts, checksums and event order, server lines first, then client lines. Nothing in
 * it depends on port numbers, fd numbers, timing or buffer sizes (those are printed as
 * classes: "> 0", "EAGAIN eventually", "eof-or-reset"), so the transcript of a run without
 * any preloaded library is the reference a run under LD_PRELOAD must reproduce exactly.
 *
 * In fork mode the parent is the server and the child the client; they synchronise over a
 * pair of pipes (never over the socket under test) and the child hands its transcript to the
 * parent through a third pipe. In split mode the two halves are separate processes (so a
 * test can preload a library into one of them only); they synchronise through two FIFOs in
 * $TMPDIR named after the port. Every process arms alarm() as a watchdog: a case that hangs
 * prints what it has, then "TIMEOUT", and exits with status 3.
 *
 * The program is one file per section: this one runs a case and holds main(); table.c lists
 * the cases; cases_*.c are the cases by theme; transcript.c, data.c, side_channel.c,
 * sockets.c and streams.c are what the cases are written with; sockconf.h is what the files
 * share.
 *
 * Build: cc -O2 -Wall -Wextra -Werror -pthread $(ls *.c | grep -v forkserve) -o sockconf
 * (or make).
 */

#include "sockconf.h"

/* ------------------------------------------------------------------------------------------
 * Running a case
 * ---------------------------------------------------------------------------------------- */

static int run_fork(const struct casedef *c)
{
    C.lfd = listen_socket(C.family, 0);
    C.port = bound_port(C.lfd);
    int s2c[2], c2s[2], logp[2];
    if (pipe2(s2c, O_CLOEXEC) < 0 || pipe2(c2s, O_CLOEXEC) < 0 || pipe2(logp, O_CLOEXEC) < 0)
        die("pipe2");
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        role = "client";
        out_fd = logp[1];
        close(logp[0]);
        close(s2c[1]);
        close(c2s[0]);
        sync_rfd = s2c[0];
        sync_wfd = c2s[1];
        sync_remember();
        close(C.lfd);
        C.lfd = -1;
        arm_watchdog();
        c->client();
        flush_log();
        _exit(0);
    }
    role = "server";
    watch_child = pid;
    C.peer = pid;
    close(logp[1]);
    close(s2c[0]);
    close(c2s[1]);
    sync_rfd = c2s[0];
    sync_wfd = s2c[1];
    sync_remember();
    c->server();
    close(C.lfd);
    /* The client's transcript: read it before reaping, the pipe holds it meanwhile. */
    char *clog = NULL;
    size_t clen = 0, ccap = 0;
    for (;;) {
        if (clen + 4096 > ccap) {
            ccap = ccap ? ccap * 2 : 65536;
            clog = realloc(clog, ccap);
            if (!clog)
                die("realloc");
        }
        ssize_t r = read(logp[0], clog + clen, ccap - clen);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        clen += (size_t)r;
    }
    int st = 0, rc = 0;
    if (!C.peer_killed) {
        wait_pid(pid, &st);
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
            say("client %s", status_str(st));
            rc = 1;
        }
    }
    watch_child = -1;
    flush_log();
    write_all_raw(1, clog, clen);
    free(clog);
    return rc;
}

static void fifo_paths(int port, char *a, char *b, size_t n)
{
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    snprintf(a, n, "%s/sockconf-%d-s2c", tmp, port);
    snprintf(b, n, "%s/sockconf-%d-c2s", tmp, port);
}

static int open_fifo(const char *path)
{
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    unlink(tmp);
    unlink(path);
    if (mkfifo(tmp, 0600) < 0)
        die("mkfifo %s", tmp);
    int fd = open(tmp, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        die("open %s", tmp);
    if (rename(tmp, path) < 0)
        die("rename %s", tmp);
    return fd;
}

static int run_split(const struct casedef *c, bool server)
{
    char s2c[512], c2s[512];
    fifo_paths(C.port, s2c, c2s, sizeof s2c);
    C.split = true;
    if (server) {
        role = "server";
        C.lfd = listen_socket(C.family, C.port);
        /* Each FIFO is opened under a temporary name and only then renamed into place: a
         * client that finds it knows the server holds it open, so what the client writes
         * stays in the pipe even if the client is done and gone before the server reads. */
        sync_wfd = open_fifo(s2c);
        sync_rfd = open_fifo(c2s);
        sync_remember();
        sync_expect('H');
        unlink(s2c);
        unlink(c2s);
        c->server();
        close(C.lfd);
    } else {
        role = "client";
        long long t0 = now_ms();
        while (sync_rfd < 0 || sync_wfd < 0) {
            if (sync_rfd < 0)
                sync_rfd = open(s2c, O_RDWR | O_CLOEXEC);
            if (sync_wfd < 0)
                sync_wfd = open(c2s, O_RDWR | O_CLOEXEC);
            if (sync_rfd >= 0 && sync_wfd >= 0)
                break;
            if (now_ms() - t0 > 10000)
                die("no server: %s", s2c);
            sleep_ms(10);
        }
        sync_remember();
        sync_send('H');
        c->client();
    }
    flush_log();
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: sockconf --list\n"
                    "       sockconf CASE [--role server|client --port P [--host4 A] [--host6 B]]\n");
    exit(64);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < ncases; i++)
            printf("%s\t%s\t%s\n", cases[i].name, cases[i].split ? "split" : "fork-only",
                   cases[i].what);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "--exec-child") == 0)
        return exec_child_main(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "--handoff-child") == 0)
        return handoff_child_main(argc, argv);
    if (argc < 2)
        usage();
    const struct casedef *c = find_case(argv[1]);
    if (!c) {
        fprintf(stderr, "sockconf: no case %s (see --list)\n", argv[1]);
        return 64;
    }
    const char *want_role = NULL;
    int port = -1;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--role") == 0 && i + 1 < argc)
            want_role = argv[++i];
        else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (strcmp(argv[i], "--host4") == 0 && i + 1 < argc)
            C.host4 = argv[++i];
        else if (strcmp(argv[i], "--host6") == 0 && i + 1 < argc)
            C.host6 = argv[++i];
        else
            usage();
    }
    static char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0)
        die("readlink /proc/self/exe");
    self[sl] = 0;
    C.self = self;
    C.family = c->family;
    if (c->setup)
        c->setup();
    arm_watchdog();
    if (!want_role)
        return run_fork(c);
    if (port <= 0 || port > 65535 || (strcmp(want_role, "server") && strcmp(want_role, "client")))
        usage();
    if (!c->split) {
        fprintf(stderr, "sockconf: case %s runs in fork mode only\n", c->name);
        return 64;
    }
    C.port = port;
    return run_split(c, strcmp(want_role, "server") == 0);
}
