/*
 * lanes-ofi-sys: exported wrappers for the parts of libfabric's API that are `static inline`
 * in the rdma/ headers (libfabric 1.17 exports only fi_getinfo, fi_freeinfo, fi_dupinfo, fi_fabric,
 * fi_strerror and a few more), so that Rust can call them.
 *
 * Structures are flattened: the Rust side never sees struct fi_info or any attribute
 * struct. Hints are built from scalars, fi_info fields are read through accessors, the
 * message forms of the RMA calls take scalars. Only struct fi_cq_data_entry, struct
 * fi_context (opaque storage) and struct lanes_fi_cq_err (below) cross the boundary; their
 * sizes and field offsets are exported in lanes_fi_layout() and checked by tests/layout.rs.
 * Constants are exported by name in lanes_fi_constants() and checked the same way.
 *
 * Every function is a thin call: no allocation beyond what libfabric does, no state.
 *
 * libfabric is not linked: it is loaded at first use (dlopen of libfabric.so.1). Linking it
 * would load it, and the libraries it links (libpsm2 installs its own SIGSEGV/SIGBUS
 * handlers from a constructor), into every process of a program built with the ofi
 * feature, including those that never leave the host. The few functions libfabric really
 * exports are renamed below to lanes_fi_dl_* forwarders, so both the inline functions of
 * the headers and the Rust side reach them through the loader. Loading, and the first
 * fi_getinfo (which loads the provider plugins), keep the process's handlers of the fatal
 * signals and of the termination signals as they were: the psm provider's libinfinipath
 * installs SIGINT and SIGTERM handlers that call exit(1), which took SIGTERM from `lanes ip
 * up` (its clean shutdown) once it joined a cluster.
 */
#define fi_getinfo lanes_fi_dl_getinfo
#define fi_freeinfo lanes_fi_dl_freeinfo
#define fi_dupinfo lanes_fi_dl_dupinfo
#define fi_fabric lanes_fi_dl_fabric
#define fi_strerror lanes_fi_dl_strerror
#define fi_version lanes_fi_dl_version

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Most remote ranges lanes_fi_writemsg_scatter takes (LANES_SCATTER_MAX in lib.rs). */
#define LANES_SCATTER_MAX 4

#if FI_MAJOR_VERSION < 1 || (FI_MAJOR_VERSION == 1 && FI_MINOR_VERSION < 17)
#error "lanes-ofi-sys needs libfabric >= 1.17"
#endif

/* ---- loading libfabric ---------------------------------------------------------------- */

static struct {
	int ready;
	int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
		       struct fi_info **);
	void (*freeinfo)(struct fi_info *);
	struct fi_info *(*dupinfo)(const struct fi_info *);
	int (*fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
	const char *(*strerror)(int);
	uint32_t (*version)(void);
} lib;
static char load_error[256];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

/* The fatal signals, and those a program catches to end cleanly. */
static const int kept_signals[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGINT, SIGTERM, SIGHUP, SIGQUIT };
#define KEPT_SIGNALS (sizeof kept_signals / sizeof kept_signals[0])

static void save_handlers(struct sigaction *saved)
{
	for (size_t i = 0; i < KEPT_SIGNALS; i++)
		sigaction(kept_signals[i], NULL, &saved[i]);
}

static void restore_handlers(const struct sigaction *saved)
{
	for (size_t i = 0; i < KEPT_SIGNALS; i++)
		sigaction(kept_signals[i], &saved[i], NULL);
}

static void load(void)
{
	struct sigaction saved[KEPT_SIGNALS];
	save_handlers(saved);
	void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
	restore_handlers(saved);
	if (!h) {
		const char *e = dlerror();
		snprintf(load_error, sizeof load_error, "libfabric could not be loaded: %s", e ? e : "dlopen failed");
		return;
	}
	*(void **)&lib.getinfo = dlsym(h, "fi_getinfo");
	*(void **)&lib.freeinfo = dlsym(h, "fi_freeinfo");
	*(void **)&lib.dupinfo = dlsym(h, "fi_dupinfo");
	*(void **)&lib.fabric = dlsym(h, "fi_fabric");
	*(void **)&lib.strerror = dlsym(h, "fi_strerror");
	*(void **)&lib.version = dlsym(h, "fi_version");
	if (!lib.getinfo || !lib.freeinfo || !lib.dupinfo || !lib.fabric || !lib.strerror || !lib.version) {
		snprintf(load_error, sizeof load_error, "libfabric.so.1 lacks the functions of libfabric 1.17");
		return;
	}
	lib.ready = 1;
}

static int loaded(void)
{
	pthread_once(&load_once, load);
	return lib.ready;
}

int lanes_fi_dl_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
			const struct fi_info *hints, struct fi_info **info)
{
	if (!loaded())
		return -FI_ENOSYS;
	struct sigaction saved[KEPT_SIGNALS];
	save_handlers(saved);
	int rc = lib.getinfo(version, node, service, flags, hints, info);
	restore_handlers(saved);
	return rc;
}

void lanes_fi_dl_freeinfo(struct fi_info *info)
{
	if (loaded())
		lib.freeinfo(info);
}

struct fi_info *lanes_fi_dl_dupinfo(const struct fi_info *info)
{
	return loaded() ? lib.dupinfo(info) : NULL;
}

int lanes_fi_dl_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
	return loaded() ? lib.fabric(attr, fabric, context) : -FI_ENOSYS;
}

/* libfabric's text for a code; without libfabric, why it could not be loaded. */
const char *lanes_fi_dl_strerror(int errnum)
{
	return loaded() ? lib.strerror(errnum) : load_error;
}

/* libfabric's version, 0 without libfabric. */
uint32_t lanes_fi_dl_version(void)
{
	return loaded() ? lib.version() : 0;
}

/* ---- names and layouts, for the Rust side's checks ---------------------------------- */

struct lanes_fi_named {
	const char *name;
	uint64_t value;
};

/* A completion error, reduced to what Lanes uses (no err_data pointer: its text is
 * produced by lanes_fi_cq_readerr while it is still valid). */
struct lanes_fi_cq_err {
	void *op_context;
	uint64_t flags;
	size_t len;
	uint64_t data;
	int err;
	int prov_errno;
};

#define C(name) { #name, (uint64_t)(name) }

static const struct lanes_fi_named constants[] = {
	C(FI_MSG), C(FI_RMA), C(FI_READ), C(FI_WRITE), C(FI_RECV), C(FI_SEND), C(FI_TRANSMIT),
	C(FI_REMOTE_READ), C(FI_REMOTE_WRITE), C(FI_REMOTE_CQ_DATA), C(FI_MORE), C(FI_FENCE),
	C(FI_COMPLETION), C(FI_INJECT), C(FI_INJECT_COMPLETE), C(FI_TRANSMIT_COMPLETE),
	C(FI_DELIVERY_COMPLETE), C(FI_RMA_EVENT), C(FI_SOURCE), C(FI_SELECTIVE_COMPLETION),
	C(FI_CONTEXT), C(FI_RX_CQ_DATA),
	C(FI_MR_LOCAL), C(FI_MR_RAW), C(FI_MR_VIRT_ADDR), C(FI_MR_ALLOCATED), C(FI_MR_PROV_KEY),
	C(FI_MR_MMU_NOTIFY), C(FI_MR_RMA_EVENT), C(FI_MR_ENDPOINT), C(FI_MR_HMEM),
	C(FI_ORDER_NONE), C(FI_ORDER_SAS), C(FI_ORDER_RMA_RAR), C(FI_ORDER_RMA_RAW),
	C(FI_ORDER_RMA_WAR), C(FI_ORDER_RMA_WAW),
	C(FI_EP_UNSPEC), C(FI_EP_MSG), C(FI_EP_DGRAM), C(FI_EP_RDM),
	C(FI_PROGRESS_UNSPEC), C(FI_PROGRESS_AUTO), C(FI_PROGRESS_MANUAL),
	C(FI_THREAD_UNSPEC), C(FI_THREAD_SAFE), C(FI_THREAD_DOMAIN), C(FI_THREAD_COMPLETION),
	C(FI_THREAD_ENDPOINT),
	C(FI_AV_UNSPEC), C(FI_AV_MAP), C(FI_AV_TABLE),
	C(FI_WAIT_NONE), C(FI_WAIT_UNSPEC), C(FI_WAIT_FD),
	C(FI_ADDR_NOTAVAIL), C(FI_KEY_NOTAVAIL),
	C(FI_SUCCESS), C(FI_EPERM), C(FI_ENOENT), C(FI_EINTR), C(FI_EIO), C(FI_E2BIG), C(FI_EBADF),
	C(FI_EAGAIN), C(FI_ENOMEM), C(FI_EACCES), C(FI_EFAULT), C(FI_EBUSY), C(FI_ENODEV),
	C(FI_EINVAL), C(FI_EMFILE), C(FI_ENOSPC), C(FI_ENOSYS), C(FI_ENOMSG), C(FI_ENODATA),
	C(FI_EOVERFLOW), C(FI_EMSGSIZE), C(FI_ENOPROTOOPT), C(FI_EOPNOTSUPP), C(FI_EADDRINUSE),
	C(FI_EADDRNOTAVAIL), C(FI_ENETDOWN), C(FI_ENETUNREACH), C(FI_ECONNABORTED),
	C(FI_ECONNRESET), C(FI_ENOBUFS), C(FI_EISCONN), C(FI_ENOTCONN), C(FI_ESHUTDOWN),
	C(FI_ETIMEDOUT), C(FI_ECONNREFUSED), C(FI_EHOSTDOWN), C(FI_EHOSTUNREACH), C(FI_EALREADY),
	C(FI_EINPROGRESS), C(FI_EREMOTEIO), C(FI_ECANCELED), C(FI_EKEYREJECTED), C(FI_EOTHER),
	C(FI_ETOOSMALL), C(FI_EOPBADSTATE), C(FI_EAVAIL), C(FI_EBADFLAGS), C(FI_ENOEQ),
	C(FI_EDOMAIN), C(FI_ENOCQ), C(FI_ECRC), C(FI_ETRUNC), C(FI_ENOKEY), C(FI_ENOAV),
	C(FI_EOVERRUN), C(FI_ENORX),
	{ "FI_VERSION(1,17)", FI_VERSION(1, 17) },
};

#define SIZE(type) { "sizeof(" #type ")", sizeof(struct type) }
#define ALIGN(type) { "alignof(" #type ")", _Alignof(struct type) }
#define OFFSET(type, field) { #type "." #field, offsetof(struct type, field) }

static const struct lanes_fi_named layout[] = {
	SIZE(fi_cq_data_entry), ALIGN(fi_cq_data_entry),
	OFFSET(fi_cq_data_entry, op_context), OFFSET(fi_cq_data_entry, flags),
	OFFSET(fi_cq_data_entry, len), OFFSET(fi_cq_data_entry, buf),
	OFFSET(fi_cq_data_entry, data),
	SIZE(lanes_fi_cq_err), ALIGN(lanes_fi_cq_err),
	OFFSET(lanes_fi_cq_err, op_context), OFFSET(lanes_fi_cq_err, flags),
	OFFSET(lanes_fi_cq_err, len), OFFSET(lanes_fi_cq_err, data),
	OFFSET(lanes_fi_cq_err, err), OFFSET(lanes_fi_cq_err, prov_errno),
	SIZE(fi_context), ALIGN(fi_context),
	{ "sizeof(fi_addr_t)", sizeof(fi_addr_t) },
};

const struct lanes_fi_named *lanes_fi_constants(size_t *count)
{
	*count = sizeof(constants) / sizeof(constants[0]);
	return constants;
}

const struct lanes_fi_named *lanes_fi_layout(size_t *count)
{
	*count = sizeof(layout) / sizeof(layout[0]);
	return layout;
}

/* ---- hints and fi_info accessors ------------------------------------------------------ */

/* fi_allocinfo() with the fields Lanes chooses filled in; NULL when out of memory.
 * prov_name may be NULL (any provider). Free with fi_freeinfo(). */
struct fi_info *lanes_fi_hints_new(const char *prov_name, uint64_t caps, uint64_t mode,
				   int mr_mode, int ep_type, uint64_t msg_order,
				   int data_progress, int threading)
{
	struct fi_info *hints = fi_allocinfo();
	if (!hints)
		return NULL;
	hints->caps = caps;
	hints->mode = mode;
	hints->ep_attr->type = (enum fi_ep_type)ep_type;
	hints->domain_attr->mr_mode = mr_mode;
	hints->domain_attr->data_progress = (enum fi_progress)data_progress;
	hints->domain_attr->threading = (enum fi_threading)threading;
	hints->tx_attr->msg_order = msg_order;
	hints->rx_attr->msg_order = msg_order;
	if (prov_name) {
		hints->fabric_attr->prov_name = strdup(prov_name);
		if (!hints->fabric_attr->prov_name) {
			fi_freeinfo(hints);
			return NULL;
		}
	}
	return hints;
}

const struct fi_info *lanes_fi_info_next(const struct fi_info *info) { return info->next; }
const char *lanes_fi_info_prov_name(const struct fi_info *info) { return info->fabric_attr->prov_name; }
const char *lanes_fi_info_fabric_name(const struct fi_info *info) { return info->fabric_attr->name; }
const char *lanes_fi_info_domain_name(const struct fi_info *info) { return info->domain_attr->name; }
uint64_t lanes_fi_info_caps(const struct fi_info *info) { return info->caps; }
uint64_t lanes_fi_info_mode(const struct fi_info *info) { return info->mode; }
int lanes_fi_info_ep_type(const struct fi_info *info) { return info->ep_attr->type; }
int lanes_fi_info_mr_mode(const struct fi_info *info) { return info->domain_attr->mr_mode; }
size_t lanes_fi_info_mr_key_size(const struct fi_info *info) { return info->domain_attr->mr_key_size; }
size_t lanes_fi_info_cq_data_size(const struct fi_info *info) { return info->domain_attr->cq_data_size; }
int lanes_fi_info_data_progress(const struct fi_info *info) { return info->domain_attr->data_progress; }
int lanes_fi_info_threading(const struct fi_info *info) { return info->domain_attr->threading; }
uint64_t lanes_fi_info_msg_order(const struct fi_info *info) { return info->tx_attr->msg_order; }
size_t lanes_fi_info_inject_size(const struct fi_info *info) { return info->tx_attr->inject_size; }
size_t lanes_fi_info_tx_size(const struct fi_info *info) { return info->tx_attr->size; }
size_t lanes_fi_info_rx_size(const struct fi_info *info) { return info->rx_attr->size; }
size_t lanes_fi_info_max_msg_size(const struct fi_info *info) { return info->ep_attr->max_msg_size; }
size_t lanes_fi_info_rma_iov_limit(const struct fi_info *info) { return info->tx_attr->rma_iov_limit; }
size_t lanes_fi_info_max_order_waw_size(const struct fi_info *info) { return info->ep_attr->max_order_waw_size; }
size_t lanes_fi_info_max_order_raw_size(const struct fi_info *info) { return info->ep_attr->max_order_raw_size; }

/* The source address (NULL, *len = 0 when the info has none). */
const void *lanes_fi_info_src_addr(const struct fi_info *info, size_t *len)
{
	*len = info->src_addr ? info->src_addrlen : 0;
	return info->src_addr;
}

/* ---- opening and binding -------------------------------------------------------------- */

int lanes_fi_fabric(const struct fi_info *info, struct fid_fabric **fabric)
{
	return fi_fabric(info->fabric_attr, fabric, NULL);
}

int lanes_fi_domain(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **domain)
{
	return fi_domain(fabric, info, domain, NULL);
}

int lanes_fi_av_open(struct fid_domain *domain, int type, size_t count, struct fid_av **av)
{
	struct fi_av_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.type = (enum fi_av_type)type;
	attr.count = count;
	return fi_av_open(domain, &attr, av, NULL);
}

/* Inserts one address. 0 with *fi_addr set, or a negative fi_errno. */
int lanes_fi_av_insert(struct fid_av *av, const void *addr, fi_addr_t *fi_addr)
{
	int ret = fi_av_insert(av, addr, 1, fi_addr, 0, NULL);
	if (ret == 1)
		return 0;
	return ret < 0 ? ret : -FI_EADDRNOTAVAIL;
}

int lanes_fi_av_remove(struct fid_av *av, fi_addr_t fi_addr)
{
	return fi_av_remove(av, &fi_addr, 1, 0);
}

/* A completion queue of struct fi_cq_data_entry with the given wait object. */
int lanes_fi_cq_open(struct fid_domain *domain, size_t size, int wait_obj, struct fid_cq **cq)
{
	struct fi_cq_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.size = size;
	attr.format = FI_CQ_FORMAT_DATA;
	attr.wait_obj = (enum fi_wait_obj)wait_obj;
	attr.wait_cond = FI_CQ_COND_NONE;
	return fi_cq_open(domain, &attr, cq, NULL);
}

/* The CQ's file descriptor (FI_WAIT_FD CQs): fi_control(FI_GETWAIT). */
int lanes_fi_cq_wait_fd(struct fid_cq *cq, int *fd)
{
	return fi_control(&cq->fid, FI_GETWAIT, fd);
}

int lanes_fi_endpoint(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep)
{
	return fi_endpoint(domain, info, ep, NULL);
}

int lanes_fi_ep_bind_av(struct fid_ep *ep, struct fid_av *av)
{
	return fi_ep_bind(ep, &av->fid, 0);
}

/* flags: FI_TRANSMIT and/or FI_RECV, optionally FI_SELECTIVE_COMPLETION. */
int lanes_fi_ep_bind_cq(struct fid_ep *ep, struct fid_cq *cq, uint64_t flags)
{
	return fi_ep_bind(ep, &cq->fid, flags);
}

int lanes_fi_enable(struct fid_ep *ep) { return fi_enable(ep); }

/* 0, or -FI_ETOOSMALL with *len set to the size needed. */
int lanes_fi_getname(struct fid_ep *ep, void *addr, size_t *len)
{
	return fi_getname(&ep->fid, addr, len);
}

int lanes_fi_close_fabric(struct fid_fabric *fabric) { return fi_close(&fabric->fid); }
int lanes_fi_close_domain(struct fid_domain *domain) { return fi_close(&domain->fid); }
int lanes_fi_close_av(struct fid_av *av) { return fi_close(&av->fid); }
int lanes_fi_close_cq(struct fid_cq *cq) { return fi_close(&cq->fid); }
int lanes_fi_close_ep(struct fid_ep *ep) { return fi_close(&ep->fid); }
int lanes_fi_close_mr(struct fid_mr *mr) { return fi_close(&mr->fid); }

/* ---- memory registration -------------------------------------------------------------- */

int lanes_fi_mr_reg(struct fid_domain *domain, const void *buf, size_t len, uint64_t access,
		    uint64_t requested_key, struct fid_mr **mr)
{
	return fi_mr_reg(domain, buf, len, access, 0, requested_key, 0, mr, NULL);
}

uint64_t lanes_fi_mr_key(struct fid_mr *mr) { return fi_mr_key(mr); }
void *lanes_fi_mr_desc(struct fid_mr *mr) { return fi_mr_desc(mr); }

/* ---- RMA ------------------------------------------------------------------------------ */

ssize_t lanes_fi_write(struct fid_ep *ep, const void *buf, size_t len, void *desc,
		       fi_addr_t dest, uint64_t addr, uint64_t key, void *context)
{
	return fi_write(ep, buf, len, desc, dest, addr, key, context);
}

ssize_t lanes_fi_writedata(struct fid_ep *ep, const void *buf, size_t len, void *desc,
			   uint64_t data, fi_addr_t dest, uint64_t addr, uint64_t key,
			   void *context)
{
	return fi_writedata(ep, buf, len, desc, data, dest, addr, key, context);
}

/* fi_writemsg with one local and one remote segment; data is used with FI_REMOTE_CQ_DATA. */
ssize_t lanes_fi_writemsg1(struct fid_ep *ep, const void *buf, size_t len, void *desc,
			   fi_addr_t dest, uint64_t addr, uint64_t key, uint64_t data,
			   void *context, uint64_t flags)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct fi_rma_iov rma_iov = { .addr = addr, .len = len, .key = key };
	struct fi_msg_rma msg = {
		.msg_iov = &iov,
		.desc = &desc,
		.iov_count = 1,
		.addr = dest,
		.rma_iov = &rma_iov,
		.rma_iov_count = 1,
		.context = context,
		.data = data,
	};
	return fi_writemsg(ep, &msg, flags);
}

/* fi_writemsg of one local segment to `count` (at most LANES_SCATTER_MAX) remote ranges of
 * one key, in list order: ranges[i] takes the next lens[i] bytes of buf. */
ssize_t lanes_fi_writemsg_scatter(struct fid_ep *ep, const void *buf, size_t len, void *desc,
				  fi_addr_t dest, const uint64_t *addrs, const size_t *lens,
				  size_t count, uint64_t key, void *context, uint64_t flags)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct fi_rma_iov rma_iov[LANES_SCATTER_MAX];
	size_t i, total = 0;

	if (count == 0 || count > LANES_SCATTER_MAX)
		return -FI_EINVAL;
	for (i = 0; i < count; i++) {
		rma_iov[i].addr = addrs[i];
		rma_iov[i].len = lens[i];
		rma_iov[i].key = key;
		total += lens[i];
	}
	if (total != len)
		return -FI_EINVAL;
	struct fi_msg_rma msg = {
		.msg_iov = &iov,
		.desc = &desc,
		.iov_count = 1,
		.addr = dest,
		.rma_iov = rma_iov,
		.rma_iov_count = count,
		.context = context,
		.data = 0,
	};
	return fi_writemsg(ep, &msg, flags);
}

ssize_t lanes_fi_inject_write(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest,
			      uint64_t addr, uint64_t key)
{
	return fi_inject_write(ep, buf, len, dest, addr, key);
}

ssize_t lanes_fi_read(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src,
		      uint64_t addr, uint64_t key, void *context)
{
	return fi_read(ep, buf, len, desc, src, addr, key, context);
}

/* ---- completions ---------------------------------------------------------------------- */

/* count == 0 (buf may be NULL) drives progress without consuming entries. */
ssize_t lanes_fi_cq_read(struct fid_cq *cq, struct fi_cq_data_entry *buf, size_t count)
{
	return fi_cq_read(cq, buf, count);
}

/* Reads one error entry into *out and its provider-specific text (fi_cq_strerror, made
 * while err_data is still valid) into msg, always NUL-terminated when msg_len > 0.
 * Returns 1, -FI_EAGAIN when no error is queued, or another negative fi_errno. */
ssize_t lanes_fi_cq_readerr(struct fid_cq *cq, struct lanes_fi_cq_err *out, char *msg,
			    size_t msg_len)
{
	struct fi_cq_err_entry entry;
	ssize_t ret;

	memset(&entry, 0, sizeof entry); /* err_data_size 0: the provider's own buffer */
	ret = fi_cq_readerr(cq, &entry, 0);
	if (ret < 0)
		return ret;
	out->op_context = entry.op_context;
	out->flags = entry.flags;
	out->len = entry.len;
	out->data = entry.data;
	out->err = entry.err;
	out->prov_errno = entry.prov_errno;
	if (msg && msg_len) {
		const char *text = fi_cq_strerror(cq, entry.prov_errno, entry.err_data, msg, msg_len);
		if (text && text != msg) {
			strncpy(msg, text, msg_len - 1);
			msg[msg_len - 1] = '\0';
		} else if (!text) {
			msg[0] = '\0';
		}
		msg[msg_len - 1] = '\0';
	}
	return ret;
}

/* The provider's text for prov_errno, without error data. */
const char *lanes_fi_cq_strerror(struct fid_cq *cq, int prov_errno, char *buf, size_t len)
{
	return fi_cq_strerror(cq, prov_errno, NULL, buf, len);
}

/* fi_trywait over up to 8 CQs: FI_SUCCESS means it is safe to block on their fds,
 * -FI_EAGAIN that completions may be pending (read them first). */
int lanes_fi_trywait_cqs(struct fid_fabric *fabric, struct fid_cq *const *cqs, size_t count)
{
	struct fid *fids[8];
	size_t i;

	if (count == 0 || count > 8)
		return -FI_EINVAL;
	for (i = 0; i < count; i++)
		fids[i] = &cqs[i]->fid;
	return fi_trywait(fabric, fids, (int)count);
}
