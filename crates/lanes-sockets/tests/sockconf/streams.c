#include "sockconf.h"

/* ------------------------------------------------------------------------------------------
 * Streams
 * ---------------------------------------------------------------------------------------- */

int last_addrlen = -1, last_namelen = -1, last_msgflags = -1;

/* M_V2MIX: every other call of a side is preadv2/pwritev2, the others read/write. */
static unsigned v2mix_sends, v2mix_recvs;

ssize_t x_send(enum iomode m, int fd, const unsigned char *b, size_t n)
{
    if (m == M_V2MIX)
        m = v2mix_sends++ % 2 ? M_V2 : M_RW;
    switch (m) {
    case M_RW:
        return write(fd, b, n);
    case M_SR:
        return send(fd, b, n, 0);
    case M_TO:
        return sendto(fd, b, n, 0, NULL, 0);
    case M_MSG: {
        struct iovec iov[3];
        size_t a = n / 3, c = n / 2;
        iov[0] = (struct iovec){(void *)b, a};
        iov[1] = (struct iovec){(void *)(b + a), c - a};
        iov[2] = (struct iovec){(void *)(b + c), n - c};
        struct msghdr mh;
        memset(&mh, 0, sizeof mh);
        mh.msg_iov = iov;
        mh.msg_iovlen = 3;
        return sendmsg(fd, &mh, 0);
    }
    case M_VEC: {
        struct iovec iov[4];
        size_t q = n / 4;
        for (int i = 0; i < 4; i++)
            iov[i] = (struct iovec){(void *)(b + (size_t)i * q), i == 3 ? n - 3 * q : q};
        return writev(fd, iov, 4);
    }
    case M_V2:
    case M_V2MIX: {
        /* At the current position (-1), as a socket allows; with a flag sockets ignore. */
        struct iovec iov[2];
        size_t h = n / 2;
        iov[0] = (struct iovec){(void *)b, h};
        iov[1] = (struct iovec){(void *)(b + h), n - h};
        return pwritev2(fd, iov, 2, -1, RWF_HIPRI);
    }
    case M_MMSG: {
        struct iovec iov[2];
        struct mmsghdr mm[2];
        memset(mm, 0, sizeof mm);
        size_t h = n / 2;
        iov[0] = (struct iovec){(void *)b, h};
        iov[1] = (struct iovec){(void *)(b + h), n - h};
        mm[0].msg_hdr.msg_iov = &iov[0];
        mm[0].msg_hdr.msg_iovlen = 1;
        mm[1].msg_hdr.msg_iov = &iov[1];
        mm[1].msg_hdr.msg_iovlen = 1;
        int r = sendmmsg(fd, mm, 2, 0);
        if (r < 0)
            return -1;
        return (ssize_t)(mm[0].msg_len + (r > 1 ? mm[1].msg_len : 0));
    }
    }
    return -1;
}

static ssize_t x_recv(enum iomode m, int fd, unsigned char *b, size_t n)
{
    if (m == M_V2MIX)
        m = v2mix_recvs++ % 2 ? M_V2 : M_RW;
    switch (m) {
    case M_RW:
        return read(fd, b, n);
    case M_SR:
        return recv(fd, b, n, 0);
    case M_TO: {
        struct sockaddr_storage ss;
        socklen_t l = sizeof ss;
        ssize_t r = recvfrom(fd, b, n, 0, (struct sockaddr *)&ss, &l);
        if (r >= 0)
            last_addrlen = (int)l;
        return r;
    }
    case M_MSG: {
        struct sockaddr_storage ss;
        struct iovec iov[2];
        size_t h = n / 2;
        iov[0] = (struct iovec){b, h};
        iov[1] = (struct iovec){b + h, n - h};
        struct msghdr mh;
        memset(&mh, 0, sizeof mh);
        mh.msg_name = &ss;
        mh.msg_namelen = sizeof ss;
        mh.msg_iov = iov;
        mh.msg_iovlen = 2;
        ssize_t r = recvmsg(fd, &mh, 0);
        if (r >= 0) {
            last_namelen = (int)mh.msg_namelen;
            last_msgflags = mh.msg_flags;
        }
        return r;
    }
    case M_VEC: {
        struct iovec iov[3];
        size_t t = n / 3;
        iov[0] = (struct iovec){b, t};
        iov[1] = (struct iovec){b + t, t};
        iov[2] = (struct iovec){b + 2 * t, n - 2 * t};
        return readv(fd, iov, 3);
    }
    case M_V2:
    case M_V2MIX: {
        struct iovec iov[2];
        size_t h = n / 2;
        iov[0] = (struct iovec){b, h};
        iov[1] = (struct iovec){b + h, n - h};
        return preadv2(fd, iov, 2, -1, 0);
    }
    case M_MMSG: {
        struct iovec iov[2];
        struct mmsghdr mm[2];
        memset(mm, 0, sizeof mm);
        size_t h = n / 2;
        iov[0] = (struct iovec){b, h};
        iov[1] = (struct iovec){b + h, n - h};
        mm[0].msg_hdr.msg_iov = &iov[0];
        mm[0].msg_hdr.msg_iovlen = 1;
        mm[1].msg_hdr.msg_iov = &iov[1];
        mm[1].msg_hdr.msg_iovlen = 1;
        /* The second entry continues the stream where the first stopped, short or not. */
        int r = recvmmsg(fd, mm, 2, MSG_WAITFORONE, NULL);
        if (r < 0)
            return -1;
        if (r > 1 && mm[0].msg_len != h)
            memmove(b + mm[0].msg_len, b + h, mm[1].msg_len);
        return (ssize_t)(mm[0].msg_len + (r > 1 ? mm[1].msg_len : 0));
    }
    }
    return -1;
}

/* Sends total bytes of the pattern (seed) in chunks of random size; returns 0 or -1. */
int send_pattern(enum iomode m, int fd, uint64_t total, uint64_t seed, uint64_t sizes,
                        size_t maxchunk, uint64_t *hash)
{
    unsigned char *buf = malloc(maxchunk);
    if (!buf)
        die("malloc");
    uint64_t off = 0, h = FNV_INIT;
    while (off < total) {
        size_t n = rnd_size(&sizes, maxchunk);
        if (n > total - off)
            n = (size_t)(total - off);
        pattern(buf, off, n, seed);
        size_t done = 0;
        while (done < n) {
            ssize_t w = x_send(m, fd, buf + done, n - done);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                free(buf);
                return -1;
            }
            done += (size_t)w;
        }
        h = fnv(h, buf, n);
        off += n;
    }
    free(buf);
    if (hash)
        *hash = h;
    return 0;
}

/* Receives until the end of the stream (or limit bytes), checking the pattern. */
struct rstat recv_pattern(enum iomode m, int fd, uint64_t seed, uint64_t sizes,
                                 size_t maxchunk, uint64_t limit)
{
    struct rstat st = {0, FNV_INIT, -1, 0};
    unsigned char *buf = malloc(maxchunk);
    if (!buf)
        die("malloc");
    while (st.total < limit) {
        size_t n = rnd_size(&sizes, maxchunk);
        if (n > limit - st.total)
            n = (size_t)(limit - st.total);
        ssize_t r = x_recv(m, fd, buf, n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            st.err = errno;
            break;
        }
        if (r == 0)
            break;
        if (st.bad_at < 0) {
            long long b = pattern_check(buf, st.total, (size_t)r, seed);
            if (b >= 0)
                st.bad_at = (long long)st.total + b;
        }
        st.hash = fnv(st.hash, buf, (size_t)r);
        st.total += (uint64_t)r;
    }
    free(buf);
    return st;
}

void say_rstat(const char *what, struct rstat st)
{
    say("%s: %llu bytes, end %s, pattern %s, fnv %016llx", what, (unsigned long long)st.total,
        st.err ? errname(st.err) : "eof",
        st.bad_at < 0 ? "ok" : "MISMATCH", (unsigned long long)st.hash);
    if (st.bad_at >= 0)
        say("first mismatch at byte %lld", st.bad_at);
}

/* The kernel's own TCP_NODELAY of fd (the system call, past any preloaded getsockopt), on
 * standard error: outside the transcript, for tests that look at what the library left. */
static void report_raw_nodelay(const char *side, int fd)
{
    int v = -1;
    socklen_t l = sizeof v;
    long r = syscall(SYS_getsockopt, fd, IPPROTO_TCP, TCP_NODELAY, &v, &l);
    fprintf(stderr, "raw-nodelay %s %d\n", side, r == 0 ? v : -1);
}

#define LONG_TRIPS 6000
#define LONG_PAUSE_US 100
#define LONG_MSG 100

/* The blocking ping-pong of pingpong-slow, server side: echoes every message after a pause,
 * so the peer is always asleep in its receive when the echo comes (the ring never pays). */
void long_pingpong_server(void)
{
    int s = accept_one();
    char buf[LONG_MSG];
    int trips = 0;
    ssize_t n;
    while ((n = read_full(s, buf, LONG_MSG)) == LONG_MSG) {
        usleep(LONG_PAUSE_US);
        if (write(s, buf, LONG_MSG) != LONG_MSG)
            break;
        trips++;
    }
    say("echoed %d, then %s", trips, res(n));
    report_raw_nodelay("server", s);
    close(s);
}

/* The client: LONG_TRIPS messages, each with its own pattern and sent after a pause, each
 * echo checked. */
void long_pingpong_client(void)
{
    int fd = tcp_socket(0);
    struct sockaddr_storage ss;
    socklen_t l = loop_addr(C.family, C.port, &ss);
    say("connect %s", res(connect(fd, (struct sockaddr *)&ss, l)));
    char out[LONG_MSG], in[LONG_MSG];
    int trips = 0, bad = 0;
    for (int i = 0; i < LONG_TRIPS; i++) {
        for (int j = 0; j < LONG_MSG; j++)
            out[j] = (char)(i * 7 + j);
        usleep(LONG_PAUSE_US);
        if (write(fd, out, LONG_MSG) != LONG_MSG || read_full(fd, in, LONG_MSG) != LONG_MSG)
            break;
        bad += memcmp(in, out, LONG_MSG) != 0;
        trips++;
    }
    say("round trips %d, wrong echoes %d", trips, bad);
    report_raw_nodelay("client", fd);
    say("close %s", res(close(fd)));
}

#define ONE_WAY_MSGS 3000
#define ONE_WAY_MSG 64
#define ONE_WAY_PAUSE_US 700

/* A request, then a one-way stream of small messages, each after a pause (a subscription, a
 * download): the server reads the 16-byte request, then writes ONE_WAY_MSGS messages, each
 * with its own pattern, and closes. */
void request_stream_server(void)
{
    int s = accept_one();
    char req[16], out[ONE_WAY_MSG];
    ssize_t n = read_full(s, req, sizeof req);
    say("request %s", n == (ssize_t)sizeof req && memcmp(req, "subscribe please", sizeof req) == 0 ? "ok" : "WRONG");
    int sent = 0;
    for (int i = 0; i < ONE_WAY_MSGS; i++) {
        for (int j = 0; j < ONE_WAY_MSG; j++)
            out[j] = (char)(i * 13 + j);
        usleep(ONE_WAY_PAUSE_US);
        if (write(s, out, ONE_WAY_MSG) != ONE_WAY_MSG)
            break;
        sent++;
    }
    say("sent %d messages", sent);
    say("close %s", res(close(s)));
}

/* The client: the request, then every message read and checked, until EOF. */
void request_stream_client(void)
{
    int fd = connect_one();
    say("request %s", res((int)write(fd, "subscribe please", 16) - 16));
    char in[ONE_WAY_MSG];
    int got = 0, bad = 0;
    ssize_t n;
    while ((n = read_full(fd, in, ONE_WAY_MSG)) == ONE_WAY_MSG) {
        for (int j = 0; j < ONE_WAY_MSG; j++)
            bad += in[j] != (char)(got * 13 + j);
        got++;
    }
    say("received %d messages, %d wrong bytes, then %s", got, bad, res((int)n));
    say("close %s", res(close(fd)));
}

#define LARGE_ROUNDS 400
#define LARGE_ANSWER (64 * 1024)
#define LARGE_PAUSE_US 5000

/* Requests of 64 bytes, each answered with 64 KiB (a server of large files): the server
 * answers every request with its own pattern until EOF. */
void large_answers_server(void)
{
    int s = accept_one();
    static char out[LARGE_ANSWER];
    char req[64];
    int answered = 0;
    ssize_t n;
    while ((n = read_full(s, req, sizeof req)) == (ssize_t)sizeof req) {
        for (int j = 0; j < LARGE_ANSWER; j++)
            out[j] = (char)(answered * 7 + j);
        if (write_all(s, out, LARGE_ANSWER) != LARGE_ANSWER)
            break;
        answered++;
    }
    say("answered %d, then %s", answered, res((int)n));
    say("close %s", res(close(s)));
}

/* The client: LARGE_ROUNDS requests, LARGE_PAUSE_US apart, each answer read and checked. */
void large_answers_client(void)
{
    int fd = connect_one();
    static char in[LARGE_ANSWER];
    char req[64];
    memset(req, 'r', sizeof req);
    int rounds = 0, bad = 0;
    for (int i = 0; i < LARGE_ROUNDS; i++) {
        usleep(LARGE_PAUSE_US);
        if (write(fd, req, sizeof req) != (ssize_t)sizeof req || read_full(fd, in, LARGE_ANSWER) != LARGE_ANSWER)
            break;
        for (int j = 0; j < LARGE_ANSWER; j++)
            bad += in[j] != (char)(i * 7 + j);
        rounds++;
    }
    say("rounds %d, wrong bytes %d", rounds, bad);
    say("close %s", res(close(fd)));
}
