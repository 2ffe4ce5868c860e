/* forkserve: a fork-per-connection echo server and its client, the way PostgreSQL, sshd and
 * rsync's daemon serve: the parent accepts, forks, closes the accepted socket at once and
 * goes back to accept; the child serves the connection. crates/lanes-sockets/tests/
 * conformance.rs builds it with plain cc and counts how many connections the library
 * accelerated.
 *
 *   forkserve server PORT N [setuid UID]   accept N connections, fork per connection, each
 *                                          child echoes until EOF (with `setuid UID`: a
 *                                          worker forked after listen() drops to UID, as
 *                                          nginx workers do, and accepts and forks instead)
 *   forkserve client PORT N ROUNDS READY GO
 *                                          N connections one after the other, each sending
 *                                          ROUNDS x 16 KiB of a pattern and checking the
 *                                          echo byte for byte; all N stay open, the file
 *                                          READY is created, and once the file GO exists
 *                                          they are closed
 *
 * Exit status 0 when every byte came back as sent (client) and every child ended well
 * (server); messages go to stdout.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (16 * 1024)

static void die(const char *what)
{
    printf("FATAL: %s: %s\n", what, strerror(errno));
    fflush(stdout);
    _exit(2);
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    unsigned x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        b[i] = (unsigned char)(x >> 16);
    }
}

static int read_full(int fd, unsigned char *b, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const unsigned char *b, size_t n)
{
    size_t put = 0;
    while (put < n) {
        ssize_t r = write(fd, b + put, n - put);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        put += (size_t)r;
    }
    return 0;
}

static void echo(int fd)
{
    static unsigned char buf[CHUNK];
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            die("child read");
        if (r == 0)
            break;
        if (write_full(fd, buf, (size_t)r) < 0)
            die("child write");
    }
    close(fd);
}

static int server(int port, int n, int uid)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
        die("socket");
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0)
        die("bind");
    if (listen(l, 64) < 0)
        die("listen");
    if (uid >= 0) {
        pid_t w = fork();
        if (w < 0)
            die("fork");
        if (w > 0) {
            int st;
            close(l);
            if (waitpid(w, &st, 0) < 0)
                die("waitpid");
            return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
        }
        if (setuid((uid_t)uid) < 0)
            die("setuid");
        printf("server: worker %d runs as uid %d\n", (int)getpid(), (int)getuid());
    }
    for (int i = 0; i < n; i++) {
        int c = accept(l, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR) {
                i--;
                continue;
            }
            die("accept");
        }
        pid_t pid = fork();
        if (pid < 0)
            die("fork");
        if (pid == 0) {
            close(l);
            echo(c);
            _exit(0);
        }
        close(c); /* at once, racing the child */
    }
    close(l);
    int bad = 0, st;
    for (int i = 0; i < n; i++) {
        if (wait(&st) < 0)
            die("wait");
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad++;
    }
    printf("server: %d connections served, %d children failed\n", n, bad);
    return bad ? 1 : 0;
}

static int client(int port, int n, int rounds, const char *ready, const char *go)
{
    static unsigned char out[CHUNK], in[CHUNK];
    int *fds = calloc((size_t)n, sizeof *fds);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (!fds)
        die("calloc");
    for (int i = 0; i < n; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
            die("connect");
        for (int r = 0; r < rounds; r++) {
            fill(out, sizeof out, (unsigned)(i * 7919 + r));
            if (write_full(fd, out, sizeof out) < 0)
                die("write");
            if (read_full(fd, in, sizeof in) < 0)
                die("read");
            if (memcmp(in, out, sizeof out) != 0) {
                printf("FATAL: connection %d round %d: the echo differs\n", i, r);
                return 1;
            }
        }
        fds[i] = fd;
    }
    printf("client: %d connections, %d bytes each way each, byte-exact\n", n, rounds * CHUNK);
    fflush(stdout);
    int f = open(ready, O_CREAT | O_WRONLY, 0600);
    if (f < 0)
        die("ready file");
    close(f);
    struct stat sb;
    while (stat(go, &sb) != 0) {
        struct timespec t = {0, 5 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    for (int i = 0; i < n; i++)
        close(fds[i]);
    free(fds);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 4 && strcmp(argv[1], "server") == 0)
        return server(atoi(argv[2]), atoi(argv[3]),
                      argc >= 6 && strcmp(argv[4], "setuid") == 0 ? atoi(argv[5]) : -1);
    if (argc >= 7 && strcmp(argv[1], "client") == 0)
        return client(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), argv[5], argv[6]);
    fprintf(stderr, "usage: forkserve server PORT N [setuid UID] | client PORT N ROUNDS READY GO\n");
    return 2;
}
