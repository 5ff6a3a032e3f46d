// An inference server laid out as MindIE's IPCCommunicator, on the
// installed headers and library: a coordinator whose send thread
// broadcasts execute requests while its response thread gathers each
// one's answers (rank 0's after all, or every worker's failures folded
// into one by the channel's rule), worker processes of their own, and a
// worker killed mid-run reported by rank. Built by tests/install.rs
// against an install; run as `mindie_server SOCKET` (it starts its
// workers as `mindie_server --worker SOCKET RANK`).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nodeipc.hpp>

using namespace std::chrono_literals;

constexpr uint32_t kWorkers = 3;
constexpr uint64_t kRequests = 200;
// A request's first byte: 'F' forward, 'X' a forward worker 2 fails.
// Every answer: status byte ('0' ok, 'E' failed), rank, the request's id.

static int worker_main(const std::string& socket, uint32_t rank) {
    try {
        auto w = nodeipc::Worker::connect(socket, rank, 20s);
        for (;;) {
            auto v = w.recv_in_place(20s);
            uint8_t answer[10] = {'0', static_cast<uint8_t>(rank)};
            if (v.size >= 9) std::memcpy(answer + 2, v.data + 1, 8);
            if (v.size >= 1 && v.data[0] == 'X' && rank == 2) answer[0] = 'E';
            w.respond(answer, sizeof answer);
        }
    } catch (const nodeipc::Error& e) {
        // The coordinator closed the channel: done.
        return e.code() == NODEIPC_ERR_PEER_LEFT ? 0 : (std::fprintf(stderr, "worker %u: %s\n", rank, e.what()), 1);
    }
}

int main(int argc, char** argv) {
    if (argc == 4 && std::string(argv[1]) == "--worker")
        return worker_main(argv[2], static_cast<uint32_t>(std::stoul(argv[3])));
    if (argc != 2) return 2;
    const std::string socket = argv[1];
    int failed = 0;
    auto fail = [&failed](const std::string& what) {
        failed++;
        std::printf("FAIL: %s\n", what.c_str());
    };

    auto c = nodeipc::Coordinator::create(socket + "-mindie", kWorkers, 64, 64, 4, 20s);
    auto server = c.serve(socket);
    std::vector<pid_t> workers;
    for (uint32_t rank = 0; rank < kWorkers; ++rank) {
        pid_t pid = fork();
        if (pid == 0) {
            std::string r = std::to_string(rank);
            execl("/proc/self/exe", "mindie_server", "--worker", socket.c_str(), r.c_str(),
                  static_cast<char*>(nullptr));
            _exit(127);
        }
        workers.push_back(pid);
    }
    c.wait_for_workers(20s);

    // A failure of any worker stands for the request (MindIE aggregates
    // failures into one response); otherwise rank 0's answer.
    c.set_aggregate([](const std::vector<nodeipc::Coordinator::Response>& all) {
        for (size_t r = 0; r < all.size(); ++r)
            if (all[r].size > 0 && all[r].data[0] == 'E') return r;
        return size_t{0};
    });

    std::mutex m;
    std::condition_variable cv;
    uint64_t heard = 0, failures = 0, in_order = 0;
    std::atomic<uint64_t> sent{0};
    uint64_t deepest = 0;
    nodeipc_status death = NODEIPC_OK;
    uint32_t death_rank = NODEIPC_NO_RANK;
    c.set_response_mode(nodeipc::Gather::aggregated);
    c.on_response([&](const nodeipc::Reply& r) {
        std::lock_guard<std::mutex> g(m);
        if (!r.ok()) {
            death = r.status;
            death_rank = r.rank;
        } else if (r.count == 1 && r.lengths[0] == 10) {
            uint64_t id = 0;
            std::memcpy(&id, r.data[0] + 2, 8);
            if (id == r.id) in_order++;
            if (r.data[0][0] == 'E' && r.rank == 2) failures++;
        }
        deepest = std::max(deepest, sent.load() - r.id);
        heard++;
        cv.notify_all();
    });

    // The send thread: requests as fast as the ring takes them.
    std::thread sender([&] {
        for (uint64_t id = 0; id < kRequests; ++id) {
            uint8_t request[9] = {static_cast<uint8_t>(id % 50 == 7 ? 'X' : 'F')};
            std::memcpy(request + 1, &id, 8);
            c.send(request, sizeof request, 20s);
            sent++;
        }
    });
    sender.join();
    {
        std::unique_lock<std::mutex> g(m);
        if (!cv.wait_for(g, 20s, [&] { return heard >= kRequests; }))
            fail("replies: " + std::to_string(heard) + " of " + std::to_string(kRequests));
    }
    if (in_order != kRequests) fail("in order: " + std::to_string(in_order));
    if (failures != kRequests / 50) fail("failures: " + std::to_string(failures));

    // A worker killed: the response thread reports it by rank.
    kill(workers[1], SIGKILL);
    waitpid(workers[1], nullptr, 0);
    uint8_t request[9] = {'F'};
    uint64_t id = kRequests;
    std::memcpy(request + 1, &id, 8);
    c.send(request, sizeof request, 20s);
    {
        std::unique_lock<std::mutex> g(m);
        if (!cv.wait_for(g, 20s, [&] { return heard > kRequests; })) fail("no word of the death");
    }
    if (death != NODEIPC_ERR_PEER_DIED || death_rank != 1)
        fail(std::string("death reported as ") + nodeipc_status_name(death) + " rank " +
             std::to_string(death_rank));
    c = nodeipc::Coordinator();  // closes the channel: the others leave
    for (size_t r = 0; r < workers.size(); ++r) {
        if (r == 1) continue;
        int status = 0;
        waitpid(workers[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("worker " + std::to_string(r));
    }
    std::printf("mindie server: %llu requests in order, %llu failures folded, up to %llu in "
                "flight, worker %u died: %s\n",
                static_cast<unsigned long long>(in_order),
                static_cast<unsigned long long>(failures),
                static_cast<unsigned long long>(deepest), death_rank,
                failed ? "FAILED" : "ok");
    return failed ? 1 : 0;
}
