/* A channel coordinator in plain C through nodeipc.h: serves the logon
 * handshake, starts N channel_worker processes, and round-trips COUNT
 * requests through every gather (all into strided buffers, aggregated by a
 * callback, first then drain), checking each worker's digest.
 * Usage: channel_coordinator SOCKET WORKER_BINARY N COUNT */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "nodeipc.h"

extern char **environ;

static int fail(const char *what, nodeipc_status s) {
    fprintf(stderr, "%s: %s: %s\n", what, nodeipc_status_name(s), nodeipc_last_error());
    return 1;
}

static uint64_t digest(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Keeps the response of the highest rank. */
static int32_t last_rank(void *user, uint32_t count, const uint8_t *const *responses,
                         const size_t *lengths) {
    (void)responses;
    (void)lengths;
    *(uint32_t *)user += 1;
    return (int32_t)count - 1;
}

/* Fails the gather as a timeout: the code is passed through as it is. */
static int32_t fails(void *user, uint32_t count, const uint8_t *const *responses,
                     const size_t *lengths) {
    (void)count;
    (void)responses;
    (void)lengths;
    *(uint32_t *)user += 1;
    return NODEIPC_ERR_TIMEOUT;
}

/* Chooses a response past the last: refused as an invalid argument. */
static int32_t past_the_last(void *user, uint32_t count, const uint8_t *const *responses,
                             const size_t *lengths) {
    (void)responses;
    (void)lengths;
    *(uint32_t *)user += 1;
    return (int32_t)count;
}

static int check_answer(const uint8_t *answer, size_t len, uint64_t want, uint32_t rank) {
    uint64_t got;
    if (len != 9) return fprintf(stderr, "worker %u: a %zu-byte answer\n", rank, len), 1;
    memcpy(&got, answer, 8);
    if (got != want || answer[8] != rank)
        return fprintf(stderr, "worker %u: wrong digest or rank\n", rank), 1;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 5) return fprintf(stderr, "usage: channel_coordinator SOCKET WORKER N COUNT\n"), 2;
    const char *socket_path = argv[1];
    uint32_t n = (uint32_t)strtoul(argv[3], NULL, 10);
    long count = strtol(argv[4], NULL, 10);
    nodeipc_coordinator *c = NULL;
    nodeipc_status s = nodeipc_coordinator_create("/nodeipc-capi-c-coordinator", n, 4096, 64, 2,
                                                  20000, &c);
    if (s != NODEIPC_OK) return fail("create", s);
    nodeipc_handshake_server *server = NULL;
    if ((s = nodeipc_coordinator_serve(c, socket_path, &server)) != NODEIPC_OK)
        return fail("serve", s);
    pid_t pids[16];
    char rank_text[16];
    if (n > 16) return fprintf(stderr, "at most 16 workers\n"), 2;
    for (uint32_t r = 0; r < n; r++) {
        snprintf(rank_text, sizeof rank_text, "%u", r);
        char *args[] = {argv[2], (char *)socket_path, rank_text, argv[4], NULL};
        if (posix_spawn(&pids[r], argv[2], NULL, NULL, args, environ) != 0)
            return perror("posix_spawn"), 1;
    }
    if ((s = nodeipc_coordinator_wait_for_workers(c, 20000)) != NODEIPC_OK)
        return fail("wait_for_workers", s);
    if ((s = nodeipc_handshake_server_free(server)) != NODEIPC_OK) return fail("server free", s);

    uint8_t request[3000];
    uint8_t buffer[16 * 64];
    size_t lengths[16];
    uint32_t calls = 0;
    for (long i = 0; i < count; i++) {
        size_t len = 2 + (size_t)(i * 997) % (sizeof request - 2);
        for (size_t k = 0; k < len; k++) request[k] = (uint8_t)(k * 31 + (size_t)i);
        uint64_t want = digest(request, len), index = 0;
        if ((s = nodeipc_coordinator_send(c, request, len, 20000, &index)) != NODEIPC_OK)
            return fail("send", s);
        if (index != (uint64_t)i) return fprintf(stderr, "index %llu\n", (unsigned long long)index), 1;
        switch (i % 3) {
        case 0:
            if ((s = nodeipc_coordinator_recv_all(c, 20000, buffer, 64, lengths)) != NODEIPC_OK)
                return fail("recv_all", s);
            for (uint32_t r = 0; r < n; r++)
                if (check_answer(buffer + r * 64, lengths[r], want, r)) return 1;
            break;
        case 1: {
            size_t got = 0;
            uint32_t rank = 99;
            /* A failing callback and one choosing no response fail that
             * gather alone, with their codes: every answer is still taken. */
            if (i == 1 || i == 4) {
                s = nodeipc_coordinator_recv_aggregated(c, 20000, i == 1 ? fails : past_the_last,
                                                        &calls, buffer, 64, &got, &rank);
                nodeipc_status want_status =
                    i == 1 ? NODEIPC_ERR_TIMEOUT : NODEIPC_ERR_INVALID_ARGUMENT;
                if (s != want_status)
                    return fprintf(stderr, "callback %ld: %s, not %s: %s\n", i,
                                   nodeipc_status_name(s), nodeipc_status_name(want_status),
                                   nodeipc_last_error()),
                           1;
                break;
            }
            s = nodeipc_coordinator_recv_aggregated(c, 20000, last_rank, &calls, buffer, 64, &got,
                                                    &rank);
            if (s != NODEIPC_OK) return fail("recv_aggregated", s);
            if (rank != n - 1 || check_answer(buffer, got, want, rank)) return 1;
            break;
        }
        default: {
            size_t got = 0;
            uint32_t rank = 99;
            uint64_t drained = 0;
            if ((s = nodeipc_coordinator_recv_first(c, buffer, 64, &got, &rank)) != NODEIPC_OK)
                return fail("recv_first", s);
            if (rank >= n || check_answer(buffer, got, want, rank)) return 1;
            if ((s = nodeipc_coordinator_drain(c, &drained)) != NODEIPC_OK) return fail("drain", s);
            if (drained != n - 1) return fprintf(stderr, "drained %llu\n", (unsigned long long)drained), 1;
        }
        }
    }
    /* Bad arguments: codes, not crashes. */
    if (nodeipc_coordinator_send(NULL, request, 1, 0, NULL) != NODEIPC_ERR_INVALID_ARGUMENT)
        return fprintf(stderr, "a NULL coordinator was not refused\n"), 1;
    if (nodeipc_coordinator_recv_all(c, 0, buffer, 64, NULL) != NODEIPC_ERR_INVALID_ARGUMENT)
        return fprintf(stderr, "NULL lengths were not refused\n"), 1;
    if (nodeipc_coordinator_recv_aggregated(c, 0, NULL, NULL, buffer, 64, lengths, &calls) !=
        NODEIPC_ERR_INVALID_ARGUMENT)
        return fprintf(stderr, "a NULL callback was not refused\n"), 1;
    if ((s = nodeipc_coordinator_free(c)) != NODEIPC_OK) return fail("free", s);
    for (uint32_t r = 0; r < n; r++) {
        int status = 0;
        if (waitpid(pids[r], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            return fprintf(stderr, "worker %u failed (status %d)\n", r, status), 1;
    }
    printf("c coordinator: %ld requests through %u workers, %u aggregations\n", count, n, calls);
    return 0;
}
