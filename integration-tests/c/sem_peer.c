/* A C program sharing glibc named semaphores with nodeipc, as a C++ worker
 * of an inference server would.
 *
 *   sem_peer pong PING PONG ROUNDS   ROUNDS times: wait on PING, post PONG
 *   sem_peer create NAME VALUE       create NAME (O_EXCL, 0600) and exit
 *
 * Every wait is bounded (10 s); exit status 0 on success. */
#include <errno.h>
#include <fcntl.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int wait10(sem_t *sem) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    while (sem_timedwait(sem, &deadline) != 0) {
        if (errno != EINTR) return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "pong") == 0) {
        sem_t *ping = sem_open(argv[2], 0);
        sem_t *pong = sem_open(argv[3], 0);
        if (ping == SEM_FAILED || pong == SEM_FAILED) { perror("sem_open"); return 1; }
        long rounds = atol(argv[4]);
        for (long i = 0; i < rounds; i++) {
            if (wait10(ping) != 0) { perror("sem_timedwait"); return 1; }
            if (sem_post(pong) != 0) { perror("sem_post"); return 1; }
        }
        sem_close(ping);
        sem_close(pong);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "create") == 0) {
        sem_t *sem = sem_open(argv[2], O_CREAT | O_EXCL, 0600, (unsigned)atoi(argv[3]));
        if (sem == SEM_FAILED) { perror("sem_open"); return 1; }
        sem_close(sem);
        return 0;
    }
    fprintf(stderr, "usage: sem_peer pong PING PONG ROUNDS | create NAME VALUE\n");
    return 2;
}
