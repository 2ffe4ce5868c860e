/* Connecting to a segment whose object file is not one the library wrote (garbage, a FIFO):
 * the call fails with an error, it does not crash or block, and SCIGetErrorString for the
 * code gives the cause (the file and what is wrong with it) on this thread until another
 * call fails. Usage: corrupt NODE SEGMENT-ID. Prints "ok ..." / "FAIL ..." lines and
 * "message: ..." (what SCIGetErrorString said); the exit status is the number of failures.
 * The library's own report goes to stderr (the test checks it); this program writes none. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sisci_api.h>
#include <sisci_error.h>

static int failures;

static void truth(const char *name, int cond)
{
    printf("%s %s\n", cond ? "ok" : "FAIL", name);
    if (!cond) failures++;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        printf("Usage: corrupt NODE SEGMENT-ID\n");
        return 100;
    }
    unsigned int node = (unsigned int)strtoul(argv[1], NULL, 0);
    unsigned int id = (unsigned int)strtoul(argv[2], NULL, 0);
    sci_error_t err;
    sci_desc_t sd;
    SCIInitialize(0, &err);
    truth("SCIInitialize", err == SCI_ERR_OK);
    SCIOpen(&sd, 0, &err);
    truth("SCIOpen", err == SCI_ERR_OK);
    if (err != SCI_ERR_OK) return 100;

    /* A fixed string before anything failed. */
    const char *before = SCIGetErrorString(SCI_ERR_SYSTEM);
    char fixed[256];
    snprintf(fixed, sizeof fixed, "%s", before);

    sci_remote_segment_t rs;
    SCIConnectSegment(sd, &rs, node, id, 0, NULL, NULL, 0, 0, &err);
    printf("connect: 0x%x\n", (unsigned)err);
    truth("the connection fails with SCI_ERR_SYSTEM", err == SCI_ERR_SYSTEM);
    const char *why = SCIGetErrorString(err);
    printf("message: %s\n", why);
    truth("the message starts with the code's string", strncmp(why, fixed, strlen(fixed)) == 0);
    truth("the message says more than the code", strlen(why) > strlen(fixed));
    truth("asking again gives the same string", SCIGetErrorString(err) == why);
    truth("another code keeps its fixed string", strstr(SCIGetErrorString(SCI_ERR_TIMEOUT), "segment") == NULL);

    /* A later failure (a NULL out-parameter) replaces it: the fixed string comes back, and
     * the string given before stays readable. */
    SCIConnectSegment(sd, NULL, node, id, 0, NULL, NULL, 0, 0, &err);
    truth("a NULL out-parameter is SCI_ERR_ILLEGAL_PARAMETER", err == SCI_ERR_ILLEGAL_PARAMETER);
    truth("after another failure, the fixed string", strcmp(SCIGetErrorString(SCI_ERR_SYSTEM), fixed) == 0);
    truth("the earlier string is still valid", strlen(why) > strlen(fixed));

    SCIClose(sd, 0, &err);
    truth("SCIClose", err == SCI_ERR_OK);
    SCITerminate();
    printf("%d failures\n", failures);
    return failures > 100 ? 100 : failures;
}
