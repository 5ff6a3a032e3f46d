/* The coordinator's response thread from C: replies in send order in the
 * mode recorded at each send; what may run beside it (a sending thread),
 * what is refused while it runs (gathers, drains, a second start) and
 * inside its callback (a waiting send, a gather, a stop: try_send only); a
 * callback ending the thread and a new one started; a fork while it runs
 * (the child may only free); a worker process that dies, heard as
 * NODEIPC_ERR_PEER_DIED naming its rank within a second. Run by
 * tests/channel.rs as `response_thread NAME`; prints one line per failed
 * check and a summary, exits 1 if any failed. */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nodeipc.h"

static int failed, checks;

#define EXPECT(call, want)                                                      \
    do {                                                                        \
        nodeipc_status got_ = (call);                                           \
        __atomic_add_fetch(&checks, 1, __ATOMIC_SEQ_CST);                       \
        if (got_ != (want)) {                                                   \
            __atomic_add_fetch(&failed, 1, __ATOMIC_SEQ_CST);                   \
            printf("FAIL line %d: %s gave %s (%s), expected %s\n", __LINE__,    \
                   #call, nodeipc_status_name(got_), nodeipc_last_error(),      \
                   nodeipc_status_name(want));                                  \
        }                                                                       \
    } while (0)

#define CHECK(cond)                                                             \
    do {                                                                        \
        __atomic_add_fetch(&checks, 1, __ATOMIC_SEQ_CST);                       \
        if (!(cond)) {                                                          \
            __atomic_add_fetch(&failed, 1, __ATOMIC_SEQ_CST);                   \
            printf("FAIL line %d: %s (last error: %s)\n", __LINE__, #cond,     \
                   nodeipc_last_error());                                       \
        }                                                                       \
    } while (0)

#define WORKERS 2
#define MAX_HEARD 64
#define DIE 0xdd

static nodeipc_coordinator *coordinator;

/* What the callbacks heard, in the order they heard it. */
struct heard {
    uint64_t id;
    nodeipc_status status;
    uint32_t rank;
    uint32_t count;
    uint8_t first[2][4]; /* the first 4 bytes of up to two answers */
    size_t lengths[2];
    char message[256];
    double at; /* seconds, CLOCK_MONOTONIC */
};
static struct heard heard[MAX_HEARD];
static int heard_count;
static sem_t heard_sem;
/* Set by the main thread: the id whose callback tries the calls a
 * callback may not make. */
static uint64_t probe_id = UINT64_MAX;
static nodeipc_status probe[5];
static char probe_errors[5][256];
static uint64_t stop_at = UINT64_MAX;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int32_t on_reply(void *user, uint64_t id, nodeipc_status status, uint32_t rank,
                        const char *message, uint32_t count, const uint8_t *const *data,
                        const size_t *lengths) {
    CHECK(user == &heard_sem);
    if (heard_count < MAX_HEARD) {
        struct heard *h = &heard[heard_count];
        memset(h, 0, sizeof *h);
        h->id = id;
        h->status = status;
        h->rank = rank;
        h->count = count;
        for (uint32_t i = 0; i < count && i < 2; i++) {
            h->lengths[i] = lengths[i];
            memcpy(h->first[i], data[i], lengths[i] < 4 ? lengths[i] : 4);
        }
        snprintf(h->message, sizeof h->message, "%s", message);
        h->at = now();
    }
    if (id == probe_id && status == NODEIPC_OK) {
        uint8_t buffer[64];
        size_t length[WORKERS];
        bool sent = false;
        probe[0] = nodeipc_coordinator_send(coordinator, (const uint8_t *)"x", 1, 1000, NULL);
        snprintf(probe_errors[0], 256, "%s", nodeipc_last_error());
        probe[1] = nodeipc_coordinator_recv_all(coordinator, 0, buffer, 32, length);
        snprintf(probe_errors[1], 256, "%s", nodeipc_last_error());
        probe[2] = nodeipc_coordinator_stop_response_thread(coordinator);
        snprintf(probe_errors[2], 256, "%s", nodeipc_last_error());
        probe[3] = nodeipc_coordinator_try_send(coordinator, (const uint8_t *)"t", 1, &sent, NULL);
        probe[4] = sent ? NODEIPC_OK : NODEIPC_ERR_TIMEOUT;
    }
    heard_count++;
    sem_post(&heard_sem);
    return id == stop_at ? 1 : 0;
}

/* Waits (bounded) for the callback's next reply. */
static struct heard *next_reply(void) {
    static int taken;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    if (sem_timedwait(&heard_sem, &until) != 0) {
        printf("FAIL: no reply %d within 20 s\n", taken);
        failed++;
        return NULL;
    }
    return &heard[taken++];
}

/* A worker: answers each request with its first byte and its rank; a
 * request DIE makes rank `dies` exit at once without answering. */
struct worker_args {
    const char *name;
    uint32_t rank;
    int request_fd, response_fd;
    int dies;
};

static int serve(struct worker_args *a) {
    nodeipc_worker *worker = NULL;
    if (nodeipc_worker_from_fds(a->name, a->rank, a->request_fd, a->response_fd, 20000,
                                &worker) != NODEIPC_OK) {
        printf("FAIL: worker %u: %s\n", a->rank, nodeipc_last_error());
        return 1;
    }
    for (;;) {
        uint8_t request[64];
        size_t len = 0;
        nodeipc_status s = nodeipc_worker_recv(worker, 20000, request, sizeof request, &len);
        if (s == NODEIPC_ERR_PEER_LEFT) break; /* the channel closed */
        if (s != NODEIPC_OK) {
            printf("FAIL: worker %u recv: %s\n", a->rank, nodeipc_last_error());
            return 1;
        }
        if (len >= 1 && request[0] == DIE && a->dies) _exit(0);
        uint8_t answer[2] = {len ? request[0] : 0, (uint8_t)a->rank};
        if (nodeipc_worker_respond(worker, answer, 2) != NODEIPC_OK) {
            printf("FAIL: worker %u respond: %s\n", a->rank, nodeipc_last_error());
            return 1;
        }
    }
    nodeipc_worker_free(worker);
    return 0;
}

static void *serve_thread(void *arg) {
    serve(arg);
    return NULL;
}

static void send_in(nodeipc_gather_mode mode, uint8_t byte, uint64_t want_index) {
    uint64_t index = 999;
    EXPECT(nodeipc_coordinator_set_response_mode(coordinator, mode), NODEIPC_OK);
    EXPECT(nodeipc_coordinator_send(coordinator, &byte, 1, 20000, &index), NODEIPC_OK);
    CHECK(index == want_index);
}

int main(int argc, char **argv) {
    if (argc != 2) return fprintf(stderr, "usage: response_thread NAME\n"), 2;
    setvbuf(stdout, NULL, _IONBF, 0);
    sem_init(&heard_sem, 0, 0);
    EXPECT(nodeipc_coordinator_create(argv[1], WORKERS, 64, 64, 4, 20000, &coordinator),
           NODEIPC_OK);
    struct worker_args args[WORKERS];
    for (uint32_t r = 0; r < WORKERS; r++) {
        args[r] = (struct worker_args){.name = argv[1], .rank = r, .dies = r == 1};
        EXPECT(nodeipc_coordinator_fds(coordinator, &args[r].request_fd, &args[r].response_fd),
               NODEIPC_OK);
    }
    /* Worker 1 is a process of its own (forked while this one has a
     * single thread), so that it can die. */
    pid_t child = fork();
    if (child == 0) _exit(serve(&args[1]));
    close(args[1].request_fd);
    close(args[1].response_fd);
    pthread_t worker0;
    CHECK(pthread_create(&worker0, NULL, serve_thread, &args[0]) == 0);
    EXPECT(nodeipc_coordinator_wait_for_workers(coordinator, 20000), NODEIPC_OK);

    /* Bad arguments, by name. */
    EXPECT(nodeipc_coordinator_start_response_thread(coordinator, NULL, NULL),
           NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_coordinator_set_response_mode(coordinator, 9), NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(nodeipc_last_error(), "gather mode 9") != NULL);
    EXPECT(nodeipc_coordinator_start_response_thread_with(coordinator, on_reply, &heard_sem, 7),
           NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_coordinator_set_gather_ahead(coordinator, 3), NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(nodeipc_last_error(), "gather-ahead setting 3") != NULL);
    /* Sends gather ahead whatever the cores: every check below holds. */
    EXPECT(nodeipc_coordinator_set_gather_ahead(coordinator, NODEIPC_GATHER_AHEAD_ALWAYS),
           NODEIPC_OK);

    EXPECT(nodeipc_coordinator_start_response_thread(coordinator, on_reply, &heard_sem),
           NODEIPC_OK);
    bool running = false;
    EXPECT(nodeipc_coordinator_response_thread_running(coordinator, &running), NODEIPC_OK);
    CHECK(running);
    EXPECT(nodeipc_coordinator_start_response_thread(coordinator, on_reply, &heard_sem),
           NODEIPC_ERR_INVALID_ARGUMENT);

    /* Each request in its own mode, replied in send order. */
    send_in(NODEIPC_GATHER_ALL, 10, 0);
    send_in(NODEIPC_GATHER_FIRST, 11, 1);
    send_in(NODEIPC_GATHER_RANK0_AFTER_ALL, 12, 2);
    send_in(NODEIPC_GATHER_AGGREGATED, 13, 3); /* no rule: that request's error */
    send_in(NODEIPC_GATHER_ALL, 14, 4);
    struct heard *h = next_reply();
    CHECK(h && h->id == 0 && h->status == NODEIPC_OK && h->count == 2 &&
          h->rank == NODEIPC_NO_RANK && h->lengths[0] == 2 && h->first[0][0] == 10 &&
          h->first[0][1] == 0 && h->first[1][0] == 10 && h->first[1][1] == 1 &&
          h->message[0] == '\0');
    h = next_reply();
    CHECK(h && h->id == 1 && h->status == NODEIPC_OK && h->count == 1 && h->rank < WORKERS &&
          h->first[0][0] == 11 && h->first[0][1] == h->rank);
    h = next_reply();
    CHECK(h && h->id == 2 && h->status == NODEIPC_OK && h->count == 1 && h->rank == 0 &&
          h->first[0][0] == 12);
    h = next_reply();
    CHECK(h && h->id == 3 && h->status == NODEIPC_ERR_INVALID_ARGUMENT && h->count == 0 &&
          strstr(h->message, "no aggregation rule") != NULL);
    h = next_reply();
    CHECK(h && h->id == 4 && h->status == NODEIPC_OK && h->count == 2);

    /* Refused while the thread runs, by name: gathers and drains. */
    uint8_t buffer[2 * 64];
    size_t lengths[WORKERS];
    uint32_t rank = 0;
    EXPECT(nodeipc_coordinator_recv_all(coordinator, 0, buffer, 64, lengths),
           NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(nodeipc_last_error(), "the response thread is running") != NULL);
    EXPECT(nodeipc_coordinator_recv_first(coordinator, buffer, 64, lengths, &rank),
           NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_coordinator_drain(coordinator, NULL), NODEIPC_ERR_INVALID_ARGUMENT);

    /* Inside a callback: a waiting send, a gather and a stop refused,
     * try_send allowed (its request is replied like any other). */
    probe_id = 5;
    send_in(NODEIPC_GATHER_ALL, 15, 5);
    h = next_reply();
    CHECK(h && h->id == 5);
    EXPECT(probe[0], NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(probe_errors[0], "only try_send is allowed") != NULL);
    EXPECT(probe[1], NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(probe_errors[1], "the response thread is running") != NULL);
    EXPECT(probe[2], NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(probe_errors[2], "from inside the response handler") != NULL);
    EXPECT(probe[3], NODEIPC_OK);
    EXPECT(probe[4], NODEIPC_OK);
    h = next_reply();
    CHECK(h && h->id == 6 && h->status == NODEIPC_OK && h->first[0][0] == 't');

    /* A fork while the thread runs: the child may only free its copy
     * (which joins nothing); the parent's thread goes on. */
    pid_t forked = fork();
    if (forked == 0) {
        int bad = 0;
        bad |= nodeipc_coordinator_stop_response_thread(coordinator) != NODEIPC_ERR_FORKED;
        bad |= nodeipc_coordinator_send(coordinator, (const uint8_t *)"c", 1, 0, NULL) !=
               NODEIPC_ERR_FORKED;
        bad |= nodeipc_coordinator_free(coordinator) != NODEIPC_OK;
        _exit(bad ? 3 : 0);
    }
    int status = 0;
    CHECK(waitpid(forked, &status, 0) == forked && WIFEXITED(status) &&
          WEXITSTATUS(status) == 0);
    send_in(NODEIPC_GATHER_ALL, 17, 7);
    h = next_reply();
    CHECK(h && h->id == 7 && h->status == NODEIPC_OK && h->count == 2);

    /* The callback ends the thread by its return; a new one starts. */
    stop_at = 8;
    send_in(NODEIPC_GATHER_ALL, 18, 8);
    h = next_reply();
    CHECK(h && h->id == 8);
    for (int i = 0; i < 2000; i++) {
        EXPECT(nodeipc_coordinator_response_thread_running(coordinator, &running), NODEIPC_OK);
        if (!running) break;
        usleep(1000);
    }
    CHECK(!running);
    /* Stopping an ended thread joins it; then there is none to stop. */
    EXPECT(nodeipc_coordinator_stop_response_thread(coordinator), NODEIPC_OK);
    EXPECT(nodeipc_coordinator_stop_response_thread(coordinator), NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(nodeipc_last_error(), "not running") != NULL);
    stop_at = UINT64_MAX;
    EXPECT(nodeipc_coordinator_start_response_thread(coordinator, on_reply, &heard_sem),
           NODEIPC_OK);

    /* Worker 1's process dies on request 9: PEER_DIED naming rank 1. */
    send_in(NODEIPC_GATHER_ALL, DIE, 9);
    CHECK(waitpid(child, &status, 0) == child);
    double died = now();
    h = next_reply();
    CHECK(h && h->id == 9 && h->status == NODEIPC_ERR_PEER_DIED && h->rank == 1 &&
          strstr(h->message, "worker 1") != NULL);
    if (h) {
        double late = h->at - died;
        CHECK(late <= 1.0);
        printf("dead worker heard %.3f s after it was reaped: %s\n", late, h->message);
    }
    for (int i = 0; i < 2000; i++) {
        EXPECT(nodeipc_coordinator_response_thread_running(coordinator, &running), NODEIPC_OK);
        if (!running) break;
        usleep(1000);
    }
    CHECK(!running); /* stop on error, the default */

    EXPECT(nodeipc_coordinator_free(coordinator), NODEIPC_OK);
    pthread_join(worker0, NULL);
    sem_destroy(&heard_sem);
    printf("%d of %d checks failed\n", failed, checks);
    return failed ? 1 : 0;
}
