/* A request built in its frame: nodeipc_coordinator_loan / _commit /
 * _abort, with a worker of this process (on the channel's descriptors).
 * A committed loan arrives whole; an aborted one sends nothing and gives
 * the frame back; an open loan is the sending thread (a send, a second
 * loan refused); a loan past the capacity, a commit with none open, a
 * frame a worker holds: each its status. Run by tests/channel.rs as
 * `channel_loan NAME`; prints one line per failed check and a summary,
 * exits 1 if any failed. */
#include <stdio.h>
#include <string.h>

#include "nodeipc.h"

static int failed, checks;

#define EXPECT(call, want)                                                      \
    do {                                                                        \
        nodeipc_status got_ = (call);                                           \
        checks++;                                                               \
        if (got_ != (want)) {                                                   \
            failed++;                                                           \
            printf("FAIL line %d: %s gave %s (%s), expected %s\n", __LINE__,    \
                   #call, nodeipc_status_name(got_), nodeipc_last_error(),      \
                   nodeipc_status_name(want));                                  \
        }                                                                       \
    } while (0)

#define CHECK(cond)                                                             \
    do {                                                                        \
        checks++;                                                               \
        if (!(cond)) {                                                          \
            failed++;                                                           \
            printf("FAIL line %d: %s (last error: %s)\n", __LINE__, #cond,     \
                   nodeipc_last_error());                                       \
        }                                                                       \
    } while (0)

#define CAPACITY (256 * 1024)

static nodeipc_coordinator *coordinator;
static nodeipc_worker *worker;

static uint8_t pattern(uint64_t round, size_t i) { return (uint8_t)(i * 131 + round * 7); }

/* The worker takes the next request in place, checks it is round's of
 * `len` bytes, and answers "ok". */
static void answer(uint64_t round, size_t len) {
    const uint8_t *data = NULL;
    size_t got = 0;
    EXPECT(nodeipc_worker_recv_in_place(worker, 20000, &data, &got), NODEIPC_OK);
    CHECK(got == len);
    int same = 1;
    for (size_t i = 0; i < got && i < len; i++) same &= data[i] == pattern(round, i);
    CHECK(same);
    EXPECT(nodeipc_worker_respond(worker, (const uint8_t *)"ok", 2), NODEIPC_OK);
    uint8_t buffer[8];
    size_t length = 0;
    EXPECT(nodeipc_coordinator_recv_all(coordinator, 20000, buffer, sizeof buffer, &length),
           NODEIPC_OK);
    CHECK(length == 2 && memcmp(buffer, "ok", 2) == 0);
}

int main(int argc, char **argv) {
    if (argc != 2) return fprintf(stderr, "usage: channel_loan NAME\n"), 2;
    EXPECT(nodeipc_coordinator_create(argv[1], 1, CAPACITY, 16, 1, 20000, &coordinator),
           NODEIPC_OK);
    int request_fd = -1, response_fd = -1;
    EXPECT(nodeipc_coordinator_fds(coordinator, &request_fd, &response_fd), NODEIPC_OK);
    EXPECT(nodeipc_worker_from_fds(argv[1], 0, request_fd, response_fd, 20000, &worker),
           NODEIPC_OK);
    EXPECT(nodeipc_coordinator_wait_for_workers(coordinator, 20000), NODEIPC_OK);
    if (failed) return printf("%d of %d checks failed\n", failed, checks), 1;

    /* Built in the frame, committed: it arrives whole, index by index. */
    size_t sizes[] = {0, 1, 4096, CAPACITY};
    for (uint64_t round = 0; round < 4; round++) {
        uint8_t *data = NULL;
        size_t len = sizes[round];
        EXPECT(nodeipc_coordinator_loan(coordinator, len, 20000, &data), NODEIPC_OK);
        CHECK(data != NULL);
        for (size_t i = 0; i < len; i++) data[i] = pattern(round, i);
        uint64_t index = 99;
        EXPECT(nodeipc_coordinator_commit(coordinator, &index), NODEIPC_OK);
        CHECK(index == round);
        answer(round, len);
    }

    /* Aborted: nothing sent, the one frame back at once, the index unused. */
    uint8_t *data = NULL;
    EXPECT(nodeipc_coordinator_loan(coordinator, 3, 0, &data), NODEIPC_OK);
    memcpy(data, "bad", 3);
    EXPECT(nodeipc_coordinator_abort(coordinator), NODEIPC_OK);
    EXPECT(nodeipc_coordinator_abort(coordinator), NODEIPC_OK); /* none open: a no-op */
    const uint8_t *held = NULL;
    size_t held_len = 0;
    EXPECT(nodeipc_worker_recv_in_place(worker, 0, &held, &held_len), NODEIPC_ERR_TIMEOUT);
    EXPECT(nodeipc_coordinator_loan(coordinator, 2, 0, &data), NODEIPC_OK);

    /* While it is open: a send, a second loan refused; the commit once. */
    EXPECT(nodeipc_coordinator_send(coordinator, (const uint8_t *)"x", 1, 0, NULL),
           NODEIPC_ERR_INVALID_ARGUMENT);
    uint8_t *second = NULL;
    EXPECT(nodeipc_coordinator_loan(coordinator, 1, 0, &second), NODEIPC_ERR_INVALID_ARGUMENT);
    data[0] = pattern(4, 0);
    data[1] = pattern(4, 1);
    uint64_t index = 99;
    EXPECT(nodeipc_coordinator_commit(coordinator, &index), NODEIPC_OK);
    CHECK(index == 4);
    EXPECT(nodeipc_coordinator_commit(coordinator, &index), NODEIPC_ERR_INVALID_ARGUMENT);
    answer(4, 2);

    /* Past the capacity; a frame the worker holds (the loan times out). */
    EXPECT(nodeipc_coordinator_loan(coordinator, CAPACITY + 1, 0, &data), NODEIPC_ERR_TOO_LARGE);
    EXPECT(nodeipc_coordinator_send(coordinator, (const uint8_t *)"h", 1, 20000, NULL), NODEIPC_OK);
    EXPECT(nodeipc_worker_recv_in_place(worker, 20000, &held, &held_len), NODEIPC_OK);
    EXPECT(nodeipc_coordinator_loan(coordinator, 1, 100, &data), NODEIPC_ERR_TIMEOUT);
    EXPECT(nodeipc_worker_respond(worker, (const uint8_t *)"ok", 2), NODEIPC_OK);
    uint8_t buffer[8];
    size_t length = 0;
    EXPECT(nodeipc_coordinator_recv_all(coordinator, 20000, buffer, sizeof buffer, &length),
           NODEIPC_OK);

    /* A coordinator freed with a loan open: the loan goes first. */
    EXPECT(nodeipc_coordinator_loan(coordinator, 8, 20000, &data), NODEIPC_OK);
    EXPECT(nodeipc_worker_free(worker), NODEIPC_OK);
    EXPECT(nodeipc_coordinator_free(coordinator), NODEIPC_OK);
    printf("%d of %d checks failed\n", failed, checks);
    return failed ? 1 : 0;
}
