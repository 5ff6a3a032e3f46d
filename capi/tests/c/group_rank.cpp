// One C++ rank of a mixed group (C++ and Rust ranks), through nodeipc.hpp.
// Run by tests/mixed_group.rs as `group_rank NAME RANK WORLD`. Every rank,
// whatever its language, does the same calls in the same order:
//   barrier; all_gather of "rank R" (8 bytes); exchange_fds of a memfd
//   saying "memfd of rank R"; broadcast_fd from rank 1 then from rank 0;
//   barrier_first(2) on ranks 0 and 1; barrier.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "nodeipc.hpp"

static int memfd_saying(const std::string& text) {
    int fd = memfd_create("mixed-group", MFD_CLOEXEC);
    if (fd < 0 || write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
        throw std::runtime_error("memfd");
    return fd;
}

static std::string contents(int fd) {
    char buf[64] = {0};
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    return n < 0 ? std::string() : std::string(buf, static_cast<size_t>(n));
}

static std::string tag(unsigned r) {
    char t[9];
    std::snprintf(t, sizeof t, "rank %03u", r);
    return std::string(t, 8);
}

#define REQUIRE(cond)                                                         \
    do {                                                                      \
        if (!(cond)) {                                                        \
            std::fprintf(stderr, "rank %u: check failed line %d: %s\n", rank, \
                         __LINE__, #cond);                                    \
            return 1;                                                         \
        }                                                                     \
    } while (0)

int main(int argc, char** argv) {
    if (argc != 4) return 2;
    unsigned rank = static_cast<unsigned>(std::atoi(argv[2]));
    unsigned world = static_cast<unsigned>(std::atoi(argv[3]));
    try {
        auto group = nodeipc::Group::join(argv[1], rank, world, std::chrono::seconds(20));
        REQUIRE(group.rank() == rank && group.world_size() == world);
        group.barrier();

        std::string mine = tag(rank);
        auto all = group.all_gather(mine.data(), mine.size());
        for (unsigned r = 0; r < world; r++)
            REQUIRE(std::memcmp(all.data() + 8 * r, tag(r).data(), 8) == 0);

        int fd = memfd_saying("memfd of rank " + std::to_string(rank));
        auto fds = group.exchange_fds(fd);
        close(fd);
        for (unsigned r = 0; r < world; r++) {
            if (r == rank) {
                REQUIRE(fds[r] == -1);
                continue;
            }
            REQUIRE(contents(fds[r]) == "memfd of rank " + std::to_string(r));
            close(fds[r]);
        }

        for (unsigned root : {1u, 0u}) {
            int data = rank == root ? memfd_saying("broadcast from " + std::to_string(root)) : -1;
            int got = group.broadcast_fd(root, data);
            REQUIRE(contents(got) == "broadcast from " + std::to_string(root));
            close(got);
            if (data >= 0) close(data);
        }

        if (rank < 2) group.barrier_first(2);
        group.barrier();
        std::printf("rank %u ok\n", rank);
        return 0;
    } catch (const nodeipc::Error& e) {
        std::fprintf(stderr, "rank %u: %s (code %d)\n", rank, e.what(), static_cast<int>(e.code()));
        return 1;
    }
}
