/* The checks of the SDK test programs: each prints "ok NAME" or "FAIL NAME ..." and flushes
 * at once (the tests read the lines of several node processes as they come); finish()
 * prints "N failures", which ends a good run with 0, and gives the exit status. */
#ifndef LANES_SDK_TEST_CHECKS_H
#define LANES_SDK_TEST_CHECKS_H

#include <stdio.h>

#include <sisci_api.h>
#include <sisci_error.h>

static int failures;

__attribute__((unused)) static void check(const char *name, sci_error_t got, sci_error_t want)
{
    if (got == want) {
        printf("ok %s\n", name);
    } else {
        printf("FAIL %s: got %s (0x%x), want %s (0x%x)\n", name, SCIGetErrorString(got), (unsigned)got,
               SCIGetErrorString(want), (unsigned)want);
        failures++;
    }
    fflush(stdout);
}

__attribute__((unused)) static void truth(const char *name, int cond)
{
    printf(cond ? "ok %s\n" : "FAIL %s\n", name);
    if (!cond) failures++;
    fflush(stdout);
}

__attribute__((unused)) static int finish(void)
{
    printf("%d failures\n", failures);
    return failures > 100 ? 100 : failures;
}

#endif
