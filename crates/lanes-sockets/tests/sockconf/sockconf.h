/*
 * sockconf.h: what the files of sockconf share (main.c describes the program): the system
 * headers, the types and constants used by more than one file, and the declarations of the
 * variables and functions one file defines for others.
 */
#ifndef SOCKCONF_H
#define SOCKCONF_H

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WATCHDOG_SECS 20
#define MIB (1024u * 1024u)


/* Types and constants used by more than one file. */

#define revstr(ev) flagstr((ev), false)

#define epstr(ev) flagstr((int)(ev), true)

#define FNV_INIT 0xcbf29ce484222325ull

struct ctx {
    int family;
    int port;
    int lfd;          /* server: the listening socket */
    pid_t peer;       /* fork mode, server: the client's pid; 0 in split mode */
    bool split;
    bool peer_killed; /* the server killed the client on purpose */
    const char *self; /* path of this program, for exec */
    /* Split mode across hosts (--host4, --host6): the server's addresses, which the server
     * listens on and the client connects to; NULL: loopback. */
    const char *host4, *host6;
};

/* A child of a case side with its own transcript, appended to ours by sub_finish. */
struct sub {
    pid_t pid;
    int rfd;
};

enum iomode { M_RW, M_SR, M_TO, M_MSG, M_VEC, M_MMSG, M_V2, M_V2MIX };

struct rstat {
    uint64_t total;
    uint64_t hash;
    long long bad_at; /* first byte off the pattern, or -1 */
    int err;          /* errno of the call that ended the stream, 0 for end of stream */
};

enum waitmode { W_POLL, W_PPOLL, W_SELECT, W_PSELECT };

struct names {
    struct sockaddr_storage sock, peer;
    socklen_t sl, pl;
};

struct thr {
    int fd;
    char letter;
    uint64_t seed;
    int ok;
};

struct casedef {
    const char *name;
    int family;
    bool split;
    void (*server)(void);
    void (*client)(void);
    void (*setup)(void);
    const char *what;
};

/* Variables defined in one file, used in others. */
extern size_t loglen;
extern const char *role;
extern int out_fd;
extern pid_t watch_child;
extern bool hash_streams;
extern int sync_rfd, sync_wfd;
extern struct ctx C;
extern int last_addrlen, last_namelen, last_msgflags;
extern enum iomode io_mode;
extern enum waitmode wait_mode;
extern const char *const *script;
extern const char *const lt_script[];
extern const char *const et_script[];
extern const char *const oneshot_script[];
extern const char *const del_script[];
extern const char *const mixed_script[];
extern const char *const nested_script[];
extern const char *const twosets_script[];
extern const char *const polled_script[];
extern const char *const eforked_script[];
extern const char *const sigio_script[];
extern const char *const chk_script[];
extern const char *const late_script[];
extern const struct casedef cases[];

extern const size_t ncases;

/* Functions defined in one file, used in others. */
void write_all_raw(int fd, const void *p, size_t n) ;
void log_raw(const char *s, size_t n) ;
void say(const char *fmt, ...) ;
void flush_log(void) ;
void arm_watchdog(void) ;
const char *errname(int e) ;
const char *res(long r) ;
void die(const char *fmt, ...) ;
const char *flagstr(int ev, bool epoll) ;
void say_poll(const char *what, struct pollfd *p, int timeout) ;
void say_fionread(const char *what, int fd) ;
const char *yes(bool b);
long long now_ms(void) ;
void sleep_ms(int ms) ;
void pattern(unsigned char *b, uint64_t off, size_t n, uint64_t seed) ;
long long pattern_check(const unsigned char *b, uint64_t off, size_t n, uint64_t seed) ;
uint64_t fnv(uint64_t h, const unsigned char *p, size_t n) ;
size_t rnd_size(uint64_t *s, size_t max);
void sync_remember(void) ;
void sync_send_buf(const void *p, size_t n) ;
void sync_wait_buf(void *p, size_t n) ;
void sync_send(char c);
char sync_wait(void) ;
void sync_expect(char want) ;
socklen_t loop_addr(int family, int port, struct sockaddr_storage *ss) ;
int port_of(const struct sockaddr_storage *ss) ;
const char *addr_str(const struct sockaddr_storage *ss, socklen_t len) ;
bool same_addr(const struct sockaddr_storage *x, const struct sockaddr_storage *y) ;
int tcp_socket(int flags) ;
int listen_socket(int family, int port) ;
int bound_port(int fd) ;
int connect_one(void) ;
int accept_one(void) ;
void set_nonblock(int fd, bool on) ;
int nonblock_of(int fd) ;
int cloexec_of(int fd) ;
ssize_t write_all(int fd, const void *buf, size_t n) ;
ssize_t send_all(int fd, const void *buf, size_t n, int flags) ;
ssize_t read_full(int fd, void *buf, size_t n) ;
void warm_up_client(int fd) ;
void warm_up_server(int s) ;
const char *got(ssize_t n, const char *buf) ;
const char *status_str(int st) ;
pid_t wait_pid(pid_t pid, int *st) ;
void slurp_into_log(int fd) ;
struct sub sub_start(const char *subrole) ;
void sub_exit(void) ;
int sub_finish(struct sub s) ;
ssize_t x_send(enum iomode m, int fd, const unsigned char *b, size_t n) ;
int send_pattern(enum iomode m, int fd, uint64_t total, uint64_t seed, uint64_t sizes, size_t maxchunk, uint64_t *hash) ;
struct rstat recv_pattern(enum iomode m, int fd, uint64_t seed, uint64_t sizes, size_t maxchunk, uint64_t limit) ;
void say_rstat(const char *what, struct rstat st) ;
void echo_server(void) ;
void echo_client(void) ;
void ping_pong_server(void) ;
void nbconnect_client(void) ;
void refused_server(void) ;
void refused_client(void) ;
void many_server(void) ;
void many_client(void) ;
void accept_nb_server(void) ;
void accept_nb_client(void) ;
void io_server(void) ;
void io_client(void) ;
void v2_ring_server(void) ;
void v2_ring_client(void) ;
void peek_server(void) ;
void peek_client(void) ;
void dontwait_server(void) ;
void dontwait_client(void) ;
void waitall_server(void) ;
void waitall_client(void) ;
void closer_server(void) ;
void nosignal_client(void) ;
void sigpipe_client(void) ;
void shutwr_server(void) ;
void shutwr_client(void) ;
void shutmisc_server(void) ;
void shutmisc_client(void) ;
void unread_server(void) ;
void unread_client(void) ;
void linger_server(void) ;
void linger_client(void) ;
void dup_server(void);
bool roundtrip(int wfd, int rfd, const char *msg) ;
void dup_client(void) ;
void close_range_server(void);
void close_range_client(void) ;
void rawclose_server(void);
void rawclose_client(void);
void unseen_write_server(void);
void unseen_write_client(void);
void errno_kept_server(void);
void errno_kept_client(void);
void nbtoggle_server(void) ;
void nbtoggle_client(void) ;
void cloexec_server(void) ;
void cloexec_client(void) ;
void wait_server(void) ;
void wait_client(void) ;
const char *epw(int ep, int timeout) ;
void late_add_server(void);
void late_add_client(void);
int ep_ctl(int ep, int op, int fd, uint32_t events, uint64_t tag) ;
void script_server(void) ;
void epoll_lt_client(void) ;
void epoll_et_client(void) ;
void epoll_oneshot_client(void) ;
void epoll_del_client(void) ;
void two_conns_server(void) ;
void epoll_reuse_client(void) ;
void epoll_mixed_client(void) ;
void epoll_nested_client(void) ;
void epoll_twosets_client(void) ;
void epoll_polled_client(void) ;
void epoll_fork_client(void) ;
void oob_server(void) ;
void oob_client(void) ;
void oob_ring_server(void) ;
void oob_ring_client(void) ;
void rcvlowat_server(void) ;
void rcvlowat_client(void) ;
void rcvlowat_unread_server(void) ;
void rcvlowat_unread_client(void) ;
void zero_server(void) ;
void zero_client(void) ;
void seccomp_server(void) ;
void seccomp_client(void) ;
void trunc_server(void) ;
void trunc_client(void) ;
void mmsg_mixed_server(void) ;
void mmsg_mixed_client(void) ;
void zerocopy_server(void) ;
void zerocopy_client(void) ;
void kernel_features_server(void) ;
void kernel_features_client(void) ;
void kernel_features_early_server(void) ;
void kernel_features_early_client(void) ;
void tcp_inq_server(void) ;
void tcp_inq_client(void) ;
void tcp_ulp_server(void) ;
void tcp_ulp_client(void) ;
void killed_unreaped_server(void) ;
void killed_unread_server(void) ;
void killed_unread_client(void) ;
void pwait_server(void) ;
void pwait_client(void) ;
void sigio_client(void) ;
void spawn_client(void) ;
void exit_handlers_server(void) ;
void uring_epoll_server(void) ;
void uring_epoll_client(void) ;
void exit_handlers_client(void) ;
void chk_client(void) ;
void fionread_server(void) ;
void fionread_client(void) ;
void names_server(void) ;
void names_client(void) ;
void sockopt_server(void) ;
void echo_until_eof_server(void) ;
void nagle_one_way_server(void) ;
void nagle_one_way_client(void) ;
void nodelay_client(void) ;
void sockopt_client(void) ;
int temp_file(void) ;
void sendfile_server(void) ;
void sendfile_client(void) ;
void splice_server(void) ;
void splice_client(void) ;
void stdio_server(void) ;
void stdio_client(void) ;
void forkshare_server(void) ;
void forkshare_client(void) ;
void exec_server(void) ;
void exec_client(void) ;
int exec_child_main(int argc, char **argv) ;
void handoff_server(void) ;
void handoff_client_execve(void);
void handoff_client_execle(void);
void handoff_client_execveat(void) ;
void handoff_client_fexecve(void) ;
int handoff_child_main(int argc, char **argv) ;
void threads_server(void) ;
void threads_client(void) ;
void forkbusy_server(void) ;
void passfd_server(void) ;
void passfd_client(void) ;
void spin_signal_setup(void) ;
void spin_signal_server(void) ;
void spin_signal_client(void) ;
void handler_send_server(void) ;
void handler_send_client(void) ;
void slow_reader_setup(void) ;
void slow_reader_server(void) ;
void slow_reader_client(void) ;
void forkbusy_client(void) ;
void no_hashing(void);
void stream_gib_server(void) ;
void stream_gib_client(void) ;
void stream_server(void) ;
void stream_client(void) ;
void long_pingpong_server(void) ;
void long_pingpong_client(void) ;
void request_stream_server(void) ;
void request_stream_client(void) ;
void large_answers_server(void) ;
void large_answers_client(void) ;
void duplex_server(void) ;
void duplex_client(void) ;
void send_eagain_server(void) ;
void send_eagain_client(void) ;
void ring_kernel_server(void) ;
void ring_kernel_client(void) ;
void timeo_server(void) ;
void timeo_client(void) ;
void killed_writer_server(void) ;
void killed_writer_client(void) ;
void killed_reader_server(void) ;
void killed_reader_client(void) ;
void catch_alarm(int flags) ;
void timer_ms(int ms) ;
void eintr_client(void) ;
void restart_server(void) ;
void restart_client(void) ;
void eintr_wait_client(void) ;
const struct casedef *find_case(const char *name) ;

#endif /* SOCKCONF_H */
