// Every C++ header of an installed nodeipc in one program: tests/install.rs
// builds it with pkg-config's flags and with CMake, statically and against
// the .so. Two processes (this one and a forked child) meet as
// KittensBroker ranks; then this one is a channel's coordinator, the child
// its one worker.
// Usage: installed GROUP CHANNEL SOCKET
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <nodeipc.hpp>
#include <nodeipc/kittens_broker.hpp>

static int coordinator(const char* group, const char* channel, const char* socket) {
    kittens::KittensBroker broker(0, 2, group);
    auto c = nodeipc::Coordinator::create(channel, 1, 256, 64);
    auto server = c.serve(socket);
    broker.sync();  // the socket is there: the child may log on
    int mine = 100, all[2] = {0, 0};
    broker.exchange_data(all, &mine, sizeof mine);
    c.wait_for_workers(std::chrono::seconds(30));
    c.send("ping", 4, std::chrono::seconds(30));
    auto answers = c.recv_all(std::chrono::seconds(30));
    std::string said(answers.at(0).begin(), answers.at(0).end());
    std::printf("installed: kittens %d %d, worker 0 says %s\n", all[0], all[1], said.c_str());
    return all[0] == 100 && all[1] == 101 && said == "pong to ping" ? 0 : 1;
}

static int worker(const char* group, const char* socket) {
    kittens::KittensBroker broker(1, 2, group);
    broker.sync();
    int mine = 101, all[2] = {0, 0};
    broker.exchange_data(all, &mine, sizeof mine);
    auto w = nodeipc::Worker::connect(socket, 0);
    std::vector<uint8_t> request;
    w.recv(request, std::chrono::seconds(30));
    w.respond("pong to " + std::string(request.begin(), request.end()));
    return 0;
}

int main(int argc, char** argv) {
    if (argc != 4) return std::fprintf(stderr, "usage: installed GROUP CHANNEL SOCKET\n"), 2;
    pid_t child = fork();
    if (child < 0) return std::perror("fork"), 1;
    if (child == 0) {
        int rc = 1;
        try {
            rc = worker(argv[1], argv[3]);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "worker: %s\n", e.what());
        }
        std::fflush(stdout);
        _exit(rc);
    }
    int failed = 1;
    try {
        failed = coordinator(argv[1], argv[2], argv[3]);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "coordinator: %s\n", e.what());
    }
    int status = 0;
    waitpid(child, &status, 0);
    return failed || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}
