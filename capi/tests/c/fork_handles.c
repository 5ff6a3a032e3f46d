/* Every handle type in a child made by fork(): any use is
 * NODEIPC_ERR_FORKED naming the handle, a free is NODEIPC_OK and prints
 * nothing, and the parent's objects live on untouched. At the fork another
 * parent thread is in a gather (holding the coordinator's gatherer lock,
 * waiting for a worker), a worker holds a request in place, and the
 * handshake server's thread is serving. Run by tests/fork.rs as
 * `fork_handles PREFIX SOCKET_DIR MONITOR_SOCKET`; prints one line per
 * failed check and a summary, exits 1 if any failed. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nodeipc.h"

static int failed, checks;

#define EXPECT(call, want)                                                      \
    do {                                                                        \
        nodeipc_status got_ = (call);                                           \
        checks++;                                                               \
        if (got_ != (want)) {                                                   \
            failed++;                                                           \
            printf("FAIL %s line %d: %s gave %s (%s), expected %s\n", who,     \
                   __LINE__, #call, nodeipc_status_name(got_),                  \
                   nodeipc_last_error(), nodeipc_status_name(want));            \
        }                                                                       \
    } while (0)

#define CHECK(cond)                                                             \
    do {                                                                        \
        checks++;                                                               \
        if (!(cond)) {                                                          \
            failed++;                                                           \
            printf("FAIL %s line %d: %s (last error: %s)\n", who, __LINE__,    \
                   #cond, nodeipc_last_error());                                \
        }                                                                       \
    } while (0)

/* A use in the child: refused, naming the handle and the fork. */
#define FORKED(call, handle)                                                    \
    do {                                                                        \
        EXPECT(call, NODEIPC_ERR_FORKED);                                       \
        CHECK(strstr(nodeipc_last_error(), handle) != NULL &&                   \
              strstr(nodeipc_last_error(), "forked") != NULL);                  \
    } while (0)

static const char *who = "parent";

struct gather {
    nodeipc_coordinator *coordinator;
    nodeipc_status status;
    uint8_t buffer[2 * 64];
    size_t lengths[2];
};

static void *gather(void *arg) {
    struct gather *g = arg;
    g->status = nodeipc_coordinator_recv_all(g->coordinator, 30000, g->buffer, 64, g->lengths);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s PREFIX SOCKET_DIR MONITOR_SOCKET\n", argv[0]);
        return 2;
    }
    const char *prefix = argv[1];
    char region_name[256], sem_name[256], group_name[256], socket[512];
    snprintf(region_name, sizeof region_name, "%s-region", prefix);
    snprintf(sem_name, sizeof sem_name, "%s-sem", prefix);
    snprintf(group_name, sizeof group_name, "%s-group", prefix);
    snprintf(socket, sizeof socket, "%s/logon.sock", argv[2]);

    /* One handle of every type. */
    nodeipc_region *region = NULL;
    nodeipc_sem *named = NULL, *in_region = NULL;
    nodeipc_group *group = NULL;
    nodeipc_pidfd *pidfd = NULL;
    nodeipc_coordinator *coordinator = NULL;
    nodeipc_handshake_server *server = NULL;
    nodeipc_worker *worker = NULL, *late = NULL;
    nodeipc_monitor *monitor = NULL;
    bool granted = false;
    EXPECT(nodeipc_region_create(region_name, 4096, &region), NODEIPC_OK);
    EXPECT(nodeipc_sem_create(sem_name, 0, &named), NODEIPC_OK);
    EXPECT(nodeipc_sem_in_region(region, 64, true, 0, &in_region), NODEIPC_OK);
    EXPECT(nodeipc_group_join(group_name, 0, 1, 0, 10000, &group), NODEIPC_OK);
    EXPECT(nodeipc_pidfd_open((uint32_t)getpid(), &pidfd), NODEIPC_OK);
    EXPECT(nodeipc_coordinator_create(prefix, 2, 60, 60, 1, 30000, &coordinator), NODEIPC_OK);
    EXPECT(nodeipc_coordinator_serve(coordinator, socket, &server), NODEIPC_OK);
    EXPECT(nodeipc_worker_connect(socket, 0, 10000, &worker), NODEIPC_OK);
    EXPECT(nodeipc_monitor_connect(argv[3], 10000, &monitor), NODEIPC_OK);
    EXPECT(nodeipc_monitor_init(monitor, 0, 0, true, &granted), NODEIPC_OK);
    CHECK(granted);
    if (failed) {
        printf("%d of %d checks failed\n", failed, checks);
        return 1;
    }

    /* A request in flight: worker 0 holds it in place, worker 1 is not in
     * yet, and another thread waits in the gather across the fork. */
    EXPECT(nodeipc_coordinator_send(coordinator, (const uint8_t *)"step", 4, 10000, NULL),
           NODEIPC_OK);
    const uint8_t *request = NULL;
    size_t request_len = 0;
    EXPECT(nodeipc_worker_recv_in_place(worker, 10000, &request, &request_len), NODEIPC_OK);
    struct gather g = {.coordinator = coordinator, .status = NODEIPC_ERR_PANIC};
    pthread_t gatherer;
    CHECK(pthread_create(&gatherer, NULL, gather, &g) == 0);
    usleep(100 * 1000);

    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        who = "child";
        void *data = NULL;
        size_t len = 0;
        int fd = -1;
        uint32_t rank = 0;
        FORKED(nodeipc_region_data(region, &data, &len), "nodeipc_region");
        FORKED(nodeipc_region_write(region, 0, "x", 1), "nodeipc_region");
        FORKED(nodeipc_sem_post(named), "nodeipc_sem");
        FORKED(nodeipc_sem_wait(in_region, 0), "nodeipc_sem");
        FORKED(nodeipc_group_barrier(group), "nodeipc_group");
        FORKED(nodeipc_group_info(group, &rank, NULL, NULL), "nodeipc_group");
        FORKED(nodeipc_pidfd_fd(pidfd, &fd), "nodeipc_pidfd");
        FORKED(nodeipc_coordinator_send(coordinator, (const uint8_t *)"x", 1, 0, NULL),
               "nodeipc_coordinator");
        FORKED(nodeipc_coordinator_wait_for_workers(coordinator, 0), "nodeipc_coordinator");
        FORKED(nodeipc_worker_respond(worker, (const uint8_t *)"x", 1), "nodeipc_worker");
        FORKED(nodeipc_worker_rank(worker, &rank), "nodeipc_worker");
        FORKED(nodeipc_monitor_heartbeat_fast(monitor), "nodeipc_monitor");
        FORKED(nodeipc_monitor_heartbeat(monitor, NULL, 0), "nodeipc_monitor");
        CHECK(strcmp(nodeipc_status_name(NODEIPC_ERR_FORKED), "NODEIPC_ERR_FORKED") == 0);
        /* Frees: each closes and unmaps the child's copy, nothing more. */
        EXPECT(nodeipc_worker_free(worker), NODEIPC_OK);
        EXPECT(nodeipc_handshake_server_free(server), NODEIPC_OK);
        EXPECT(nodeipc_coordinator_free(coordinator), NODEIPC_OK);
        EXPECT(nodeipc_monitor_free(monitor), NODEIPC_OK);
        EXPECT(nodeipc_pidfd_free(pidfd), NODEIPC_OK);
        EXPECT(nodeipc_group_leave(group), NODEIPC_OK);
        EXPECT(nodeipc_sem_free(in_region), NODEIPC_OK);
        EXPECT(nodeipc_sem_free(named), NODEIPC_OK);
        EXPECT(nodeipc_region_free(region), NODEIPC_OK);
        /* A handle made in the child is the child's own. */
        nodeipc_region *own = NULL;
        EXPECT(nodeipc_region_anonymous(4096, &own), NODEIPC_OK);
        EXPECT(nodeipc_region_write(own, 0, "own", 3), NODEIPC_OK);
        EXPECT(nodeipc_region_free(own), NODEIPC_OK);
        printf("child: %d of %d checks failed\n", failed, checks);
        fflush(stdout);
        _exit(failed ? 1 : 0);
    }
    CHECK(child > 0);
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* Everything is still the parent's. */
    nodeipc_region *again = NULL;
    EXPECT(nodeipc_region_open(region_name, 4096, 0, &again), NODEIPC_OK);
    EXPECT(nodeipc_region_free(again), NODEIPC_OK);
    nodeipc_sem *opened = NULL;
    EXPECT(nodeipc_sem_open(sem_name, 0, &opened), NODEIPC_OK);
    EXPECT(nodeipc_sem_post(opened), NODEIPC_OK);
    EXPECT(nodeipc_sem_wait(named, 0), NODEIPC_OK);
    EXPECT(nodeipc_sem_free(opened), NODEIPC_OK);
    EXPECT(nodeipc_sem_post(in_region), NODEIPC_OK);
    EXPECT(nodeipc_sem_wait(in_region, 0), NODEIPC_OK);
    EXPECT(nodeipc_group_barrier(group), NODEIPC_OK);
    bool exited = true;
    EXPECT(nodeipc_pidfd_wait_exit(pidfd, 0, &exited), NODEIPC_OK);
    CHECK(!exited);
    EXPECT(nodeipc_monitor_heartbeat_fast(monitor), NODEIPC_OK);
    EXPECT(nodeipc_monitor_heartbeat(monitor, NULL, 0), NODEIPC_OK);
    /* The handshake server still serves, worker 0 still holds its request,
     * and the gather the other thread waits in completes. */
    EXPECT(nodeipc_worker_connect(socket, 1, 10000, &late), NODEIPC_OK);
    uint8_t buf[64];
    size_t got = 0;
    EXPECT(nodeipc_worker_recv(late, 10000, buf, sizeof buf, &got), NODEIPC_OK);
    CHECK(got == 4 && memcmp(buf, "step", 4) == 0);
    CHECK(request_len == 4 && memcmp(request, "step", 4) == 0);
    EXPECT(nodeipc_worker_respond(worker, (const uint8_t *)"zero", 4), NODEIPC_OK);
    EXPECT(nodeipc_worker_respond(late, (const uint8_t *)"one", 3), NODEIPC_OK);
    CHECK(pthread_join(gatherer, NULL) == 0);
    EXPECT(g.status, NODEIPC_OK);
    CHECK(g.lengths[0] == 4 && memcmp(g.buffer, "zero", 4) == 0);
    CHECK(g.lengths[1] == 3 && memcmp(g.buffer + 64, "one", 3) == 0);

    EXPECT(nodeipc_worker_free(late), NODEIPC_OK);
    EXPECT(nodeipc_worker_free(worker), NODEIPC_OK);
    EXPECT(nodeipc_handshake_server_free(server), NODEIPC_OK);
    EXPECT(nodeipc_coordinator_free(coordinator), NODEIPC_OK);
    EXPECT(nodeipc_monitor_free(monitor), NODEIPC_OK);
    EXPECT(nodeipc_pidfd_free(pidfd), NODEIPC_OK);
    EXPECT(nodeipc_group_leave(group), NODEIPC_OK);
    EXPECT(nodeipc_sem_free(in_region), NODEIPC_OK);
    EXPECT(nodeipc_sem_free(named), NODEIPC_OK);
    EXPECT(nodeipc_region_free(region), NODEIPC_OK);
    printf("%d of %d checks failed\n", failed, checks);
    return failed ? 1 : 0;
}
