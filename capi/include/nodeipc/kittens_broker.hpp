// kittens::KittensBroker over nodeipc: ThunderKittens' multiprocess broker
// with the same public API and semantics, so a program that used it
// compiles unchanged with this include instead. Header-only, over
// nodeipc.hpp; link libnodeipc.a (-lpthread -ldl -lm -lrt).
//
//   kittens::KittensBroker broker(local_rank, local_world_size);
//   broker.sync();                          // every rank
//   broker.sync(k);                         // releases once any k ranks arrived
//   broker.exchange_data(dst, src, size);   // dst: every rank's bytes, rank order
//   broker.exchange_fds(dst, data_fd);      // dst[i]: rank i's fd; dst[own] = -1
//   broker.broadcast_fd(dst, data_fd, src); // *dst: the source rank's fd
//
// Unlike the original:
// - The group is named per job, never a fixed global name: the environment
//   variable NODEIPC_GROUP when set (a POSIX name with one leading '/', used
//   verbatim: a launcher sets it unique per job), else
//   "/nodeipc-kittens-u<uid>-p<parent pid>": the ranks of one launcher share
//   it and two jobs started by different parents never collide. Nothing is
//   left under /dev/shm or /tmp, even after a crash.
// - No call hangs: a rank that dies or leaves makes every other rank's
//   pending and later calls throw within a fraction of a second, and every
//   wait is bounded by NODEIPC_TIMEOUT_MS (milliseconds; default 600000).
// - exchange_data takes any size (beyond 64 bytes it runs in 64-byte
//   rounds, one barrier each).
// As in the original, while some ranks are in sync(k) with k below the
// world size, the ranks not taking part must not call sync; errors throw
// std::runtime_error (nodeipc::Error derives from it and adds the code).
#ifndef NODEIPC_KITTENS_BROKER_HPP
#define NODEIPC_KITTENS_BROKER_HPP

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "../nodeipc.hpp"

namespace kittens {

struct KittensBroker {
    KittensBroker(int local_rank, int local_world_size)
        : local_rank_(local_rank), local_world_size_(local_world_size) {
        check_ranks();
        group_ = nodeipc::Group::join(group_name(), static_cast<uint32_t>(local_rank_),
                                      static_cast<uint32_t>(local_world_size_), timeout());
    }

    // nodeipc's addition: an explicit group name (a launcher's own naming)
    // instead of NODEIPC_GROUP or the derived one.
    KittensBroker(int local_rank, int local_world_size, const std::string& group)
        : local_rank_(local_rank), local_world_size_(local_world_size) {
        check_ranks();
        group_ = nodeipc::Group::join(group, static_cast<uint32_t>(local_rank_),
                                      static_cast<uint32_t>(local_world_size_), timeout());
    }

    KittensBroker(const KittensBroker&) = delete;
    KittensBroker& operator=(const KittensBroker&) = delete;
    KittensBroker(KittensBroker&&) noexcept = default;
    KittensBroker& operator=(KittensBroker&&) noexcept = default;
    ~KittensBroker() = default;

    // Waits until `num_ranks` ranks (all when -1) have called sync.
    void sync(int num_ranks = -1) {
        if (num_ranks == -1 || num_ranks == local_world_size_) {
            group().barrier();
        } else if (num_ranks <= 0 || num_ranks > local_world_size_) {
            throw std::runtime_error("Invalid number of ranks");
        } else {
            group().barrier_arrivals(static_cast<uint32_t>(num_ranks));
        }
    }

    // Every rank's `size` bytes of `src`, packed in rank order into `dst`
    // (local_world_size × size bytes).
    void exchange_data(void* dst, const void* src, size_t size) {
        group().all_gather(src, size, dst,
                           nodeipc::detail::checked_mul(size, static_cast<size_t>(local_world_size_),
                                                        "exchange_data: size × world size"));
    }

    // dst[i] (local_world_size entries) receives rank i's descriptor, ours
    // to close; dst[local_rank] is -1. `data_fd` is consumed (closed).
    void exchange_fds(int* dst, int data_fd) {
        if (dst == nullptr) {
            close_quietly(data_fd);
            throw std::runtime_error("exchange_fds: dst is null");
        }
        std::vector<int> got;
        try {
            got = group().exchange_fds(data_fd);
        } catch (...) {
            close_quietly(data_fd);
            throw;
        }
        close_quietly(data_fd);
        for (size_t i = 0; i < got.size(); i++) dst[i] = got[i];
    }

    // Rank `src_local_rank`'s descriptor to every rank: the source's
    // `data_fd` is consumed (closed), the others' is ignored (-1 will do);
    // every rank, the source included, gets a descriptor of its own in *dst.
    void broadcast_fd(int* dst, int data_fd, int src_local_rank) {
        const bool source = local_rank_ == src_local_rank;
        if (src_local_rank < 0 || src_local_rank >= local_world_size_ || dst == nullptr) {
            if (source) close_quietly(data_fd);
            throw std::runtime_error("broadcast_fd: invalid source rank or null dst");
        }
        try {
            *dst = group().broadcast_fd(static_cast<uint32_t>(src_local_rank), data_fd);
        } catch (...) {
            if (source) close_quietly(data_fd);
            throw;
        }
        if (source) close_quietly(data_fd);
    }

    int local_rank_;
    int local_world_size_;

  private:
    void check_ranks() const {
        if (local_world_size_ <= 0)
            throw std::runtime_error("Local world size must be positive");
        if (local_rank_ < 0 || local_rank_ >= local_world_size_)
            throw std::runtime_error("Local rank is greater than local world size");
    }

    nodeipc::Group& group() {
        if (!group_.handle()) throw std::runtime_error("KittensBroker used after a move");
        return group_;
    }

    static std::string group_name() {
        if (const char* name = std::getenv("NODEIPC_GROUP")) return name;
        return "/nodeipc-kittens-u" + std::to_string(static_cast<unsigned long>(getuid())) +
               "-p" + std::to_string(static_cast<long>(getppid()));
    }

    static std::chrono::milliseconds timeout() {
        if (const char* ms = std::getenv("NODEIPC_TIMEOUT_MS")) {
            char* end = nullptr;
            long long v = std::strtoll(ms, &end, 10);
            if (end == ms || *end != '\0' || v <= 0)
                throw std::runtime_error(std::string("NODEIPC_TIMEOUT_MS is not a positive number: ") + ms);
            return std::chrono::milliseconds(v);
        }
        return std::chrono::milliseconds(600000);
    }

    static void close_quietly(int fd) {
        if (fd >= 0) ::close(fd);
    }

    nodeipc::Group group_;
};

}  // namespace kittens

#endif  // NODEIPC_KITTENS_BROKER_HPP
