// nodeipc::MonitorClient (nodeipc.hpp): the same rank as monitor_client.c,
// in C++. Run by tests/monitor_client.rs as `monitor_client_cpp SOCKET`.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "nodeipc.hpp"

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    try {
        auto monitor = nodeipc::MonitorClient::connect(argv[1], std::chrono::seconds(5));
        if (!monitor.init(7, 0)) {
            std::printf("FAIL no heartbeat region\n");
            return 1;
        }
        monitor.heartbeat("step 1", 6);
        for (int i = 0; i < 3; i++) monitor.heartbeat_fast();
        monitor.start_section("step");
        bool refused = false;
        try {
            monitor.start_section("step");
        } catch (const nodeipc::Error& e) {
            refused = e.code() == NODEIPC_ERR_REFUSED;
        }
        monitor.end_section("step");
        nodeipc_monitor_status status = monitor.status();
        std::string json = monitor.status_json();
        std::printf("state %d heartbeats %llu open %u refused %d running %d\n",
                    static_cast<int>(status.state),
                    static_cast<unsigned long long>(status.heartbeats), status.open_sections,
                    refused, json.find("\"running\"") != std::string::npos);
        std::printf("silent\n");
        std::fflush(stdout);
        sleep(30);  // the monitor's heartbeat timeout ends this
        std::printf("still alive\n");
        return 0;
    } catch (const nodeipc::Error& e) {
        std::printf("FAIL %s\n", e.what());
        return 1;
    }
}
