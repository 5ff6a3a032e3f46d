// The two brokers the KittensBroker row of `nodeipc bench` times, with C
// entry points for benches/src/kittens.rs (built by benches/build.rs):
// - ours: kittens::KittensBroker::sync() from capi/include, over the C ABI;
// - the seed's algorithm, written the simplest honest way: a
//   sense-reversing barrier in shared memory whose waiters poll with
//   usleep(1).
// Each returns 0, or -1 after printing why on stderr.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "nodeipc/kittens_broker.hpp"

namespace {

uint64_t now_ns() {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
}

struct SeedVault {
    std::atomic<int> counter;
    std::atomic<int> sense;
};

struct Seed {
    SeedVault* vault;
    int world;
    int local_sense;

    void sync() {
        local_sense = 1 - local_sense;
        if (vault->counter.fetch_add(1, std::memory_order_acq_rel) + 1 == world) {
            vault->counter.store(0, std::memory_order_relaxed);
            vault->sense.store(local_sense, std::memory_order_release);
        } else {
            while (vault->sense.load(std::memory_order_acquire) != local_sense) usleep(1);
        }
    }
};

}  // namespace

extern "C" {

void* nodeipc_bench_kittens_join(const char* group, int rank, int world) {
    try {
        return new kittens::KittensBroker(rank, world, group);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "KittensBroker rank %d: %s\n", rank, e.what());
        return nullptr;
    }
}

int nodeipc_bench_kittens_syncs(void* broker, uint64_t n, uint64_t* ns) {
    try {
        auto* b = static_cast<kittens::KittensBroker*>(broker);
        uint64_t start = now_ns();
        for (uint64_t i = 0; i < n; i++) b->sync();
        *ns = now_ns() - start;
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "KittensBroker::sync: %s\n", e.what());
        return -1;
    }
}

void nodeipc_bench_kittens_free(void* broker) { delete static_cast<kittens::KittensBroker*>(broker); }

// Rank 0 creates the object `name` (exclusive, 0600); the others wait up to
// 10 s for it to appear at its full size. The first sync is the rendezvous;
// rank 0 removes the name after it.
void* nodeipc_bench_seed_join(const char* name, int rank, int world) {
    int fd = -1;
    if (rank == 0) {
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd >= 0 && ftruncate(fd, sizeof(SeedVault)) != 0) {
            close(fd);
            fd = -1;
        }
    } else {
        for (int tries = 0; tries < 100000; tries++) {
            fd = shm_open(name, O_RDWR, 0600);
            struct stat st;
            if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size >= static_cast<off_t>(sizeof(SeedVault)))
                break;
            if (fd >= 0) close(fd);
            fd = -1;
            usleep(100);
        }
    }
    if (fd < 0) {
        std::perror("seed broker: shm_open");
        return nullptr;
    }
    void* p = mmap(nullptr, sizeof(SeedVault), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        std::perror("seed broker: mmap");
        return nullptr;
    }
    auto* seed = new Seed{static_cast<SeedVault*>(p), world, 0};
    seed->sync();
    if (rank == 0) shm_unlink(name);
    return seed;
}

int nodeipc_bench_seed_syncs(void* seed, uint64_t n, uint64_t* ns) {
    auto* s = static_cast<Seed*>(seed);
    uint64_t start = now_ns();
    for (uint64_t i = 0; i < n; i++) s->sync();
    *ns = now_ns() - start;
    return 0;
}

void nodeipc_bench_seed_free(void* seed) {
    auto* s = static_cast<Seed*>(seed);
    munmap(s->vault, sizeof(SeedVault));
    delete s;
}

}  // extern "C"
