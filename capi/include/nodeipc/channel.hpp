// nodeipc's execute channel for C++17: Coordinator and Worker over the raw
// bytes of nodeipc.h (requests and responses of any encoding: decode them
// with your protobuf runtime). Included by nodeipc.hpp. A Coordinator takes
// one sending thread and one gathering thread at once (a second of either
// throws NODEIPC_ERR_INVALID_ARGUMENT naming the rule), or a sending thread
// beside its response thread (on_response); a Worker one thread.
#ifndef NODEIPC_CHANNEL_HPP
#define NODEIPC_CHANNEL_HPP

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
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

// A gather mode (nodeipc.h's NODEIPC_GATHER_*).
enum class Gather : nodeipc_gather_mode {
    all = NODEIPC_GATHER_ALL,
    first = NODEIPC_GATHER_FIRST,
    aggregated = NODEIPC_GATHER_AGGREGATED,
    rank0_after_all = NODEIPC_GATHER_RANK0_AFTER_ALL,
    init = NODEIPC_GATHER_INIT,
};

// When a send that finds no free request frame takes the answers that are
// there out for the response thread (see set_gather_ahead).
enum class GatherAhead : nodeipc_gather_ahead {
    when_crowded = NODEIPC_GATHER_AHEAD_WHEN_CROWDED,
    always = NODEIPC_GATHER_AHEAD_ALWAYS,
    never = NODEIPC_GATHER_AHEAD_NEVER,
};

// What a response thread does after an error that breaks a gather, and
// after an exception of its function: end, or go on (logged on stderr).
enum class ThreadPolicy : nodeipc_thread_policy {
    stop_on_error = NODEIPC_THREAD_STOP_ON_ERROR,
    log_and_continue = NODEIPC_THREAD_LOG_AND_CONTINUE,
};

// One gather's answers where they lie (valid during the call they are
// given to): every worker's in rank order (all, init; rank is then
// NODEIPC_NO_RANK) or one (its worker's rank).
struct View {
    struct Answer {
        const uint8_t* data;
        size_t size;
    };
    uint32_t rank;
    uint32_t count;
    const uint8_t* const* data;
    const size_t* lengths;
    Answer answer(uint32_t i) const noexcept { return Answer{data[i], lengths[i]}; }
};

// One gather's answers, copied: bytes[i] is worker i's (all, init) or the
// one answer's (rank).
struct Answers {
    uint32_t rank;
    std::vector<std::vector<uint8_t>> bytes;
};

// One request's answers, as the response thread hands them over: valid
// during the call only.
struct Reply {
    struct Answer {
        const uint8_t* data;
        size_t size;
    };
    uint64_t id;            // the request's index, as send returned it
    nodeipc_status status;  // NODEIPC_OK, or why the gather failed
    uint32_t rank;          // the one answer's worker, or the failing one; else NODEIPC_NO_RANK
    const char* message;    // "" when ok
    uint32_t count;         // answers: every worker's (all, init) or one
    const uint8_t* const* data;
    const size_t* lengths;

    bool ok() const noexcept { return status == NODEIPC_OK; }
    Answer answer(uint32_t i) const noexcept { return Answer{data[i], lengths[i]}; }
    // Throws the reply's error (code, rank and message), if any.
    void check() const {
        if (!ok())
            throw Error(status, std::string(nodeipc_status_name(status)) + ": " + message, 0,
                        rank);
    }
};

// A request frame lent by Coordinator::loan: write data()[0, size()),
// then std::move(loan).commit() broadcasts it (consuming the loan: data()
// is null after). Destroyed, or moved over, uncommitted: nothing is sent
// and the frame goes back. While it lives it is the coordinator's sending
// thread: another send throws NODEIPC_ERR_INVALID_ARGUMENT. It must not
// outlive its Coordinator.
class RequestLoan {
  public:
    RequestLoan(RequestLoan&& o) noexcept
        : c_(std::exchange(o.c_, nullptr)), data_(std::exchange(o.data_, nullptr)), size_(o.size_) {}
    RequestLoan& operator=(RequestLoan&& o) noexcept {
        if (this != &o) {
            abort();
            c_ = std::exchange(o.c_, nullptr);
            data_ = std::exchange(o.data_, nullptr);
            size_ = o.size_;
        }
        return *this;
    }
    RequestLoan(const RequestLoan&) = delete;
    RequestLoan& operator=(const RequestLoan&) = delete;
    ~RequestLoan() { abort(); }
    // The request's bytes in the frame (null once committed or aborted).
    uint8_t* data() noexcept { return data_; }
    size_t size() const noexcept { return size_; }
    // Broadcasts the request; its index. Called on an rvalue only:
    // std::move(loan).commit().
    uint64_t commit() && {
        if (c_ == nullptr) {
            throw Error(NODEIPC_ERR_INVALID_ARGUMENT,
                        "nodeipc::RequestLoan::commit: no loan (committed, aborted or moved from)");
        }
        data_ = nullptr;
        uint64_t index = 0;
        check(nodeipc_coordinator_commit(std::exchange(c_, nullptr), &index));
        return index;
    }
    // Gives the frame back unsent; a no-op once committed or aborted.
    void abort() noexcept {
        data_ = nullptr;
        if (c_ != nullptr) {
            nodeipc_coordinator_abort(std::exchange(c_, nullptr));
        }
    }

  private:
    friend class Coordinator;
    RequestLoan(nodeipc_coordinator* c, uint8_t* data, size_t size) noexcept
        : c_(c), data_(data), size_(size) {}
    nodeipc_coordinator* c_ = nullptr;
    uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

class Coordinator {
  public:
    Coordinator() noexcept = default;
    Coordinator(Coordinator&&) noexcept = default;
    // The response thread (which uses this coordinator's function) ends
    // before the function does.
    Coordinator& operator=(Coordinator&& o) noexcept {
        if (this != &o) {
            h_.reset();
            responses_ = std::move(o.responses_);
            rule_ = std::move(o.rule_);
            h_ = std::move(o.h_);
            workers_ = o.workers_;
            response_size_ = o.response_size_;
        }
        return *this;
    }
    ~Coordinator() { h_.reset(); }
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
    // Lends the next request frame's `len` bytes (every worker's frame
    // freed first, within `timeout`): build the request there, then
    // std::move(loan).commit(). No copy of the payload.
    template <class D = Millis>
    RequestLoan loan(size_t len, D timeout = forever) {
        uint8_t* data = nullptr;
        check(nodeipc_coordinator_loan(h_.get(), len, to_ms(timeout), &data));
        return RequestLoan(h_.get(), data, len);
    }
    // Broadcasts a request of `len` bytes that `fill(uint8_t*, size_t)`
    // writes in the frame; nothing is sent if `fill` throws.
    template <class F, class D = Millis>
    uint64_t send_with(size_t len, F&& fill, D timeout = forever) {
        RequestLoan lent = loan(len, timeout);
        std::forward<F>(fill)(lent.data(), lent.size());
        return std::move(lent).commit();
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
    // The grid: a gather in any mode, waiting up to `timeout` (forever by
    // default), its answers copied; try_recv never waits (nullopt while an
    // answer it needs is not there); recv_in_place hands `f` a View of the
    // answers where they lie (no copy). An exception `f` (or the rule of
    // set_aggregate) throws is rethrown here; the answers are taken anyway.
    template <class D = Millis>
    Answers recv(Gather mode, D timeout = forever) {
        Answers out{NODEIPC_NO_RANK, {}};
        recv_in_place(mode, [&out](const View& v) { out = copy(v); }, timeout);
        return out;
    }
    std::optional<Answers> try_recv(Gather mode) {
        std::optional<Answers> out;
        bool gathered = false;
        Visit<std::function<void(const View&)>> visit{[&out](const View& v) { out = copy(v); },
                                                       nullptr};
        finish(nodeipc_coordinator_try_recv(h_.get(), static_cast<nodeipc_gather_mode>(mode),
                                            &Coordinator::visit<decltype(visit.f)>, &visit,
                                            &gathered),
               visit.error);
        return out;
    }
    template <class F, class D = Millis>
    void recv_in_place(Gather mode, F&& f, D timeout = forever) {
        Visit<F> visit{f, nullptr};
        finish(nodeipc_coordinator_recv(h_.get(), static_cast<nodeipc_gather_mode>(mode),
                                        to_ms(timeout), &Coordinator::visit<F>, &visit),
               visit.error);
    }
    // Takes the answers a Gather::first gather left; how many.
    template <class D = Millis>
    uint64_t drain(D timeout = forever) {
        uint64_t n = 0;
        check(nodeipc_coordinator_drain_timeout(h_.get(), to_ms(timeout), &n));
        return n;
    }
    // drain() without waiting: nullopt while a leftover answer is not there.
    std::optional<uint64_t> try_drain() {
        bool done = false;
        uint64_t n = 0;
        check(nodeipc_coordinator_try_drain(h_.get(), &done, &n));
        return done ? std::optional<uint64_t>(n) : std::nullopt;
    }
    // The channel's rule for Gather::aggregated (the caller's gathers and
    // the response thread's): `choose` gets every worker's answer
    // (`const std::vector<Response>&`, rank order) and returns the index of
    // the one to keep; what it throws fails that gather (rethrown by recv,
    // a Reply's error on the response thread).
    void set_aggregate(std::function<size_t(const std::vector<Response>&)> choose) {
        auto rule = std::make_unique<Rule>(Rule{std::move(choose), nullptr});
        check(nodeipc_coordinator_set_aggregate(h_.get(), &Coordinator::pick, rule.get()));
        rule_ = std::move(rule);  // the old rule is replaced only now
    }

    // Starts the response thread: `f` is called with each request's Reply,
    // in send order, one call at a time, on a thread of the library's. The
    // mode of each is the one set (set_response_mode) when it was sent. In
    // `f` only try_send may be called on this coordinator. An exception
    // `f` throws is caught: under stop_on_error it ends the thread (and
    // stop_response_thread rethrows it), under log_and_continue it is
    // written to stderr and the thread goes on.
    void on_response(std::function<void(const Reply&)> f,
                     ThreadPolicy policy = ThreadPolicy::stop_on_error) {
        if (!f) detail::invalid("nodeipc::Coordinator::on_response: an empty function");
        bool running = false;
        check(nodeipc_coordinator_response_thread_running(h_.get(), &running));
        if (running)
            detail::invalid("nodeipc::Coordinator::on_response: the response thread is running");
        // An ended thread still holds the old function: joined first.
        if (responses_) (void)nodeipc_coordinator_stop_response_thread(h_.get());
        auto handler = std::make_unique<Responses>(Responses{std::move(f), policy, nullptr});
        check(nodeipc_coordinator_start_response_thread_with(
            h_.get(), &Coordinator::respond, handler.get(),
            static_cast<nodeipc_thread_policy>(policy)));
        responses_ = std::move(handler);
    }
    // Stops the response thread; rethrows the exception that ended it, if any.
    void stop_response_thread() {
        check(nodeipc_coordinator_stop_response_thread(h_.get()));
        if (responses_ && responses_->error)
            std::rethrow_exception(std::exchange(responses_->error, nullptr));
    }
    bool response_thread_running() const {
        bool running = false;
        check(nodeipc_coordinator_response_thread_running(h_.get(), &running));
        return running;
    }
    // The mode requests sent from now on are gathered in by the thread.
    void set_response_mode(Gather mode) {
        check(nodeipc_coordinator_set_response_mode(h_.get(),
                                                    static_cast<nodeipc_gather_mode>(mode)));
    }
    // Whether sends gather answers ahead for the response thread (read at
    // its start; GatherAhead::when_crowded until set). The replies are the
    // same under each; what changes is how often the thread is switched to.
    void set_gather_ahead(GatherAhead when) {
        check(nodeipc_coordinator_set_gather_ahead(h_.get(),
                                                   static_cast<nodeipc_gather_ahead>(when)));
    }
    // send() without waiting: false (nothing sent) while a worker has no
    // free frame. The one send allowed inside a response function.
    bool try_send(const void* data, size_t len, uint64_t* index = nullptr) {
        bool sent = false;
        check(nodeipc_coordinator_try_send(h_.get(), static_cast<const uint8_t*>(data), len, &sent,
                                           index));
        return sent;
    }
    nodeipc_coordinator* handle() const noexcept { return h_.get(); }

  private:
    static Answers copy(const View& v) {
        Answers out{v.rank, {}};
        for (uint32_t i = 0; i < v.count; ++i) {
            auto a = v.answer(i);
            out.bytes.emplace_back(a.data, a.data + a.size);
        }
        return out;
    }
    template <class F>
    struct Visit {
        F f;
        std::exception_ptr error;
    };
    template <class F>
    static int32_t visit(void* user, uint32_t rank, uint32_t count, const uint8_t* const* data,
                         const size_t* lengths) noexcept {
        auto* v = static_cast<Visit<F>*>(user);
        try {
            v->f(View{rank, count, data, lengths});
            return 0;
        } catch (...) {
            v->error = std::current_exception();
            return NODEIPC_ERR_INVALID_ARGUMENT;
        }
    }
    // A call's status, after the exception of its callable (or its rule's).
    void finish(nodeipc_status s, std::exception_ptr& error) {
        if (error) std::rethrow_exception(std::exchange(error, nullptr));
        if (s != NODEIPC_OK && rule_ && rule_->error)
            std::rethrow_exception(std::exchange(rule_->error, nullptr));
        check(s);
    }
    struct Rule {
        std::function<size_t(const std::vector<Response>&)> choose;
        std::exception_ptr error;
    };
    static int32_t pick(void* user, uint32_t count, const uint8_t* const* responses,
                        const size_t* lengths) noexcept {
        auto* rule = static_cast<Rule*>(user);
        try {
            std::vector<Response> all;
            all.reserve(count);
            for (uint32_t r = 0; r < count; ++r) all.push_back(Response{responses[r], lengths[r]});
            size_t index = rule->choose(all);
            if (index >= count)
                throw Error(NODEIPC_ERR_INVALID_ARGUMENT,
                            "nodeipc::Coordinator::set_aggregate: the rule returned index " +
                                std::to_string(index) + " of " + std::to_string(count) +
                                " responses");
            return static_cast<int32_t>(index);
        } catch (...) {
            rule->error = std::current_exception();
            return NODEIPC_ERR_INVALID_ARGUMENT;
        }
    }
    struct Responses {
        std::function<void(const Reply&)> f;
        ThreadPolicy policy;
        std::exception_ptr error;
    };
    // The C callback: no exception leaves it (the library is Rust).
    static int32_t respond(void* user, uint64_t id, nodeipc_status status, uint32_t rank,
                           const char* message, uint32_t count, const uint8_t* const* data,
                           const size_t* lengths) noexcept {
        auto* r = static_cast<Responses*>(user);
        try {
            r->f(Reply{id, status, rank, message, count, data, lengths});
            return 0;
        } catch (...) {
            if (r->policy == ThreadPolicy::stop_on_error) {
                r->error = std::current_exception();
                return 1;
            }
            try {
                throw;
            } catch (const std::exception& e) {
                std::fprintf(stderr, "nodeipc: response function threw on request %llu: %s\n",
                             static_cast<unsigned long long>(id), e.what());
            } catch (...) {
                std::fprintf(stderr, "nodeipc: response function threw on request %llu\n",
                             static_cast<unsigned long long>(id));
            }
            return 0;
        }
    }
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
    // Declared before h_, so destroyed after it: the thread ends first.
    std::unique_ptr<Responses> responses_;
    std::unique_ptr<Rule> rule_;
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
    // recv() without waiting: false (nothing taken) while no request is there.
    bool try_recv(std::vector<uint8_t>& out) {
        size_t len = 0;
        if (out.empty()) out.resize(out.capacity() > 0 ? out.capacity() : 4096);
        nodeipc_status s = nodeipc_worker_recv(h_.get(), 0, out.data(), out.size(), &len);
        if (s == NODEIPC_ERR_TIMEOUT) return false;
        if (s == NODEIPC_ERR_TOO_LARGE && len > out.size()) {
            out.resize(len);
            s = nodeipc_worker_recv(h_.get(), 0, out.data(), out.size(), &len);
        }
        check(s);
        out.resize(len);
        return true;
    }
    void release() { check(nodeipc_worker_release(h_.get())); }
    void respond(const void* data, size_t len) {
        check(nodeipc_worker_respond(h_.get(), static_cast<const uint8_t*>(data), len));
    }
    // Into the init slot: what Gather::init gathers.
    void respond_init(const void* data, size_t len) {
        check(nodeipc_worker_respond_init(h_.get(), static_cast<const uint8_t*>(data), len));
    }
    void respond(const std::string& bytes) { respond(bytes.data(), bytes.size()); }
    nodeipc_worker* handle() const noexcept { return h_.get(); }

  private:
    explicit Worker(nodeipc_worker* w) : h_(w) {}
    detail::Owned<nodeipc_worker, nodeipc_worker_free> h_;
};

namespace detail {
// A message's bytes (protobuf's ByteSizeLong / SerializeToArray) into `out`.
template <class M>
void encode(const M& m, std::vector<uint8_t>& out, const char* what) {
    size_t size = m.ByteSizeLong();
    if (size > static_cast<size_t>(INT32_MAX))
        throw Error(NODEIPC_ERR_TOO_LARGE, std::string(what) + ": a message of " +
                                               std::to_string(size) + " bytes");
    out.resize(size);
    if (!m.SerializeToArray(out.data(), static_cast<int>(size)))
        throw Error(NODEIPC_ERR_CORRUPT, std::string(what) + ": the message did not serialize");
}
// A message decoded from `size` bytes at `data` (ParseFromArray).
template <class M>
M decode(const uint8_t* data, size_t size, uint32_t rank, const char* what) {
    M m;
    if (size > static_cast<size_t>(INT32_MAX) || !m.ParseFromArray(data, static_cast<int>(size)))
        throw Error(NODEIPC_ERR_CORRUPT,
                    std::string(nodeipc_status_name(NODEIPC_ERR_CORRUPT)) + ": " + what +
                        ": an answer of " + std::to_string(size) + " bytes does not decode",
                    0, rank);
    return m;
}
}  // namespace detail

// A Coordinator on messages of your own schema (protobuf's C++ classes:
// anything with ByteSizeLong, SerializeToArray and ParseFromArray). The
// same calls as Coordinator, typed: answers come decoded, with the rank of
// each (every worker's for Gather::all and ::init, one otherwise); a reply
// that does not decode throws NODEIPC_ERR_CORRUPT naming the rank.
template <class Req, class Resp>
class TypedCoordinator {
  public:
    using Decoded = std::vector<std::pair<uint32_t, Resp>>;
    struct TypedReply {
        uint64_t id;
        nodeipc_status status;
        uint32_t rank;
        std::string message;
        Decoded answers;
        bool ok() const noexcept { return status == NODEIPC_OK; }
        void check() const {
            if (!ok())
                throw Error(status, std::string(nodeipc_status_name(status)) + ": " + message, 0,
                            rank);
        }
    };
    explicit TypedCoordinator(Coordinator c) : c_(std::move(c)) {}
    Coordinator& raw() noexcept { return c_; }

    template <class D = Millis>
    uint64_t send(const Req& request, D timeout = forever) {
        detail::encode(request, out_, "nodeipc::TypedCoordinator::send");
        return c_.send(out_.data(), out_.size(), timeout);
    }
    bool try_send(const Req& request, uint64_t* index = nullptr) {
        detail::encode(request, out_, "nodeipc::TypedCoordinator::try_send");
        return c_.try_send(out_.data(), out_.size(), index);
    }
    template <class D = Millis>
    Decoded recv(Gather mode, D timeout = forever) {
        Decoded out;
        c_.recv_in_place(mode, [&out](const View& v) { out = decode_all(v); }, timeout);
        return out;
    }
    std::optional<Decoded> try_recv(Gather mode) {
        auto answers = c_.try_recv(mode);
        if (!answers) return std::nullopt;
        Decoded out;
        for (size_t i = 0; i < answers->bytes.size(); ++i) {
            uint32_t rank = answers->rank == NODEIPC_NO_RANK ? static_cast<uint32_t>(i)
                                                             : answers->rank;
            const auto& b = answers->bytes[i];
            out.emplace_back(rank, detail::decode<Resp>(b.data(), b.size(), rank,
                                                        "nodeipc::TypedCoordinator::try_recv"));
        }
        return out;
    }
    template <class D = Millis>
    uint64_t drain(D timeout = forever) { return c_.drain(timeout); }
    std::optional<uint64_t> try_drain() { return c_.try_drain(); }
    void set_response_mode(Gather mode) { c_.set_response_mode(mode); }
    void set_gather_ahead(GatherAhead when) { c_.set_gather_ahead(when); }
    // The response thread on decoded replies (an answer that does not
    // decode is the reply's NODEIPC_ERR_CORRUPT, naming its rank).
    void on_response(std::function<void(const TypedReply&)> f,
                     ThreadPolicy policy = ThreadPolicy::stop_on_error) {
        c_.on_response(
            [f = std::move(f)](const Reply& r) {
                TypedReply t{r.id, r.status, r.rank, r.message, {}};
                if (r.ok()) {
                    try {
                        t.answers = decode_all(View{r.rank, r.count, r.data, r.lengths});
                    } catch (const Error& e) {
                        t.status = e.code();
                        t.rank = e.rank();
                        t.message = e.what();
                    }
                }
                f(t);
            },
            policy);
    }
    void stop_response_thread() { c_.stop_response_thread(); }
    bool response_thread_running() const { return c_.response_thread_running(); }

  private:
    static Decoded decode_all(const View& v) {
        Decoded out;
        out.reserve(v.count);
        for (uint32_t i = 0; i < v.count; ++i) {
            uint32_t rank = v.rank == NODEIPC_NO_RANK ? i : v.rank;
            auto a = v.answer(i);
            out.emplace_back(rank, detail::decode<Resp>(a.data, a.size, rank,
                                                        "nodeipc::TypedCoordinator::recv"));
        }
        return out;
    }
    Coordinator c_;
    std::vector<uint8_t> out_;
};

// A Worker on messages of your own schema: each request decoded where it
// lies in the ring (no copy; its frame released once decoded), each answer
// encoded into a reused buffer.
template <class Req, class Resp>
class TypedWorker {
  public:
    explicit TypedWorker(Worker w) : w_(std::move(w)) {}
    Worker& raw() noexcept { return w_; }
    uint32_t rank() const { return w_.rank(); }
    template <class D = Millis>
    Req recv(D timeout = forever) {
        auto v = w_.recv_in_place(timeout);
        Req request;
        bool ok = v.size <= static_cast<size_t>(INT32_MAX) &&
                  request.ParseFromArray(v.data, static_cast<int>(v.size));
        w_.release();
        if (!ok)
            throw Error(NODEIPC_ERR_CORRUPT,
                        "nodeipc::TypedWorker::recv: a request of " + std::to_string(v.size) +
                            " bytes does not decode");
        return request;
    }
    void respond(const Resp& response) {
        detail::encode(response, out_, "nodeipc::TypedWorker::respond");
        w_.respond(out_.data(), out_.size());
    }
    void respond_init(const Resp& response) {
        detail::encode(response, out_, "nodeipc::TypedWorker::respond_init");
        w_.respond_init(out_.data(), out_.size());
    }

  private:
    Worker w_;
    std::vector<uint8_t> out_;
};

}  // namespace nodeipc

#endif  // NODEIPC_CHANNEL_HPP
