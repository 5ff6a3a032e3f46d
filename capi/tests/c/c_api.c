/* Every layer through nodeipc.h from plain C11, and every bad argument
 * answered with its code: run by tests/c_api.rs as `c_api NAME_PREFIX`.
 * Prints one line per failed check and exits 1 if any failed. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <grp.h>
#include <sys/socket.h>
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

/* EPERM: pidfd_getfd of a process we may not ptrace. As root, from a child
 * that dropped to nobody, of this (root) process; otherwise of pid 1. The
 * errno and the message reach C. */
static void not_permitted(void) {
    int pipefd[2];
    CHECK(pipe(pipefd) == 0);
    pid_t target = getpid();
    pid_t child = fork();
    if (child == 0) {
        close(pipefd[0]);
        char verdict[600];
        int root = getuid() == 0;
        if (root && (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 65534) != 0 ||
                     setresuid(65534, 65534, 65534) != 0)) {
            snprintf(verdict, sizeof verdict, "skip: cannot drop to nobody");
        } else {
            pid_t victim = root ? target : 1;
            int got = -1;
            nodeipc_status rc = nodeipc_fd_import_pid_fd((uint32_t)victim, 0, &got);
            snprintf(verdict, sizeof verdict, "%d %d %s", (int)rc, nodeipc_last_errno(),
                     nodeipc_last_error());
        }
        ssize_t n = write(pipefd[1], verdict, strlen(verdict));
        _exit(n > 0 ? 0 : 1);
    }
    close(pipefd[1]);
    char verdict[600] = {0};
    ssize_t n = read(pipefd[0], verdict, sizeof verdict - 1);
    close(pipefd[0]);
    CHECK(child > 0 && waitpid(child, NULL, 0) == child && n > 0);
    if (strncmp(verdict, "skip:", 5) == 0) {
        printf("eperm %s\n", verdict);
        return;
    }
    int rc = 0, err = 0, failed_before = failed;
    CHECK(sscanf(verdict, "%d %d", &rc, &err) == 2);
    CHECK(rc == NODEIPC_ERR_NOT_PERMITTED);
    CHECK(err == EPERM);
    /* The ways out in the system's terms, none only Rust has. */
    CHECK(strstr(verdict, "same user") != NULL && strstr(verdict, "PR_SET_PTRACER") != NULL &&
          strstr(verdict, "SCM_RIGHTS") != NULL);
    CHECK(strstr(verdict, "allow_ptracer") == NULL && strstr(verdict, "Transport::") == NULL);
    if (failed != failed_before) printf("eperm: %s\n", verdict);
}

static void bad_arguments(const char *prefix) {
    nodeipc_region *r = NULL;
    char name[200];
    snprintf(name, sizeof name, "%s-bad", prefix);

    EXPECT(nodeipc_region_create(NULL, 64, &r), NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(nodeipc_last_error(), "name is null") != NULL);
    EXPECT(nodeipc_region_create(name, 64, NULL), NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(nodeipc_last_error(), "out_region is null") != NULL);
    EXPECT(nodeipc_region_create("no-leading-slash", 64, &r), NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(r == NULL);
    EXPECT(nodeipc_region_create(name, 0, &r), NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_region_anonymous(0, &r), NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_region_open(name, 0, 0, &r), NODEIPC_ERR_NOT_FOUND);
    EXPECT(nodeipc_region_open(name, 0, 20, &r), NODEIPC_ERR_TIMEOUT);
    /* Durations in words ("20 ms"), never Rust's Debug form ("20.093828ms"). */
    CHECK(strstr(nodeipc_last_error(), " ms waiting for shared-memory object") != NULL);

    void *data;
    size_t len;
    EXPECT(nodeipc_region_data(NULL, &data, &len), NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(nodeipc_last_error(), "nodeipc_region handle is null") != NULL);

    /* Unknown handles: zeroed memory, and a handle of another type. */
    uint64_t fake[8] = {0};
    EXPECT(nodeipc_region_data((nodeipc_region *)fake, &data, &len), NODEIPC_ERR_BAD_HANDLE);
    EXPECT(nodeipc_group_barrier((nodeipc_group *)fake), NODEIPC_ERR_BAD_HANDLE);
    EXPECT(nodeipc_region_free((nodeipc_region *)fake), NODEIPC_ERR_BAD_HANDLE);
    nodeipc_sem *sem = NULL;
    EXPECT(nodeipc_region_anonymous(4096, &r), NODEIPC_OK);
    EXPECT(nodeipc_sem_in_region(r, 0, true, 0, &sem), NODEIPC_OK);
    EXPECT(nodeipc_region_data((nodeipc_region *)sem, &data, &len), NODEIPC_ERR_BAD_HANDLE);
    CHECK(strstr(nodeipc_last_error(), "not one") != NULL);
    EXPECT(nodeipc_sem_post((nodeipc_sem *)r), NODEIPC_ERR_BAD_HANDLE);

    /* Lengths and bounds. */
    EXPECT(nodeipc_region_write(r, 0, NULL, 5), NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_region_write(r, 4094, "abcd", 4), NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_region_write(r, SIZE_MAX, "a", 1), NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_region_write(r, 0, NULL, 0), NODEIPC_OK);
    EXPECT(nodeipc_sem_in_region(r, 4093, true, 0, &sem), NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_sem_in_region(r, 8, true, 0x80000000u, &sem), NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_sem_wait(sem, 10), NODEIPC_ERR_TIMEOUT);
    CHECK(strstr(nodeipc_last_error(), " ms waiting for semaphore") != NULL);
    bool acquired = true;
    EXPECT(nodeipc_sem_try_wait(sem, NULL), NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_sem_try_wait(sem, &acquired), NODEIPC_OK);
    CHECK(!acquired);
    EXPECT(nodeipc_sem_persist(sem), NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_sem_free(sem), NODEIPC_OK);
    EXPECT(nodeipc_region_free(r), NODEIPC_OK);

    /* Descriptors. */
    uint8_t handle[NODEIPC_FD_HANDLE_SIZE] = {0};
    int fd = -1;
    EXPECT(nodeipc_fd_import(handle, 23, &fd), NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_fd_import(handle, sizeof handle, &fd), NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(nodeipc_last_error(), "magic") != NULL);
    EXPECT(nodeipc_fd_import(NULL, sizeof handle, &fd), NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_fd_export(-1, handle), NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_fd_export(0, NULL), NODEIPC_ERR_INVALID_ARGUMENT);
    /* A descriptor that is not open is refused (with EBADF) by every call
     * taking one, before an export could record its number. */
    int closed_fd = dup(1);
    CHECK(closed_fd >= 0 && close(closed_fd) == 0);
    EXPECT(nodeipc_fd_export(closed_fd, handle), NODEIPC_ERR_NOT_FOUND);
    CHECK(nodeipc_last_errno() == EBADF && strstr(nodeipc_last_error(), "is not open") != NULL);
    EXPECT(nodeipc_fd_export(99999, handle), NODEIPC_ERR_NOT_FOUND);
    CHECK(nodeipc_last_errno() == EBADF && strstr(nodeipc_last_error(), "99999") != NULL);
    EXPECT(nodeipc_region_from_fd(99999, &r), NODEIPC_ERR_NOT_FOUND);
    CHECK(nodeipc_last_errno() == EBADF);
    EXPECT(nodeipc_send_fds(99999, (const uint8_t *)"x", 1, NULL, 0), NODEIPC_ERR_NOT_FOUND);
    nodeipc_credentials nobody;
    EXPECT(nodeipc_peer_credentials(99999, &nobody), NODEIPC_ERR_NOT_FOUND);
    EXPECT(nodeipc_fd_import_pid_fd(getpid(), 9999, &fd), NODEIPC_ERR_NOT_FOUND);
    CHECK(nodeipc_last_errno() == EBADF);
    EXPECT(nodeipc_send_fds(-1, (const uint8_t *)"x", 1, NULL, 0), NODEIPC_ERR_INVALID_ARGUMENT);
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    EXPECT(nodeipc_send_fds(sv[0], NULL, 0, &sv[1], 1), NODEIPC_ERR_INVALID_ARGUMENT);
    int many[300] = {0};
    EXPECT(nodeipc_send_fds(sv[0], (const uint8_t *)"x", 1, many, 300), NODEIPC_ERR_TOO_LARGE);
    close(sv[0]);
    close(sv[1]);
    nodeipc_pidfd *pidfd = NULL;
    EXPECT(nodeipc_pidfd_open(0, &pidfd), NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_fd_import_pid_fd(0x80000000u, 0, &fd), NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_pidfd_open(getpid(), &pidfd), NODEIPC_OK);
    EXPECT(nodeipc_pidfd_send_signal(pidfd, 12345), NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_pidfd_get_fd(pidfd, -3, &fd), NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_pidfd_free(pidfd), NODEIPC_OK);
    /* ESRCH: a child that has exited and been reaped. */
    pid_t gone = fork();
    if (gone == 0) _exit(0);
    CHECK(gone > 0 && waitpid(gone, NULL, 0) == gone);
    EXPECT(nodeipc_pidfd_open((uint32_t)gone, &pidfd), NODEIPC_ERR_PEER_DIED);
    CHECK(nodeipc_last_errno() == ESRCH);
    EXPECT(nodeipc_fd_import_pid_fd((uint32_t)gone, 0, &fd), NODEIPC_ERR_PEER_DIED);
    CHECK(nodeipc_last_errno() == ESRCH);
    not_permitted();

    /* Groups and the monitor. */
    nodeipc_group *g = NULL;
    EXPECT(nodeipc_group_join(name, 3, 2, 0, 100, &g), NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(nodeipc_last_error(), "rank 3") != NULL);
    EXPECT(nodeipc_group_join(name, 0, 0, 0, 100, &g), NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_group_join(NULL, 0, 1, 0, 100, &g), NODEIPC_ERR_INVALID_ARGUMENT);
    /* A name without its leading '/' (as nodeipc launch set NODEIPC_GROUP once). */
    EXPECT(nodeipc_group_join(name + 1, 0, 1, 0, 100, &g), NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(nodeipc_last_error(), "must start with '/'") != NULL);
    EXPECT(nodeipc_group_all_gather(NULL, NULL, 0, NULL, 0), NODEIPC_ERR_INVALID_ARGUMENT);
    nodeipc_monitor *m = NULL;
    EXPECT(nodeipc_monitor_connect("/nonexistent/nodeipc-test.sock", 30, &m), NODEIPC_ERR_TIMEOUT);
    EXPECT(nodeipc_monitor_connect("/tmp/x.sock", 0, &m), NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_monitor_heartbeat(NULL, NULL, 0), NODEIPC_ERR_INVALID_ARGUMENT);

    /* Freeing NULL does nothing. */
    EXPECT(nodeipc_region_free(NULL), NODEIPC_OK);
    EXPECT(nodeipc_sem_free(NULL), NODEIPC_OK);
    EXPECT(nodeipc_group_leave(NULL), NODEIPC_OK);
    EXPECT(nodeipc_monitor_free(NULL), NODEIPC_OK);
    EXPECT(nodeipc_pidfd_free(NULL), NODEIPC_OK);
    CHECK(strcmp(nodeipc_status_name(NODEIPC_ERR_TIMEOUT), "NODEIPC_ERR_TIMEOUT") == 0);
    CHECK(strcmp(nodeipc_status_name(-99), "unknown") == 0);
}

static void layers(const char *prefix) {
    char name[200];
    snprintf(name, sizeof name, "%s-region", prefix);

    /* A named region, opened a second time, shares its bytes. */
    nodeipc_region *owner = NULL, *peer = NULL;
    EXPECT(nodeipc_region_create(name, 4096, &owner), NODEIPC_OK);
    EXPECT(nodeipc_region_create(name, 4096, &peer), NODEIPC_ERR_ALREADY_EXISTS);
    EXPECT(nodeipc_region_open(name, 4096, 1000, &peer), NODEIPC_OK);
    EXPECT(nodeipc_region_write(owner, 100, "hello", 5), NODEIPC_OK);
    char buf[8] = {0};
    EXPECT(nodeipc_region_read(peer, 100, buf, 5), NODEIPC_OK);
    CHECK(memcmp(buf, "hello", 5) == 0);
    void *data = NULL;
    size_t len = 0;
    EXPECT(nodeipc_region_data(peer, &data, &len), NODEIPC_OK);
    CHECK(len == 4096 && memcmp((char *)data + 100, "hello", 5) == 0);
    EXPECT(nodeipc_region_unlink(owner), NODEIPC_OK);
    EXPECT(nodeipc_region_open(name, 0, 0, &peer), NODEIPC_ERR_NOT_FOUND);

    /* A futex semaphore in the region, seen through both mappings. */
    nodeipc_sem *a = NULL, *b = NULL;
    EXPECT(nodeipc_sem_in_region(owner, 0, true, 2, &a), NODEIPC_OK);
    EXPECT(nodeipc_sem_in_region(peer, 0, false, 0, &b), NODEIPC_OK);
    EXPECT(nodeipc_region_free(owner), NODEIPC_OK); /* the semaphore keeps it mapped */
    uint32_t value = 0;
    EXPECT(nodeipc_sem_value(b, &value), NODEIPC_OK);
    CHECK(value == 2);
    EXPECT(nodeipc_sem_wait(b, 100), NODEIPC_OK);
    EXPECT(nodeipc_sem_wait(a, -1), NODEIPC_OK);
    EXPECT(nodeipc_sem_wait(b, 5), NODEIPC_ERR_TIMEOUT);
    EXPECT(nodeipc_sem_post(a), NODEIPC_OK);
    EXPECT(nodeipc_sem_wait(b, 0), NODEIPC_OK);
    EXPECT(nodeipc_sem_free(a), NODEIPC_OK);
    EXPECT(nodeipc_sem_free(b), NODEIPC_OK);

    /* An anonymous region passed on as a descriptor, then sealed. */
    nodeipc_region *anon = NULL, *mapped = NULL;
    int fd = -1;
    EXPECT(nodeipc_region_anonymous(8192, &anon), NODEIPC_OK);
    EXPECT(nodeipc_region_fd(anon, &fd), NODEIPC_OK);
    EXPECT(nodeipc_region_from_fd(fd, &mapped), NODEIPC_OK);
    EXPECT(nodeipc_region_write(mapped, 8000, "memfd", 5), NODEIPC_OK);
    EXPECT(nodeipc_region_read(anon, 8000, buf, 5), NODEIPC_OK);
    CHECK(memcmp(buf, "memfd", 5) == 0);
    EXPECT(nodeipc_region_seal(anon), NODEIPC_OK);
    CHECK(ftruncate(fd, 4096) == -1 && errno == EPERM);
    EXPECT(nodeipc_region_free(mapped), NODEIPC_OK);
    EXPECT(nodeipc_region_free(peer), NODEIPC_OK);

    /* A named semaphore, as glibc's sem_open would share it. */
    snprintf(name, sizeof name, "%s-sem", prefix);
    nodeipc_sem *named = NULL, *opened = NULL;
    EXPECT(nodeipc_sem_create(name, 1, &named), NODEIPC_OK);
    EXPECT(nodeipc_sem_open(name, 100, &opened), NODEIPC_OK);
    EXPECT(nodeipc_sem_wait(opened, 100), NODEIPC_OK);
    EXPECT(nodeipc_sem_wait(named, 5), NODEIPC_ERR_TIMEOUT);
    EXPECT(nodeipc_sem_free(opened), NODEIPC_OK);
    EXPECT(nodeipc_sem_free(named), NODEIPC_OK);
    EXPECT(nodeipc_sem_open(name, 0, &opened), NODEIPC_ERR_NOT_FOUND);

    /* Descriptors: SCM_RIGHTS with credentials, FdHandle bytes, {pid, fd}. */
    int sv[2], pipefd[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0 && pipe(pipefd) == 0);
    nodeipc_credentials creds;
    EXPECT(nodeipc_peer_credentials(sv[1], &creds), NODEIPC_OK);
    CHECK(creds.pid == (uint32_t)getpid() && creds.uid == getuid());
    EXPECT(nodeipc_send_fds(sv[0], (const uint8_t *)"w", 1, &pipefd[1], 1), NODEIPC_OK);
    uint8_t tag = 0;
    int got[4] = {-1, -1, -1, -1};
    size_t nfds = 0;
    EXPECT(nodeipc_recv_fds(sv[1], &tag, 1, &len, got, 4, &nfds), NODEIPC_OK);
    CHECK(len == 1 && tag == 'w' && nfds == 1 && got[0] >= 0);
    CHECK(write(got[0], "A", 1) == 1);
    close(got[0]);

    uint8_t handle[NODEIPC_FD_HANDLE_SIZE];
    EXPECT(nodeipc_fd_export(pipefd[1], handle), NODEIPC_OK);
    CHECK(memcmp(handle, "NIFH", 4) == 0);
    int imported = -1;
    EXPECT(nodeipc_fd_import(handle, sizeof handle, &imported), NODEIPC_OK);
    CHECK(imported >= 0 && write(imported, "B", 1) == 1);
    close(imported);
    EXPECT(nodeipc_fd_import_pid_fd(getpid(), pipefd[1], &imported), NODEIPC_OK);
    CHECK(imported >= 0 && write(imported, "C", 1) == 1);
    close(imported);
    nodeipc_pidfd *self = NULL;
    EXPECT(nodeipc_pidfd_open(getpid(), &self), NODEIPC_OK);
    EXPECT(nodeipc_pidfd_get_fd(self, pipefd[1], &imported), NODEIPC_OK);
    CHECK(imported >= 0 && write(imported, "D", 1) == 1);
    close(imported);
    bool exited = true;
    EXPECT(nodeipc_pidfd_wait_exit(self, 0, &exited), NODEIPC_OK);
    CHECK(!exited);
    EXPECT(nodeipc_pidfd_send_signal(self, 0), NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_pidfd_free(self), NODEIPC_OK);
    char four[5] = {0};
    CHECK(read(pipefd[0], four, 4) == 4 && strcmp(four, "ABCD") == 0);
    close(pipefd[0]);
    close(pipefd[1]);
    close(sv[0]);
    close(sv[1]);

    /* A group of one: every collective works alone. */
    snprintf(name, sizeof name, "%s-group", prefix);
    nodeipc_group *g = NULL;
    EXPECT(nodeipc_group_join(name, 0, 1, 0, 5000, &g), NODEIPC_OK);
    uint32_t rank = 9, world = 9;
    size_t slot = 0;
    EXPECT(nodeipc_group_info(g, &rank, &world, &slot), NODEIPC_OK);
    CHECK(rank == 0 && world == 1 && slot == 64);
    EXPECT(nodeipc_group_barrier(g), NODEIPC_OK);
    char big[200], gathered[200];
    for (int i = 0; i < 200; i++) big[i] = (char)i;
    EXPECT(nodeipc_group_all_gather(g, (const uint8_t *)big, 200, (uint8_t *)gathered, 199),
           NODEIPC_ERR_TOO_LARGE);
    EXPECT(nodeipc_group_all_gather(g, (const uint8_t *)big, 200, (uint8_t *)gathered, 200),
           NODEIPC_OK);
    CHECK(memcmp(big, gathered, 200) == 0);
    EXPECT(nodeipc_group_all_gather(g, (const uint8_t *)big, 100, (uint8_t *)big + 50, 100),
           NODEIPC_ERR_INVALID_ARGUMENT);
    EXPECT(nodeipc_group_barrier_first(g, 2), NODEIPC_ERR_INVALID_ARGUMENT);
    /* Each wrong k says what is wrong with it, not "rank 0 is outside". */
    char first_none[512];
    EXPECT(nodeipc_group_barrier_first(g, 0), NODEIPC_ERR_INVALID_ARGUMENT);
    snprintf(first_none, sizeof first_none, "%s", nodeipc_last_error());
    CHECK(strstr(first_none, "the first 0 ranks in a group of 1") != NULL);
    EXPECT(nodeipc_group_barrier_first(g, 99), NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(nodeipc_last_error(), "the first 99 ranks in a group of 1") != NULL);
    CHECK(strstr(nodeipc_last_error(), "outside a group") == NULL);
    EXPECT(nodeipc_group_barrier_arrivals(g, 1), NODEIPC_OK);
    EXPECT(nodeipc_group_leave(g), NODEIPC_OK);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s NAME_PREFIX\n", argv[0]);
        return 2;
    }
    printf("nodeipc %s\n", nodeipc_version());
    bad_arguments(argv[1]);
    layers(argv[1]);
    printf("%d of %d checks failed\n", failed, checks);
    return failed ? 1 : 0;
}
