// `nodeipc bench channel`'s C++ rows for issue 35: a nodeipc::Coordinator
// used as MindIE's IPCCommunicator is — the calling thread sends, the
// response thread (on_response) gathers every worker's answer and checks
// it — and the same coordinator in lock-step (send, then recv_in_place of
// every answer), against the same worker processes as the Rust rows. For
// the open-loop rows the response function stamps each answered request
// with CLOCK_MONOTONIC (the clock of Rust's side, which keeps the schedule
// and works out the latencies). Entry points for
// cli/src/bench/channel/cpp.rs; no exception leaves them.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <time.h>
#include <vector>

#include "nodeipc.hpp"

namespace {

struct Bench {
    nodeipc::Coordinator c;
    std::mutex m;
    std::condition_variable cv;
    uint64_t replied = 0;
    std::string error;
    std::vector<uint8_t> expected;
    // While recording: the first request's id, and per request from it the
    // CLOCK_MONOTONIC nanoseconds its answers reached the response function
    // (0 until then).
    uint64_t first = 0;
    std::vector<uint64_t> answered_ns;
    // Set while answered_ns is filled (written by the sending thread only).
    std::atomic<bool> recording{false};
    // The count a thread waits for (0: nobody), under `m`.
    uint64_t awaited = 0;
};

uint64_t monotonic_ns() {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    return static_cast<uint64_t>(t.tv_sec) * 1000000000u + static_cast<uint64_t>(t.tv_nsec);
}

// Whether `answer` is the digest every worker must send back.
bool right_digest(const Bench& b, const uint8_t* data, size_t size) {
    return size == b.expected.size() && std::memcmp(data, b.expected.data(), size) == 0;
}

}  // namespace

extern "C" {

void* nodeipc_bench_thread_create(const char* tag, uint32_t workers, size_t capacity,
                                  uint32_t depth, int32_t* request_fd, int32_t* response_fd) {
    try {
        auto* b = new Bench{nodeipc::Coordinator::create(tag, workers, capacity, 64, depth,
                                                         std::chrono::seconds(30)),
                            {}, {}, 0, {}, {}, 0, {}};
        nodeipc_status s = nodeipc_coordinator_fds(b->c.handle(), request_fd, response_fd);
        if (s != NODEIPC_OK) {
            std::fprintf(stderr, "bench coordinator fds: %s\n", nodeipc_last_error());
            delete b;
            return nullptr;
        }
        return b;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench coordinator: %s\n", e.what());
        return nullptr;
    }
}

int nodeipc_bench_thread_start(void* bench, const uint8_t* expected, size_t len) {
    auto* b = static_cast<Bench*>(bench);
    try {
        b->c.wait_for_workers(std::chrono::seconds(30));
        b->expected.assign(expected, expected + len);
        b->c.set_response_mode(nodeipc::Gather::all);
        b->c.on_response([b](const nodeipc::Reply& r) {
            // The clock only while recording (a read costs 100 ns and more
            // on a virtual machine), a wake only for a waiter: as the Rust
            // handler, so the rows compare the bindings, not the handlers.
            const uint64_t now = b->recording ? monotonic_ns() : 0;
            std::lock_guard<std::mutex> g(b->m);
            if (now != 0 && r.id >= b->first && r.id - b->first < b->answered_ns.size())
                b->answered_ns[r.id - b->first] = now;
            if (!r.ok()) {
                b->error = r.message;
            } else {
                for (uint32_t i = 0; i < r.count; ++i) {
                    auto a = r.answer(i);
                    if (!right_digest(*b, a.data, a.size))
                        b->error = "worker " + std::to_string(i) + " answered a wrong digest";
                }
            }
            b->replied++;
            if (b->awaited != 0 && (b->replied >= b->awaited || !b->error.empty()))
                b->cv.notify_all();
        });
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench response thread: %s\n", e.what());
        return -1;
    }
}

// Sends `rounds` requests from this thread and waits until every one was
// answered on the response thread.
int nodeipc_bench_thread_run(void* bench, const uint8_t* data, size_t len, uint64_t rounds) {
    auto* b = static_cast<Bench*>(bench);
    try {
        uint64_t target = 0;
        {
            std::lock_guard<std::mutex> g(b->m);
            target = b->replied + rounds;
        }
        for (uint64_t i = 0; i < rounds; ++i) b->c.send(data, len, std::chrono::seconds(30));
        std::unique_lock<std::mutex> g(b->m);
        b->awaited = target;
        if (!b->cv.wait_for(g, std::chrono::seconds(30),
                            [&] { return b->replied >= target || !b->error.empty(); }))
            b->error = "answers missing after 30 s";
        b->awaited = 0;
        if (!b->error.empty()) {
            std::fprintf(stderr, "bench: %s\n", b->error.c_str());
            return -1;
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench send: %s\n", e.what());
        return -1;
    }
}

// Records, for the `n` requests from id `first` on, when the response
// function heard their answers.
int nodeipc_bench_thread_record(void* bench, uint64_t first, uint64_t n) {
    auto* b = static_cast<Bench*>(bench);
    try {
        std::lock_guard<std::mutex> g(b->m);
        b->first = first;
        b->answered_ns.assign(n, 0);
        b->recording = true;
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench record: %s\n", e.what());
        return -1;
    }
}

// One send from this thread (waiting only while the ring is full); its id
// in `*id`.
int nodeipc_bench_thread_send(void* bench, const uint8_t* data, size_t len, uint64_t* id) {
    auto* b = static_cast<Bench*>(bench);
    try {
        *id = b->c.send(data, len, std::chrono::seconds(30));
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench send: %s\n", e.what());
        return -1;
    }
}

// Waits until `total` requests were answered since the start, then hands
// the recorded times over (`n` of them into `out`) and stops recording.
int nodeipc_bench_thread_collect(void* bench, uint64_t total, uint64_t* out, uint64_t n) {
    auto* b = static_cast<Bench*>(bench);
    try {
        std::unique_lock<std::mutex> g(b->m);
        b->awaited = total;
        if (!b->cv.wait_for(g, std::chrono::seconds(30),
                            [&] { return b->replied >= total || !b->error.empty(); }))
            b->error = "answers missing after 30 s";
        b->awaited = 0;
        b->recording = false;
        if (!b->error.empty()) {
            std::fprintf(stderr, "bench: %s\n", b->error.c_str());
            return -1;
        }
        if (n != b->answered_ns.size()) {
            std::fprintf(stderr, "bench: %llu times asked for, %zu recorded\n",
                         static_cast<unsigned long long>(n), b->answered_ns.size());
            return -1;
        }
        std::memcpy(out, b->answered_ns.data(), n * sizeof(uint64_t));
        b->answered_ns.clear();
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench collect: %s\n", e.what());
        return -1;
    }
}

// Waits for the workers, without a response thread: the lock-step rows.
int nodeipc_bench_lockstep_start(void* bench, const uint8_t* expected, size_t len) {
    auto* b = static_cast<Bench*>(bench);
    try {
        b->c.wait_for_workers(std::chrono::seconds(30));
        b->expected.assign(expected, expected + len);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench lock-step start: %s\n", e.what());
        return -1;
    }
}

// One lock-step round trip: send, then every worker's answer read in place
// and checked.
int nodeipc_bench_lockstep_round(void* bench, const uint8_t* data, size_t len) {
    auto* b = static_cast<Bench*>(bench);
    try {
        b->c.send(data, len, std::chrono::seconds(30));
        bool right = true;
        b->c.recv_in_place(
            nodeipc::Gather::all,
            [&](const nodeipc::View& v) {
                for (uint32_t i = 0; i < v.count; ++i) {
                    auto a = v.answer(i);
                    right = right && right_digest(*b, a.data, a.size);
                }
            },
            std::chrono::seconds(30));
        if (!right) {
            std::fprintf(stderr, "bench: a worker answered a wrong digest\n");
            return -1;
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench lock-step: %s\n", e.what());
        return -1;
    }
}

void nodeipc_bench_thread_free(void* bench) { delete static_cast<Bench*>(bench); }

}  // extern "C"
