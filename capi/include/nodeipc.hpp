// nodeipc for C++17: move-only RAII classes over the C ABI of nodeipc.h.
// Header-only; link libnodeipc.a (-lpthread -ldl -lm -lrt) or libnodeipc.so.
//
// Every failure throws nodeipc::Error, which carries the C status code and
// the library's message. Timeouts are std::chrono durations of any
// representation: a negative one (or nodeipc::forever) waits without limit,
// as every C call taking a timeout documents; one past INT64_MAX ms
// saturates there (the C API waits without limit then too); a part of a
// millisecond rounds up; NaN is refused (NODEIPC_ERR_INVALID_ARGUMENT).
// Names and paths are std::strings: one holding a NUL byte is refused
// (the C API would stop reading at it), never cut short.
//
// Thread safety is that of the C handles: Region and Semaphore may be used
// from several threads at once; a Coordinator by one sending and one
// gathering thread; Group, MonitorClient and Worker one thread at a time.
//
// After fork(), an object is its parent's: in the child every call throws
// Error with NODEIPC_ERR_FORKED, and destroying it only closes and unmaps
// the child's copy (see the README, "After fork()").
#ifndef NODEIPC_HPP
#define NODEIPC_HPP

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <ratio>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "nodeipc.h"

namespace nodeipc {

// A failed call: what() is the library's message; code() the nodeipc_status.
class Error : public std::runtime_error {
  public:
    Error(nodeipc_status code, const std::string& message, int os_errno = 0)
        : std::runtime_error(message), code_(code), errno_(os_errno) {}
    nodeipc_status code() const noexcept { return code_; }
    // The errno behind a NODEIPC_ERR_IO, 0 otherwise.
    int os_errno() const noexcept { return errno_; }

  private:
    nodeipc_status code_;
    int errno_;
};

// Throws the thread's last error when `status` is not NODEIPC_OK.
inline void check(nodeipc_status status) {
    if (status != NODEIPC_OK) {
        throw Error(status, std::string(nodeipc_status_name(status)) + ": " + nodeipc_last_error(),
                    nodeipc_last_errno());
    }
}

using Millis = std::chrono::milliseconds;
// Wait without limit.
constexpr Millis forever{-1};

namespace detail {
// Throws NODEIPC_ERR_INVALID_ARGUMENT with `message`, as check() words it.
[[noreturn]] inline void invalid(const std::string& message) {
    throw Error(NODEIPC_ERR_INVALID_ARGUMENT,
                std::string(nodeipc_status_name(NODEIPC_ERR_INVALID_ARGUMENT)) + ": " + message);
}

// A name or path for the C API: refused when it holds a NUL byte, where the
// C API would stop reading ("/x\0-rest" would name "/x").
inline const char* c_str(const std::string& s, const char* what) {
    const auto nul = s.find('\0');
    if (nul != std::string::npos) {
        invalid(std::string(what) + " holds a NUL byte at offset " + std::to_string(nul) +
                " (of " + std::to_string(s.size()) + "): a C string would end there");
    }
    return s.c_str();
}

// a × b, refused when it overflows a size_t.
inline size_t checked_mul(size_t a, size_t b, const char* what) {
    if (b != 0 && a > std::numeric_limits<size_t>::max() / b) {
        invalid(std::string(what) + ": " + std::to_string(a) + " × " + std::to_string(b) +
                " bytes overflows");
    }
    return a * b;
}
}  // namespace detail

// A timeout in whole milliseconds for the C API, from any std::chrono
// duration, with no overflow: negative (and -inf) is -1, "wait without
// limit", which is what a negative timeout means to every C call taking one;
// past INT64_MAX ms (+inf included) saturates at INT64_MAX, which the C API
// also takes as without limit; a positive part of a millisecond rounds up,
// so no wait is cut to "look once"; NaN has no meaning and is refused.
template <class Rep, class Period>
int64_t to_ms(std::chrono::duration<Rep, Period> d) {
    // Milliseconds per tick, as a reduced ratio num/den (both positive).
    using per_tick = std::ratio_divide<Period, std::milli>;
    constexpr intmax_t num = per_tick::num;
    constexpr intmax_t den = per_tick::den;
    static_assert(num > 0 && den > 0, "a duration's period must be positive");
    constexpr int64_t most = std::numeric_limits<int64_t>::max();
    if constexpr (std::is_floating_point<Rep>::value) {
        const long double ticks = static_cast<long double>(d.count());
        if (std::isnan(ticks)) detail::invalid("a timeout of NaN has no meaning");
        if (ticks < 0) return -1;
        const long double ms = std::ceil(ticks * static_cast<long double>(num) /
                                         static_cast<long double>(den));
        // 2^63 is exact in a long double; this is also false for +inf.
        if (!(ms < 9223372036854775808.0L)) return most;
        return static_cast<int64_t>(ms);
    } else {
        static_assert(std::is_integral<Rep>::value && sizeof(Rep) <= sizeof(std::uintmax_t),
                      "a duration of an integer representation of at most 64 bits");
        if constexpr (std::is_signed<Rep>::value) {
            if (d.count() < 0) return -1;
        }
        using U = std::uintmax_t;
        const U ticks = static_cast<U>(d.count());
        const U unum = static_cast<U>(num), uden = static_cast<U>(den);
        // ceil(ticks × num / den) without forming ticks × num: whole
        // periods of den ticks first, then the rest (below den).
        const U whole = ticks / uden, rest = ticks % uden;
        if (whole > static_cast<U>(most) / unum) return most;
        const U ms = whole * unum;
        const U part = (rest * unum + uden - 1) / uden;
        if (ms > static_cast<U>(most) - part) return most;
        return static_cast<int64_t>(ms + part);
    }
}

namespace detail {
// Owns one C handle; Free is its _free function.
template <class T, nodeipc_status (*Free)(T*)>
class Owned {
  public:
    Owned() noexcept = default;
    explicit Owned(T* p) noexcept : p_(p) {}
    Owned(Owned&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    Owned& operator=(Owned&& o) noexcept {
        if (this != &o) {
            reset();
            p_ = std::exchange(o.p_, nullptr);
        }
        return *this;
    }
    Owned(const Owned&) = delete;
    Owned& operator=(const Owned&) = delete;
    ~Owned() { reset(); }
    T* get() const noexcept { return p_; }
    explicit operator bool() const noexcept { return p_ != nullptr; }
    void reset() noexcept {
        if (p_) (void)Free(std::exchange(p_, nullptr));
    }

  private:
    T* p_ = nullptr;
};
}  // namespace detail

// A shared-memory region (named, anonymous, or from a descriptor).
class Region {
  public:
    static Region create(const std::string& name, size_t size) {
        nodeipc_region* r = nullptr;
        check(nodeipc_region_create(detail::c_str(name, "nodeipc::Region::create: name"), size, &r));
        return Region(r);
    }
    template <class D = Millis>
    static Region open(const std::string& name, size_t min_size, D timeout = Millis(0)) {
        nodeipc_region* r = nullptr;
        check(nodeipc_region_open(detail::c_str(name, "nodeipc::Region::open: name"), min_size,
                                  to_ms(timeout), &r));
        return Region(r);
    }
    static Region anonymous(size_t size) {
        nodeipc_region* r = nullptr;
        check(nodeipc_region_anonymous(size, &r));
        return Region(r);
    }
    // Maps the object behind `fd`; `fd` stays the caller's.
    static Region from_fd(int fd) {
        nodeipc_region* r = nullptr;
        check(nodeipc_region_from_fd(fd, &r));
        return Region(r);
    }
    // The mapping: other processes may write it at any time.
    void* data() const {
        void* p = nullptr;
        size_t n = 0;
        check(nodeipc_region_data(h_.get(), &p, &n));
        return p;
    }
    size_t size() const {
        void* p = nullptr;
        size_t n = 0;
        check(nodeipc_region_data(h_.get(), &p, &n));
        return n;
    }
    // The region's descriptor, still the region's.
    int fd() const {
        int fd = -1;
        check(nodeipc_region_fd(h_.get(), &fd));
        return fd;
    }
    void write(size_t offset, const void* src, size_t len) const {
        check(nodeipc_region_write(h_.get(), offset, src, len));
    }
    void read(size_t offset, void* dst, size_t len) const {
        check(nodeipc_region_read(h_.get(), offset, dst, len));
    }
    void seal() const { check(nodeipc_region_seal(h_.get())); }
    void persist() const { check(nodeipc_region_persist(h_.get())); }
    void unlink() const { check(nodeipc_region_unlink(h_.get())); }
    nodeipc_region* handle() const noexcept { return h_.get(); }

  private:
    explicit Region(nodeipc_region* r) : h_(r) {}
    detail::Owned<nodeipc_region, nodeipc_region_free> h_;
};

// A counting semaphore: named (glibc sem_open compatible) or in a region.
class Semaphore {
  public:
    static Semaphore create(const std::string& name, uint32_t value) {
        nodeipc_sem* s = nullptr;
        check(nodeipc_sem_create(detail::c_str(name, "nodeipc::Semaphore::create: name"), value, &s));
        return Semaphore(s);
    }
    template <class D = Millis>
    static Semaphore open(const std::string& name, D timeout = Millis(0)) {
        nodeipc_sem* s = nullptr;
        check(nodeipc_sem_open(detail::c_str(name, "nodeipc::Semaphore::open: name"), to_ms(timeout),
                               &s));
        return Semaphore(s);
    }
    // At `offset` in `region` (NODEIPC_SEM_SIZE bytes); `init` sets the count.
    static Semaphore in_region(const Region& region, size_t offset, bool init, uint32_t value = 0) {
        nodeipc_sem* s = nullptr;
        check(nodeipc_sem_in_region(region.handle(), offset, init, value, &s));
        return Semaphore(s);
    }
    void post() const { check(nodeipc_sem_post(h_.get())); }
    // Throws Error with code NODEIPC_ERR_TIMEOUT when the time runs out.
    template <class D = Millis>
    void wait(D timeout = forever) const {
        check(nodeipc_sem_wait(h_.get(), to_ms(timeout)));
    }
    // Whether the count was positive (and is now one less).
    bool try_wait() const {
        bool got = false;
        check(nodeipc_sem_try_wait(h_.get(), &got));
        return got;
    }
    uint32_t value() const {
        uint32_t v = 0;
        check(nodeipc_sem_value(h_.get(), &v));
        return v;
    }

  private:
    explicit Semaphore(nodeipc_sem* s) : h_(s) {}
    detail::Owned<nodeipc_sem, nodeipc_sem_free> h_;
};

// One rank's membership of a group; the destructor leaves it.
class Group {
  public:
    // No group (what a moved-from Group also is).
    Group() noexcept = default;
    template <class D = std::chrono::seconds>
    static Group join(const std::string& name, uint32_t rank, uint32_t world_size,
                      D timeout = std::chrono::seconds(60), size_t slot_size = 0) {
        nodeipc_group* g = nullptr;
        check(nodeipc_group_join(detail::c_str(name, "nodeipc::Group::join: name"), rank, world_size,
                                 slot_size, to_ms(timeout), &g));
        return Group(g);
    }
    uint32_t rank() const {
        uint32_t r = 0;
        check(nodeipc_group_info(h_.get(), &r, nullptr, nullptr));
        return r;
    }
    uint32_t world_size() const {
        uint32_t w = 0;
        check(nodeipc_group_info(h_.get(), nullptr, &w, nullptr));
        return w;
    }
    void barrier() const { check(nodeipc_group_barrier(h_.get())); }
    template <class D>
    void barrier(D timeout) const {
        check(nodeipc_group_barrier_timeout(h_.get(), to_ms(timeout)));
    }
    // Ranks 0..k only.
    void barrier_first(uint32_t k) const { check(nodeipc_group_barrier_first(h_.get(), k)); }
    // Any k ranks (ThunderKittens' sync(k)).
    void barrier_arrivals(uint32_t k) const { check(nodeipc_group_barrier_arrivals(h_.get(), k)); }
    // Every rank's `len` bytes into `out` (world size × len bytes), rank order.
    void all_gather(const void* data, size_t len, void* out, size_t out_len) {
        check(nodeipc_group_all_gather(h_.get(), static_cast<const uint8_t*>(data), len,
                                       static_cast<uint8_t*>(out), out_len));
    }
    std::vector<uint8_t> all_gather(const void* data, size_t len) {
        std::vector<uint8_t> out(
            detail::checked_mul(world_size(), len, "nodeipc::Group::all_gather: world size × len"));
        all_gather(data, len, out.data(), out.size());
        return out;
    }
    // Entry r: a descriptor (ours to close) for rank r's `fd`; own entry -1.
    std::vector<int> exchange_fds(int fd) {
        std::vector<int> out(world_size(), -1);
        check(nodeipc_group_exchange_fds(h_.get(), fd, out.data(), out.size()));
        return out;
    }
    // Rank `root`'s descriptor; `fd` is ignored elsewhere. Ours to close.
    int broadcast_fd(uint32_t root, int fd) {
        int out = -1;
        check(nodeipc_group_broadcast_fd(h_.get(), root, fd, &out));
        return out;
    }
    nodeipc_group* handle() const noexcept { return h_.get(); }

  private:
    explicit Group(nodeipc_group* g) : h_(g) {}
    detail::Owned<nodeipc_group, nodeipc_group_leave> h_;
};

// A rank's connection to its monitor.
class MonitorClient {
  public:
    template <class D = std::chrono::seconds>
    static MonitorClient connect(const std::string& path, D timeout = std::chrono::seconds(10)) {
        nodeipc_monitor* m = nullptr;
        check(nodeipc_monitor_connect(detail::c_str(path, "nodeipc::MonitorClient::connect: path"),
                                      to_ms(timeout), &m));
        return MonitorClient(m);
    }
    // Registers this process; returns whether the shared-memory heartbeat
    // region was granted (when asked for).
    bool init(uint32_t global_rank, uint32_t local_rank, bool heartbeat_region = true) {
        bool granted = false;
        check(nodeipc_monitor_init(h_.get(), global_rank, local_rank, heartbeat_region, &granted));
        return granted;
    }
    void heartbeat() { check(nodeipc_monitor_heartbeat(h_.get(), nullptr, 0)); }
    void heartbeat(const void* state, size_t len) {
        check(nodeipc_monitor_heartbeat(h_.get(), static_cast<const uint8_t*>(state), len));
    }
    void heartbeat_fast() const { check(nodeipc_monitor_heartbeat_fast(h_.get())); }
    void start_section(const std::string& name) {
        check(nodeipc_monitor_start_section(
            h_.get(), detail::c_str(name, "nodeipc::MonitorClient::start_section: name")));
    }
    void end_section(const std::string& name) {
        check(nodeipc_monitor_end_section(
            h_.get(), detail::c_str(name, "nodeipc::MonitorClient::end_section: name")));
    }
    void end_all_sections() { check(nodeipc_monitor_end_all_sections(h_.get())); }
    nodeipc_monitor_status status() {
        nodeipc_monitor_status s{};
        check(nodeipc_monitor_get_status(h_.get(), &s));
        return s;
    }
    std::string status_json() {
        std::string buf(4096, '\0');
        size_t len = 0;
        nodeipc_status rc = nodeipc_monitor_status_json(h_.get(), &buf[0], buf.size(), &len);
        if (rc == NODEIPC_ERR_TOO_LARGE) {
            buf.assign(len + 1, '\0');
            rc = nodeipc_monitor_status_json(h_.get(), &buf[0], buf.size(), &len);
        }
        check(rc);
        buf.resize(len);
        return buf;
    }

  private:
    explicit MonitorClient(nodeipc_monitor* m) : h_(m) {}
    detail::Owned<nodeipc_monitor, nodeipc_monitor_free> h_;
};

}  // namespace nodeipc

// The execute channel's Coordinator and Worker.
#include "nodeipc/channel.hpp"

#endif  // NODEIPC_HPP
