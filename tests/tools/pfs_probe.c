/* Reads a file with COUNT preads of BYTES each per thread (offsets cycling through the file),
 * from THREADS threads at once (default 1), and prints the elapsed seconds: the probe of
 * tests/tools/pfs_model_check.sh, which runs it with and without the parallel-file-system model
 * (benchmarks/pfs/pfs_model.c) preloaded.
 * Usage: pfs_probe FILE COUNT BYTES [THREADS] */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int g_fd = -1;
static long g_count = 0;
static size_t g_bytes = 0;
static off_t g_span = 1;

static void* reader(void* arg) {
    char* buf = malloc(g_bytes);
    if (!buf) return (void*)1;
    for (long i = 0; i < g_count; ++i) {
        const off_t at = (off_t)(((size_t)i * g_bytes) % (size_t)g_span);
        if (pread(g_fd, buf, g_bytes, at) != (ssize_t)g_bytes) {
            perror("pread");
            free(buf);
            return (void*)1;
        }
    }
    free(buf);
    return arg;
}

int main(int argc, char** argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: pfs_probe FILE COUNT BYTES [THREADS]\n");
        return 2;
    }
    g_count = atol(argv[2]);
    g_bytes = (size_t)atol(argv[3]);
    const int threads = argc == 5 ? atoi(argv[4]) : 1;
    g_fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (g_fd < 0 || fstat(g_fd, &st) != 0 || (size_t)st.st_size < g_bytes || g_bytes == 0 ||
        threads < 1 || threads > 64) {
        perror(argv[1]);
        return 1;
    }
    g_span = st.st_size - (off_t)g_bytes + 1;
    pthread_t ids[64];
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int t = 0; t < threads; ++t) pthread_create(&ids[t], NULL, reader, NULL);
    int failed = 0;
    for (int t = 0; t < threads; ++t) {
        void* rc = NULL;
        pthread_join(ids[t], &rc);
        failed |= rc != NULL;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (failed) return 1;
    printf("%.6f\n", (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9);
    close(g_fd);
    return 0;
}
