#include "sockconf.h"

/* ------------------------------------------------------------------------------------------
 * Data: a position-addressed pseudo-random pattern, FNV-1a, a small PRNG for sizes
 * ---------------------------------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void pattern(unsigned char *b, uint64_t off, size_t n, uint64_t seed)
{
    size_t i = 0;
    uint64_t w = mix64(seed ^ (off >> 3));
    /* Byte k of the word at offset 8j is w >> 8k: on a little-endian machine whole aligned
     * words can be stored as they are (the multi-GiB stream needs the speed). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; i < n && ((off + i) & 7) != 0; i++)
        b[i] = (unsigned char)(w >> (((off + i) & 7) * 8));
    for (; i + 8 <= n; i += 8) {
        w = mix64(seed ^ ((off + i) >> 3));
        memcpy(b + i, &w, 8);
    }
#endif
    for (; i < n; i++) {
        uint64_t p = off + i;
        if ((p & 7) == 0)
            w = mix64(seed ^ (p >> 3));
        b[i] = (unsigned char)(w >> ((p & 7) * 8));
    }
}

/* Index of the first byte of b that differs from the pattern, or -1. */
long long pattern_check(const unsigned char *b, uint64_t off, size_t n, uint64_t seed)
{
    unsigned char tmp[4096];
    size_t done = 0;
    while (done < n) {
        size_t c = n - done < sizeof tmp ? n - done : sizeof tmp;
        pattern(tmp, off + done, c, seed);
        if (memcmp(tmp, b + done, c) != 0) {
            for (size_t i = 0; i < c; i++)
                if (tmp[i] != b[done + i])
                    return (long long)(done + i);
        }
        done += c;
    }
    return -1;
}

/* Streams hash what they carry unless a case turns it off (the multi-GiB stream checks the
 * pattern of every byte, which proves the same, and byte-wise FNV would take minutes). */
bool hash_streams = true;

uint64_t fnv(uint64_t h, const unsigned char *p, size_t n)
{
    if (!hash_streams)
        return h;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t rng(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

size_t rnd_size(uint64_t *s, size_t max) { return 1 + (size_t)(rng(s) % max); }
