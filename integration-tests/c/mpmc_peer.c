/* A C peer of a nodeipc MPMC ring, written from the MPMC byte layout in
 * queue/README.md alone: it takes a producer or consumer place of a named
 * ring (a vacant one, else one whose holder is dead), then pushes COUNT
 * messages of 16 bytes {SOURCE << 48 | n, that * K}, or pops COUNT
 * messages checking each, parking on a slot's sequence word when it must
 * wait, and leaves.
 *
 *   mpmc_peer produce|consume NAME SCHEMA COUNT SOURCE
 *
 * Prints "joined place=I took_over=T", then "done COUNT". A consumer pops
 * the messages of one producer (SOURCE) in order. Every wait is bounded
 * (10 s); exit 0 on success, 1 on any failure. */
#include "peer_record.h"

#define MAGIC 0x4d63706965646f6eULL /* "nodeipcM" */
#define TAIL 128
#define HEAD 256
#define DATA_PARKED 512
#define ROOM_PARKED 640
#define PLACES 768
#define ELEM 16
#define ALIGN 8
#define K 0x9e3779b97f4a7c15ULL

static uint8_t *q;
static uint32_t capacity;
static uint64_t slots, stride;

static uint32_t *word32(uint64_t at) { return (uint32_t *)(q + at); }
static uint32_t *seq_of(uint32_t p) { return (uint32_t *)(q + slots + (uint64_t)(p & (capacity - 1)) * stride); }
static uint64_t *msg_of(uint32_t p) {
    return (uint64_t *)(q + slots + (uint64_t)(p & (capacity - 1)) * stride + 8);
}

static void park(uint32_t *word, uint64_t parked_at, uint32_t seen) {
    __atomic_fetch_add(word32(parked_at), 1, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(word, __ATOMIC_SEQ_CST) == seen) futex_wait(word, seen, 50);
    __atomic_fetch_sub(word32(parked_at), 1, __ATOMIC_SEQ_CST);
}

/* After storing a sequence word: wake its sleepers, no system call if none. */
static void wake(uint32_t *word, int releasing) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(word32(DATA_PARKED), __ATOMIC_RELAXED) != 0
        || (releasing && __atomic_load_n(word32(ROOM_PARKED), __ATOMIC_RELAXED) != 0))
        futex_wake(word);
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: mpmc_peer produce|consume NAME SCHEMA COUNT SOURCE\n");
        return 2;
    }
    int producer = strcmp(argv[1], "produce") == 0;
    if (!producer && strcmp(argv[1], "consume") != 0) FAIL("unknown role %s", argv[1]);
    uint64_t schema = strtoull(argv[3], NULL, 0), count = strtoull(argv[4], NULL, 10);
    uint64_t source = strtoull(argv[5], NULL, 10);

    uint64_t size;
    q = map_named(argv[2], PLACES, &size);
    wait_magic(q, MAGIC);
    if (load32(q, 8) != 1) FAIL("layout version %u", load32(q, 8));
    if (load32(q, 12) != ELEM || load32(q, 16) != ALIGN) FAIL("element size or alignment");
    if (__atomic_load_n((uint64_t *)(q + 24), __ATOMIC_RELAXED) != schema) FAIL("schema id");
    capacity = load32(q, 20);
    if (capacity < 4 || (capacity & (capacity - 1)) || capacity > (1u << 30)) FAIL("capacity %u", capacity);
    uint32_t nprod = load32(q, 40), ncons = load32(q, 44);
    if (nprod < 1 || nprod > 64 || ncons < 1 || ncons > 64) FAIL("places %u %u", nprod, ncons);
    slots = __atomic_load_n((uint64_t *)(q + 32), __ATOMIC_RELAXED);
    if (slots != PLACES + 128ULL * (nprod + ncons)) FAIL("slots offset %llu", (unsigned long long)slots);
    stride = (8 + ELEM + 63) / 64 * 64; /* whole cache lines */
    if (size < slots + (uint64_t)capacity * stride) FAIL("region smaller than its slots");

    /* A place of our role: a vacant one first, else a dead holder's. */
    uint32_t me = (uint32_t)getpid(), from = 0;
    uint64_t my_start = own_start();
    uint32_t first = producer ? 0 : nprod, n_places = producer ? nprod : ncons;
    int place = -1;
    for (int take_over = 0; take_over < 2 && place < 0; take_over++)
        for (uint32_t i = 0; i < n_places && place < 0; i++)
            if (record_take(record_at(q, PLACES + 128ULL * (first + i)), me, my_start, take_over, &from) == 0)
                place = (int)i;
    if (place < 0) FAIL("no %s place free", argv[1]);
    uint64_t place_at = PLACES + 128ULL * (first + (uint32_t)place);
    uint64_t *claim = (uint64_t *)(q + place_at + 16);
    __atomic_store_n(claim, 0, __ATOMIC_RELEASE);
    printf("joined place=%d took_over=%d\n", place, from != 0);
    fflush(stdout);

    uint64_t deadline = now_ms() + 10000, expect = 0;
    for (uint64_t n = 0; n < count;) {
        if (now_ms() > deadline) FAIL("no progress for 10 s at message %llu", (unsigned long long)n);
        uint32_t *cursor = word32(producer ? TAIL : HEAD);
        uint32_t p = __atomic_load_n(cursor, __ATOMIC_ACQUIRE);
        uint32_t s = __atomic_load_n(seq_of(p), __ATOMIC_ACQUIRE);
        uint32_t ahead = s - p, behind = p - s;
        if (producer) {
            if (behind == capacity || behind == capacity - 1 || behind == capacity - 2) {
                park(seq_of(p), ROOM_PARKED, s); /* full */
                continue;
            }
            if (ahead != 0) {
                if (ahead == 1 || ahead == 2 || (ahead >= capacity && ahead < (1u << 31))) continue;
                FAIL("slot of position %u holds %u", p, s);
            }
            __atomic_store_n(claim, (1ULL << 32) | p, __ATOMIC_RELAXED);
            uint32_t expected = p;
            if (!__atomic_compare_exchange_n(cursor, &expected, p + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                __atomic_store_n(claim, 0, __ATOMIC_RELAXED);
                continue;
            }
            uint64_t value = source << 48 | n;
            __atomic_store_n(&msg_of(p)[0], value, __ATOMIC_RELAXED);
            __atomic_store_n(&msg_of(p)[1], value * K, __ATOMIC_RELAXED);
            __atomic_store_n(seq_of(p), p + 1, __ATOMIC_RELEASE);
            __atomic_store_n(claim, 0, __ATOMIC_RELEASE);
            wake(seq_of(p), 0);
            n++;
        } else {
            if (ahead != 1 && ahead != 2) {
                if (ahead == 0 || behind == capacity - 1 || behind == capacity - 2) {
                    park(seq_of(p), DATA_PARKED, s); /* empty */
                    continue;
                }
                if (ahead >= capacity && ahead < (1u << 31)) continue;
                FAIL("slot of position %u holds %u", p, s);
            }
            __atomic_store_n(claim, (1ULL << 32) | p, __ATOMIC_RELAXED);
            uint32_t expected = p;
            if (!__atomic_compare_exchange_n(cursor, &expected, p + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                __atomic_store_n(claim, 0, __ATOMIC_RELAXED);
                continue;
            }
            if (ahead == 1) {
                uint64_t value = __atomic_load_n(&msg_of(p)[0], __ATOMIC_RELAXED);
                uint64_t check = __atomic_load_n(&msg_of(p)[1], __ATOMIC_RELAXED);
                if (value != (source << 48 | expect) || check != value * K)
                    FAIL("message %llu reads {%#llx, %#llx}", (unsigned long long)expect,
                         (unsigned long long)value, (unsigned long long)check);
                expect++;
                n++;
            }
            __atomic_store_n(seq_of(p), p + capacity, __ATOMIC_RELEASE);
            __atomic_store_n(claim, 0, __ATOMIC_RELEASE);
            wake(seq_of(p), 1);
        }
        deadline = now_ms() + 10000;
    }

    struct record r = record_at(q, place_at);
    record_leave(r, me, my_start);
    printf("done %llu\n", (unsigned long long)count);
    return 0;
}
