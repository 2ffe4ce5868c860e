/* Removal while a peer is connected, as the vendor's library does it (issue 28, item 2),
 * one role per node process:
 *
 *   teardown owner DIR      (node 8)
 *   teardown peer OWNER DIR (node 4)
 *
 * The vendor's sisci_api.h gives, per call: SCIRemoveSegment "SCI_ERR_BUSY - Unable to
 * remove the segment. The segment is currently in use."; SCIDisconnectSegment
 * "SCI_ERR_BUSY - The segment is currently mapped or in use."; SCIUnmapSegment
 * "SCI_ERR_BUSY - The map is currently in use."; SCIClose "SCI_ERR_BUSY - All resources are
 * not deallocated."; and SCISetSegmentUnavailable takes SCI_FLAG_FORCE_DISCONNECT and
 * SCI_FLAG_NOTIFY, which programs written for it pass before removing a segment that peers
 * may still use. So: the owner's SCIRemoveSegment is busy while the peer is connected; after
 * SCISetSegmentUnavailable(SCI_FLAG_NOTIFY | SCI_FLAG_FORCE_DISCONNECT) it succeeds. The peer
 * hears SCI_CB_NOT_OPERATIONAL, then SCI_CB_DISCONNECT; its sequence fails; connecting again
 * finds no segment; its own teardown (sequence, map, connection, descriptor) succeeds in
 * order, each step busy while the one before is not done.
 *
 * Each check prints "ok NAME" or "FAIL NAME ..."; "0 failures" ends a good run. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sisci_api.h>
#include <sisci_error.h>
#include <sisci_types.h>

#include "checks.h"

#define NO_FLAGS 0
#define SEGMENT 0x7700
#define BYTES 8192
#define TIMEOUT_MS 30000

static void touch(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
}

static int await_file(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    for (int i = 0; i < TIMEOUT_MS / 2; i++) {
        if (access(path, F_OK) == 0) return 1;
        usleep(2000);
    }
    return 0;
}

static int owner(const char *dir)
{
    sci_error_t err;
    sci_desc_t sd;
    sci_local_segment_t seg;
    unsigned int node = 0, adapter = 0;
    SCIInitialize(NO_FLAGS, &err);
    SCIOpen(&sd, NO_FLAGS, &err);
    SCICreateSegment(sd, &seg, SEGMENT, BYTES, NULL, NULL, NO_FLAGS, &err);
    check("SCICreateSegment", err, SCI_ERR_OK);
    SCIPrepareSegment(seg, 0, NO_FLAGS, &err);
    SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err);
    check("SCISetSegmentAvailable", err, SCI_ERR_OK);
    sci_segment_cb_reason_t why = SCIWaitForLocalSegmentEvent(seg, &node, &adapter, TIMEOUT_MS, NO_FLAGS, &err);
    truth("the peer connected (SCI_CB_CONNECT)", err == SCI_ERR_OK && why == SCI_CB_CONNECT && node == 4);
    truth("the peer is set up", await_file(dir, "peer-ready"));

    SCIRemoveSegment(seg, NO_FLAGS, &err);
    check("SCIRemoveSegment while a peer is connected", err, SCI_ERR_BUSY);
    SCIClose(sd, NO_FLAGS, &err);
    check("SCIClose while the segment exists", err, SCI_ERR_BUSY);
    SCISetSegmentUnavailable(seg, 0, SCI_FLAG_NOTIFY | SCI_FLAG_FORCE_DISCONNECT, &err);
    check("SCISetSegmentUnavailable(SCI_FLAG_NOTIFY | SCI_FLAG_FORCE_DISCONNECT)", err, SCI_ERR_OK);
    truth("the peer heard SCI_CB_NOT_OPERATIONAL", await_file(dir, "peer-notified"));
    SCIRemoveSegment(seg, NO_FLAGS, &err);
    check("SCIRemoveSegment after SCI_FLAG_FORCE_DISCONNECT", err, SCI_ERR_OK);
    touch(dir, "removed");
    /* The node stays (its descriptor open) while the peer looks for the segment again. */
    truth("the peer finished its teardown", await_file(dir, "peer-done"));
    SCIClose(sd, NO_FLAGS, &err);
    check("SCIClose", err, SCI_ERR_OK);
    SCITerminate();
    return finish();
}

static int peer(unsigned int owner_node, const char *dir)
{
    sci_error_t err, status;
    sci_desc_t sd;
    sci_remote_segment_t rseg;
    sci_map_t map;
    sci_sequence_t seq;
    SCIInitialize(NO_FLAGS, &err);
    SCIOpen(&sd, NO_FLAGS, &err);
    SCIConnectSegment(sd, &rseg, owner_node, SEGMENT, 0, NULL, NULL, TIMEOUT_MS, NO_FLAGS, &err);
    check("SCIConnectSegment", err, SCI_ERR_OK);
    if (err != SCI_ERR_OK) return finish();
    volatile uint32_t *p = SCIMapRemoteSegment(rseg, &map, 0, BYTES, NULL, NO_FLAGS, &err);
    check("SCIMapRemoteSegment", err, SCI_ERR_OK);
    SCICreateMapSequence(map, &seq, NO_FLAGS, &err);
    check("SCICreateMapSequence", err, SCI_ERR_OK);
    p[0] = 1;
    truth("SCICheckSequence while connected", SCICheckSequence(seq, NO_FLAGS, &err) == SCI_SEQ_OK);
    touch(dir, "peer-ready");

    sci_segment_cb_reason_t why = SCIWaitForRemoteSegmentEvent(rseg, &status, TIMEOUT_MS, NO_FLAGS, &err);
    truth("SCISetSegmentUnavailable(SCI_FLAG_NOTIFY) is SCI_CB_NOT_OPERATIONAL for the peer",
          err == SCI_ERR_OK && why == SCI_CB_NOT_OPERATIONAL);
    touch(dir, "peer-notified");
    why = SCIWaitForRemoteSegmentEvent(rseg, &status, TIMEOUT_MS, NO_FLAGS, &err);
    truth("the forced disconnection is SCI_CB_DISCONNECT for the peer",
          err == SCI_ERR_OK && why == SCI_CB_DISCONNECT && status == SCI_ERR_NOT_CONNECTED);
    truth("the owner removed the segment", await_file(dir, "removed"));
    truth("the peer's sequence fails", SCICheckSequence(seq, NO_FLAGS, &err) == SCI_SEQ_NOT_RETRIABLE);
    {
        sci_remote_segment_t again;
        SCIConnectSegment(sd, &again, owner_node, SEGMENT, 0, NULL, NULL, 0, NO_FLAGS, &err);
        check("connecting again finds no segment", err, SCI_ERR_NO_SUCH_SEGMENT);
    }
    /* The peer's own teardown, in the vendor's order. */
    SCIDisconnectSegment(rseg, NO_FLAGS, &err);
    check("SCIDisconnectSegment while mapped", err, SCI_ERR_BUSY);
    SCIUnmapSegment(map, NO_FLAGS, &err);
    check("SCIUnmapSegment while its sequence exists", err, SCI_ERR_BUSY);
    SCIClose(sd, NO_FLAGS, &err);
    check("SCIClose with resources", err, SCI_ERR_BUSY);
    SCIRemoveSequence(seq, NO_FLAGS, &err);
    check("SCIRemoveSequence", err, SCI_ERR_OK);
    SCIUnmapSegment(map, NO_FLAGS, &err);
    check("SCIUnmapSegment", err, SCI_ERR_OK);
    SCIDisconnectSegment(rseg, NO_FLAGS, &err);
    check("SCIDisconnectSegment of the removed segment", err, SCI_ERR_OK);
    SCIClose(sd, NO_FLAGS, &err);
    check("SCIClose", err, SCI_ERR_OK);
    SCITerminate();
    touch(dir, "peer-done");
    return finish();
}

/* The ping-pong client's teardown (kritjo/sisci-perf): it tells its peer to stop through
 * the peer's segment, then removes its own segment at once, with no flags, while the peer
 * is still connected and disconnects as soon as it sees the word. The removal succeeds: the
 * peer leaves within the removal's grace. */
static int stopper(const char *dir)
{
    sci_error_t err;
    sci_desc_t sd;
    sci_local_segment_t seg;
    sci_map_t map;
    unsigned int node = 0, adapter = 0;
    SCIInitialize(NO_FLAGS, &err);
    SCIOpen(&sd, NO_FLAGS, &err);
    SCICreateSegment(sd, &seg, SEGMENT + 1, BYTES, NULL, NULL, NO_FLAGS, &err);
    SCIPrepareSegment(seg, 0, NO_FLAGS, &err);
    SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err);
    volatile uint32_t *word = SCIMapLocalSegment(seg, &map, 0, BYTES, NULL, NO_FLAGS, &err);
    check("SCIMapLocalSegment", err, SCI_ERR_OK);
    word[0] = 0;
    sci_segment_cb_reason_t why = SCIWaitForLocalSegmentEvent(seg, &node, &adapter, TIMEOUT_MS, NO_FLAGS, &err);
    truth("the peer connected", err == SCI_ERR_OK && why == SCI_CB_CONNECT);
    word[0] = 1; /* "stop": the peer disconnects when it sees it */
    SCIUnmapSegment(map, NO_FLAGS, &err);
    check("SCIUnmapSegment", err, SCI_ERR_OK);
    SCISetSegmentUnavailable(seg, 0, NO_FLAGS, &err);
    check("SCISetSegmentUnavailable", err, SCI_ERR_OK);
    SCIRemoveSegment(seg, NO_FLAGS, &err);
    check("SCIRemoveSegment right after telling the peer to stop", err, SCI_ERR_OK);
    SCIClose(sd, NO_FLAGS, &err);
    check("SCIClose", err, SCI_ERR_OK);
    SCITerminate();
    touch(dir, "stopper-done");
    return finish();
}

static int stopped(unsigned int owner_node, const char *dir)
{
    sci_error_t err;
    sci_desc_t sd;
    sci_remote_segment_t rseg;
    sci_map_t map;
    SCIInitialize(NO_FLAGS, &err);
    SCIOpen(&sd, NO_FLAGS, &err);
    SCIConnectSegment(sd, &rseg, owner_node, SEGMENT + 1, 0, NULL, NULL, TIMEOUT_MS, NO_FLAGS, &err);
    check("SCIConnectSegment", err, SCI_ERR_OK);
    if (err != SCI_ERR_OK) return finish();
    volatile uint32_t *word = SCIMapRemoteSegment(rseg, &map, 0, BYTES, NULL, NO_FLAGS, &err);
    check("SCIMapRemoteSegment", err, SCI_ERR_OK);
    for (int i = 0; i < TIMEOUT_MS && word[0] != 1; i++) usleep(1000);
    truth("the stop word arrived", word[0] == 1);
    usleep(50 * 1000); /* a peer busy with something else for a moment */
    SCIUnmapSegment(map, NO_FLAGS, &err);
    check("SCIUnmapSegment", err, SCI_ERR_OK);
    SCIDisconnectSegment(rseg, NO_FLAGS, &err);
    check("SCIDisconnectSegment", err, SCI_ERR_OK);
    truth("the owner removed its segment", await_file(dir, "stopper-done"));
    SCIClose(sd, NO_FLAGS, &err);
    SCITerminate();
    return finish();
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "owner") == 0) return owner(argv[2]);
    if (argc == 4 && strcmp(argv[1], "peer") == 0) return peer((unsigned int)atoi(argv[2]), argv[3]);
    if (argc == 3 && strcmp(argv[1], "stopper") == 0) return stopper(argv[2]);
    if (argc == 4 && strcmp(argv[1], "stopped") == 0) return stopped((unsigned int)atoi(argv[2]), argv[3]);
    fprintf(stderr, "usage: %s owner DIR | peer OWNER DIR | stopper DIR | stopped OWNER DIR\n", argv[0]);
    return 1;
}
