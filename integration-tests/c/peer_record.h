/* What queue_peer.c and pool_peer.c share, written from the byte layouts in
 * queue/README.md and pool/README.md: mapping a named region (owner and
 * mode checked), waiting for its magic, the 16-byte record {pid, joins,
 * start time} a queue role and a pool handle are (take, leave, is its
 * holder alive), and the raw futex calls.
 *
 * Every word another process may write is read once, with an atomic load,
 * and checked before use. */
#ifndef NODEIPC_PEER_RECORD_H
#define NODEIPC_PEER_RECORD_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

static inline uint64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static inline void sleep_ms(long ms) {
    struct timespec t = { ms / 1000, (ms % 1000) * 1000000 };
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {}
}

/* A named region: shm_open, owned by us and mode 0600 (both checked), at
 * least min_size bytes, mapped shared. */
static inline uint8_t *map_named(const char *name, uint64_t min_size, uint64_t *size) {
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) FAIL("shm_open %s: %s", name, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) FAIL("fstat %s: %s", name, strerror(errno));
    if (st.st_uid != geteuid() || (st.st_mode & 0777) != 0600)
        FAIL("%s: owner %u mode %o, expected ours and 0600", name, (unsigned)st.st_uid,
             (unsigned)(st.st_mode & 0777));
    if ((uint64_t)st.st_size < min_size) FAIL("%s: %lld bytes, at least %llu expected", name,
                                              (long long)st.st_size, (unsigned long long)min_size);
    *size = (uint64_t)st.st_size;
    void *p = mmap(NULL, *size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) FAIL("mmap %s: %s", name, strerror(errno));
    return p;
}

/* Waits (10 s at most) for the creator's magic, stored last with release. */
static inline void wait_magic(const uint8_t *base, uint64_t magic) {
    uint64_t deadline = now_ms() + 10000;
    uint64_t found;
    while ((found = __atomic_load_n((const uint64_t *)base, __ATOMIC_ACQUIRE)) != magic) {
        if (found != 0) FAIL("magic is %#llx, %#llx expected", (unsigned long long)found,
                             (unsigned long long)magic);
        if (now_ms() > deadline) FAIL("no magic after 10 s");
        sleep_ms(1);
    }
}

static inline uint32_t load32(const uint8_t *base, uint64_t at) {
    return __atomic_load_n((const uint32_t *)(base + at), __ATOMIC_ACQUIRE);
}

/* The state (field 3) and start time (field 22) of /proc/<pid>/stat:
 * 0 read, 1 no such process, -1 could not tell (our own trouble). */
static inline int proc_stat(uint32_t pid, char *state, uint64_t *start) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%u/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return (errno == ENOENT || errno == ESRCH) ? 1 : -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    int gone = n < 0 && errno == ESRCH;
    close(fd);
    if (n <= 0) return gone ? 1 : -1;
    buf[n] = 0;
    /* The command name (field 2) may hold spaces and parentheses: count
     * fields after its last ')'. */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || !p[2]) return -1;
    p += 2;
    *state = *p;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p) return -1;
        p++;
    }
    *start = strtoull(p, NULL, 10);
    return 0;
}

/* This process's start time. */
static inline uint64_t own_start(void) {
    char state;
    uint64_t start;
    if (proc_stat((uint32_t)getpid(), &state, &start) != 0) FAIL("cannot read /proc/self/stat");
    return start;
}

/* Whether the holder {pid, start} runs: 1 alive, 0 dead (no such process,
 * a later start time, or exited and not reaped: state Z or X), -1 could
 * not tell. Start time 0: the holder is joining; the pid alone decides. */
static inline int holder_alive(uint32_t pid, uint64_t start) {
    char state;
    uint64_t found;
    int r = proc_stat(pid, &state, &found);
    if (r != 0) return r == 1 ? 0 : -1;
    if (state == 'Z' || state == 'X') return 0;
    return start == 0 || found == start;
}

/* A record: pid at +0, joins at +4, start time at +8. */
struct record { uint32_t *pid, *joins; uint64_t *start; };

static inline struct record record_at(uint8_t *base, uint64_t at) {
    struct record r = { (uint32_t *)(base + at), (uint32_t *)(base + at + 4),
                        (uint64_t *)(base + at + 8) };
    return r;
}

/* Takes the record for {me, my_start}: vacant, or with take_over from a
 * dead holder. Returns 0 taken (*from: the dead holder, or 0), 1 refused
 * (*from: the holder), -1 could not tell whether the holder lives. */
static inline int record_take(struct record r, uint32_t me, uint64_t my_start, int take_over,
                       uint32_t *from) {
    for (int attempt = 0; attempt < 1000; attempt++) {
        uint32_t pid = __atomic_load_n(r.pid, __ATOMIC_ACQUIRE);
        *from = pid;
        if (pid != 0) {
            if (!take_over) return 1;
            uint64_t start = __atomic_load_n(r.start, __ATOMIC_ACQUIRE);
            int alive = holder_alive(pid, start);
            if (alive != 0) return alive == 1 ? 1 : -1;
            /* Dead: its start time to 0 first, so nobody takes us mid-join
             * for a process with the dead one's start time. */
            if (start != 0 && !__atomic_compare_exchange_n(r.start, &start, 0, 0,
                                                          __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                continue;
        }
        uint32_t expected = pid;
        if (__atomic_compare_exchange_n(r.pid, &expected, me, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            __atomic_store_n(r.start, my_start, __ATOMIC_RELEASE);
            __atomic_fetch_add(r.joins, 1, __ATOMIC_ACQ_REL);
            return 0;
        }
    }
    return 1;
}

/* Hands the record back if it is still ours. */
static inline void record_leave(struct record r, uint32_t me, uint64_t my_start) {
    if (__atomic_load_n(r.pid, __ATOMIC_ACQUIRE) == me
        && __atomic_load_n(r.start, __ATOMIC_ACQUIRE) == my_start) {
        __atomic_store_n(r.start, 0, __ATOMIC_RELEASE);
        uint32_t expected = me;
        __atomic_compare_exchange_n(r.pid, &expected, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    }
}

/* FUTEX_WAIT on a shared word (never FUTEX_PRIVATE_FLAG), at most ms. */
static inline void futex_wait(uint32_t *word, uint32_t expected, long ms) {
    struct timespec t = { ms / 1000, (ms % 1000) * 1000000 };
    if (syscall(SYS_futex, word, FUTEX_WAIT, expected, &t, NULL, 0) != 0 && errno != EAGAIN
        && errno != EINTR && errno != ETIMEDOUT)
        FAIL("futex wait: %s", strerror(errno));
}

static inline void futex_wake(uint32_t *word) {
    if (syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0) < 0)
        FAIL("futex wake: %s", strerror(errno));
}

#endif
