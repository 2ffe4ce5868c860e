/* Creating past the descriptor limit: with RLIMIT_NOFILE lowered after SCIOpen, segments are
 * created until a creation fails. The failure must be SCI_ERR_NOSPC ("out of resources"),
 * not SCI_ERR_SYSTEM, and SCIGetErrorString must say which resource ran out. Then, with the
 * limit raised again (as a program does once it has closed files of its own), every segment
 * is removed, creating works again, the descriptor closes and the library terminates.
 * Prints "ok ..." / "FAIL ..." lines; the exit status is the number of failures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <sisci_api.h>
#include <sisci_error.h>

#define MAX_SEGMENTS 4096

static int failures;

static void truth(const char *name, int cond)
{
    printf("%s %s\n", cond ? "ok" : "FAIL", name);
    if (!cond) failures++;
}

static void check(const char *name, sci_error_t got, sci_error_t want)
{
    if (got == want) {
        printf("ok %s\n", name);
    } else {
        printf("FAIL %s: got %s (0x%x), want 0x%x\n", name, SCIGetErrorString(got), (unsigned)got, (unsigned)want);
        failures++;
    }
}

static sci_local_segment_t segments[MAX_SEGMENTS];

int main(void)
{
    sci_error_t err;
    sci_desc_t sd;
    SCIInitialize(0, &err);
    check("SCIInitialize", err, SCI_ERR_OK);
    SCIOpen(&sd, 0, &err);
    check("SCIOpen", err, SCI_ERR_OK);
    if (err != SCI_ERR_OK) return 1;

    struct rlimit old, low;
    getrlimit(RLIMIT_NOFILE, &old);
    low = old;
    low.rlim_cur = 64;
    truth("setrlimit(RLIMIT_NOFILE, 64)", setrlimit(RLIMIT_NOFILE, &low) == 0);

    int n = 0;
    err = SCI_ERR_OK;
    while (n < MAX_SEGMENTS) {
        SCICreateSegment(sd, &segments[n], 0x1000 + (unsigned)n, 4096, NULL, NULL, 0, &err);
        if (err != SCI_ERR_OK) break;
        n++;
    }
    printf("created %d segments before the failure\n", n);
    truth("some segments were created", n > 0);
    check("creating past the descriptor limit", err, SCI_ERR_NOSPC);
    const char *why = SCIGetErrorString(err);
    printf("message: %s\n", why);
    truth("the message names the resource", strstr(why, "Too many open files") != NULL);

    truth("setrlimit back", setrlimit(RLIMIT_NOFILE, &old) == 0);
    int removed = 0;
    for (int i = 0; i < n; i++) {
        sci_error_t e;
        SCIRemoveSegment(segments[i], 0, &e);
        if (e == SCI_ERR_OK) removed++;
        else printf("SCIRemoveSegment %d: %s\n", i, SCIGetErrorString(e));
    }
    truth("every segment was removed", removed == n);

    /* With the descriptors back, creating works again. */
    sci_local_segment_t again;
    SCICreateSegment(sd, &again, 0x1000, 4096, NULL, NULL, 0, &err);
    check("creating again after removing", err, SCI_ERR_OK);
    if (err == SCI_ERR_OK) {
        SCIRemoveSegment(again, 0, &err);
        check("removing it", err, SCI_ERR_OK);
    }

    SCIClose(sd, 0, &err);
    check("SCIClose", err, SCI_ERR_OK);
    SCITerminate();
    printf("%d failures\n", failures);
    return failures > 100 ? 100 : failures;
}
