// An execute worker as an inference server's executor would be written in
// C++: it logs on through nodeipc.hpp, takes raw request bytes, decodes them
// with the C++ protobuf runtime from nodeipc's execute.proto, and answers an
// ExecuteResponse (sequence echoed, the forward input's length and its first
// byte in the output). Usage: execute_worker SOCKET RANK COUNT
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "execute.pb.h"
#include "nodeipc.hpp"

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: execute_worker SOCKET RANK COUNT\n");
        return 2;
    }
    const uint32_t rank = static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 10));
    const long count = std::strtol(argv[3], nullptr, 10);
    try {
        auto worker = nodeipc::Worker::connect(argv[1], rank, std::chrono::seconds(20));
        std::vector<uint8_t> request_bytes;
        nodeipc::execute::v1::ExecuteRequest request;
        nodeipc::execute::v1::ExecuteResponse response;
        std::string out;
        for (long i = 0; i < count; ++i) {
            worker.recv(request_bytes, std::chrono::seconds(20));
            if (!request.ParseFromArray(request_bytes.data(), static_cast<int>(request_bytes.size()))) {
                std::fprintf(stderr, "worker %u: request %ld is not an ExecuteRequest\n", rank, i);
                return 1;
            }
            response.Clear();
            response.set_msg_type(request.execute_type());
            response.set_sequence(request.sequence());
            const std::string& input = request.forward().input();
            std::string output = std::to_string(input.size()) + ":" +
                                 (input.empty() ? std::string("-") : input.substr(0, 1)) + ":" +
                                 std::to_string(rank);
            response.mutable_forward()->set_output(output);
            response.SerializeToString(&out);
            worker.respond(out);
        }
    } catch (const nodeipc::Error& e) {
        std::fprintf(stderr, "worker %u: %s\n", rank, e.what());
        return 1;
    }
    std::printf("c++ execute worker %u answered %ld requests\n", rank, count);
    return 0;
}
