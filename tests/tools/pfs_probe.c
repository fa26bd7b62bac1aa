/* Reads a file with COUNT preads of BYTES each (offsets cycling through the file) and prints
 * the elapsed seconds: the probe of tests/tools/pfs_model_check.sh, which runs it with and
 * without the parallel-file-system model (benchmarks/pfs/pfs_model.c) preloaded.
 * Usage: pfs_probe FILE COUNT BYTES */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char** argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: pfs_probe FILE COUNT BYTES\n");
        return 2;
    }
    const long count = atol(argv[2]);
    const size_t bytes = (size_t)atol(argv[3]);
    const int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || (size_t)st.st_size < bytes || bytes == 0) {
        perror(argv[1]);
        return 1;
    }
    char* buf = malloc(bytes);
    if (!buf) return 1;
    const off_t span = st.st_size - (off_t)bytes + 1;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < count; ++i) {
        const off_t at = (off_t)(((size_t)i * bytes) % (size_t)span);
        if (pread(fd, buf, bytes, at) != (ssize_t)bytes) {
            perror("pread");
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.6f\n", (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9);
    free(buf);
    close(fd);
    return 0;
}
