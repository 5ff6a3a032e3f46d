/* Two ranks of one group (this process and a forked child) meet at a
 * barrier, all-gather a value each, and share a memfd region by descriptor.
 * Build: cc -std=c11 -I capi/include group.c target/release/libnodeipc.a -lpthread -ldl -lm -lrt */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nodeipc.h"

static int fail(const char *what, nodeipc_status rc) {
    fprintf(stderr, "%s: %s: %s\n", what, nodeipc_status_name(rc), nodeipc_last_error());
    return 1;
}

static int rank_main(const char *group_name, uint32_t rank) {
    nodeipc_group *group = NULL;
    nodeipc_status rc = nodeipc_group_join(group_name, rank, 2, 0, 10000, &group);
    if (rc != NODEIPC_OK) return fail("join", rc);

    /* Every rank's 8 bytes, in rank order. */
    char mine[8], all[16];
    snprintf(mine, sizeof mine, "rank %u", rank);
    rc = nodeipc_group_all_gather(group, (const uint8_t *)mine, sizeof mine, (uint8_t *)all, sizeof all);
    if (rc != NODEIPC_OK) return fail("all_gather", rc);

    /* Rank 0's memfd region to both ranks. */
    nodeipc_region *region = NULL;
    int fd = -1;
    if (rank == 0) {
        if ((rc = nodeipc_region_anonymous(4096, &region)) != NODEIPC_OK) return fail("region", rc);
        nodeipc_region_write(region, 0, "shared", 6);
        nodeipc_region_fd(region, &fd);
    }
    int received = -1;
    rc = nodeipc_group_broadcast_fd(group, 0, fd, &received);
    if (rc != NODEIPC_OK) return fail("broadcast_fd", rc);
    nodeipc_region *mapped = NULL;
    if ((rc = nodeipc_region_from_fd(received, &mapped)) != NODEIPC_OK) return fail("from_fd", rc);
    close(received);
    char word[7] = {0};
    nodeipc_region_read(mapped, 0, word, 6);

    if ((rc = nodeipc_group_barrier(group)) != NODEIPC_OK) return fail("barrier", rc);
    printf("rank %u: gathered \"%s\" \"%s\", region says \"%s\"\n", rank, all, all + 8, word);
    nodeipc_region_free(mapped);
    nodeipc_region_free(region);
    nodeipc_group_leave(group);
    return 0;
}

int main(void) {
    char name[64];
    snprintf(name, sizeof name, "/nodeipc-example-%d", (int)getpid());
    pid_t child = fork();
    if (child == 0) {
        int rc = rank_main(name, 1);
        fflush(stdout);
        _exit(rc);
    }
    int failed = rank_main(name, 0);
    int status = 0;
    waitpid(child, &status, 0);
    return failed || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}
