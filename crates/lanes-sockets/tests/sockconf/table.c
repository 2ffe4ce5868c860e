#include "sockconf.h"

/* ------------------------------------------------------------------------------------------
 * The table
 * ---------------------------------------------------------------------------------------- */

static void set_rw(void) { io_mode = M_RW; }
static void set_sr(void) { io_mode = M_SR; }
static void set_to(void) { io_mode = M_TO; }
static void set_msg(void) { io_mode = M_MSG; }
static void set_vec(void) { io_mode = M_VEC; }
static void set_mmsg(void) { io_mode = M_MMSG; }
static void set_v2(void) { io_mode = M_V2; }
static void set_v2mix(void) { io_mode = M_V2MIX; }
static void set_poll(void) { wait_mode = W_POLL; }
static void set_ppoll(void) { wait_mode = W_PPOLL; }
static void set_select(void) { wait_mode = W_SELECT; }
static void set_pselect(void) { wait_mode = W_PSELECT; }
static void set_lt(void) { script = lt_script; }
static void set_et(void) { script = et_script; }
static void set_oneshot(void) { script = oneshot_script; }
static void set_del(void) { script = del_script; }
static void set_mixed(void) { script = mixed_script; }
static void set_nested(void) { script = nested_script; }
static void set_twosets(void) { script = twosets_script; }
static void set_polled(void) { script = polled_script; }
static void set_eforked(void) { script = eforked_script; }
static void set_late(void) { script = late_script; }
static void set_chk(void) { script = chk_script; }
static void set_sigio(void) { script = sigio_script; }

const struct casedef cases[] = {
    {"connect-echo", AF_INET, true, echo_server, echo_client, NULL,
     "blocking connect, write, echo, close"},
    {"connect-nonblock", AF_INET, true, ping_pong_server, nbconnect_client, NULL,
     "non-blocking connect: EINPROGRESS, poll POLLOUT, SO_ERROR 0, EISCONN"},
    {"connect-refused", AF_INET, true, refused_server, refused_client, NULL,
     "connect to a closed port: ECONNREFUSED blocking, and through SO_ERROR non-blocking"},
    {"ipv6-echo", AF_INET6, true, echo_server, echo_client, NULL, "blocking connect and echo over ::1"},
    {"many-conns", AF_INET, true, many_server, many_client, NULL, "16 connections at once"},
    {"accept-nonblock", AF_INET, true, accept_nb_server, accept_nb_client, NULL,
     "non-blocking accept: EAGAIN, poll on the listener, accept4 flags"},
    {"io-readwrite", AF_INET, true, io_server, io_client, set_rw,
     "read/write both ways, random sizes, checked"},
    {"io-sendrecv", AF_INET, true, io_server, io_client, set_sr, "recv/send both ways, checked"},
    {"io-sendto", AF_INET, true, io_server, io_client, set_to,
     "recvfrom/sendto both ways, checked; addrlen; sendto with an address"},
    {"io-msg", AF_INET, true, io_server, io_client, set_msg,
     "recvmsg/sendmsg with several iovecs, checked; namelen, flags"},
    {"io-vec", AF_INET, true, io_server, io_client, set_vec, "readv/writev both ways, checked"},
    {"io-mmsg", AF_INET, true, io_server, io_client, set_mmsg, "recvmmsg/sendmmsg both ways, checked"},
    {"io-v2", AF_INET, true, io_server, io_client, set_v2,
     "preadv2/pwritev2 at the current position both ways, checked; offsets and flags refused"},
    {"io-v2-mixed", AF_INET, true, io_server, io_client, set_v2mix,
     "preadv2/pwritev2 alternating with read/write both ways, checked"},
    {"io-v2-after-ring", AF_INET, true, v2_ring_server, v2_ring_client, NULL,
     "round trips in read/write, then in preadv2/pwritev2: every byte where the first left it"},
    {"io-mmsg-mixed", AF_INET, true, mmsg_mixed_server, mmsg_mixed_client, NULL,
     "sendmmsg and write alternating, recvmmsg with written bytes waiting: in order"},
    {"msg-peek", AF_INET, true, peek_server, peek_client, NULL, "MSG_PEEK, then read"},
    {"msg-dontwait", AF_INET, true, dontwait_server, dontwait_client, NULL,
     "MSG_DONTWAIT on an empty blocking socket: EAGAIN"},
    {"msg-waitall", AF_INET, true, waitall_server, waitall_client, NULL,
     "MSG_WAITALL across small writes, and cut short by the peer's close"},
    {"msg-oob", AF_INET, true, oob_server, oob_client, NULL,
     "MSG_OOB: POLLPRI, SIOCATMARK, the urgent byte out of the stream, SO_OOBINLINE"},
    {"oob-ring", AF_INET, true, oob_ring_server, oob_ring_client, NULL,
     "MSG_OOB after data both ways: every readiness call, SIOCATMARK, SIGURG, WAITALL at the mark, "
     "a second urgent byte, SO_OOBINLINE, MSG_OOB without urgent data"},
    {"rcvlowat", AF_INET, true, rcvlowat_server, rcvlowat_client, NULL,
     "SO_RCVLOWAT after data both ways: readiness, blocking recv/poll/select/epoll, EOF, "
     "inherited from the listener"},
    {"rcvlowat-unread", AF_INET, true, rcvlowat_unread_server, rcvlowat_unread_client, NULL,
     "SO_RCVLOWAT set while bytes are unread: readiness, blocking recv/read/poll/select/epoll"},
    {"zero-length", AF_INET, true, zero_server, zero_client, NULL,
     "reads and writes of 0 bytes, empty iovecs, recvmsg without buffers: 0 at once"},
    {"seccomp-rw", AF_INET, true, seccomp_server, seccomp_client, NULL,
     "under a seccomp filter that kills on recvmsg/sendmsg/recvfrom/sendto/ioctl: read, write, ppoll"},
    {"msg-trunc", AF_INET, true, trunc_server, trunc_client, NULL,
     "MSG_TRUNC discards bytes; with MSG_PEEK; with MSG_WAITALL cut by the peer's close"},
    {"msg-zerocopy", AF_INET, true, zerocopy_server, zerocopy_client, NULL,
     "MSG_ZEROCOPY completions and MSG_ERRQUEUE receives with the stream's bytes waiting"},
    {"kernel-features", AF_INET, true, kernel_features_server, kernel_features_client, NULL,
     "SO_PEEK_OFF and SO_TIMESTAMPNS turned on mid-stream: peeks from the offset, timestamps"},
    {"kernel-features-early", AF_INET, true, kernel_features_early_server, kernel_features_early_client, NULL,
     "SO_TIMESTAMPNS before connect and right after it, then data both ways: timestamps still come"},
    {"tcp-inq", AF_INET, true, tcp_inq_server, tcp_inq_client, NULL,
     "TCP_INQ: TCP_CM_INQ after each recvmsg, peeks, cut control buffers, the end; on a listener"},
    {"tcp-ulp", AF_INET, true, tcp_ulp_server, tcp_ulp_client, NULL,
     "TCP_ULP tls asked mid-stream, with nothing and with bytes unread: the stream goes on in order"},
    {"msg-nosignal", AF_INET, true, closer_server, nosignal_client, NULL,
     "send MSG_NOSIGNAL after the peer closed: EPIPE eventually, no SIGPIPE"},
    {"sigpipe", AF_INET, true, closer_server, sigpipe_client, NULL,
     "write after the peer closed: EPIPE and SIGPIPE (handler counts, default kills)"},
    {"shutdown-wr", AF_INET, true, shutwr_server, shutwr_client, NULL,
     "half-close: the peer reads EOF and still sends back"},
    {"shutdown-misc", AF_INET, true, shutmisc_server, shutmisc_client, NULL,
     "SHUT_RDWR by the peer, SHUT_RD, ENOTCONN, EINVAL"},
    {"close-unread", AF_INET, true, unread_server, unread_client, NULL,
     "close with unread data: the peer gets ECONNRESET"},
    {"linger-reset", AF_INET, true, linger_server, linger_client, NULL,
     "SO_LINGER {1,0} close: the peer gets ECONNRESET"},
    {"dup", AF_INET, true, dup_server, dup_client, NULL,
     "dup, dup2, dup3, F_DUPFD, F_DUPFD_CLOEXEC, dup2 over a pipe; I/O through each; last close"},
    {"close-range", AF_INET, true, close_range_server, close_range_client, NULL,
     "close_range with and without CLOSE_RANGE_CLOEXEC"},
    {"raw-close", AF_INET, true, rawclose_server, rawclose_client, NULL,
     "a socket closed with syscall(SYS_close), its number given to the next accepted one"},
    {"unseen-write", AF_INET, true, unseen_write_server, unseen_write_client, NULL,
     "6 bytes written with syscall(SYS_write) before the set-up, then 8 MiB, checked"},
    {"errno-kept", AF_INET, true, errno_kept_server, errno_kept_client, NULL,
     "calls that succeed leave errno as it was (epoll_ctl after EINPROGRESS)"},
    {"nonblock-toggle", AF_INET, true, nbtoggle_server, nbtoggle_client, NULL,
     "O_NONBLOCK by fcntl and ioctl(FIONBIO), EAGAIN, blocking again"},
    {"cloexec", AF_INET, true, cloexec_server, cloexec_client, NULL,
     "SOCK_CLOEXEC, accept4 SOCK_CLOEXEC, F_GETFD/F_SETFD"},
    {"poll", AF_INET, true, wait_server, wait_client, set_poll, "poll: timeouts 0 and 100 ms, readable, EOF"},
    {"ppoll", AF_INET, true, wait_server, wait_client, set_ppoll, "ppoll, as poll"},
    {"select", AF_INET, true, wait_server, wait_client, set_select, "select, as poll"},
    {"pselect", AF_INET, true, wait_server, wait_client, set_pselect, "pselect, as poll"},
    {"epoll-lt", AF_INET, true, script_server, epoll_lt_client, set_lt,
     "epoll level-triggered: stays ready until read, EPOLLOUT, EPOLLRDHUP"},
    {"epoll-late-add", AF_INET, true, late_add_server, late_add_client, NULL,
     "a socket with a request waiting added to a set another thread sleeps on: it wakes at once"},
    {"epoll-et", AF_INET, true, script_server, epoll_et_client, set_et,
     "epoll edge-triggered: one event per arrival, none when nothing new"},
    {"epoll-oneshot", AF_INET, true, script_server, epoll_oneshot_client, set_oneshot,
     "EPOLLONESHOT and re-arming with EPOLL_CTL_MOD"},
    {"epoll-reuse", AF_INET, true, two_conns_server, epoll_reuse_client, NULL,
     "DEL and ADD between waits; a closed fd's number reused by a new socket"},
    {"epoll-del", AF_INET, true, script_server, epoll_del_client, set_del,
     "EPOLL_CTL_DEL, EEXIST, ENOENT, a closed duplicate, EPERM, EINVAL, EBADF"},
    {"epoll-mixed", AF_INET, true, script_server, epoll_mixed_client, set_mixed,
     "one epoll set with a TCP socket and a pipe"},
    {"epoll-nested", AF_INET, true, script_server, epoll_nested_client, set_nested,
     "an epoll set inside another, level and edge"},
    {"epoll-two-sets", AF_INET, true, script_server, epoll_twosets_client, set_twosets,
     "one socket in a level-triggered and an edge-triggered set"},
    {"epoll-polled", AF_INET, true, script_server, epoll_polled_client, set_polled,
     "an epoll set's fd waited for by poll, ppoll, select and epoll_pwait2"},
    {"epoll-pwait", AF_INET, true, pwait_server, pwait_client, NULL,
     "epoll_pwait and ppoll with a signal mask, epoll_pwait2"},
    {"epoll-fork", AF_INET, true, script_server, epoll_fork_client, set_eforked,
     "an epoll set shared with a forked child"},
    {"fortified-calls", AF_INET, true, script_server, chk_client, set_chk,
     "read, recv, recvfrom, poll, ppoll as _FORTIFY_SOURCE emits them (__read_chk...)"},
    {"fionread", AF_INET, true, fionread_server, fionread_client, NULL, "ioctl FIONREAD"},
    {"names", AF_INET, true, names_server, names_client, NULL, "getsockname/getpeername agree"},
    {"sockopt", AF_INET, true, sockopt_server, sockopt_client, NULL,
     "TCP_NODELAY, SO_KEEPALIVE, SO_RCVBUF, SO_SNDBUF, SO_TYPE, TCP_INFO..."},
    {"nagle-one-way", AF_INET, true, nagle_one_way_server, nagle_one_way_client, NULL,
     "small writes one way: the kernel socket keeps Nagle's algorithm as the program left it"},
    {"nodelay", AF_INET, true, echo_until_eof_server, nodelay_client, NULL,
     "TCP_NODELAY as the program set it, before and after traffic"},
    {"sendfile", AF_INET, true, sendfile_server, sendfile_client, NULL,
     "sendfile from a file into the socket, checked"},
    {"splice", AF_INET, true, splice_server, splice_client, NULL, "splice pipe -> socket -> pipe"},
    {"stdio", AF_INET, true, stdio_server, stdio_client, NULL, "fdopen, fprintf, fgets, dprintf"},
    {"fork-share", AF_INET, true, forkshare_server, forkshare_client, NULL,
     "parent and forked child both write to the socket, the child reads"},
    {"exec", AF_INET, true, exec_server, exec_client, NULL,
     "an exec'd child uses the inherited socket; the close-on-exec copy is gone"},
    {"exec-handoff", AF_INET, true, handoff_server, handoff_client_execve, NULL,
     "a forked child execs a program with an empty environment; it reads what was sent before"},
    {"execle-handoff", AF_INET, true, handoff_server, handoff_client_execle, NULL,
     "the same hand-off through execle (a variadic call)"},
    {"execveat-handoff", AF_INET, true, handoff_server, handoff_client_execveat, NULL,
     "the same hand-off through execveat"},
    {"fexecve-handoff", AF_INET, true, handoff_server, handoff_client_fexecve, NULL,
     "the same hand-off through fexecve of an open image"},
    {"posix-spawn", AF_INET, true, exec_server, spawn_client, NULL,
     "a posix_spawn'd child uses the inherited socket; the close-on-exec copy is gone"},
    {"exit-handlers", AF_INET, true, exit_handlers_server, exit_handlers_client, NULL,
     "send, shutdown, epoll_wait, recv and close in an atexit handler"},
    {"io-uring-epoll", AF_INET, true, uring_epoll_server, uring_epoll_client, NULL,
     "a connection put into an epoll set through an io_uring (as libuv does), 200 messages answered"},
    {"sigio", AF_INET, true, script_server, sigio_client, set_sigio, "O_ASYNC and F_SETOWN: SIGIO on arrival"},
    {"threads", AF_INET, true, threads_server, threads_client, NULL,
     "two threads send concurrently, the peer counts"},
    {"pass-fd", AF_INET, true, passfd_server, passfd_client, NULL,
     "an accepted socket passed to a worker process over a Unix socket (SCM_RIGHTS), then closed"},
    {"fork-busy-threads", AF_INET, true, forkbusy_server, forkbusy_client, NULL,
     "forks while two threads are inside socket calls: each child closes its sockets and exits"},
    {"stream-64m", AF_INET, true, stream_server, stream_client, NULL,
     "64 MiB with random write and read sizes, checked"},
    {"stream-4g", AF_INET, true, stream_gib_server, stream_gib_client, no_hashing,
     "4 GiB with random write and read sizes, every byte checked"},
    {"stream-duplex", AF_INET, true, duplex_server, duplex_client, NULL,
     "16 MiB each way at once, non-blocking, poll-driven, checked"},
    {"pingpong-slow", AF_INET, true, long_pingpong_server, long_pingpong_client, NULL,
     "6000 blocking round trips of 100 bytes, each side pausing 100 us before it writes, checked"},
    {"request-stream", AF_INET, true, request_stream_server, request_stream_client, NULL,
     "a 16-byte request, then 3000 messages of 64 bytes one way, 700 us apart, checked"},
    {"large-answers", AF_INET, true, large_answers_server, large_answers_client, NULL,
     "400 requests of 64 bytes, 5 ms apart, each answered with 64 KiB, checked"},
    {"send-eagain", AF_INET, true, send_eagain_server, send_eagain_client, NULL,
     "non-blocking writes until EAGAIN; the peer gets exactly that; POLLOUT after draining"},
    {"ring-then-kernel", AF_INET, true, ring_kernel_server, ring_kernel_client, NULL,
     "8 rounds of 1.5 MiB written, then read by calls that take ring and kernel bytes at once"},
    {"timeouts", AF_INET, true, timeo_server, timeo_client, NULL,
     "SO_RCVTIMEO and SO_SNDTIMEO: EAGAIN after the timeout"},
    {"peer-killed-writer", AF_INET, false, killed_writer_server, killed_writer_client, NULL,
     "the writing peer SIGKILLed mid-stream: the reader gets eof-or-reset"},
    {"peer-killed-reader", AF_INET, false, killed_reader_server, killed_reader_client, NULL,
     "the reading peer SIGKILLed with unread data: the writer gets epipe-or-reset"},
    {"peer-killed-unread", AF_INET, false, killed_unread_server, killed_unread_client, NULL,
     "the peer SIGKILLed with 100 bytes unread: ECONNRESET, then 0, then EPIPE"},
    {"peer-killed-unreaped", AF_INET, false, killed_unreaped_server, killed_unread_client, NULL,
     "as peer-killed-unread, read before the killed peer is reaped"},
    {"eintr", AF_INET, true, script_server, eintr_client, set_late,
     "alarm() without SA_RESTART interrupts a blocking recv: EINTR"},
    {"eintr-restart", AF_INET, true, restart_server, restart_client, NULL,
     "alarm() with SA_RESTART: the blocking recv restarts and gets the data"},
    {"eintr-wait", AF_INET, true, script_server, eintr_wait_client, set_late,
     "SA_RESTART still interrupts epoll_wait, poll, select and recv with SO_RCVTIMEO"},
    {"eintr-spin", AF_INET, true, spin_signal_server, spin_signal_client, spin_signal_setup,
     "a 50 ms timer interrupts epoll_wait, poll and a blocking recv (inside a 500 ms spin, with the library)"},
    {"handler-send", AF_INET, true, handler_send_server, handler_send_client, NULL,
     "a SIGALRM handler sends while the program reads a pipe: its byte lands in order"},
    {"eintr-send", AF_INET, true, slow_reader_server, slow_reader_client, slow_reader_setup,
     "a 100 ms timer ends a blocking send waiting for room at a slow reader, with the count it moved"},
};

/* The number of cases, for the files that see `cases` without its size. */
const size_t ncases = sizeof cases / sizeof cases[0];

const struct casedef *find_case(const char *name)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(cases[i].name, name) == 0)
            return &cases[i];
    return NULL;
}
