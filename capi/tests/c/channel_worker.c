/* A channel worker in plain C through nodeipc.h: logs on through the
 * handshake, reads each request in place (the first one also through a
 * buffer too small for it, to see TOO_LARGE keep it held), answers an
 * 8-byte FNV-1a digest of the request followed by its rank.
 * Usage: channel_worker SOCKET RANK COUNT */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nodeipc.h"

static int fail(const char *what, nodeipc_status s) {
    fprintf(stderr, "%s: %s: %s\n", what, nodeipc_status_name(s), nodeipc_last_error());
    return 1;
}

static uint64_t digest(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

int main(int argc, char **argv) {
    if (argc != 4) return fprintf(stderr, "usage: channel_worker SOCKET RANK COUNT\n"), 2;
    uint32_t rank = (uint32_t)strtoul(argv[2], NULL, 10);
    long count = strtol(argv[3], NULL, 10);
    nodeipc_worker *w = NULL;
    nodeipc_status s = nodeipc_worker_connect(argv[1], rank, 20000, &w);
    if (s != NODEIPC_OK) return fail("connect", s);
    uint32_t got_rank = 99;
    if ((s = nodeipc_worker_rank(w, &got_rank)) != NODEIPC_OK || got_rank != rank)
        return fail("rank", s);
    for (long i = 0; i < count; i++) {
        const uint8_t *data = NULL;
        size_t len = 0;
        if (i == 0) {
            uint8_t tiny[1];
            s = nodeipc_worker_recv(w, 20000, tiny, sizeof tiny, &len);
            if (s != NODEIPC_ERR_TOO_LARGE || len <= 1) return fail("recv into a tiny buffer", s);
        }
        s = nodeipc_worker_recv_in_place(w, 20000, &data, &len);
        if (s != NODEIPC_OK) return fail("recv_in_place", s);
        uint8_t answer[9];
        uint64_t d = digest(data, len);
        memcpy(answer, &d, 8);
        answer[8] = (uint8_t)rank;
        if ((s = nodeipc_worker_respond(w, answer, sizeof answer)) != NODEIPC_OK)
            return fail("respond", s);
    }
    /* Bad arguments are refused with a code, never dereferenced. */
    if (nodeipc_worker_respond(NULL, (const uint8_t *)"x", 1) != NODEIPC_ERR_INVALID_ARGUMENT)
        return fprintf(stderr, "a NULL worker was not refused\n"), 1;
    if (nodeipc_worker_recv(w, 0, NULL, 8, NULL) != NODEIPC_ERR_INVALID_ARGUMENT)
        return fprintf(stderr, "a NULL buffer was not refused\n"), 1;
    if ((s = nodeipc_worker_free(w)) != NODEIPC_OK) return fail("free", s);
    printf("c worker %u answered %ld requests\n", rank, count);
    return 0;
}
