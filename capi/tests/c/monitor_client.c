/* A rank in plain C talking to its monitor through nodeipc.h, then going
 * silent: run by tests/monitor_client.rs as `monitor_client SOCKET`, which
 * expects the monitor to kill it for missing heartbeats. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "nodeipc.h"

#define MUST(call)                                                              \
    do {                                                                        \
        nodeipc_status rc_ = (call);                                            \
        if (rc_ != NODEIPC_OK) {                                                \
            printf("FAIL %s: %s: %s\n", #call, nodeipc_status_name(rc_),        \
                   nodeipc_last_error());                                       \
            return 1;                                                           \
        }                                                                       \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    nodeipc_monitor *m = NULL;
    MUST(nodeipc_monitor_connect(argv[1], 5000, &m));
    /* Nothing before Init: a fast heartbeat has no region yet. */
    if (nodeipc_monitor_heartbeat_fast(m) != NODEIPC_ERR_INVALID_ARGUMENT) {
        printf("FAIL heartbeat_fast before init\n");
        return 1;
    }
    bool granted = false;
    MUST(nodeipc_monitor_init(m, 7, 0, true, &granted));
    if (!granted) {
        printf("FAIL no heartbeat region\n");
        return 1;
    }
    MUST(nodeipc_monitor_heartbeat(m, (const uint8_t *)"step 1", 6));
    for (int i = 0; i < 3; i++) MUST(nodeipc_monitor_heartbeat_fast(m));
    MUST(nodeipc_monitor_start_section(m, "step"));
    nodeipc_status again = nodeipc_monitor_start_section(m, "step");
    if (again != NODEIPC_ERR_REFUSED) {
        printf("FAIL second start_section gave %s\n", nodeipc_status_name(again));
        return 1;
    }
    MUST(nodeipc_monitor_end_section(m, "step"));
    MUST(nodeipc_monitor_start_section(m, "eval"));
    MUST(nodeipc_monitor_end_all_sections(m));

    nodeipc_monitor_status status;
    MUST(nodeipc_monitor_get_status(m, &status));
    char tiny[8];
    size_t len = 0;
    nodeipc_status small = nodeipc_monitor_status_json(m, tiny, sizeof tiny, &len);
    char json[65536];
    MUST(nodeipc_monitor_status_json(m, json, sizeof json, &len));
    printf("state %d heartbeats %llu open %u small %s json_len %zu strlen %zu running %d\n",
           (int)status.state, (unsigned long long)status.heartbeats, status.open_sections,
           nodeipc_status_name(small), len, strlen(json), strstr(json, "\"running\"") != NULL);
    printf("silent\n");
    fflush(stdout);
    sleep(30); /* the monitor's heartbeat timeout ends this */
    printf("still alive\n");
    return 0;
}
