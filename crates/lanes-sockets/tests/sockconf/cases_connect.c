#include "sockconf.h"

/* ------------------------------------------------------------------------------------------
 * Cases: connect
 * ---------------------------------------------------------------------------------------- */

void echo_server(void)
{
    int s = accept_one();
    say("accept ok");
    struct sockaddr_storage ss;
    socklen_t l = sizeof ss;
    const char *r = res(getsockname(s, (struct sockaddr *)&ss, &l));
    say("getsockname %s %s", r, addr_str(&ss, l));
    char buf[64];
    ssize_t n = read_full(s, buf, 12);
    say("read_full %s", got(n, buf));
    say("write %s", res(write(s, buf, n > 0 ? (size_t)n : 0)));
    say("read at end %s", res(read(s, buf, sizeof buf)));
    say("close %s", res(close(s)));
}

void echo_client(void)
{
    int fd = tcp_socket(0);
    struct sockaddr_storage ss;
    socklen_t l = loop_addr(C.family, C.port, &ss);
    say("connect %s", res(connect(fd, (struct sockaddr *)&ss, l)));
    l = sizeof ss;
    const char *r = res(getpeername(fd, (struct sockaddr *)&ss, &l));
    say("getpeername %s %s", r, addr_str(&ss, l));
    say("write %s", res(write(fd, "hello, lanes", 12)));
    char buf[64];
    say("read_full %s", got(read_full(fd, buf, 12), buf));
    say("close %s", res(close(fd)));
}

void ping_pong_server(void)
{
    int s = accept_one();
    char buf[16];
    say("read_full %s", got(read_full(s, buf, 4), buf));
    say("write %s", res(write(s, "pong", 4)));
    say("read at end %s", res(read(s, buf, sizeof buf)));
    close(s);
}

void nbconnect_client(void)
{
    int fd = tcp_socket(SOCK_NONBLOCK);
    struct sockaddr_storage ss;
    socklen_t l = loop_addr(C.family, C.port, &ss);
    say("connect %s", res(connect(fd, (struct sockaddr *)&ss, l)));
    struct pollfd p = {fd, POLLOUT, 0};
    int r = poll(&p, 1, 5000);
    say("poll POLLOUT %s revents %s", res(r), revstr(p.revents));
    int err = -1;
    socklen_t el = sizeof err;
    r = getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    say("getsockopt SO_ERROR %s value %s", res(r), errname(err));
    say("connect again (completes it) %s", res(connect(fd, (struct sockaddr *)&ss, l)));
    say("connect once more %s", res(connect(fd, (struct sockaddr *)&ss, l)));
    say("O_NONBLOCK %d", nonblock_of(fd));
    set_nonblock(fd, false);
    say("write %s", res(write(fd, "ping", 4)));
    char buf[16];
    say("read_full %s", got(read_full(fd, buf, 4), buf));
    close(fd);
}

/* A bound socket that does not listen: connecting to its port is refused. */
static int closed_port(int *port)
{
    int fd = socket(C.family, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket");
    struct sockaddr_storage ss;
    socklen_t l = loop_addr(C.family, 0, &ss);
    if (bind(fd, (struct sockaddr *)&ss, l) < 0)
        die("bind");
    *port = bound_port(fd);
    return fd;
}

void refused_server(void)
{
    sync_expect('d');
    set_nonblock(C.lfd, true);
    say("accept on the listener (nobody connected) %s", res(accept(C.lfd, NULL, NULL)));
}

void refused_client(void)
{
    int port;
    int holder = closed_port(&port);
    struct sockaddr_storage ss;
    socklen_t l = loop_addr(C.family, port, &ss);

    int fd = tcp_socket(0);
    say("blocking connect %s", res(connect(fd, (struct sockaddr *)&ss, l)));
    int err = -1;
    socklen_t el = sizeof err;
    const char *r = res(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el));
    say("SO_ERROR after %s value %s", r, errname(err));
    say("write after refused %s", res(send(fd, "x", 1, MSG_NOSIGNAL)));
    close(fd);

    fd = tcp_socket(SOCK_NONBLOCK);
    say("non-blocking connect %s", res(connect(fd, (struct sockaddr *)&ss, l)));
    struct pollfd p = {fd, POLLOUT, 0};
    r = res(poll(&p, 1, 5000));
    say("poll POLLOUT %s revents %s", r, revstr(p.revents));
    err = -1;
    r = res(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el));
    say("SO_ERROR %s value %s", r, errname(err));
    err = -1;
    r = res(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el));
    say("SO_ERROR again %s value %s", r, errname(err));
    close(fd);
    close(holder);
    sync_send('d');
}

void many_server(void)
{
    enum { N = 16 };
    int s[N];
    bool seen[N] = {false};
    for (int i = 0; i < N; i++)
        s[i] = accept_one();
    int ok = 0;
    for (int i = 0; i < N; i++) {
        unsigned char c;
        if (read_full(s[i], &c, 1) == 1 && c < N && !seen[c]) {
            seen[c] = true;
            unsigned char two[2] = {c, (unsigned char)(c + 100)};
            if (write_all(s[i], two, 2) == 2)
                ok++;
        }
    }
    say("accepted %d, every index seen once and answered: %s", N, yes(ok == N));
    int eofs = 0;
    for (int i = 0; i < N; i++) {
        char c;
        if (read(s[i], &c, 1) == 0)
            eofs++;
        close(s[i]);
    }
    say("end of stream on all: %s", yes(eofs == N));
}

void many_client(void)
{
    enum { N = 16 };
    int fd[N];
    for (int i = 0; i < N; i++) {
        fd[i] = connect_one();
        unsigned char c = (unsigned char)i;
        if (write_all(fd[i], &c, 1) != 1)
            die("write");
    }
    int ok = 0;
    for (int i = 0; i < N; i++) {
        unsigned char two[2];
        if (read_full(fd[i], two, 2) == 2 && two[0] == i && two[1] == i + 100)
            ok++;
    }
    for (int i = 0; i < N; i++)
        close(fd[i]);
    say("%d connections, every answer right: %s", N, yes(ok == N));
}

void accept_nb_server(void)
{
    set_nonblock(C.lfd, true);
    say("accept, nobody connecting %s", res(accept(C.lfd, NULL, NULL)));
    say("accept4, nobody connecting %s", res(accept4(C.lfd, NULL, NULL, SOCK_NONBLOCK)));
    sync_send('g');
    struct pollfd p = {C.lfd, POLLIN, 0};
    int r = poll(&p, 1, 5000);
    say("poll listener %s revents %s", res(r), revstr(p.revents));
    struct sockaddr_storage ss;
    socklen_t l = sizeof ss;
    int s = accept4(C.lfd, (struct sockaddr *)&ss, &l, SOCK_NONBLOCK | SOCK_CLOEXEC);
    say("accept4 %s peer %s", s >= 0 ? "ok" : res(s), addr_str(&ss, l));
    say("accepted O_NONBLOCK %d FD_CLOEXEC %d", nonblock_of(s), cloexec_of(s));
    say("accept again %s", res(accept(C.lfd, NULL, NULL)));
    set_nonblock(s, false);
    char c;
    say("read_full %s", got(read_full(s, &c, 1), &c));
    say("read at end %s", res(read(s, &c, 1)));
    close(s);
    sync_send('h');
    say_poll("poll listener", &p, 5000);
    s = accept(C.lfd, NULL, NULL);
    say("plain accept on the non-blocking listener %s: O_NONBLOCK %d (not inherited)",
        s >= 0 ? "ok" : res(s), nonblock_of(s));
    say("read_full %s", got(read_full(s, &c, 1), &c));
    close(s);
}

void accept_nb_client(void)
{
    sync_expect('g');
    int fd = connect_one();
    say("write %s", res(write(fd, "x", 1)));
    close(fd);
    sync_expect('h');
    fd = connect_one();
    say("write %s", res(write(fd, "y", 1)));
    close(fd);
}
