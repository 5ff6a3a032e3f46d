/* A C worker on a nodeipc execute channel with named semaphores, written
 * from the layout the nodeipc-channel README documents, as a C++ worker of
 * an inference server would be.
 *
 *   channel_worker NAME WORKERS DEPTH REQUEST_CAPACITY RESPONSE_SLOT_SIZE RANK COUNT
 *
 * Answers COUNT requests: each response echoes the request's execute_type
 * (as msg_type) and sequence. Every wait is bounded (10 s). Exit 0 on success,
 * 1 on a failure, a frame or field length past its frame among them.
 *
 * Every length read from shared memory is compared in 64 bits, never added
 * to in 32: `len + 4` of a hostile u32 length wraps and passes any check. */
#include <errno.h>
#include <fcntl.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LAYOUT_VERSION 2
#define LINE 64
#define REQUEST_HEADER 128
#define RESPONSE_HEADER 64
#define WORKER_ENTRY 32
#define MAX_WORKERS 1024
#define MAX_DEPTH 64
#define MAX_SLOT ((uint64_t)1 << 30)

/* Only called with n <= MAX_SLOT (checked at start), so n + 63 cannot wrap. */
static uint64_t round64(uint64_t n) { return (n + LINE - 1) / LINE * LINE; }

static void *map(const char *name, size_t *size) {
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) { perror(name); exit(1); }
    struct stat st;
    if (fstat(fd, &st) != 0) { perror("fstat"); exit(1); }
    *size = (size_t)st.st_size;
    void *p = mmap(NULL, *size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) { perror("mmap"); exit(1); }
    return p;
}

static sem_t *sem(const char *name, const char *dir, const char *role, int rank) {
    char full[512];
    snprintf(full, sizeof full, "%s_%s_%s_%d", name, dir, role, rank);
    sem_t *s = sem_open(full, 0);
    if (s == SEM_FAILED) { perror(full); exit(1); }
    return s;
}

static void wait10(sem_t *s) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    while (sem_timedwait(s, &deadline) != 0) {
        if (errno != EINTR) { perror("sem_timedwait"); exit(1); }
    }
}

/* Reads a varint at p (bounded by end); returns the new position or NULL. */
static const uint8_t *varint(const uint8_t *p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; p < end && shift < 64; shift += 7) {
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) { *out = v; return p; }
    }
    return NULL;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) { *p++ = (uint8_t)(v | 0x80); v >>= 7; }
    *p++ = (uint8_t)v;
    return p;
}

/* Field 22 of /proc/self/stat: this process's start time. */
static uint64_t start_time(void) {
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')') + 2;
    for (int field = 3; field < 22; field++) p = strchr(p, ' ') + 1;
    return strtoull(p, NULL, 10);
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: channel_worker NAME WORKERS DEPTH REQUEST_CAPACITY RESPONSE_SLOT_SIZE RANK COUNT\n");
        return 2;
    }
    const char *name = argv[1];
    int workers = atoi(argv[2]), depth = atoi(argv[3]), rank = atoi(argv[6]);
    uint64_t capacity = strtoull(argv[4], NULL, 10), slot_size = strtoull(argv[5], NULL, 10);
    long count = atol(argv[7]);
    if (workers < 1 || workers > MAX_WORKERS || depth < 1 || depth > MAX_DEPTH
        || rank < 0 || rank >= workers || capacity < 5 || capacity > MAX_SLOT
        || slot_size < 5 || slot_size > MAX_SLOT) {
        fprintf(stderr, "arguments out of range\n");
        return 2;
    }

    char region_name[512];
    size_t request_size, response_size;
    snprintf(region_name, sizeof region_name, "%s_request", name);
    const uint8_t *request = map(region_name, &request_size);
    snprintf(region_name, sizeof region_name, "%s_response", name);
    uint8_t *response = map(region_name, &response_size);

    /* The regions must hold the layout of these arguments before anything is
     * written (the entry, the slots) or read. Every product below is at most
     * 64 * 2^30 or 1024 * 64 * 2^30: no wrap in 64 bits. */
    uint64_t sems_at = round64(RESPONSE_HEADER + (uint64_t)workers * WORKER_ENTRY);
    uint64_t responses_at = sems_at + (uint64_t)workers * 4 * LINE;
    if ((uint64_t)REQUEST_HEADER + (uint64_t)depth * round64(capacity) > request_size
        || responses_at + (uint64_t)workers * depth * round64(slot_size) > response_size) {
        fprintf(stderr, "the regions are smaller than the layout of these arguments\n");
        return 1;
    }
    uint32_t version;
    memcpy(&version, request + 8, 4);
    if (version != LAYOUT_VERSION) {
        fprintf(stderr, "layout version %u, this worker follows %d\n", version, LAYOUT_VERSION);
        return 1;
    }
    /* This worker's ring of `depth` answer slots; answer i goes to i % depth. */
    uint8_t *slots = response + responses_at + (uint64_t)rank * depth * round64(slot_size);

    sem_t *req_produce = sem(name, "request", "produce", rank);
    sem_t *req_consume = sem(name, "request", "consume", rank);
    sem_t *resp_produce = sem(name, "response", "produce", rank);
    sem_t *resp_consume = sem(name, "response", "consume", rank);

    /* Register: pid and start time, then the joined flag. */
    uint8_t *entry = response + RESPONSE_HEADER + rank * WORKER_ENTRY;
    uint64_t start = start_time();
    memcpy(entry + 8, &start, 8);
    uint32_t pid = (uint32_t)getpid();
    memcpy(entry, &pid, 4);
    __atomic_fetch_or((uint32_t *)(entry + 4), 1u, __ATOMIC_SEQ_CST);

    for (long i = 0; i < count; i++) {
        wait10(req_consume);
        const uint8_t *frame = request + REQUEST_HEADER + (uint64_t)(i % depth) * round64(capacity);
        uint32_t len;
        memcpy(&len, frame, 4);
        if ((uint64_t)len + 4 > capacity) { fprintf(stderr, "frame length %u past the frame\n", len); return 1; }
        const uint8_t *p = frame + 4, *end = frame + 4 + len;
        uint64_t type = 0, sequence = 0;
        while (p && p < end) {
            uint64_t key, value;
            p = varint(p, end, &key);
            if (!p) break;
            if ((key & 7) == 0) {
                p = varint(p, end, &value);
                if ((key >> 3) == 1) type = value;
                if ((key >> 3) == 2) sequence = value;
            } else if ((key & 7) == 2) {
                p = varint(p, end, &value);
                /* Compare with what is left, never form p + value: it may wrap. */
                if (p && value > (uint64_t)(end - p)) {
                    fprintf(stderr, "field length %llu past the frame\n", (unsigned long long)value);
                    return 1;
                }
                if (p) p += value;
            } else {
                break;
            }
        }
        sem_post(req_produce);
        if (sequence != (uint64_t)i) { fprintf(stderr, "request %ld has sequence %llu\n", i, (unsigned long long)sequence); return 1; }

        wait10(resp_produce);
        uint8_t message[32], *q = message;
        if (type) { *q++ = 0x10; q = put_varint(q, type); }          /* msg_type = 2 */
        if (sequence) { *q++ = 0x18; q = put_varint(q, sequence); }  /* sequence = 3 */
        uint32_t out_len = (uint32_t)(q - message);
        if ((uint64_t)out_len + 4 > slot_size) { fprintf(stderr, "a %u-byte response does not fit the slot\n", out_len); return 1; }
        uint8_t *slot = slots + (uint64_t)(i % depth) * round64(slot_size);
        memcpy(slot, &out_len, 4);
        memcpy(slot + 4, message, out_len);
        /* Answers announced, where a worker rejoining this rank would resume. */
        __atomic_store_n((uint64_t *)(entry + 24), (uint64_t)i + 1, __ATOMIC_RELEASE);
        sem_post(resp_consume);
    }
    return 0;
}
