/* The smallest program against an installed nodeipc: tests/install.rs
 * builds it with pkg-config's flags, statically and against the .so. */
#include <stdio.h>

#include <nodeipc.h>

int main(void) {
    nodeipc_region *r = NULL;
    if (nodeipc_region_anonymous(4096, &r) != NODEIPC_OK) {
        printf("failed: %s\n", nodeipc_last_error());
        return 1;
    }
    nodeipc_region_write(r, 0, "hi", 2);
    char buf[3] = {0};
    nodeipc_region_read(r, 0, buf, 2);
    nodeipc_region_free(r);
    printf("nodeipc %s says %s\n", nodeipc_version(), buf);
    return 0;
}
