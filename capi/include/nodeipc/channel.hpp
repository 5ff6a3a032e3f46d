// nodeipc's execute channel for C++17: Coordinator and Worker over the raw
// bytes of nodeipc.h (requests and responses of any encoding: decode them
// with your protobuf runtime). Included by nodeipc.hpp. A Coordinator takes
// one sending thread and one gathering thread at once (a second of either
// throws NODEIPC_ERR_INVALID_ARGUMENT naming the rule); a Worker one thread.
#ifndef NODEIPC_CHANNEL_HPP
#define NODEIPC_CHANNEL_HPP

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

// What this file uses (check, to_ms, detail::Owned): included alone, this
// brings nodeipc.hpp in first; from nodeipc.hpp (which includes this file at
// its end) the guard makes it a no-op.
#include "../nodeipc.hpp"

namespace nodeipc {

class HandshakeServer {
  public:
    HandshakeServer() noexcept = default;
    explicit HandshakeServer(nodeipc_handshake_server* s) noexcept : h_(s) {}

  private:
    detail::Owned<nodeipc_handshake_server, nodeipc_handshake_server_free> h_;
};

class Coordinator {
  public:
    Coordinator() noexcept = default;
    // A channel over anonymous regions; largest request and response in bytes.
    template <class D = std::chrono::seconds>
    static Coordinator create(const std::string& name, uint32_t workers, size_t request_capacity,
                              size_t response_size, uint32_t depth = 1,
                              D timeout = std::chrono::seconds(30)) {
        nodeipc_coordinator* c = nullptr;
        check(nodeipc_coordinator_create(detail::c_str(name, "nodeipc::Coordinator::create: name"),
                                         workers, request_capacity, response_size, depth,
                                         to_ms(timeout), &c));
        return Coordinator(c, workers, response_size);
    }
    // Serves the logon handshake at `socket_path` (its directory ours, 0700).
    HandshakeServer serve(const std::string& socket_path) const {
        nodeipc_handshake_server* s = nullptr;
        check(nodeipc_coordinator_serve(
            h_.get(), detail::c_str(socket_path, "nodeipc::Coordinator::serve: socket_path"), &s));
        return HandshakeServer(s);
    }
    template <class D>
    void wait_for_workers(D timeout) const {
        check(nodeipc_coordinator_wait_for_workers(h_.get(), to_ms(timeout)));
    }
    template <class D = Millis>
    uint64_t send(const void* data, size_t len, D timeout = forever) {
        uint64_t index = 0;
        check(nodeipc_coordinator_send(h_.get(), static_cast<const uint8_t*>(data), len,
                                       to_ms(timeout), &index));
        return index;
    }
    // Every worker's response, in rank order.
    template <class D = Millis>
    std::vector<std::vector<uint8_t>> recv_all(D timeout = forever) {
        std::vector<uint8_t> buffer(detail::checked_mul(
            workers_, response_size_, "nodeipc::Coordinator::recv_all: workers × response size"));
        std::vector<size_t> lengths(workers_);
        check(nodeipc_coordinator_recv_all(h_.get(), to_ms(timeout), buffer.data(),
                                           response_size_, lengths.data()));
        std::vector<std::vector<uint8_t>> out;
        for (uint32_t r = 0; r < workers_; ++r) {
            const uint8_t* at = buffer.data() + static_cast<size_t>(r) * response_size_;
            out.emplace_back(at, at + lengths[r]);
        }
        return out;
    }
    // A worker's response where it lies, valid during the call to `choose`.
    struct Response {
        const uint8_t* data;
        size_t size;
    };
    // What recv_aggregated keeps: the chosen response and its worker's rank.
    struct Aggregated {
        uint32_t rank;
        std::vector<uint8_t> bytes;
    };
    // One response for the whole gather: `choose` is called with every
    // worker's (`const std::vector<Response>&`, in rank order) and returns
    // the index of the one to keep. An exception `choose` throws fails the
    // gather (its responses are taken) and is rethrown here; it never
    // crosses into the library.
    template <class F, class D = Millis>
    Aggregated recv_aggregated(F&& choose, D timeout = forever) {
        Call<F> call{choose, nullptr};
        std::vector<uint8_t> buffer(response_size_);
        size_t length = 0;
        uint32_t rank = 0;
        nodeipc_status s = nodeipc_coordinator_recv_aggregated(
            h_.get(), to_ms(timeout), &Coordinator::aggregate<F>, &call, buffer.data(),
            buffer.size(), &length, &rank);
        if (call.error) std::rethrow_exception(call.error);
        check(s);
        buffer.resize(length);
        return Aggregated{rank, std::move(buffer)};
    }
    nodeipc_coordinator* handle() const noexcept { return h_.get(); }

  private:
    template <class F>
    struct Call {
        F& choose;
        std::exception_ptr error;
    };
    // The C callback: no exception leaves it (the library is Rust).
    template <class F>
    static int32_t aggregate(void* user, uint32_t count, const uint8_t* const* responses,
                             const size_t* lengths) noexcept {
        auto* call = static_cast<Call<F>*>(user);
        try {
            std::vector<Response> all;
            all.reserve(count);
            for (uint32_t r = 0; r < count; ++r) all.push_back(Response{responses[r], lengths[r]});
            size_t index = call->choose(static_cast<const std::vector<Response>&>(all));
            if (index >= count)
                throw Error(NODEIPC_ERR_INVALID_ARGUMENT,
                            "nodeipc::Coordinator::recv_aggregated: choose returned index " +
                                std::to_string(index) + " of " + std::to_string(count) +
                                " responses");
            return static_cast<int32_t>(index);
        } catch (...) {
            call->error = std::current_exception();
            return NODEIPC_ERR_INVALID_ARGUMENT;
        }
    }
    Coordinator(nodeipc_coordinator* c, uint32_t workers, size_t response_size)
        : h_(c), workers_(workers), response_size_(response_size) {}
    detail::Owned<nodeipc_coordinator, nodeipc_coordinator_free> h_;
    uint32_t workers_ = 0;
    size_t response_size_ = 0;
};

class Worker {
  public:
    Worker() noexcept = default;
    // Logs on through the coordinator's handshake server as `rank`.
    template <class D = std::chrono::seconds>
    static Worker connect(const std::string& socket_path, uint32_t rank,
                          D timeout = std::chrono::seconds(30)) {
        nodeipc_worker* w = nullptr;
        check(nodeipc_worker_connect(
            detail::c_str(socket_path, "nodeipc::Worker::connect: socket_path"), rank,
            to_ms(timeout), &w));
        return Worker(w);
    }
    uint32_t rank() const {
        uint32_t r = 0;
        check(nodeipc_worker_rank(h_.get(), &r));
        return r;
    }
    // The next request, copied into `out` (grown as needed, its capacity reused).
    template <class D = Millis>
    void recv(std::vector<uint8_t>& out, D timeout = forever) {
        size_t len = 0;
        if (out.empty()) out.resize(out.capacity() > 0 ? out.capacity() : 4096);
        nodeipc_status s =
            nodeipc_worker_recv(h_.get(), to_ms(timeout), out.data(), out.size(), &len);
        if (s == NODEIPC_ERR_TOO_LARGE && len > out.size()) {
            // Still held: take it with a buffer of its size.
            out.resize(len);
            s = nodeipc_worker_recv(h_.get(), to_ms(timeout), out.data(), out.size(), &len);
        }
        check(s);
        out.resize(len);
    }
    // The next request where it lies, held until respond() or release().
    struct View {
        const uint8_t* data;
        size_t size;
    };
    template <class D = Millis>
    View recv_in_place(D timeout = forever) {
        View v{nullptr, 0};
        check(nodeipc_worker_recv_in_place(h_.get(), to_ms(timeout), &v.data, &v.size));
        return v;
    }
    void release() { check(nodeipc_worker_release(h_.get())); }
    void respond(const void* data, size_t len) {
        check(nodeipc_worker_respond(h_.get(), static_cast<const uint8_t*>(data), len));
    }
    void respond(const std::string& bytes) { respond(bytes.data(), bytes.size()); }
    nodeipc_worker* handle() const noexcept { return h_.get(); }

  private:
    explicit Worker(nodeipc_worker* w) : h_(w) {}
    detail::Owned<nodeipc_worker, nodeipc_worker_free> h_;
};

}  // namespace nodeipc

#endif  // NODEIPC_CHANNEL_HPP
