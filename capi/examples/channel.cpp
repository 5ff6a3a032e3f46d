// A coordinator and three workers (forked children) on your own messages,
// model.proto: init, forward, a worker's failure aggregated into one
// response, then a worker killed and reported.
// Build: the CMakeLists.txt beside it, or with pkg-config:
//   protoc --cpp_out=. model.proto
//   g++ -std=c++17 channel.cpp model.pb.cc $(pkg-config --cflags --libs nodeipc protobuf)
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nodeipc.hpp>

#include "model.pb.h"

constexpr uint32_t kWorkers = 3;

// A worker answers every request until the coordinator closes the channel.
static int worker_main(const std::string& socket, uint32_t rank) try {
    auto worker = nodeipc::Worker::connect(socket, rank);
    std::vector<uint8_t> bytes;
    std::string model;
    for (;;) {
        try {
            worker.recv(bytes);
        } catch (const nodeipc::Error& e) {
            return e.code() == NODEIPC_ERR_PEER_LEFT ? 0 : 1;  // closed: done
        }
        example::Request request;
        example::Response response;
        response.set_rank(rank);
        if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
            response.set_error("an undecodable request");
        } else if (request.has_init()) {
            model = request.init().model();
        } else if (model.empty()) {
            response.set_error("forward before init");
        } else {
            for (float x : request.forward().inputs()) {
                if (x < 0 && rank == 1) {  // this worker cannot take negatives
                    char why[64];
                    std::snprintf(why, sizeof why, "worker 1 refuses input %g", x);
                    response.set_error(why);
                    break;
                }
                response.add_outputs(x * static_cast<float>(rank + 1));
            }
        }
        worker.respond(response.SerializeAsString());
    }
} catch (const std::exception& e) {
    std::fprintf(stderr, "worker %u: %s\n", rank, e.what());
    return 1;
}

static void send(nodeipc::Coordinator& c, const example::Request& request) {
    std::string bytes = request.SerializeAsString();
    c.send(bytes.data(), bytes.size(), std::chrono::seconds(30));
}

// Keeps the first failure, else worker 0's answer: one response per request.
static size_t first_failure(const std::vector<nodeipc::Coordinator::Response>& all) {
    for (size_t r = 0; r < all.size(); r++) {
        example::Response response;
        if (!response.ParseFromArray(all[r].data, static_cast<int>(all[r].size)) ||
            !response.error().empty())
            return r;
    }
    return 0;
}

static void forward(nodeipc::Coordinator& c, std::vector<float> inputs) {
    example::Request request;
    for (float x : inputs) request.mutable_forward()->add_inputs(x);
    send(c, request);
    auto kept = c.recv_aggregated(first_failure, std::chrono::seconds(30));
    example::Response response;
    response.ParseFromArray(kept.bytes.data(), static_cast<int>(kept.bytes.size()));
    std::printf("forward:");
    for (float x : inputs) std::printf(" %g", x);
    if (!response.error().empty()) {
        std::printf(" -> worker %u failed: %s\n", kept.rank, response.error().c_str());
        return;
    }
    std::printf(" -> worker %u:", kept.rank);
    for (float y : response.outputs()) std::printf(" %g", y);
    std::printf("\n");
}

static int coordinator_main(const std::string& socket, std::vector<pid_t>& workers) {
    std::string name = "/nodeipc-example-channel-" + std::to_string(getpid());
    auto c = nodeipc::Coordinator::create(name, kWorkers, 4096, 4096);
    auto server = c.serve(socket);
    for (uint32_t rank = 0; rank < kWorkers; rank++) {
        pid_t pid = fork();
        if (pid == 0) _exit(worker_main(socket, rank));
        workers.push_back(pid);
    }
    c.wait_for_workers(std::chrono::seconds(30));

    example::Request init;
    init.mutable_init()->set_model("tiny");
    send(c, init);
    auto answers = c.recv_all(std::chrono::seconds(30));
    std::printf("init: %zu workers loaded tiny\n", answers.size());

    forward(c, {1, 2, 3});
    forward(c, {1, -2});

    // A worker dies: the gather waiting for it says which one, at once.
    kill(workers[2], SIGKILL);
    try {
        forward(c, {4});
        return 1;
    } catch (const nodeipc::Error& e) {
        std::printf("worker 2 killed: %s\n", e.what());
        return e.code() == NODEIPC_ERR_PEER_DIED ? 0 : 1;
    }
}  // the channel closes: the workers left return

int main() {
    char dir[] = "/tmp/nodeipc-example-XXXXXX";  // private (0700), for the socket
    if (mkdtemp(dir) == nullptr) return std::perror("mkdtemp"), 1;
    std::string socket = std::string(dir) + "/channel.sock";
    std::vector<pid_t> workers;
    int failed = 1;
    try {
        failed = coordinator_main(socket, workers);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "coordinator: %s\n", e.what());
    }
    for (pid_t pid : workers) {
        int status = 0;
        waitpid(pid, &status, 0);
        if (pid != workers[2] && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) failed = 1;
    }
    unlink(socket.c_str());
    rmdir(dir);
    return failed;
}
