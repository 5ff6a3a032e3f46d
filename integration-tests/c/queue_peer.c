/* A C peer of a nodeipc queue, written from the byte layout in
 * queue/README.md alone: it joins a named queue as its producer or its
 * consumer (taking the role over from a dead holder if need be), moves
 * COUNT messages of 16 bytes {seq, seq * K}, parking on the futex of the
 * other side's index when it must wait, and leaves.
 *
 *   queue_peer produce|consume NAME SCHEMA COUNT
 *
 * Prints "joined pid=P joins=J took_over=T", then "done COUNT". Every wait
 * is bounded (10 s); exit 0 on success, 1 on any failure (a corrupt index,
 * a message out of order, the other side gone). */
#include "peer_record.h"

#define MAGIC 0x5163706965646f6eULL /* "nodeipcQ" */
#define SLOTS 768
#define TAIL 128
#define HEAD 256
#define PRODUCER 384
#define CONSUMER 400
#define TAIL_PARKED 512
#define HEAD_PARKED 640
#define ELEM 16
#define ALIGN 8
#define K 0x9e3779b97f4a7c15ULL

static uint8_t *q;
static uint32_t capacity;

static uint32_t *word32(uint64_t at) { return (uint32_t *)(q + at); }
static uint64_t *slot(uint32_t n) {
    return (uint64_t *)(q + SLOTS + (uint64_t)(n & (capacity - 1)) * ELEM);
}

/* Sleeps on `word` while it holds `seen`: announce in `parked`, fence,
 * recheck, FUTEX_WAIT (50 ms at most), withdraw whatever woke us. */
static void park(uint64_t word_at, uint64_t parked_at, uint32_t seen) {
    __atomic_fetch_add(word32(parked_at), 1, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(word32(word_at), __ATOMIC_SEQ_CST) == seen)
        futex_wait(word32(word_at), seen, 50);
    __atomic_fetch_sub(word32(parked_at), 1, __ATOMIC_SEQ_CST);
}

/* After our store to `word_at`: wake a parked peer, no system call if none. */
static void wake(uint64_t word_at, uint64_t parked_at) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(word32(parked_at), __ATOMIC_RELAXED) != 0) futex_wake(word32(word_at));
}

/* Fails if the other side's role is vacant after being held: it left. */
static void check_peer(uint64_t role_at) {
    struct record r = record_at(q, role_at);
    uint32_t pid = __atomic_load_n(r.pid, __ATOMIC_ACQUIRE);
    if (pid == 0 && __atomic_load_n(r.joins, __ATOMIC_ACQUIRE) != 0) FAIL("the peer left");
    if (pid != 0 && holder_alive(pid, __atomic_load_n(r.start, __ATOMIC_ACQUIRE)) == 0)
        FAIL("the peer (pid %u) died", pid);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: queue_peer produce|consume NAME SCHEMA COUNT\n");
        return 2;
    }
    int producer = strcmp(argv[1], "produce") == 0;
    if (!producer && strcmp(argv[1], "consume") != 0) FAIL("unknown role %s", argv[1]);
    uint64_t schema = strtoull(argv[3], NULL, 0), count = strtoull(argv[4], NULL, 10);

    uint64_t size;
    q = map_named(argv[2], SLOTS, &size);
    wait_magic(q, MAGIC);
    if (load32(q, 8) != 1) FAIL("layout version %u", load32(q, 8));
    if (load32(q, 12) != ELEM || load32(q, 16) != ALIGN) FAIL("element size or alignment");
    if (__atomic_load_n((uint64_t *)(q + 24), __ATOMIC_RELAXED) != schema) FAIL("schema id");
    if (__atomic_load_n((uint64_t *)(q + 32), __ATOMIC_RELAXED) != SLOTS) FAIL("slots offset");
    capacity = load32(q, 20);
    if (capacity == 0 || (capacity & (capacity - 1)) || capacity > (1u << 30)) FAIL("capacity %u", capacity);
    if (size < SLOTS + (uint64_t)capacity * ELEM) FAIL("region smaller than its slots");

    /* Take our role; over a dead holder, reset the role's parked count. */
    uint32_t me = (uint32_t)getpid(), from;
    uint64_t my_start = own_start();
    struct record role = record_at(q, producer ? PRODUCER : CONSUMER);
    int taken = record_take(role, me, my_start, 1, &from);
    if (taken != 0) FAIL("role %s held by pid %u", argv[1], from);
    if (from != 0) __atomic_store_n(word32(producer ? HEAD_PARKED : TAIL_PARKED), 0, __ATOMIC_SEQ_CST);
    printf("joined pid=%u joins=%u took_over=%d\n", me, __atomic_load_n(role.joins, __ATOMIC_ACQUIRE),
           from != 0);
    fflush(stdout);

    uint32_t tail = __atomic_load_n(word32(TAIL), __ATOMIC_ACQUIRE);
    uint32_t head = __atomic_load_n(word32(HEAD), __ATOMIC_ACQUIRE);
    if (tail - head > capacity) FAIL("tail %u is %u past head %u", tail, tail - head, head);
    uint64_t deadline = now_ms() + 10000;
    for (uint64_t n = 0; n < count;) {
        if (now_ms() > deadline) FAIL("no progress for 10 s at message %llu", (unsigned long long)n);
        if (producer) {
            /* Our tail; a cached head, reloaded when the ring looks full. */
            if (tail - head == capacity) {
                uint32_t fresh = __atomic_load_n(word32(HEAD), __ATOMIC_ACQUIRE);
                if (fresh - head > tail - head) FAIL("head %u is not between %u and the tail %u", fresh, head, tail);
                if (fresh == head) {
                    check_peer(CONSUMER);
                    park(HEAD, HEAD_PARKED, head);
                    continue;
                }
                head = fresh;
            }
            uint64_t *s = slot(tail);
            __atomic_store_n(&s[0], n, __ATOMIC_RELAXED);
            __atomic_store_n(&s[1], n * K, __ATOMIC_RELAXED);
            tail++;
            __atomic_store_n(word32(TAIL), tail, __ATOMIC_RELEASE);
            wake(TAIL, TAIL_PARKED);
        } else {
            /* Our head; a cached tail, reloaded when the ring looks empty. */
            if (tail == head) {
                uint32_t fresh = __atomic_load_n(word32(TAIL), __ATOMIC_ACQUIRE);
                if (fresh - head > capacity || fresh - head < tail - head)
                    FAIL("tail %u is not between %u and head %u + %u", fresh, tail, head, capacity);
                if (fresh == head) {
                    check_peer(PRODUCER);
                    park(TAIL, TAIL_PARKED, head);
                    continue;
                }
                tail = fresh;
            }
            uint64_t *s = slot(head);
            uint64_t seq = __atomic_load_n(&s[0], __ATOMIC_RELAXED);
            uint64_t check = __atomic_load_n(&s[1], __ATOMIC_RELAXED);
            if (seq != n || check != n * K)
                FAIL("message %llu reads {%llu, %#llx}", (unsigned long long)n,
                     (unsigned long long)seq, (unsigned long long)check);
            head++;
            __atomic_store_n(word32(HEAD), head, __ATOMIC_RELEASE);
            wake(HEAD, HEAD_PARKED);
        }
        n++;
        deadline = now_ms() + 10000;
    }

    /* Leave: the start time to 0, the pid to 0; wake the other side. */
    record_leave(role, me, my_start);
    futex_wake(word32(producer ? TAIL : HEAD));
    printf("done %llu\n", (unsigned long long)count);
    return 0;
}
