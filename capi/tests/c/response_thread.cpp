// nodeipc::Coordinator's response thread in C++: a sending thread beside
// it (every reply in send order), the mode recorded at each send, a
// reply's error as a nodeipc::Error with its code and rank, an exception
// of the response function caught (log_and_continue goes on,
// stop_on_error ends the thread and stop_response_thread rethrows it),
// gathers refused while it runs, and a coordinator destroyed with its
// thread running. Run by tests/cpp_classes.rs as `response_thread SOCKET`.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "nodeipc.hpp"

using namespace std::chrono_literals;

static std::atomic<int> failed{0}, checks{0};

#define CHECK(cond)                                                      \
    do {                                                                 \
        checks++;                                                        \
        if (!(cond)) {                                                   \
            failed++;                                                    \
            std::printf("FAIL line %d: %s\n", __LINE__, #cond);          \
        }                                                                \
    } while (0)

constexpr uint32_t kWorkers = 2;

// What the response function heard, owned.
struct Heard {
    uint64_t id;
    nodeipc_status status;
    uint32_t rank;
    std::vector<std::vector<uint8_t>> answers;
    std::string error;
};

struct Log {
    std::mutex m;
    std::condition_variable cv;
    std::vector<Heard> heard;

    void add(const nodeipc::Reply& r) {
        Heard h{r.id, r.status, r.rank, {}, {}};
        for (uint32_t i = 0; i < r.count; ++i) {
            auto a = r.answer(i);
            h.answers.emplace_back(a.data, a.data + a.size);
        }
        try {
            r.check();
        } catch (const nodeipc::Error& e) {
            h.error = e.what();
            CHECK(e.code() == r.status && e.rank() == r.rank);
        }
        std::lock_guard<std::mutex> g(m);
        heard.push_back(std::move(h));
        cv.notify_all();
    }
    // Waits (bounded) until `n` replies were heard.
    bool wait_for(size_t n) {
        std::unique_lock<std::mutex> g(m);
        return cv.wait_for(g, 20s, [&] { return heard.size() >= n; });
    }
};

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    const std::string socket = argv[1];
    std::vector<std::thread> workers;
    {
        auto c = nodeipc::Coordinator::create(socket + "-channel", kWorkers, 64, 64, 4, 20s);
        auto server = c.serve(socket);
        for (uint32_t rank = 0; rank < kWorkers; ++rank) {
            workers.emplace_back([socket, rank] {
                auto w = nodeipc::Worker::connect(socket, rank, 20s);
                std::vector<uint8_t> request;
                for (;;) {
                    try {
                        w.recv(request, 20s);
                    } catch (const nodeipc::Error& e) {
                        if (e.code() == NODEIPC_ERR_PEER_LEFT) return;  // closed
                        std::printf("FAIL worker %u: %s\n", rank, e.what());
                        failed++;
                        return;
                    }
                    uint8_t answer[2] = {request.empty() ? uint8_t(0) : request[0],
                                         static_cast<uint8_t>(rank)};
                    w.respond(answer, 2);
                }
            });
        }
        c.wait_for_workers(20s);

        // A sending thread beside the response thread: every reply, in order.
        Log log;
        c.set_response_mode(nodeipc::Gather::all);
        c.on_response([&log](const nodeipc::Reply& r) { log.add(r); });
        CHECK(c.response_thread_running());
        constexpr uint64_t kSent = 300;
        std::thread sender([&c] {
            for (uint64_t i = 0; i < kSent; ++i) CHECK(c.send(&i, 1, 20s) == i);
        });
        sender.join();
        CHECK(log.wait_for(kSent));
        {
            std::lock_guard<std::mutex> g(log.m);
            for (uint64_t i = 0; i < kSent && i < log.heard.size(); ++i) {
                const Heard& h = log.heard[i];
                CHECK(h.id == i && h.status == NODEIPC_OK && h.answers.size() == kWorkers);
                for (uint32_t r = 0; r < kWorkers && r < h.answers.size(); ++r)
                    CHECK(h.answers[r] == (std::vector<uint8_t>{uint8_t(i), uint8_t(r)}));
            }
        }

        // Modes recorded per send; aggregated without a rule is that
        // request's error, as a nodeipc::Error.
        c.set_response_mode(nodeipc::Gather::first);
        uint8_t b = 1;
        c.send(&b, 1);
        c.set_response_mode(nodeipc::Gather::rank0_after_all);
        b = 2;
        c.send(&b, 1);
        c.set_response_mode(nodeipc::Gather::aggregated);
        b = 3;
        c.send(&b, 1);
        CHECK(log.wait_for(kSent + 3));
        {
            std::lock_guard<std::mutex> g(log.m);
            const Heard& first = log.heard[kSent];
            CHECK(first.id == kSent && first.status == NODEIPC_OK && first.rank < kWorkers &&
                  first.answers.size() == 1 &&
                  first.answers[0] == (std::vector<uint8_t>{1, uint8_t(first.rank)}));
            const Heard& rank0 = log.heard[kSent + 1];
            CHECK(rank0.status == NODEIPC_OK && rank0.rank == 0 &&
                  rank0.answers[0] == (std::vector<uint8_t>{2, 0}));
            const Heard& none = log.heard[kSent + 2];
            CHECK(none.status == NODEIPC_ERR_INVALID_ARGUMENT && none.answers.empty() &&
                  none.rank == NODEIPC_NO_RANK &&
                  none.error.find("no aggregation rule") != std::string::npos);
        }

        // Gathers are refused while the thread runs, by name.
        nodeipc_status refused = NODEIPC_OK;
        try {
            c.recv_all(0ms);
        } catch (const nodeipc::Error& e) {
            refused = e.code();
            CHECK(std::strstr(e.what(), "the response thread is running") != nullptr);
        }
        CHECK(refused == NODEIPC_ERR_INVALID_ARGUMENT);
        // A second start while it runs is refused too.
        refused = NODEIPC_OK;
        try {
            c.on_response([](const nodeipc::Reply&) {});
        } catch (const nodeipc::Error& e) {
            refused = e.code();
        }
        CHECK(refused == NODEIPC_ERR_INVALID_ARGUMENT);
        c.stop_response_thread();
        CHECK(!c.response_thread_running());

        // The same replies, in send order, whether sends gather ahead or not.
        uint64_t next = kSent + 3;
        c.set_response_mode(nodeipc::Gather::all);
        for (auto when : {nodeipc::GatherAhead::never, nodeipc::GatherAhead::always,
                          nodeipc::GatherAhead::when_crowded}) {
            constexpr uint64_t kEach = 100;
            Log each;
            c.set_gather_ahead(when);
            c.on_response([&each](const nodeipc::Reply& r) { each.add(r); });
            std::thread sender([&c, next] {
                for (uint64_t i = 0; i < kEach; ++i) {
                    uint8_t v = static_cast<uint8_t>(next + i);
                    CHECK(c.send(&v, 1, 20s) == next + i);
                }
            });
            sender.join();
            CHECK(each.wait_for(kEach));
            c.stop_response_thread();
            std::lock_guard<std::mutex> g(each.m);
            CHECK(each.heard.size() == kEach);
            for (uint64_t i = 0; i < kEach && i < each.heard.size(); ++i) {
                const Heard& h = each.heard[i];
                CHECK(h.id == next + i && h.status == NODEIPC_OK && h.answers.size() == kWorkers);
                for (uint32_t r = 0; r < kWorkers && r < h.answers.size(); ++r)
                    CHECK(h.answers[r] ==
                          (std::vector<uint8_t>{static_cast<uint8_t>(next + i), uint8_t(r)}));
            }
            next += kEach;
        }

        // log_and_continue: an exception is logged, the thread goes on.
        c.set_response_mode(nodeipc::Gather::all);
        std::atomic<int> calls{0};
        c.on_response(
            [&calls](const nodeipc::Reply& r) {
                calls++;
                if (r.id % 2 == 0) throw std::runtime_error("even request");
            },
            nodeipc::ThreadPolicy::log_and_continue);
        for (int i = 0; i < 4; ++i) c.send(&b, 1);
        for (int i = 0; i < 2000 && calls < 4; ++i) std::this_thread::sleep_for(1ms);
        CHECK(calls == 4);
        CHECK(c.response_thread_running());
        c.stop_response_thread();  // nothing to rethrow

        // stop_on_error: the first exception ends the thread, and stopping
        // it rethrows that exception.
        calls = 0;
        c.on_response([&calls](const nodeipc::Reply&) {
            calls++;
            throw std::runtime_error("the response function failed");
        });
        c.send(&b, 1);
        c.send(&b, 1);
        for (int i = 0; i < 2000 && c.response_thread_running(); ++i)
            std::this_thread::sleep_for(1ms);
        CHECK(!c.response_thread_running());
        CHECK(calls == 1);
        std::string rethrown;
        try {
            c.stop_response_thread();
        } catch (const std::runtime_error& e) {
            rethrown = e.what();
        }
        CHECK(rethrown == "the response function failed");

        // A new function takes the request the ended thread left, and the
        // coordinator is destroyed with its thread running.
        Log again;
        c.on_response([&again](const nodeipc::Reply& r) { again.add(r); });
        CHECK(again.wait_for(1));
        {
            std::lock_guard<std::mutex> g(again.m);
            CHECK(again.heard[0].status == NODEIPC_OK && again.heard[0].answers.size() == kWorkers);
        }
        nodeipc::Coordinator moved = std::move(c);
        CHECK(moved.response_thread_running());
    }
    for (auto& t : workers) t.join();
    std::printf("%d of %d checks failed\n", failed.load(), checks.load());
    return failed ? 1 : 0;
}
