/* One coordinator shared by threads: a sending thread and a gathering
 * thread at once (a worker answering on a third, over
 * nodeipc_coordinator_fds), then a second sender and a second gatherer
 * refused by name while the first ones wait. Run by tests/channel.rs as
 * `coordinator_threads NAME`; prints one line per failed check and a
 * summary, exits 1 if any failed. */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

#define ROUNDS 100

static nodeipc_coordinator *coordinator;
static nodeipc_worker *worker;
static sem_t sent;

/* Answers ROUNDS requests with the request and a '!'. */
static void *answer(void *unused) {
    (void)unused;
    for (int i = 0; i < ROUNDS; i++) {
        const uint8_t *data = NULL;
        size_t len = 0;
        uint8_t reply[32];
        EXPECT(nodeipc_worker_recv_in_place(worker, 20000, &data, &len), NODEIPC_OK);
        if (len + 1 > sizeof reply) return NULL;
        memcpy(reply, data, len);
        reply[len] = '!';
        EXPECT(nodeipc_worker_respond(worker, reply, len + 1), NODEIPC_OK);
    }
    return NULL;
}

/* Sends ROUNDS requests, telling the gatherer after each. */
static void *send_all(void *unused) {
    (void)unused;
    for (int i = 0; i < ROUNDS; i++) {
        char request[16];
        int n = snprintf(request, sizeof request, "%d", i);
        uint64_t index = 99;
        EXPECT(nodeipc_coordinator_send(coordinator, (const uint8_t *)request, (size_t)n, 20000,
                                        &index),
               NODEIPC_OK);
        CHECK(index == (uint64_t)i);
        sem_post(&sent);
    }
    return NULL;
}

struct waiting {
    nodeipc_status status;
    uint8_t buffer[64];
    size_t length;
};

static void *send_one(void *arg) {
    struct waiting *w = arg;
    w->status = nodeipc_coordinator_send(coordinator, (const uint8_t *)"one", 3, 20000, NULL);
    return NULL;
}

static void *gather_one(void *arg) {
    struct waiting *w = arg;
    w->status = nodeipc_coordinator_recv_all(coordinator, 20000, w->buffer, sizeof w->buffer,
                                             &w->length);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) return fprintf(stderr, "usage: coordinator_threads NAME\n"), 2;
    EXPECT(nodeipc_coordinator_create(argv[1], 1, 32, 32, 1, 20000, &coordinator), NODEIPC_OK);
    int request_fd = -1, response_fd = -1;
    EXPECT(nodeipc_coordinator_fds(coordinator, &request_fd, &response_fd), NODEIPC_OK);
    EXPECT(nodeipc_worker_from_fds(argv[1], 0, request_fd, response_fd, 20000, &worker),
           NODEIPC_OK);
    EXPECT(nodeipc_coordinator_wait_for_workers(coordinator, 20000), NODEIPC_OK);
    if (failed) return printf("%d of %d checks failed\n", failed, checks), 1;

    /* A sending thread and a gathering thread (this one) at once. */
    sem_init(&sent, 0, 0);
    pthread_t answering, sending;
    CHECK(pthread_create(&answering, NULL, answer, NULL) == 0);
    CHECK(pthread_create(&sending, NULL, send_all, NULL) == 0);
    for (int i = 0; i < ROUNDS; i++) {
        sem_wait(&sent);
        uint8_t buffer[32];
        size_t length = 0;
        char want[16];
        int n = snprintf(want, sizeof want, "%d!", i);
        EXPECT(nodeipc_coordinator_recv_all(coordinator, 20000, buffer, sizeof buffer, &length),
               NODEIPC_OK);
        CHECK(length == (size_t)n && memcmp(buffer, want, (size_t)n) == 0);
    }
    pthread_join(sending, NULL);
    pthread_join(answering, NULL);

    /* Request "zero" takes the only frame; the worker does not read it
     * yet, so a sending thread waits for a frame and a gathering thread
     * for an answer. A second of either is refused by name. */
    EXPECT(nodeipc_coordinator_send(coordinator, (const uint8_t *)"zero", 4, 20000, NULL),
           NODEIPC_OK);
    struct waiting first_send = {.status = NODEIPC_ERR_PANIC};
    struct waiting first_gather = {.status = NODEIPC_ERR_PANIC};
    pthread_t a, b;
    CHECK(pthread_create(&a, NULL, send_one, &first_send) == 0);
    CHECK(pthread_create(&b, NULL, gather_one, &first_gather) == 0);
    usleep(200 * 1000);
    uint8_t buffer[32];
    size_t length = 0;
    uint32_t rank = 0;
    EXPECT(nodeipc_coordinator_send(coordinator, (const uint8_t *)"two", 3, 0, NULL),
           NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(nodeipc_last_error(), "another thread is sending") != NULL &&
          strstr(nodeipc_last_error(), "one sending and one gathering thread") != NULL);
    EXPECT(nodeipc_coordinator_recv_all(coordinator, 0, buffer, sizeof buffer, &length),
           NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(nodeipc_last_error(), "another thread is gathering") != NULL);
    EXPECT(nodeipc_coordinator_recv_first(coordinator, buffer, sizeof buffer, &length, &rank),
           NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_coordinator_drain(coordinator, NULL), NODEIPC_ERR_INVALID_ARGUMENT);

    /* The worker answers "zero": the gather ends, and its frame frees the
     * waiting send. Nothing was sent or taken for the refused calls. */
    size_t got = 0;
    EXPECT(nodeipc_worker_recv(worker, 20000, buffer, sizeof buffer, &got), NODEIPC_OK);
    CHECK(got == 4 && memcmp(buffer, "zero", 4) == 0);
    EXPECT(nodeipc_worker_respond(worker, (const uint8_t *)"answer", 6), NODEIPC_OK);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    EXPECT(first_send.status, NODEIPC_OK);
    EXPECT(first_gather.status, NODEIPC_OK);
    CHECK(first_gather.length == 6 && memcmp(first_gather.buffer, "answer", 6) == 0);
    EXPECT(nodeipc_worker_recv(worker, 20000, buffer, sizeof buffer, &got), NODEIPC_OK);
    CHECK(got == 3 && memcmp(buffer, "one", 3) == 0);
    EXPECT(nodeipc_worker_respond(worker, (const uint8_t *)"1", 1), NODEIPC_OK);
    EXPECT(nodeipc_coordinator_recv_all(coordinator, 20000, buffer, sizeof buffer, &length),
           NODEIPC_OK);
    CHECK(length == 1 && buffer[0] == '1');
    EXPECT(nodeipc_coordinator_recv_all(coordinator, 0, buffer, sizeof buffer, &length),
           NODEIPC_ERR_INVALID_ARGUMENT); /* nothing outstanding */

    EXPECT(nodeipc_worker_free(worker), NODEIPC_OK);
    EXPECT(nodeipc_coordinator_free(coordinator), NODEIPC_OK);
    sem_destroy(&sent);
    printf("%d of %d checks failed\n", failed, checks);
    return failed ? 1 : 0;
}
