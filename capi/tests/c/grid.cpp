// The channel's grid from C++ on messages of the user's own schema
// (examples/model.proto, the C++ protobuf runtime): every gather mode with
// recv, try_recv and a per-call timeout, drain and try_drain, the
// channel's rule, raw bytes and answers seen in place, requests decoded in
// place by the workers, init answers; errors as nodeipc::Error with the C
// error's code, rank and message. Run by tests/channel.rs as `grid SOCKET`.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "model.pb.h"
#include "nodeipc.hpp"

using namespace std::chrono_literals;
using Coordinator = nodeipc::TypedCoordinator<example::Request, example::Response>;
using Worker = nodeipc::TypedWorker<example::Request, example::Response>;

static std::atomic<int> failed{0}, checks{0};

#define CHECK(cond)                                                      \
    do {                                                                 \
        checks++;                                                        \
        if (!(cond)) {                                                   \
            failed++;                                                    \
            std::printf("FAIL line %d: %s\n", __LINE__, #cond);          \
        }                                                                \
    } while (0)

constexpr uint32_t kWorkers = 3;
static std::atomic<bool> hold[kWorkers];

// The nodeipc::Error a call throws (code NODEIPC_OK: none).
template <class F>
static nodeipc::Error error_of(F f) {
    try {
        f();
    } catch (const nodeipc::Error& e) {
        return e;
    }
    return nodeipc::Error(NODEIPC_OK, "");
}

static example::Request forward(std::vector<float> inputs) {
    example::Request r;
    for (float x : inputs) r.mutable_forward()->add_inputs(x);
    return r;
}

// Worker `rank`: init answers into the init slot; a forward is answered
// with its inputs times rank + 1 once `hold[rank]` is off; a forward of
// {-1} makes worker 1 answer bytes that do not decode.
static void serve(const std::string& socket, uint32_t rank) {
    Worker w(nodeipc::Worker::connect(socket, rank, 20s));
    for (;;) {
        example::Request request;
        try {
            request = w.recv(20s);
        } catch (const nodeipc::Error& e) {
            if (e.code() != NODEIPC_ERR_PEER_LEFT) {
                std::printf("FAIL worker %u: %s\n", rank, e.what());
                failed++;
            }
            return;
        }
        example::Response response;
        response.set_rank(rank);
        if (request.has_init()) {
            response.set_error(request.init().model());
            w.respond_init(response);
            continue;
        }
        while (hold[rank]) std::this_thread::sleep_for(1ms);
        const auto& in = request.forward().inputs();
        if (in.size() == 1 && in[0] == -1.0f && rank == 1) {
            const uint8_t junk[3] = {0xff, 0xff, 0xff};
            w.raw().respond(junk, sizeof junk);
            continue;
        }
        for (float x : in) response.add_outputs(x * static_cast<float>(rank + 1));
        w.respond(response);
    }
}

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    const std::string socket = argv[1];
    std::vector<std::thread> workers;
    {
        Coordinator c(nodeipc::Coordinator::create(socket + "-grid", kWorkers, 4096, 4096, 4, 20s));
        auto server = c.raw().serve(socket);
        for (uint32_t r = 0; r < kWorkers; ++r) workers.emplace_back(serve, socket, r);
        c.raw().wait_for_workers(20s);

        // init: every worker's init answer, rank order.
        example::Request init;
        init.mutable_init()->set_model("m");
        c.send(init);
        auto inits = c.recv(nodeipc::Gather::init);
        CHECK(inits.size() == kWorkers);
        for (uint32_t r = 0; r < inits.size(); ++r)
            CHECK(inits[r].first == r && inits[r].second.rank() == r &&
                  inits[r].second.error() == "m");

        // all, first (then drain), rank0_after_all.
        c.send(forward({1, 2}));
        auto all = c.recv(nodeipc::Gather::all);
        CHECK(all.size() == kWorkers);
        for (uint32_t r = 0; r < all.size(); ++r)
            CHECK(all[r].first == r && all[r].second.outputs_size() == 2 &&
                  all[r].second.outputs(1) == 2.0f * static_cast<float>(r + 1));
        c.send(forward({3}));
        auto first = c.recv(nodeipc::Gather::first);
        CHECK(first.size() == 1 && first[0].second.rank() == first[0].first &&
              first[0].second.outputs(0) == 3.0f * static_cast<float>(first[0].first + 1));
        CHECK(c.drain(20s) == kWorkers - 1);
        CHECK(c.try_drain() == std::optional<uint64_t>(0));
        c.send(forward({4}));
        auto rank0 = c.recv(nodeipc::Gather::rank0_after_all);
        CHECK(rank0.size() == 1 && rank0[0].first == 0 && rank0[0].second.outputs(0) == 4.0f);

        // aggregated: refused without a rule before anything is taken, then
        // the rule's pick; a rule's exception rethrown.
        c.send(forward({5}));
        auto no_rule = error_of([&] { c.recv(nodeipc::Gather::aggregated); });
        CHECK(no_rule.code() == NODEIPC_ERR_INVALID_ARGUMENT &&
              std::strstr(no_rule.what(), "no aggregation rule") != nullptr);
        c.raw().set_aggregate([](const std::vector<nodeipc::Coordinator::Response>& all) {
            return all.size() - 1;
        });
        auto picked = c.recv(nodeipc::Gather::aggregated);
        CHECK(picked.size() == 1 && picked[0].first == kWorkers - 1 &&
              picked[0].second.outputs(0) == 5.0f * kWorkers);
        c.raw().set_aggregate([](const std::vector<nodeipc::Coordinator::Response>&) -> size_t {
            throw std::runtime_error("no answer fits");
        });
        c.send(forward({6}));
        std::string rethrown;
        try {
            c.recv(nodeipc::Gather::aggregated);
        } catch (const std::runtime_error& e) {
            rethrown = e.what();
        }
        CHECK(rethrown == "no answer fits");

        // Per-call timeouts and try_recv while worker 2 holds its answer;
        // the next gather resumes where the one that timed out stopped.
        hold[2] = true;
        c.send(forward({7}));
        auto late = error_of([&] { c.recv(nodeipc::Gather::all, 100ms); });
        CHECK(late.code() == NODEIPC_ERR_TIMEOUT);
        CHECK(!c.try_recv(nodeipc::Gather::all).has_value());
        CHECK(!c.try_recv(nodeipc::Gather::rank0_after_all).has_value());
        hold[2] = false;
        auto resumed = c.recv(nodeipc::Gather::all, 20s);
        CHECK(resumed.size() == kWorkers && resumed[2].second.outputs(0) == 21.0f);
        std::optional<Coordinator::Decoded> tried;
        c.send(forward({8}));
        for (int i = 0; i < 20000 && !tried; ++i) {
            tried = c.try_recv(nodeipc::Gather::all);
            if (!tried) std::this_thread::sleep_for(1ms);
        }
        CHECK(tried && tried->size() == kWorkers && (*tried)[1].second.outputs(0) == 16.0f);

        // Raw bytes, and the answers seen where they lie (no copy).
        c.send(forward({9}));
        uint32_t seen = 0;
        c.raw().recv_in_place(nodeipc::Gather::all, [&seen](const nodeipc::View& v) {
            seen = v.count;
            for (uint32_t r = 0; r < v.count; ++r) {
                example::Response resp;
                auto a = v.answer(r);
                CHECK(resp.ParseFromArray(a.data, static_cast<int>(a.size)) && resp.rank() == r);
            }
        });
        CHECK(seen == kWorkers);
        const std::string bytes = forward({10}).SerializeAsString();
        c.raw().send(bytes.data(), bytes.size());
        auto copied = c.raw().recv(nodeipc::Gather::rank0_after_all, 20s);
        example::Response r0;
        CHECK(copied.rank == 0 && copied.bytes.size() == 1 &&
              r0.ParseFromArray(copied.bytes[0].data(), static_cast<int>(copied.bytes[0].size())) &&
              r0.outputs(0) == 10.0f);

        // An answer that does not decode: NODEIPC_ERR_CORRUPT naming rank 1.
        c.send(forward({-1}));
        auto corrupt = error_of([&] { c.recv(nodeipc::Gather::all); });
        CHECK(corrupt.code() == NODEIPC_ERR_CORRUPT && corrupt.rank() == 1);
        // Nothing outstanding: refused by name, with no rank.
        auto nothing = error_of([&] { c.recv(nodeipc::Gather::all, 0ms); });
        CHECK(nothing.code() == NODEIPC_ERR_INVALID_ARGUMENT && nothing.rank() == NODEIPC_NO_RANK);
    }
    for (auto& t : workers) t.join();
    std::printf("%d of %d checks failed\n", failed.load(), checks.load());
    return failed ? 1 : 0;
}
