#include "sockconf.h"

/* ------------------------------------------------------------------------------------------
 * Side channel (never the socket under test)
 * ---------------------------------------------------------------------------------------- */

int sync_rfd = -1, sync_wfd = -1;
static ino_t sync_rino, sync_wino;

/* Remembers what the side channel's fds are, so that a library closing or replacing them
 * (a bug worth catching) is reported instead of hanging both sides. */
void sync_remember(void)
{
    struct stat st;
    if (fstat(sync_rfd, &st) < 0)
        die("fstat sync fd");
    sync_rino = st.st_ino;
    if (fstat(sync_wfd, &st) < 0)
        die("fstat sync fd");
    sync_wino = st.st_ino;
}

static void sync_check(int fd, ino_t ino)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        die("the side channel's fd %d was closed behind the program's back", fd);
    if (st.st_ino != ino)
        die("the side channel's fd %d was replaced behind the program's back", fd);
}

void sync_send_buf(const void *p, size_t n)
{
    sync_check(sync_wfd, sync_wino);
    const char *c = p;
    while (n) {
        ssize_t w = write(sync_wfd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("sync: write");
        c += w;
        n -= (size_t)w;
    }
}

void sync_wait_buf(void *p, size_t n)
{
    sync_check(sync_rfd, sync_rino);
    char *c = p;
    while (n) {
        ssize_t r = read(sync_rfd, c, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            die("sync: peer gone");
        c += r;
        n -= (size_t)r;
    }
}

void sync_send(char c) { sync_send_buf(&c, 1); }

char sync_wait(void)
{
    char c;
    sync_wait_buf(&c, 1);
    return c;
}

void sync_expect(char want)
{
    char c = sync_wait();
    if (c != want)
        die("sync: expected '%c', got '%c'", want, c);
}
