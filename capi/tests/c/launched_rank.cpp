// A ThunderKittens-style rank for `nodeipc launch`: KittensBroker as such a
// program constructs it (local rank and world size from the launcher,
// torchrun's LOCAL_RANK and LOCAL_WORLD_SIZE; the group from NODEIPC_GROUP,
// taken verbatim), then exchange_data of "<tag> rank <r> pid <pid>" (32
// bytes, NUL-padded; the tag is argv[1], default "c++"). Prints "rank <r>
// pid <pid> in <group> gathered: <each rank's>|...". Run by
// tests/launched.rs, and by the Python tests beside ranks in other
// languages.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "nodeipc/kittens_broker.hpp"

static int env_number(const char* name) {
    const char* text = std::getenv(name);
    if (text == nullptr) {
        std::fprintf(stderr, "%s is not set: run me under nodeipc launch\n", name);
        std::exit(2);
    }
    return std::atoi(text);
}

int main(int argc, char** argv) {
    const std::string tag = argc > 1 ? argv[1] : "c++";
    const int rank = env_number("LOCAL_RANK"), world = env_number("LOCAL_WORLD_SIZE");
    const char* group = std::getenv("NODEIPC_GROUP");
    if (group == nullptr) return std::fprintf(stderr, "NODEIPC_GROUP is not set\n"), 2;
    try {
        kittens::KittensBroker broker(rank, world);
        constexpr size_t slot = 32;
        const std::string pid = std::to_string(getpid());
        char mine[slot] = {0};
        (tag + " rank " + std::to_string(rank) + " pid " + pid).copy(mine, slot - 1);
        std::vector<char> all(slot * static_cast<size_t>(world));
        broker.exchange_data(all.data(), mine, slot);
        std::string line =
            "rank " + std::to_string(rank) + " pid " + pid + " in " + group + " gathered: ";
        for (int r = 0; r < world; r++) {
            const char* theirs = all.data() + slot * static_cast<size_t>(r);
            line += (r ? "|" : "") + std::string(theirs, strnlen(theirs, slot));
        }
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        return 1;
    }
}
