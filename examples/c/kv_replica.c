/*
 * kv_replica - a replicated key-value store over reflective memory.
 *
 * Every replica creates the broadcast segment of the group (SCICreateSegment with
 * SCI_FLAG_BROADCAST and the same id: the first creates the group, the others join it) and
 * maps it locally: its copy of the store, for reads. For its writes it connects to node
 * DIS_BROADCAST_NODEID_GROUP_ALL with SCI_FLAG_BROADCAST and maps the connection (no flag:
 * the multicast address): a store through that map reaches every replica's copy.
 *
 * The store is a fixed-size open-addressing table of 128-byte slots split into one region
 * per replica: a key belongs to replica hash(key) % N and lives in its region (linear
 * probing, tombstones for deletions), so each slot has a single writer. A slot carries a
 * version word used as a seqlock: the writer makes it odd, SCIStoreBarrier, writes the key,
 * value and checksum, SCIStoreBarrier, makes it even again and SCIFlush-es; a reader copies
 * a slot only between two equal even versions, and checks the checksum (and, for scripted
 * values, that the value is the one its key and generation say): a torn value is counted.
 * The writer keeps a private mirror of its region.
 *
 * Commands: PUT key value, GET key, DEL key, SUM (table checksum), from stdin (-stdin) or a
 * scripted workload (-ops: PUTs and DELs of the replica's own keys, GETs of everyone's).
 * Replicas meet at barriers in the group's control lines: all joined; all done writing; then
 * each compares its region with its mirror, computes the checksum of its copy of the whole
 * table, publishes it, and checks that every replica's checksum is the same (converged).
 *
 *   LANES_NODE_ID=4  ./kv_replica -replicas 4,8,12 -ops 2000 &
 *   LANES_NODE_ID=8  ./kv_replica -replicas 4,8,12 -ops 2000 &
 *   LANES_NODE_ID=12 ./kv_replica -replicas 4,8,12 -ops 2000
 *   printf 'PUT a 1\nGET a\n' | LANES_NODE_ID=4 ./kv_replica -replicas 4 -stdin
 *
 * Exit status: 0 converged and no torn read, 1 usage, 2 SISCI error, 3 a torn value, a wrong
 * own value, diverged replicas or a replica that did not arrive in time.
 */
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sisci_api.h>
#include <sisci_error.h>
#include <sisci_types.h>
#include <dis_types.h>

#define NO_FLAGS     0
#define NO_CALLBACK  NULL
#define NO_ARG       NULL
#define ADAPTER_NO   0

#define MAX_REPLICAS 16
#define KEY_MAX      32     /* bytes, NUL-padded (31 usable) */
#define VAL_MAX      72     /* bytes */
#define CTRL_BYTES   4096   /* control lines before the table */
#define LINE(k)      (64 * (size_t)(k))

enum { SLOT_EMPTY = 0, SLOT_USED = 1, SLOT_TOMB = 2 };
enum { PHASE_JOINED = 1, PHASE_WRITTEN = 2, PHASE_SUMMED = 3, PHASE_LEAVING = 4 };

/* One slot: 128 bytes. */
struct slot {
    uint64_t version;        /* seqlock: odd while the owner writes */
    uint32_t state;          /* SLOT_* */
    uint32_t vlen;
    char key[KEY_MAX];
    char val[VAL_MAX];
    uint64_t sum;            /* fnv of state, vlen, key, val */
};

/* A replica's control line. */
struct line {
    uint64_t phase;
    uint64_t checksum;
    uint64_t ops;
    uint64_t torn;
};

static const char *prog = "kv_replica";
#include "common.h"

static void usage(void)
{
    printf("Usage: %s -replicas NODE[,NODE...] [-group G] [-slots N] [-ops N | -stdin] [-keys N]\n"
           "       [-seed S] [-timeout MS]\n"
           "A key-value store replicated over reflective memory (one process per replica).\n"
           "  -replicas LIST  the replicas' node ids, comma separated, this node among them (at most %d)\n"
           "  -group G        the reflective group id (default 0x4B56)\n"
           "  -slots N        slots of the table, the same for every replica (default 1024)\n"
           "  -ops N          scripted workload: N operations (default 10000)\n"
           "  -keys N         scripted workload: own keys per replica (default 16)\n"
           "  -seed S         scripted workload: seed (default 1)\n"
           "  -stdin          read commands from stdin instead: PUT key value, GET key, DEL key, SUM\n"
           "  -timeout MS     longest wait for the other replicas (default 30000)\n"
           "  -h              this help\n"
           "Exit status: 0 converged, no torn read; 1 usage; 2 SISCI error; 3 a check failed.\n",
           prog, MAX_REPLICAS);
}

/* The store: our copy (reads), the multicast map (writes), and our mirror. */
static struct {
    unsigned int me, index, n;
    unsigned int nodes[MAX_REPLICAS];
    size_t slots, per;
    const volatile uint8_t *rd;
    volatile uint8_t *wr;
    sci_sequence_t seq;
    struct slot *mirror;     /* our region as we wrote it */
    unsigned int timeout;
    unsigned long torn, retries;
    int scripted;
} kv;

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}
#define FNV0 0xcbf29ce484222325ULL

static uint64_t slot_sum(const struct slot *s)
{
    uint64_t h = fnv(FNV0, &s->state, sizeof s->state);
    h = fnv(h, &s->vlen, sizeof s->vlen);
    h = fnv(h, s->key, KEY_MAX);
    return fnv(h, s->val, VAL_MAX);
}

static uint64_t key_hash(const char *key) { return fnv(FNV0, key, strlen(key)); }

static const volatile struct slot *rslot(size_t i)
{
    return (const volatile struct slot *)(kv.rd + CTRL_BYTES + i * sizeof(struct slot));
}

static volatile struct slot *wslot(size_t i)
{
    return (volatile struct slot *)(kv.wr + CTRL_BYTES + i * sizeof(struct slot));
}

static void relax(unsigned int n)
{
    if (n % 16 == 0) sched_yield();
}

/* Copies slot i of our copy between two equal even versions; -1 if the writer kept it odd
 * past the timeout. */
static int slot_read(size_t i, struct slot *out)
{
    const volatile struct slot *s = rslot(i);
    double deadline = now_us() + kv.timeout * 1000.0;
    for (unsigned int n = 1;; n++) {
        uint64_t v1 = __atomic_load_n(&s->version, __ATOMIC_ACQUIRE);
        if ((v1 & 1) == 0) {
            out->state = s->state;
            out->vlen = s->vlen;
            for (size_t k = 0; k < KEY_MAX; k++) out->key[k] = s->key[k];
            for (size_t k = 0; k < VAL_MAX; k++) out->val[k] = s->val[k];
            out->sum = s->sum;
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            if (__atomic_load_n(&s->version, __ATOMIC_ACQUIRE) == v1) {
                out->version = v1;
                return 0;
            }
        }
        kv.retries++;
        if (n % 64 == 0 && now_us() > deadline) return -1;
        relax(n);
    }
}

/* Writes slot i of our region to every replica, as a seqlock writer. */
static void slot_write(size_t i, const struct slot *in)
{
    volatile struct slot *w = wslot(i);
    struct slot *m = &kv.mirror[i - (size_t)kv.index * kv.per];
    uint64_t v = m->version;
    *m = *in;
    m->sum = slot_sum(m);
    __atomic_store_n(&w->version, v + 1, __ATOMIC_RELEASE);
    SCIStoreBarrier(kv.seq, NO_FLAGS);          /* the odd version first, everywhere */
    w->state = m->state;
    w->vlen = m->vlen;
    for (size_t k = 0; k < KEY_MAX; k++) w->key[k] = m->key[k];
    for (size_t k = 0; k < VAL_MAX; k++) w->val[k] = m->val[k];
    w->sum = m->sum;
    SCIStoreBarrier(kv.seq, NO_FLAGS);          /* the contents before the even version */
    __atomic_store_n(&w->version, v + 2, __ATOMIC_RELEASE);
    SCIFlush(kv.seq, NO_FLAGS);                 /* delivered everywhere before we go on */
    m->version = v + 2;
}

/* A scripted value: "key=gen:" then letters both sides derive from key and gen. */
static uint32_t make_value(char *val, const char *key, uint64_t gen, uint32_t len)
{
    int n = snprintf(val, VAL_MAX, "%s=%llu:", key, (unsigned long long)gen);
    uint64_t h = fnv(key_hash(key), &gen, sizeof gen);
    uint32_t i = (uint32_t)n;
    for (; i < len && i < VAL_MAX; i++) val[i] = (char)('a' + (h + i) % 26);
    return i;
}

static int value_consistent(const char *key, const char *val, uint32_t vlen)
{
    char expect[VAL_MAX];
    const char *eq = memchr(val, '=', vlen);
    if (vlen > VAL_MAX || eq == NULL || (size_t)(eq - val) != strlen(key) || memcmp(val, key, strlen(key)) != 0)
        return 0;
    unsigned long long gen = strtoull(eq + 1, NULL, 10);
    memset(expect, 0, sizeof expect);
    return make_value(expect, key, gen, vlen) == vlen && memcmp(expect, val, vlen) == 0;
}

/* Whether a slot read is whole: its checksum, and a scripted value's contents. */
static int whole(const struct slot *s)
{
    if (s->state == SLOT_EMPTY) return s->sum == 0 || s->sum == slot_sum(s);
    if (s->state != SLOT_USED && s->state != SLOT_TOMB) return 0;
    if (s->sum != slot_sum(s)) return 0;
    if (s->state == SLOT_USED && kv.scripted) {
        char key[KEY_MAX];
        memcpy(key, s->key, KEY_MAX);
        key[KEY_MAX - 1] = '\0';
        return value_consistent(key, s->val, s->vlen);
    }
    return 1;
}

static unsigned int owner(const char *key) { return (unsigned int)(key_hash(key) % kv.n); }

/* GET from our copy: 1 found (value in val, length in *vlen), 0 not found, -1 timed out. */
static int kv_get(const char *key, char *val, uint32_t *vlen)
{
    uint64_t h = key_hash(key);
    size_t base = (size_t)owner(key) * kv.per, start = (size_t)(h / kv.n) % kv.per;
    for (size_t p = 0; p < kv.per; p++) {
        size_t i = base + (start + p) % kv.per;
        struct slot s;
        if (slot_read(i, &s) != 0) return -1;
        if (!whole(&s)) {
            kv.torn++;
            fprintf(stderr, "%s: node %u: slot %zu read torn (version %llu)\n", prog, kv.me, i,
                    (unsigned long long)s.version);
            return 0;
        }
        if (s.state == SLOT_EMPTY) return 0;
        if (s.state == SLOT_USED && strncmp(s.key, key, KEY_MAX) == 0) {
            memcpy(val, s.val, VAL_MAX);
            *vlen = s.vlen;
            return 1;
        }
    }
    return 0;
}

/* Our region's slot for key in the mirror: the slot holding it, else the first free one
 * (tombstone or empty); *found says which. (size_t)-1 when the region is full. */
static size_t mirror_find(const char *key, int *found)
{
    uint64_t h = key_hash(key);
    size_t start = (size_t)(h / kv.n) % kv.per, free_slot = (size_t)-1;
    *found = 0;
    for (size_t p = 0; p < kv.per; p++) {
        size_t j = (start + p) % kv.per;
        struct slot *s = &kv.mirror[j];
        if (s->state == SLOT_USED && strncmp(s->key, key, KEY_MAX) == 0) {
            *found = 1;
            return j;
        }
        if (s->state != SLOT_USED && free_slot == (size_t)-1) free_slot = j;
        if (s->state == SLOT_EMPTY) break;
    }
    return free_slot;
}

/* PUT or DEL of one of our keys: 0, or -1 when the region is full or the key not found. */
static int kv_put(const char *key, const char *val, uint32_t vlen)
{
    int found;
    size_t j = mirror_find(key, &found);
    if (j == (size_t)-1) return -1;
    struct slot s;
    memset(&s, 0, sizeof s);
    s.state = SLOT_USED;
    s.vlen = vlen;
    strncpy(s.key, key, KEY_MAX - 1);
    memcpy(s.val, val, vlen);
    slot_write((size_t)kv.index * kv.per + j, &s);
    return 0;
}

static int kv_del(const char *key)
{
    int found;
    size_t j = mirror_find(key, &found);
    if (!found) return -1;
    struct slot s = kv.mirror[j];
    s.state = SLOT_TOMB;
    s.vlen = 0;
    memset(s.val, 0, VAL_MAX);
    slot_write((size_t)kv.index * kv.per + j, &s);
    return 0;
}

/* The checksum of our copy of the whole table. */
static uint64_t table_checksum(void)
{
    uint64_t h = FNV0;
    for (size_t i = 0; i < kv.slots; i++) {
        struct slot s;
        if (slot_read(i, &s) != 0) return 0;
        h = fnv(h, &s, sizeof s);
    }
    return h;
}

static volatile struct line *wline(unsigned int k) { return (volatile struct line *)(kv.wr + LINE(k)); }
static const volatile struct line *rline(unsigned int k) { return (const volatile struct line *)(kv.rd + LINE(k)); }

static void publish(uint64_t phase, uint64_t checksum, uint64_t ops)
{
    volatile struct line *l = wline(kv.index);
    l->checksum = checksum;
    l->ops = ops;
    l->torn = kv.torn;
    SCIStoreBarrier(kv.seq, NO_FLAGS);
    __atomic_store_n(&l->phase, phase, __ATOMIC_RELEASE);
    SCIFlush(kv.seq, NO_FLAGS);
}

/* Waits until every replica reached `phase`; -1 naming the one that did not in time. */
static int barrier(uint64_t phase)
{
    double deadline = now_us() + kv.timeout * 1000.0;
    for (unsigned int k = 0; k < kv.n; k++) {
        for (unsigned int n = 1; __atomic_load_n(&rline(k)->phase, __ATOMIC_ACQUIRE) < phase; n++) {
            if (n % 64 == 0 && now_us() > deadline) {
                fprintf(stderr, "%s: node %u: replica node %u did not reach phase %llu within %u ms\n", prog, kv.me,
                        kv.nodes[k], (unsigned long long)phase, kv.timeout);
                return -1;
            }
            relax(n);
        }
    }
    return 0;
}

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Replica k's own key number i: a key whose owner is k. */
static void own_key(char *key, unsigned int k, unsigned long i)
{
    for (unsigned long salt = 0;; salt++) {
        snprintf(key, KEY_MAX, "n%u-k%lu-%lu", kv.nodes[k], i, salt);
        if (owner(key) == k) return;
    }
}

/* The scripted workload; 0, or -1 when a check failed. */
static int workload(unsigned long ops, unsigned long keys, uint64_t seed)
{
    unsigned long puts = 0, dels = 0, gets = 0, hits = 0, own_gets = 0;
    int rc = 0;
    uint64_t gen = 0;
    rng_state = seed * 0x9E3779B97F4A7C15ULL + kv.me + 1;
    for (unsigned long op = 0; op < ops && rc == 0; op++) {
        char key[KEY_MAX], val[VAL_MAX], got[VAL_MAX];
        uint32_t vlen, glen;
        unsigned int r = (unsigned int)(rnd() % 100);
        if (r < 45) {
            own_key(key, kv.index, (unsigned long)(rnd() % keys));
            memset(val, 0, sizeof val);
            vlen = make_value(val, key, ++gen, (uint32_t)(16 + rnd() % (VAL_MAX - 16 + 1)));
            if (kv_put(key, val, vlen) != 0) {
                fprintf(stderr, "%s: node %u: region full\n", prog, kv.me);
                rc = -1;
            }
            puts++;
        } else if (r < 60) {
            own_key(key, kv.index, (unsigned long)(rnd() % keys));
            if (kv_del(key) == 0) dels++;
        } else {
            unsigned int k = (unsigned int)(rnd() % kv.n);
            own_key(key, k, (unsigned long)(rnd() % keys));
            int f = kv_get(key, got, &glen);
            if (f < 0) {
                fprintf(stderr, "%s: node %u: GET %s: a slot stayed locked\n", prog, kv.me, key);
                rc = -1;
                break;
            }
            gets++;
            hits += (unsigned long)f;
            if (k == kv.index) {
                /* Our own key: exactly what our mirror says. */
                int found;
                size_t j = mirror_find(key, &found);
                own_gets++;
                if (found != f || (found && (glen != kv.mirror[j].vlen || memcmp(got, kv.mirror[j].val, glen) != 0))) {
                    fprintf(stderr, "%s: node %u: GET %s of our own key returned %s\n", prog, kv.me, key,
                            f ? "a wrong value" : "nothing");
                    rc = -1;
                }
            }
        }
    }
    printf("%s: node %u: %lu ops: %lu put, %lu del, %lu get (%lu hits, %lu own), %lu retries, %lu torn\n", prog,
           kv.me, ops, puts, dels, gets, hits, own_gets, kv.retries, kv.torn);
    return rc;
}

/* Commands from stdin; 0, or -1 when a check failed. */
static int commands(void)
{
    char line[256];
    unsigned long ops = 0;
    while (fgets(line, sizeof line, stdin)) {
        char cmd[16], key[64], val[128];
        char got[VAL_MAX + 1];
        uint32_t glen;
        int n = sscanf(line, "%15s %63s %127[^\n]", cmd, key, val);
        if (n < 1 || cmd[0] == '#') continue;
        ops++;
        if (n >= 2 && strlen(key) >= KEY_MAX) { printf("ERR key longer than %d bytes\n", KEY_MAX - 1); continue; }
        if (!strcmp(cmd, "PUT") && n == 3) {
            if (owner(key) != kv.index) printf("ERR %s belongs to replica node %u\n", key, kv.nodes[owner(key)]);
            else if (strlen(val) > VAL_MAX) printf("ERR value longer than %d bytes\n", VAL_MAX);
            else if (kv_put(key, val, (uint32_t)strlen(val)) != 0) printf("ERR full\n");
            else printf("OK\n");
        } else if (!strcmp(cmd, "DEL") && n == 2) {
            if (owner(key) != kv.index) printf("ERR %s belongs to replica node %u\n", key, kv.nodes[owner(key)]);
            else printf(kv_del(key) == 0 ? "OK\n" : "NOTFOUND %s\n", key);
        } else if (!strcmp(cmd, "GET") && n == 2) {
            int f = kv_get(key, got, &glen);
            if (f < 0) return -1;
            got[f ? glen : 0] = '\0';
            if (f) printf("VALUE %s %s\n", key, got);
            else printf("NOTFOUND %s\n", key);
        } else if (!strcmp(cmd, "SUM") && n == 1) {
            printf("SUM 0x%016llx\n", (unsigned long long)table_checksum());
        } else {
            printf("ERR usage: PUT key value | GET key | DEL key | SUM\n");
        }
        fflush(stdout);
    }
    printf("%s: node %u: %lu commands, %lu torn\n", prog, kv.me, ops, kv.torn);
    return kv.torn ? -1 : 0;
}

static int parse_count(const char *s, unsigned long *out)
{
    char *end;
    *out = strtoul(s, &end, 0);
    return end == s || *end != '\0' ? -1 : 0;
}

int main(int argc, char **argv)
{
    unsigned long group = 0x4B56, slots = 1024, ops = 10000, keys = 16, seed = 1, timeout = 30000;
    int from_stdin = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "-help") || !strcmp(a, "--help")) { usage(); return 0; }
        if (!strcmp(a, "-stdin")) { from_stdin = 1; continue; }
        if (v && !strcmp(a, "-replicas")) {
            char buf[512];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                unsigned long node;
                if (kv.n == MAX_REPLICAS || parse_count(t, &node) != 0 || node == 0 || node > 0xFFFF) {
                    bad = 1;
                    break;
                }
                kv.nodes[kv.n++] = (unsigned int)node;
            }
        }
        else if (v && !strcmp(a, "-group")) bad = parse_count(v, &group) || group > 0xFFFFFFFFUL;
        else if (v && !strcmp(a, "-slots")) bad = parse_count(v, &slots) || slots == 0 || slots > 65536;
        else if (v && !strcmp(a, "-ops")) bad = parse_count(v, &ops);
        else if (v && !strcmp(a, "-keys")) bad = parse_count(v, &keys) || keys == 0;
        else if (v && !strcmp(a, "-seed")) bad = parse_count(v, &seed);
        else if (v && !strcmp(a, "-timeout")) bad = parse_count(v, &timeout) || timeout == 0 || timeout > 3600000;
        else { fprintf(stderr, "%s: unknown or incomplete option %s\n", prog, a); usage(); return 1; }
        if (bad) { fprintf(stderr, "%s: bad value for %s: %s\n", prog, a, v); usage(); return 1; }
        i++;
    }
    if (kv.n == 0) { fprintf(stderr, "%s: -replicas is required\n", prog); usage(); return 1; }
    kv.slots = slots;
    kv.per = slots / kv.n;
    kv.timeout = (unsigned int)timeout;
    kv.scripted = !from_stdin;
    if (kv.per < 2 || (kv.scripted && keys > kv.per / 2)) {
        fprintf(stderr, "%s: %lu slots are too few for %u replicas (and %lu keys each)\n", prog, slots, kv.n, keys);
        return 1;
    }

    sci_error_t err;
    sci_desc_t sd;
    sci_local_segment_t seg;
    sci_remote_segment_t rseg;
    sci_map_t rmap, wmap;
    size_t bytes = CTRL_BYTES + slots * sizeof(struct slot);

    SCIInitialize(NO_FLAGS, &err);
    CHECK("SCIInitialize");
    SCIOpen(&sd, NO_FLAGS, &err);
    CHECK("SCIOpen");
    SCIGetLocalNodeId(ADAPTER_NO, &kv.me, NO_FLAGS, &err);
    CHECK("SCIGetLocalNodeId");
    kv.index = kv.n;
    for (unsigned int k = 0; k < kv.n; k++)
        if (kv.nodes[k] == kv.me) kv.index = k;
    if (kv.index == kv.n) {
        fprintf(stderr, "%s: this node (%u) is not in -replicas\n", prog, kv.me);
        return 1;
    }
    kv.mirror = calloc(kv.per, sizeof *kv.mirror);
    if (kv.mirror == NULL) { perror(prog); return 2; }

    /* Every replica creates the group's segment with the same id. */
    SCICreateSegment(sd, &seg, (unsigned int)group, bytes, NO_CALLBACK, NO_ARG, SCI_FLAG_BROADCAST, &err);
    CHECK("SCICreateSegment(SCI_FLAG_BROADCAST)");
    SCIPrepareSegment(seg, ADAPTER_NO, SCI_FLAG_BROADCAST, &err);
    CHECK("SCIPrepareSegment");
    SCISetSegmentAvailable(seg, ADAPTER_NO, SCI_FLAG_BROADCAST, &err);
    CHECK("SCISetSegmentAvailable");
    kv.rd = SCIMapLocalSegment(seg, &rmap, 0, bytes, NULL, SCI_FLAG_READONLY_MAP, &err);
    CHECK("SCIMapLocalSegment (our copy)");
    /* Our writes: the group's multicast address. */
    SCIConnectSegment(sd, &rseg, DIS_BROADCAST_NODEID_GROUP_ALL, (unsigned int)group, ADAPTER_NO, NO_CALLBACK, NO_ARG,
                      kv.timeout, SCI_FLAG_BROADCAST, &err);
    CHECK("SCIConnectSegment(DIS_BROADCAST_NODEID_GROUP_ALL)");
    kv.wr = SCIMapRemoteSegment(rseg, &wmap, 0, bytes, NULL, NO_FLAGS, &err);
    CHECK("SCIMapRemoteSegment (multicast)");
    SCICreateMapSequence(wmap, &kv.seq, NO_FLAGS, &err);
    CHECK("SCICreateMapSequence");
    printf("%s: node %u: replica %u of %u, group 0x%lx, %lu slots (%zu per replica)\n", prog, kv.me, kv.index + 1, kv.n,
           group, slots, kv.per);
    fflush(stdout);

    int rc = 0;
    publish(PHASE_JOINED, 0, 0);
    if (barrier(PHASE_JOINED) != 0) rc = 3;
    if (rc == 0) {
        /* Our region starts as the group holds it (empty, unless we rejoin). */
        for (size_t j = 0; j < kv.per; j++)
            if (slot_read((size_t)kv.index * kv.per + j, &kv.mirror[j]) != 0) rc = 3;
    }
    if (rc == 0 && (from_stdin ? commands() : workload(ops, keys, seed)) != 0) rc = 3;
    if (rc == 0) {
        publish(PHASE_WRITTEN, 0, ops);
        if (barrier(PHASE_WRITTEN) != 0) rc = 3;
    }
    if (rc == 0) {
        /* Our region in our copy is our mirror, byte for byte; every slot is whole. */
        unsigned long present = 0, bad = 0;
        for (size_t j = 0; j < kv.per; j++) {
            struct slot s;
            if (slot_read((size_t)kv.index * kv.per + j, &s) != 0 || memcmp(&s, &kv.mirror[j], sizeof s) != 0) bad++;
            present += kv.mirror[j].state == SLOT_USED;
        }
        for (size_t i = 0; i < kv.slots; i++) {
            struct slot s;
            if (slot_read(i, &s) != 0 || !whole(&s)) bad++;
        }
        if (bad) {
            fprintf(stderr, "%s: node %u: %lu slots differ from what was written\n", prog, kv.me, bad);
            rc = 3;
        } else {
            printf("%s: node %u: own region verified (%lu keys present)\n", prog, kv.me, present);
        }
    }
    uint64_t sum = 0;
    if (rc == 0) {
        sum = table_checksum();
        publish(PHASE_SUMMED, sum, ops);
        if (barrier(PHASE_SUMMED) != 0) rc = 3;
    }
    if (rc == 0) {
        unsigned long torn = kv.torn;
        for (unsigned int k = 0; k < kv.n; k++) {
            uint64_t theirs = rline(k)->checksum;
            torn += k == kv.index ? 0 : rline(k)->torn;
            if (theirs != sum) {
                fprintf(stderr, "%s: node %u: replica node %u has checksum 0x%016llx, we have 0x%016llx\n", prog,
                        kv.me, kv.nodes[k], (unsigned long long)theirs, (unsigned long long)sum);
                rc = 3;
            }
        }
        if (rc == 0)
            printf("%s: node %u: table checksum 0x%016llx, converged with %u replicas, %lu torn reads in all\n", prog,
                   kv.me, (unsigned long long)sum, kv.n, torn);
        if (torn) rc = 3;
        /* Nobody leaves (the group's creator ends it) before everyone has read the checksums. */
        publish(PHASE_LEAVING, sum, ops);
        if (barrier(PHASE_LEAVING) != 0) rc = 3;
    }

    SCIRemoveSequence(kv.seq, NO_FLAGS, &err);
    CHECK("SCIRemoveSequence");
    SCIUnmapSegment(wmap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment (multicast)");
    SCIDisconnectSegment(rseg, NO_FLAGS, &err);
    CHECK("SCIDisconnectSegment");
    SCIUnmapSegment(rmap, NO_FLAGS, &err);
    CHECK("SCIUnmapSegment (our copy)");
    SCIRemoveSegment(seg, NO_FLAGS, &err);
    CHECK("SCIRemoveSegment");
    SCIClose(sd, NO_FLAGS, &err);
    CHECK("SCIClose");
    SCITerminate();
    free(kv.mirror);
    printf("%s: node %u: %s\n", prog, kv.me, rc == 0 ? "done" : "FAILED");
    return rc;
}
