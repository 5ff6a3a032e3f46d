// nodeipc.hpp's RAII classes: Region, Semaphore and Error, their moves and
// their exceptions; Coordinator::recv_aggregated's choice, and an exception
// from its callable rethrown; KittensBroker refusing a group name without
// its '/'. Run by tests/cpp_classes.rs as `hpp_classes PREFIX`;
// MonitorClient is driven by monitor_client.cpp.
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "nodeipc.hpp"
#include "nodeipc/kittens_broker.hpp"

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

// The code the call throws, or NODEIPC_OK when it does not throw.
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
    const std::string prefix = argv[1];

    // Region: create, open, read and write, move, unlink.
    auto owner = nodeipc::Region::create(prefix + "-region", 4096);
    CHECK(owner.size() == 4096);
    owner.write(10, "cpp", 3);
    auto peer = nodeipc::Region::open(prefix + "-region", 4096, 500ms);
    char buf[4] = {0};
    peer.read(10, buf, 3);
    CHECK(std::strcmp(buf, "cpp") == 0);
    CHECK(std::memcmp(static_cast<char*>(peer.data()) + 10, "cpp", 3) == 0);
    nodeipc::Region moved = std::move(peer);
    CHECK(moved.handle() != nullptr && peer.handle() == nullptr);
    owner.unlink();
    CHECK(code_of([&] { nodeipc::Region::open(prefix + "-region", 0); }) == NODEIPC_ERR_NOT_FOUND);
    CHECK(code_of([&] { nodeipc::Region::create(prefix + "-region", 0); }) ==
          NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(code_of([&] { owner.write(4095, "ab", 2); }) == NODEIPC_ERR_INVALID_ARGUMENT);

    // The message names the call and says what was wrong.
    try {
        nodeipc::Region::create("no-slash", 64);
        CHECK(false);
    } catch (const std::runtime_error& e) {
        std::string what = e.what();
        CHECK(what.find("NODEIPC_ERR_INVALID_ARGUMENT: nodeipc_region_create") == 0);
    }

    // Anonymous regions by descriptor, sealed.
    auto anon = nodeipc::Region::anonymous(8192);
    auto mapped = nodeipc::Region::from_fd(anon.fd());
    mapped.write(0, "x", 1);
    anon.read(0, buf, 1);
    CHECK(buf[0] == 'x');
    anon.seal();
    CHECK(ftruncate(anon.fd(), 0) == -1);

    // Semaphores: in a region (shared by two threads), named, timeouts.
    auto sem = nodeipc::Semaphore::in_region(anon, 64, true, 0);
    auto same = nodeipc::Semaphore::in_region(mapped, 64, false);
    std::thread poster([&] {
        std::this_thread::sleep_for(20ms);
        same.post();
    });
    sem.wait(2s);
    poster.join();
    CHECK(!sem.try_wait());
    CHECK(code_of([&] { sem.wait(10ms); }) == NODEIPC_ERR_TIMEOUT);
    auto named = nodeipc::Semaphore::create(prefix + "-sem", 2);
    auto opened = nodeipc::Semaphore::open(prefix + "-sem", 100ms);
    CHECK(opened.value() == 2);
    opened.wait();
    named.wait(0ms);
    CHECK(code_of([&] { named.wait(5ms); }) == NODEIPC_ERR_TIMEOUT);
    CHECK(code_of([&] { nodeipc::Semaphore::create(prefix + "-sem", 0); }) ==
          NODEIPC_ERR_ALREADY_EXISTS);

    // A moved-from object's calls fail with a code, never a crash.
    nodeipc::Semaphore taken = std::move(named);
    CHECK(code_of([&] { named.post(); }) == NODEIPC_ERR_INVALID_ARGUMENT);
    taken.post();
    CHECK(taken.value() == 1);

    // Names with a NUL byte are refused, never cut short at it.
    const std::string cut = prefix + "-nul";
    const std::string with_nul = cut + std::string("\0-rest", 6);
    CHECK(with_nul.size() == cut.size() + 6);
    CHECK(code_of([&] { nodeipc::Region::create(with_nul, 64); }) == NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(code_of([&] { nodeipc::Region::open(with_nul, 0); }) == NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(code_of([&] { nodeipc::Semaphore::create(with_nul, 0); }) ==
          NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(code_of([&] { nodeipc::Semaphore::open(with_nul); }) == NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(code_of([&] { nodeipc::Group::join(with_nul, 0, 1, 100ms); }) ==
          NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(code_of([&] { nodeipc::MonitorClient::connect(with_nul, 100ms); }) ==
          NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(code_of([&] { nodeipc::Coordinator::create(with_nul, 1, 64, 64); }) ==
          NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(code_of([&] { nodeipc::Worker::connect(with_nul, 0, 100ms); }) ==
          NODEIPC_ERR_INVALID_ARGUMENT);
    try {
        nodeipc::Region::create(with_nul, 64);
    } catch (const nodeipc::Error& e) {
        std::string what = e.what();
        CHECK(what.find("NODEIPC_ERR_INVALID_ARGUMENT: nodeipc::Region::create: name holds a NUL") == 0);
    }
    // Nothing was made under the name the NUL would have cut it to.
    CHECK(code_of([&] { nodeipc::Region::open(cut, 0); }) == NODEIPC_ERR_NOT_FOUND);
    CHECK(code_of([&] { nodeipc::Semaphore::open(cut); }) == NODEIPC_ERR_NOT_FOUND);

    // Every duration converts without overflow: saturating, rounding a part
    // of a millisecond up, negative meaning forever, NaN refused.
    constexpr int64_t most = INT64_MAX;
    CHECK(nodeipc::to_ms(std::chrono::seconds(18446744073709552LL)) == most);
    CHECK(nodeipc::to_ms(std::chrono::hours::max()) == most);
    CHECK(nodeipc::to_ms(std::chrono::milliseconds::max()) == most);
    CHECK(nodeipc::to_ms(std::chrono::nanoseconds::max()) == 9223372036855LL);
    CHECK(nodeipc::to_ms(std::chrono::duration<uint64_t>(UINT64_MAX)) == most);
    CHECK(nodeipc::to_ms(std::chrono::duration<unsigned, std::milli>(7)) == 7);
    CHECK(nodeipc::to_ms(std::chrono::minutes(2)) == 120000);
    CHECK(nodeipc::to_ms(std::chrono::microseconds(1)) == 1);
    CHECK(nodeipc::to_ms(std::chrono::microseconds(1000)) == 1);
    CHECK(nodeipc::to_ms(std::chrono::microseconds(1001)) == 2);
    CHECK(nodeipc::to_ms(std::chrono::milliseconds(0)) == 0);
    CHECK(nodeipc::to_ms(std::chrono::milliseconds(-5)) == -1);
    CHECK(nodeipc::to_ms(std::chrono::hours::min()) == -1);
    CHECK(nodeipc::to_ms(std::chrono::duration<double, std::milli>(0.5)) == 1);
    CHECK(nodeipc::to_ms(std::chrono::duration<double>(2.5)) == 2500);
    CHECK(nodeipc::to_ms(std::chrono::duration<double>(1e300)) == most);
    CHECK(nodeipc::to_ms(std::chrono::duration<double>(INFINITY)) == most);
    CHECK(nodeipc::to_ms(std::chrono::duration<double>(-INFINITY)) == -1);
    CHECK(nodeipc::to_ms(std::chrono::duration<float>(-0.25f)) == -1);
    CHECK(code_of([&] { nodeipc::to_ms(std::chrono::duration<double>(NAN)); }) ==
          NODEIPC_ERR_INVALID_ARGUMENT);
    // A NaN wait is refused, not a wait without limit.
    CHECK(code_of([&] { taken.wait(std::chrono::duration<double>(NAN)); }) ==
          NODEIPC_ERR_INVALID_ARGUMENT);
    CHECK(taken.value() == 1);
    // The example: this waited 384 ms (the product wrapped); it is
    // a wait without limit, so a post 600 ms later ends it.
    taken.wait(0ms);
    std::thread late([&] {
        std::this_thread::sleep_for(600ms);
        taken.post();
    });
    CHECK(code_of([&] { taken.wait(std::chrono::seconds(18446744073709552LL)); }) == NODEIPC_OK);
    late.join();
    // Saturated waits reach the C API and work there too.
    taken.post();
    taken.wait(std::chrono::hours::max());
    taken.post();
    taken.wait(std::chrono::duration<double>(INFINITY));

    // Coordinator::recv_aggregated, with two workers of this process (on
    // the channel's descriptors): the response the callable picks, with its
    // rank; an exception it throws rethrown as it was (the gather taken); an
    // index past the responses refused; the channel fine afterwards.
    {
        using Responses = std::vector<nodeipc::Coordinator::Response>;
        auto c = nodeipc::Coordinator::create(prefix + "-channel", 2, 64, 64);
        nodeipc_worker* workers[2] = {nullptr, nullptr};
        for (uint32_t r = 0; r < 2; r++) {
            int32_t request = -1, response = -1;
            nodeipc::check(nodeipc_coordinator_fds(c.handle(), &request, &response));
            nodeipc::check(
                nodeipc_worker_from_fds("hpp-worker", r, request, response, 10000, &workers[r]));
        }
        c.wait_for_workers(10s);
        auto round = [&] {
            c.send("?", 1, 10s);
            for (uint32_t r = 0; r < 2; r++) {
                uint8_t request[8];
                size_t len = 0;
                nodeipc::check(nodeipc_worker_recv(workers[r], 10000, request, sizeof request, &len));
                const char* answer = r == 0 ? "zero" : "one";
                nodeipc::check(nodeipc_worker_respond(
                    workers[r], reinterpret_cast<const uint8_t*>(answer), std::strlen(answer)));
            }
        };
        round();
        size_t seen = 0;
        auto kept = c.recv_aggregated(
            [&](const Responses& all) {
                seen = all.size();
                return all.size() - 1;
            },
            10s);
        CHECK(seen == 2 && kept.rank == 1);
        CHECK(std::string(kept.bytes.begin(), kept.bytes.end()) == "one");
        round();
        std::string rethrown;
        try {
            c.recv_aggregated([](const Responses&) -> size_t { throw std::logic_error("mine"); },
                              10s);
        } catch (const std::logic_error& e) {
            rethrown = e.what();
        }
        CHECK(rethrown == "mine");
        round();
        CHECK(code_of([&] { c.recv_aggregated([](const Responses& all) { return all.size(); }); }) ==
              NODEIPC_ERR_INVALID_ARGUMENT);
        round();
        kept = c.recv_aggregated([](const Responses&) { return size_t{0}; }, 10s);
        CHECK(kept.rank == 0 && std::string(kept.bytes.begin(), kept.bytes.end()) == "zero");
        for (nodeipc_worker* w : workers) nodeipc_worker_free(w);
    }

    // KittensBroker takes NODEIPC_GROUP (or its own group argument) as it
    // is, so a name without the leading '/' is refused, never mended.
    {
        const std::string no_slash = prefix.substr(1) + "-kittens";
        auto refused = [&](auto make) {
            try {
                make();
            } catch (const nodeipc::Error& e) {
                return e.code() == NODEIPC_ERR_INVALID_ARGUMENT &&
                       std::string(e.what()).find("must start with '/'") != std::string::npos;
            }
            return false;
        };
        CHECK(refused([&] { kittens::KittensBroker(0, 1, no_slash); }));
        setenv("NODEIPC_GROUP", no_slash.c_str(), 1);
        CHECK(refused([&] { kittens::KittensBroker(0, 1); }));
        unsetenv("NODEIPC_GROUP");
    }

    std::printf("%d of %d checks failed\n", failed, checks);
    return failed ? 1 : 0;
}
