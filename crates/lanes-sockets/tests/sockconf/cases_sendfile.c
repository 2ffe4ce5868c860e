#include "sockconf.h"

/* ------------------------------------------------------------------------------------------
 * Cases: sendfile, splice, stdio
 * ---------------------------------------------------------------------------------------- */

int temp_file(void)
{
    const char *tmp = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/sockconf-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int f = mkstemp(path);
    if (f < 0)
        die("mkstemp %s", path);
    unlink(path);
    return f;
}

#define SF_SIZE (3 * MIB + 123)
void sendfile_server(void)
{
    int s = accept_one();
    int f = temp_file();
    unsigned char *b = malloc(SF_SIZE);
    if (!b)
        die("malloc");
    pattern(b, 0, SF_SIZE, 21);
    if (write_all(f, b, SF_SIZE) != SF_SIZE)
        die("write temp file");
    free(b);
    off_t off = 0;
    size_t total = 0;
    while (total < SF_SIZE) {
        ssize_t n = sendfile(s, f, &off, SF_SIZE - total);
        if (n <= 0) {
            say("sendfile %s", res(n));
            break;
        }
        total += (size_t)n;
    }
    say("sendfile with an offset: %zu bytes, offset now %lld, file position %lld", total,
        (long long)off, (long long)lseek(f, 0, SEEK_CUR));
    lseek(f, 0, SEEK_SET);
    ssize_t n = sendfile(s, f, NULL, 1000);
    say("sendfile without an offset %s, file position %lld", res(n), (long long)lseek(f, 0, SEEK_CUR));
    say("sendfile from a socket %s", res(sendfile(f, s, NULL, 10)));
    close(f);
    say("shutdown SHUT_WR %s", res(shutdown(s, SHUT_WR)));
    char c;
    say("read at end %s", res(read(s, &c, 1)));
    close(s);
}

void sendfile_client(void)
{
    int fd = connect_one();
    unsigned char *b = malloc(SF_SIZE + 2000);
    if (!b)
        die("malloc");
    ssize_t n = read_full(fd, b, SF_SIZE + 2000);
    say("read to the end %s", res(n));
    say("first part right: %s", yes(n >= SF_SIZE && pattern_check(b, 0, SF_SIZE, 21) < 0));
    say("second part right: %s",
        yes(n == SF_SIZE + 1000 && pattern_check(b + SF_SIZE, 0, 1000, 21) < 0));
    say("fnv %016llx", (unsigned long long)fnv(FNV_INIT, b, n > 0 ? (size_t)n : 0));
    free(b);
    close(fd);
}

void splice_server(void)
{
    int s = accept_one();
    int p[2];
    if (pipe(p) < 0)
        die("pipe");
    say("write pipe %s", res(write(p[1], "hello splice", 12)));
    say("splice pipe -> socket %s", res(splice(p[0], NULL, s, NULL, 12, 0)));
    size_t total = 0;
    while (total < 11) {
        ssize_t n = splice(s, NULL, p[1], NULL, 11 - total, 0);
        if (n <= 0) {
            say("splice socket -> pipe %s", res(n));
            break;
        }
        total += (size_t)n;
    }
    char b[16];
    say("splice socket -> pipe: %zu bytes, pipe holds %s", total, got(read(p[0], b, sizeof b), b));
    say("splice at end %s", res(splice(s, NULL, p[1], NULL, 11, 0)));
    close(s);
}

void splice_client(void)
{
    int fd = connect_one();
    char b[16];
    say("read_full %s", got(read_full(fd, b, 12), b));
    say("write %s", res(write(fd, "back at you", 11)));
    close(fd);
}

void stdio_server(void)
{
    int s = accept_one();
    char b[64];
    say("read_full %s", got(read_full(s, b, 9), b));
    say("write %s", res(write(s, "world\n", 6)));
    say("read_full %s", got(read_full(s, b, 11), b));
    say("read at end %s", res(read(s, b, sizeof b)));
    close(s);
}

void stdio_client(void)
{
    int fd = connect_one();
    FILE *f = fdopen(dup(fd), "r+");
    say("fdopen %s", f ? "ok" : "failed");
    if (!f)
        die("fdopen");
    say("fprintf %d", fprintf(f, "hello %d\n", 42));
    say("fflush %d", fflush(f));
    char line[64] = "";
    char *l = fgets(line, sizeof line, f);
    say("fgets %s", l ? got((ssize_t)strlen(line), line) : "(null)");
    say("dprintf %d", dprintf(fd, "dprintf %s\n", "ok"));
    say("fclose %d", fclose(f));
    close(fd);
}
