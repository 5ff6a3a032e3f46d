// ThunderKittens' KittensBroker API over nodeipc: two ranks (this process
// and a forked child) sync, exchange data and pass a descriptor.
// Build: g++ -std=c++17 -I capi/include kittens.cpp target/release/libnodeipc.a -lpthread -ldl -lm -lrt
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "nodeipc/kittens_broker.hpp"

static int rank_main(int rank) try {
    kittens::KittensBroker broker(rank, 2);  // group from NODEIPC_GROUP
    broker.sync();

    int mine = 100 + rank, all[2];
    broker.exchange_data(all, &mine, sizeof mine);

    // Rank 0's memfd to rank 1 (as CUDA IPC programs pass dma-bufs).
    int fd = -1;
    if (rank == 0) {
        fd = memfd_create("kittens-example", MFD_CLOEXEC);
        if (write(fd, "from rank 0", 11) != 11) return 1;
    }
    int got = -1;
    broker.broadcast_fd(&got, fd, 0);
    char text[12] = {0};
    if (pread(got, text, 11, 0) != 11) return 1;
    close(got);

    broker.sync();
    std::printf("rank %d: exchanged %d %d, fd says \"%s\"\n", rank, all[0], all[1], text);
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
}

int main() {
    // A launcher sets NODEIPC_GROUP, unique per job, for every rank.
    std::string group = "/nodeipc-example-kittens-" + std::to_string(getpid());
    setenv("NODEIPC_GROUP", group.c_str(), 1);
    pid_t child = fork();
    if (child == 0) {
        int rc = rank_main(1);
        std::fflush(stdout);
        _exit(rc);
    }
    int failed = rank_main(0);
    int status = 0;
    waitpid(child, &status, 0);
    return failed || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}
