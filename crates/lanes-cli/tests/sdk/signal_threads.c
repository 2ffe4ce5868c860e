/* The library's threads leave the program's signals to the program.
 *
 * A SISCI program starts library threads (an interrupt's callback, DMA channels), then
 * blocks SIGUSR1 and waits for it with sigtimedwait, as daemons that take their signals
 * synchronously do. A signal sent to the process must reach that wait: a library thread
 * that did not block it could be picked for it, and SIGUSR1's default action there would
 * end the process. Each library thread (named "lanes-...") must block every signal. */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sisci_api.h>
#include <sisci_error.h>
#include <sisci_types.h>

#include "checks.h"

#define NO_FLAGS 0U

static sci_callback_action_t intr_cb(void *arg, sci_local_interrupt_t li, sci_error_t status)
{
    (void)arg;
    (void)li;
    (void)status;
    return SCI_CALLBACK_CONTINUE;
}

/* How many threads of this process are named lanes-...; with `check`, each one's mask is
 * checked too. */
static int library_threads(int check)
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    if (!d) return 0;
    while ((e = readdir(d)) != NULL) {
        char path[320], comm[64] = "", line[256];
        unsigned long long blocked = 0;
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
        fclose(f);
        comm[strcspn(comm, "\n")] = 0;
        if (strncmp(comm, "lanes-", 6) != 0) continue;
        n++;
        if (!check) continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
        f = fopen(path, "r");
        if (!f) continue;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "SigBlk: %llx", &blocked) == 1) break;
        fclose(f);
        /* The signals programs take themselves (every one is blocked). */
        char name[200];
        snprintf(name, sizeof name, "thread %s blocks SIGTERM, SIGUSR1, SIGINT, SIGCHLD (SigBlk %llx)", comm, blocked);
        truth(name, (blocked >> (SIGTERM - 1) & 1) && (blocked >> (SIGUSR1 - 1) & 1) &&
                        (blocked >> (SIGINT - 1) & 1) && (blocked >> (SIGCHLD - 1) & 1));
    }
    closedir(d);
    return n;
}

int main(void)
{
    sci_desc_t sd;
    sci_error_t err;
    sci_local_interrupt_t li;
    sci_dma_queue_t dq;
    unsigned int no = 0;
    SCIInitialize(NO_FLAGS, &err);
    SCIOpen(&sd, NO_FLAGS, &err);
    check("SCIOpen", err, SCI_ERR_OK);
    SCICreateInterrupt(sd, &li, 0, &no, intr_cb, NULL, SCI_FLAG_USE_CALLBACK, &err);
    check("SCICreateInterrupt with a callback", err, SCI_ERR_OK);
    SCICreateDMAQueue(sd, &dq, 0, 4, NO_FLAGS, &err);
    check("SCICreateDMAQueue", err, SCI_ERR_OK);

    /* A new thread names itself once it runs: look again for a while. */
    int seen = 0;
    for (int i = 0; i < 2000 && seen == 0; i++) {
        seen = library_threads(0);
        if (seen == 0) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
    }
    truth("library threads are running", seen > 0 && library_threads(1) > 0);

    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, NULL);
    kill(getpid(), SIGUSR1);
    struct timespec five = {5, 0};
    int got = sigtimedwait(&usr1, NULL, &five);
    truth("sigtimedwait gets the SIGUSR1 sent to the process", got == SIGUSR1);

    SCIRemoveDMAQueue(dq, NO_FLAGS, &err);
    SCIRemoveInterrupt(li, NO_FLAGS, &err);
    SCIClose(sd, NO_FLAGS, &err);
    SCITerminate();
    return finish();
}
