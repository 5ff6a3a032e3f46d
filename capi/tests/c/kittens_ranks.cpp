// A ThunderKittens-style program: only KittensBroker's public API, as a
// program written against the original uses it. Run by
// tests/kittens_broker.rs as `kittens_ranks LOCAL_RANK WORLD MODE` with
// NODEIPC_GROUP set; MODE is "all" (every call, checked) or "die" (rank 1
// dies after joining; the others must get an exception, not hang).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "nodeipc/kittens_broker.hpp"

static int memfd_saying(const std::string& text) {
    int fd = memfd_create("kittens-test", MFD_CLOEXEC);
    if (fd < 0 || write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
        throw std::runtime_error("memfd");
    return fd;
}

static std::string contents(int fd) {
    char buf[64] = {0};
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    return n < 0 ? std::string("<pread failed>") : std::string(buf, static_cast<size_t>(n));
}

#define REQUIRE(cond)                                                         \
    do {                                                                      \
        if (!(cond)) {                                                        \
            std::fprintf(stderr, "rank %d: check failed line %d: %s\n", rank, \
                         __LINE__, #cond);                                    \
            return 1;                                                         \
        }                                                                     \
    } while (0)

static int run_all(int rank, int world) {
    kittens::KittensBroker broker(rank, world);
    broker.sync();

    // Beyond the original's 64-byte limit: 100 bytes each, two rounds.
    std::vector<unsigned char> src(100), dst(100 * world);
    for (size_t i = 0; i < src.size(); i++) src[i] = static_cast<unsigned char>(rank * 7 + i);
    broker.exchange_data(dst.data(), src.data(), src.size());
    for (int r = 0; r < world; r++)
        for (size_t i = 0; i < 100; i++)
            REQUIRE(dst[r * 100 + i] == static_cast<unsigned char>(r * 7 + i));

    // sync(2) among the last two ranks alone, three times: it must release
    // on two arrivals whoever they are.
    if (rank >= world - 2)
        for (int i = 0; i < 3; i++) broker.sync(2);
    broker.sync();

    bool threw = false;
    try {
        broker.sync(world + 1);
    } catch (const std::runtime_error&) {
        threw = true;
    }
    REQUIRE(threw);

    int mine = memfd_saying("fd of rank " + std::to_string(rank));
    std::vector<int> fds(world, -2);
    broker.exchange_fds(fds.data(), mine);
    REQUIRE(fcntl(mine, F_GETFD) == -1);  // consumed
    for (int r = 0; r < world; r++) {
        if (r == rank) {
            REQUIRE(fds[r] == -1);
        } else {
            REQUIRE(contents(fds[r]) == "fd of rank " + std::to_string(r));
            close(fds[r]);
        }
    }

    int source = world - 1;
    int data_fd = rank == source ? memfd_saying("broadcast") : -1;
    int got = -1;
    broker.broadcast_fd(&got, data_fd, source);
    REQUIRE(got >= 0 && contents(got) == "broadcast");
    close(got);

    kittens::KittensBroker moved = std::move(broker);
    moved.sync();
    std::printf("rank %d ok\n", rank);
    return 0;
}

static int run_die(int rank, int world) {
    kittens::KittensBroker broker(rank, world);
    if (rank == 1) _exit(3);
    auto start = std::chrono::steady_clock::now();
    try {
        broker.sync();
    } catch (const std::runtime_error& e) {
        auto waited = std::chrono::steady_clock::now() - start;
        std::printf("rank %d caught after %lld ms: %s\n", rank,
                    static_cast<long long>(
                        std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()),
                    e.what());
        return std::strstr(e.what(), "died") ? 0 : 1;
    }
    std::fprintf(stderr, "rank %d: sync returned with a dead rank\n", rank);
    return 1;
}

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s LOCAL_RANK WORLD all|die\n", argv[0]);
        return 2;
    }
    int rank = std::atoi(argv[1]), world = std::atoi(argv[2]);
    try {
        return std::string(argv[3]) == "die" ? run_die(rank, world) : run_all(rank, world);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        return 1;
    }
}
