/* A rank in C for `nodeipc launch`: joins the group the launcher names in
 * NODEIPC_GROUP, as it is, as rank NODEIPC_LOCAL_RANK of
 * NODEIPC_LOCAL_WORLD_SIZE, and all-gathers "c rank <r> pid <pid>" (32
 * bytes, NUL-padded). Prints "rank <r> pid <pid> in <group> gathered:
 * <each rank's>|...". Run by tests/launched.rs, and by the Python tests
 * beside ranks in other languages. */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nodeipc.h"

#define SLOT 32

static uint32_t env_number(const char *name) {
    const char *text = getenv(name);
    if (text == NULL) {
        fprintf(stderr, "%s is not set: run me under nodeipc launch\n", name);
        exit(2);
    }
    return (uint32_t)strtoul(text, NULL, 10);
}

int main(void) {
    const char *name = getenv("NODEIPC_GROUP");
    uint32_t rank = env_number("NODEIPC_LOCAL_RANK"), world = env_number("NODEIPC_LOCAL_WORLD_SIZE");
    if (name == NULL || world == 0 || world > 64) return fprintf(stderr, "no group\n"), 2;
    nodeipc_group *group = NULL;
    nodeipc_status rc = nodeipc_group_join(name, rank, world, 0, 30000, &group);
    if (rc != NODEIPC_OK) {
        fprintf(stderr, "rank %u: join %s: %s: %s\n", rank, name, nodeipc_status_name(rc),
                nodeipc_last_error());
        return 1;
    }
    char text[64], mine[SLOT] = {0}, all[64 * SLOT];
    snprintf(text, sizeof text, "c rank %u pid %ld", rank, (long)getpid());
    memcpy(mine, text, strnlen(text, SLOT - 1));
    rc = nodeipc_group_all_gather(group, (const uint8_t *)mine, SLOT, (uint8_t *)all, world * SLOT);
    if (rc != NODEIPC_OK) {
        fprintf(stderr, "rank %u: all_gather: %s\n", rank, nodeipc_last_error());
        return 1;
    }
    printf("rank %u pid %ld in %s gathered: ", rank, (long)getpid(), name);
    for (uint32_t r = 0; r < world; r++)
        printf("%s%.*s", r ? "|" : "", SLOT, all + r * SLOT);
    printf("\n");
    fflush(stdout);
    nodeipc_group_leave(group);
    return 0;
}
