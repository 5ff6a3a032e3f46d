/* A C peer of a nodeipc pool, written from the byte layout in
 * pool/README.md alone: it joins a named pool as a handle, claims a slab,
 * allocates COUNT blocks of at least SIZE bytes and fills them, frees every
 * other one itself, hands the rest to the Rust side (which checks and frees
 * them remotely, back to us), checks and frees remotely the blocks the Rust
 * side gave it, takes its own blocks back in its clean-up, and leaves.
 *
 *   pool_peer NAME SIZE COUNT REF...
 *
 * Block bytes: byte j of the block with reference r is (r + 7j) mod 256.
 * Prints "handle H", "block R" (allocated, for the Rust side), "freed R"
 * (freed by us: a reference now stale), "remote-freed N", "ready", then,
 * once its blocks came back, "cleaned N". Every wait is bounded (10 s);
 * exit 0 on success, 1 on any failure. */
#include "peer_record.h"

#define MAGIC 0x5063706965646f6eULL /* "nodeipcP" */
#define SLAB 65536u
#define MAX_SLABS 65536u
#define MAX_HANDLES 1024u
#define MAX_CLASSES 8u
#define FREE 0u
#define ALLOCATED 1u
#define REMOTE_FREED 2u
#define GEN_MASK 0xffffffu
#define MAX_COUNT 256

static uint8_t *p;
static uint64_t size, handles, slabs, classes[MAX_CLASSES], class_count, data_at;

static uint64_t meta(uint64_t s) { return 128 + 64 * handles + 64 * s; }
static uint32_t *owner_word(uint64_t s) { return (uint32_t *)(p + meta(s)); }
static uint32_t *class_word(uint64_t s) { return (uint32_t *)(p + meta(s) + 4); }
static uint64_t *bitmap(uint64_t s, uint64_t w) { return (uint64_t *)(p + meta(s) + 8 + 8 * w); }
static uint32_t *descriptor(uint64_t s, uint64_t i) {
    return (uint32_t *)(p + 128 + 64 * handles + 64 * slabs + 1024 * s + 4 * i);
}
static uint64_t block_offset(uint64_t s, uint64_t i, uint64_t c) { return data_at + SLAB * s + i * classes[c]; }

static uint8_t pattern(uint64_t ref, uint64_t j) { return (uint8_t)(ref + 7 * j); }

/* A block found from a reference, every word checked (README: References). */
struct located { uint64_t slab, index, cls; uint32_t owner; };

static struct located locate(uint64_t ref) {
    uint64_t offset = ref & ((1ULL << 40) - 1);
    uint32_t generation = (uint32_t)(ref >> 40);
    struct located at;
    if (offset < data_at) FAIL("ref %llu: before the blocks", (unsigned long long)ref);
    at.slab = (offset - data_at) / SLAB;
    if (at.slab >= slabs) FAIL("ref %llu: past the last slab", (unsigned long long)ref);
    at.owner = __atomic_load_n(owner_word(at.slab), __ATOMIC_ACQUIRE);
    if (at.owner == 0 || at.owner > handles) FAIL("ref %llu: slab without owner", (unsigned long long)ref);
    at.cls = __atomic_load_n(class_word(at.slab), __ATOMIC_ACQUIRE);
    if (at.cls >= class_count) FAIL("ref %llu: impossible class", (unsigned long long)ref);
    uint64_t within = (offset - data_at) % SLAB;
    if (within % classes[at.cls] != 0) FAIL("ref %llu: not a block start", (unsigned long long)ref);
    at.index = within / classes[at.cls];
    if (at.index >= SLAB / classes[at.cls]) FAIL("ref %llu: past the slab's blocks", (unsigned long long)ref);
    uint32_t found = __atomic_load_n(descriptor(at.slab, at.index), __ATOMIC_ACQUIRE);
    if ((found >> 8) != (generation & GEN_MASK) || (found & 0xff) != ALLOCATED)
        FAIL("ref %llu: descriptor %#x (stale or not allocated)", (unsigned long long)ref, found);
    return at;
}

/* Our books, in our own memory: the slab we claimed, its free blocks, and
 * which blocks we handed out. */
static int64_t my_slab = -1;
static uint64_t my_class, handed_out[4];
static uint32_t free_list[256], free_count;

static int claim_slab(uint32_t handle, uint64_t cls) {
    for (uint64_t s = 0; s < slabs; s++) {
        if (__atomic_load_n(owner_word(s), __ATOMIC_ACQUIRE) != 0) continue;
        int pristine = 1;
        for (uint64_t i = 0; i < 256 && pristine; i++)
            pristine = __atomic_load_n(descriptor(s, i), __ATOMIC_ACQUIRE) == 0;
        if (!pristine && __atomic_load_n(class_word(s), __ATOMIC_ACQUIRE) != cls) continue;
        uint32_t expected = 0;
        if (!__atomic_compare_exchange_n(owner_word(s), &expected, handle + 1, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            continue;
        __atomic_store_n(class_word(s), (uint32_t)cls, __ATOMIC_RELEASE);
        my_slab = (int64_t)s;
        my_class = cls;
        uint64_t blocks = SLAB / classes[cls];
        for (uint64_t i = blocks; i-- > 0;)
            if ((__atomic_load_n(descriptor(s, i), __ATOMIC_ACQUIRE) & 0xff) == FREE)
                free_list[free_count++] = (uint32_t)i;
        return 1;
    }
    return 0;
}

/* Allocates from our slab: free to allocated, generation + 1. */
static uint64_t alloc_block(void) {
    while (free_count > 0) {
        uint32_t i = free_list[--free_count];
        uint32_t *d = descriptor((uint64_t)my_slab, i);
        uint32_t found = __atomic_load_n(d, __ATOMIC_ACQUIRE);
        if ((found & 0xff) != FREE) continue;
        uint32_t generation = ((found >> 8) + 1) & GEN_MASK;
        if (!__atomic_compare_exchange_n(d, &found, generation << 8 | ALLOCATED, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            continue;
        handed_out[i / 64] |= 1ULL << (i % 64);
        return (uint64_t)generation << 40 | block_offset((uint64_t)my_slab, i, my_class);
    }
    FAIL("our slab is full");
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: pool_peer NAME SIZE COUNT REF...\n");
        return 2;
    }
    uint64_t want = strtoull(argv[2], NULL, 10), count = strtoull(argv[3], NULL, 10);
    if (count > MAX_COUNT) FAIL("at most %d blocks", MAX_COUNT);

    p = map_named(argv[1], 128, &size);
    wait_magic(p, MAGIC);
    if (load32(p, 8) != 1) FAIL("layout version %u", load32(p, 8));
    if (load32(p, 12) != SLAB) FAIL("slab size %u", load32(p, 12));
    slabs = load32(p, 16);
    handles = load32(p, 20);
    class_count = load32(p, 24);
    if (slabs == 0 || slabs > MAX_SLABS || handles == 0 || handles > MAX_HANDLES
        || class_count == 0 || class_count > MAX_CLASSES)
        FAIL("counts out of range");
    for (uint64_t c = 0; c < class_count; c++) {
        classes[c] = load32(p, 32 + 4 * c);
        if (classes[c] < 256 || classes[c] > SLAB || classes[c] % 64 || (c && classes[c] <= classes[c - 1]))
            FAIL("class %llu is %llu bytes", (unsigned long long)c, (unsigned long long)classes[c]);
    }
    data_at = (128 + 64 * handles + 1088 * slabs + 4095) / 4096 * 4096;
    if (size < data_at + (uint64_t)SLAB * slabs) FAIL("region smaller than its slabs");

    /* Join: a vacant handle, else one whose holder is dead. */
    uint32_t me = (uint32_t)getpid(), from;
    uint64_t my_start = own_start();
    int64_t handle = -1;
    for (int take_over = 0; take_over < 2 && handle < 0; take_over++)
        for (uint64_t h = 0; h < handles && handle < 0; h++)
            if (record_take(record_at(p, 128 + 64 * h), me, my_start, take_over, &from) == 0)
                handle = (int64_t)h;
    if (handle < 0) FAIL("no handle free");
    /* A previous holder's slabs would be adopted here; none in our test. */
    for (uint64_t s = 0; s < slabs; s++)
        if (__atomic_load_n(owner_word(s), __ATOMIC_ACQUIRE) == (uint32_t)handle + 1)
            FAIL("slab %llu left by a previous holder: adoption not written", (unsigned long long)s);
    printf("handle %lld\n", (long long)handle);

    /* Allocate from the smallest class that fits, in a slab we claim. */
    uint64_t cls = 0;
    while (cls < class_count && classes[cls] < want) cls++;
    if (cls == class_count) FAIL("%llu bytes is more than the largest class", (unsigned long long)want);
    if (!claim_slab((uint32_t)handle, cls)) FAIL("no slab to claim");
    for (uint64_t n = 0; n < count; n++) {
        uint64_t ref = alloc_block();
        uint8_t *block = p + (ref & ((1ULL << 40) - 1));
        for (uint64_t j = 0; j < want; j++) block[j] = pattern(ref, j);
        if (n % 2) {
            /* Ours, freed by us: allocated to free, same generation. */
            struct located at = locate(ref);
            uint32_t expected = (uint32_t)(ref >> 40) << 8 | ALLOCATED;
            if (at.owner != (uint32_t)handle + 1
                || !__atomic_compare_exchange_n(descriptor(at.slab, at.index), &expected,
                                                expected & ~0xffu, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                FAIL("our own free of %llu refused", (unsigned long long)ref);
            handed_out[at.index / 64] &= ~(1ULL << (at.index % 64));
            free_list[free_count++] = (uint32_t)at.index;
            printf("freed %llu\n", (unsigned long long)ref);
        } else {
            printf("block %llu\n", (unsigned long long)ref);
        }
    }
    uint64_t lent = (count + 1) / 2;

    /* The Rust side's blocks: check their bytes, free them remotely (the
     * bit in the owner's bitmap first, then the mark). */
    uint64_t remote = 0;
    for (int a = 4; a < argc; a++) {
        uint64_t ref = strtoull(argv[a], NULL, 10);
        struct located at = locate(ref);
        if (at.owner == (uint32_t)handle + 1) FAIL("ref %llu is in our own slab", (unsigned long long)ref);
        const uint8_t *block = p + (ref & ((1ULL << 40) - 1));
        for (uint64_t j = 0; j < classes[at.cls]; j++)
            if (block[j] != pattern(ref, j)) FAIL("ref %llu: byte %llu differs", (unsigned long long)ref,
                                                  (unsigned long long)j);
        __atomic_fetch_or(bitmap(at.slab, at.index / 64), 1ULL << (at.index % 64), __ATOMIC_ACQ_REL);
        uint32_t expected = (uint32_t)(ref >> 40 & GEN_MASK) << 8 | ALLOCATED;
        if (!__atomic_compare_exchange_n(descriptor(at.slab, at.index), &expected,
                                         (expected & ~0xffu) | REMOTE_FREED, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            FAIL("remote free of %llu refused (descriptor %#x)", (unsigned long long)ref, expected);
        remote++;
    }
    printf("remote-freed %llu\nready\n", (unsigned long long)remote);
    fflush(stdout);

    /* Our clean-up, until every block we lent came back: swap each bitmap
     * word to 0; a block freed remotely that we handed out is ours again;
     * one still allocated keeps its bit; any other bit is dropped. */
    uint64_t cleaned = 0, deadline = now_ms() + 10000;
    while (cleaned < lent) {
        if (now_ms() > deadline) FAIL("%llu of %llu blocks came back in 10 s",
                                      (unsigned long long)cleaned, (unsigned long long)lent);
        if (__atomic_load_n(owner_word((uint64_t)my_slab), __ATOMIC_ACQUIRE) != (uint32_t)handle + 1)
            FAIL("our slab's owner word changed");
        for (uint64_t w = 0; w < 4; w++) {
            uint64_t bits = __atomic_exchange_n(bitmap((uint64_t)my_slab, w), 0, __ATOMIC_ACQ_REL), kept = 0;
            for (; bits; bits &= bits - 1) {
                uint64_t i = w * 64 + (uint64_t)__builtin_ctzll(bits);
                if (i >= SLAB / classes[my_class]) continue;
                uint32_t *d = descriptor((uint64_t)my_slab, i);
                uint32_t found = __atomic_load_n(d, __ATOMIC_ACQUIRE);
                int ours = (handed_out[w] >> (i % 64)) & 1;
                if ((found & 0xff) == REMOTE_FREED && ours) {
                    if (__atomic_compare_exchange_n(d, &found, found & ~0xffu, 0, __ATOMIC_ACQ_REL,
                                                    __ATOMIC_ACQUIRE)) {
                        handed_out[w] &= ~(1ULL << (i % 64));
                        free_list[free_count++] = (uint32_t)i;
                        cleaned++;
                    }
                } else if ((found & 0xff) == ALLOCATED && ours) {
                    kept |= 1ULL << (i % 64);
                } else if ((found & 0xff) != FREE || ours) {
                    FAIL("block %llu reads %#x against our books", (unsigned long long)i, found);
                }
            }
            if (kept) __atomic_fetch_or(bitmap((uint64_t)my_slab, w), kept, __ATOMIC_ACQ_REL);
        }
        if (cleaned < lent) sleep_ms(1);
    }
    for (uint64_t w = 0; w < 4; w++)
        if (handed_out[w]) FAIL("blocks still handed out after the clean-up");

    /* Leave: our slab stays ours for the next holder of the handle. */
    record_leave(record_at(p, 128 + 64 * (uint64_t)handle), me, my_start);
    printf("cleaned %llu\n", (unsigned long long)cleaned);
    return 0;
}
