/* Helpers shared by the example tools. Each tool defines `static const char *prog` (its
 * name, used in messages) before including this file. */
#ifndef LANES_EXAMPLES_COMMON_H
#define LANES_EXAMPLES_COMMON_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <sisci_api.h>

/* The exit code for a failed SISCI call: 2, unless the tool defines its own first. */
#ifndef DIE_SCI_EXIT
#define DIE_SCI_EXIT(err) 2
#endif

/* Reports a failed SISCI call and exits. */
static inline void die_sci(const char *what, sci_error_t err)
{
    fprintf(stderr, "%s: %s failed: %s (0x%x)\n", prog, what, SCIGetErrorString(err), (unsigned)err);
    exit(DIE_SCI_EXIT(err));
}

/* Dies if the call before it set `err` to an error. */
#define CHECK(what) do { if (err != SCI_ERR_OK) die_sci((what), err); } while (0)

/* Microseconds of the monotonic clock. */
static inline double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* Parses a size such as 4096, 64K or 1M; 0 on success, -1 on a malformed one. */
static inline int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno != 0 || end == s) return -1;
    if (*end == 'k' || *end == 'K') { v <<= 10; end++; }
    else if (*end == 'm' || *end == 'M') { v <<= 20; end++; }
    if (*end != '\0') return -1;
    *out = (size_t)v;
    return 0;
}

#endif
