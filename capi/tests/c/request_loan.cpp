// nodeipc::RequestLoan, RAII over nodeipc_coordinator_loan: built in the
// frame and committed (std::move(loan).commit()), destroyed uncommitted
// (nothing sent), moved, committed twice (refused), and send_with, whose
// fill may throw (nothing sent). A worker of this process answers over the
// C API. Run by tests/channel.rs as `request_loan NAME`; prints one line
// per failed check and a summary, exits 1 if any failed.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "nodeipc.hpp"

using namespace std::chrono_literals;

static int failed = 0, checks = 0;

#define CHECK(cond)                                                      \
    do {                                                                 \
        checks++;                                                        \
        if (!(cond)) {                                                   \
            failed++;                                                    \
            std::printf("FAIL line %d: %s\n", __LINE__, #cond);          \
        }                                                                \
    } while (0)

template <class F>
static nodeipc_status code_of(F f) {
    try {
        f();
    } catch (const nodeipc::Error& e) {
        return e.code();
    }
    return NODEIPC_OK;
}

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    auto c = nodeipc::Coordinator::create(argv[1], 1, 64 << 10, 16);
    nodeipc_worker* worker = nullptr;
    int32_t request = -1, response = -1;
    nodeipc::check(nodeipc_coordinator_fds(c.handle(), &request, &response));
    nodeipc::check(nodeipc_worker_from_fds(argv[1], 0, request, response, 10000, &worker));
    c.wait_for_workers(10s);

    // The next request the worker sees (empty when none comes in `ms`),
    // answered "ok" and gathered.
    auto next = [&](int64_t ms) {
        const uint8_t* data = nullptr;
        size_t len = 0;
        if (nodeipc_worker_recv_in_place(worker, ms, &data, &len) != NODEIPC_OK) {
            return std::string("<none>");
        }
        std::string got(reinterpret_cast<const char*>(data), len);
        nodeipc::check(nodeipc_worker_respond(worker, reinterpret_cast<const uint8_t*>("ok"), 2));
        auto all = c.recv_all(10s);
        CHECK(all.size() == 1 && all[0].size() == 2);
        return got;
    };

    // Built in the frame, committed: consumed (data() null after).
    {
        auto loan = c.loan(5, 10s);
        CHECK(loan.size() == 5 && loan.data() != nullptr);
        std::memcpy(loan.data(), "hello", 5);
        CHECK(std::move(loan).commit() == 0);
        CHECK(loan.data() == nullptr);
        CHECK(code_of([&] { std::move(loan).commit(); }) == NODEIPC_ERR_INVALID_ARGUMENT);
    }
    CHECK(next(10000) == "hello");

    // Destroyed uncommitted: nothing sent, the frame back (the next loan,
    // not waiting, gets it), the index unused.
    {
        auto loan = c.loan(3, 0ms);
        std::memcpy(loan.data(), "bad", 3);
        // While it lives, it is the sender: a send is refused.
        CHECK(code_of([&] { c.send("x", 1, 0ms); }) == NODEIPC_ERR_INVALID_ARGUMENT);
    }
    CHECK(next(0) == "<none>");

    // Moved: the new owner commits, the old one holds nothing.
    {
        auto first = c.loan(4, 0ms);
        std::memcpy(first.data(), "move", 4);
        nodeipc::RequestLoan second = std::move(first);
        CHECK(first.data() == nullptr);
        CHECK(std::move(second).commit() == 1);
    }
    CHECK(next(10000) == "move");

    // send_with: built by a callable; one that throws sends nothing.
    CHECK(c.send_with(4, [](uint8_t* d, size_t n) { std::memcpy(d, "with", n); }, 10s) == 2);
    CHECK(next(10000) == "with");
    bool thrown = false;
    try {
        c.send_with(4, [](uint8_t*, size_t) { throw std::runtime_error("no payload"); }, 10s);
    } catch (const std::runtime_error&) {
        thrown = true;
    }
    CHECK(thrown);
    CHECK(next(0) == "<none>");
    CHECK(code_of([&] { c.loan((64 << 10) + 1, 0ms); }) == NODEIPC_ERR_TOO_LARGE);
    CHECK(c.send_with(2, [](uint8_t* d, size_t) { std::memcpy(d, "ok", 2); }) == 3);
    CHECK(next(10000) == "ok");

    nodeipc::check(nodeipc_worker_free(worker));
    std::printf("%d of %d checks failed\n", failed, checks);
    return failed ? 1 : 0;
}
