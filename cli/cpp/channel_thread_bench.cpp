// `nodeipc bench channel`'s C++ row for issue 35: a nodeipc::Coordinator
// used as MindIE's IPCCommunicator is — the calling thread sends, the
// response thread (on_response) gathers every worker's answer and checks
// it — against the same worker processes as the Rust row. Entry points
// for cli/src/bench/channel.rs; no exception leaves them.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
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
};

}  // namespace

extern "C" {

void* nodeipc_bench_thread_create(const char* tag, uint32_t workers, size_t capacity,
                                  uint32_t depth, int32_t* request_fd, int32_t* response_fd) {
    try {
        auto* b = new Bench{nodeipc::Coordinator::create(tag, workers, capacity, 64, depth,
                                                         std::chrono::seconds(30)),
                            {}, {}, 0, {}, {}};
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
            std::lock_guard<std::mutex> g(b->m);
            if (!r.ok()) {
                b->error = r.message;
            } else {
                for (uint32_t i = 0; i < r.count; ++i) {
                    auto a = r.answer(i);
                    if (a.size != b->expected.size() ||
                        std::memcmp(a.data, b->expected.data(), a.size) != 0)
                        b->error = "worker " + std::to_string(i) + " answered a wrong digest";
                }
            }
            b->replied++;
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
        if (!b->cv.wait_for(g, std::chrono::seconds(30),
                            [&] { return b->replied >= target || !b->error.empty(); }))
            b->error = "answers missing after 30 s";
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

void nodeipc_bench_thread_free(void* bench) { delete static_cast<Bench*>(bench); }

}  // extern "C"
