/* Parallel-file-system model for benchmarks (benchmarks/README.md, "Parallel-file-system
 * model"): an LD_PRELOAD shim that makes every read of a data file cost what it would cost on a
 * shared parallel file system seen from one client process:
 *
 *   a request of n bytes issued at t0 completes at
 *       end = max(t0 + latency, link_free) + n / bandwidth,   link_free = end
 *
 * i.e. a per-request latency (requests of different threads overlap, as RPCs in flight do) and
 * one per-process link of `bandwidth` bytes/s that all of the process's transfers share. The
 * real read runs first (from the page cache, so the modelled time dominates); the calling
 * thread then sleeps until `end`. Reads of other descriptors (sockets, pipes, MPI's shared
 * memory, Python's own modules) pass straight through.
 *
 * Intercepted (what this machine's readers call, checked with strace, README): pread, pread64,
 * read, readv, preadv, preadv64, preadv2, preadv64v2. Descriptors are tracked from open,
 * open64, openat, openat64 (and their _FORTIFY_SOURCE twins __open_2, __open64_2, __openat_2,
 * __openat64_2) to close (or dup2/dup3 over them). Mapped files (the memory tier's
 * `--stage-read map`): `mmap`/`mmap64` of a tracked descriptor records the mapping (until
 * `munmap`), and each `madvise(MADV_POPULATE_READ)` inside one is charged as one request of its
 * length, issued when the call started; every rank is charged for the pages it reads in, also
 * those a node peer already read (the page cache is shared on a real node, so this overcharges
 * the mapped tier). Not modelled: page faults on mapped pages not read in by madvise,
 * descriptors made by dup, fread of FILE streams (glibc reads their buffer without going
 * through these symbols), metadata calls.
 *
 * Environment (read once, at load):
 *   MPISTAGE_PFS_LATENCY_US   per-request latency in microseconds (default 1000)
 *   MPISTAGE_PFS_BANDWIDTH    bytes per second of one process's link (default 2e9; 0 = no cap)
 *   MPISTAGE_PFS_ROOT         only files whose canonical path starts with this prefix (default:
 *                             every regular file opened after the shim was loaded)
 *   MPISTAGE_PFS_STATS        when set, at exit the process appends one line
 *                             "pid requests bytes modelled_seconds slept_seconds" to this file
 *   MPISTAGE_PFS_OFF=1        load but pass everything through (baseline runs)
 *
 * Thread safety: the link time is one atomic; the descriptor table is an array of atomics.
 * Benchmark tool only (never linked into the library). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum { kMaxFd = 1 << 16 };

static atomic_uchar g_tracked[kMaxFd];
static int64_t g_latency_ns = 1000000;   /* 1 ms */
static double g_ns_per_byte = 1e9 / 2e9; /* 2 GB/s */
static char g_root[4096];
static size_t g_root_len = 0;
static int g_off = 0;
static _Atomic int64_t g_link_free_ns = 0;
static _Atomic uint64_t g_requests = 0;
static _Atomic uint64_t g_bytes = 0;
static _Atomic int64_t g_modelled_ns = 0;
static _Atomic int64_t g_slept_ns = 0;

/* The next definition of each function (libc's), looked up once: a dlsym per call would cost
 * more than the reads of pipes and sockets that pass through. The race on first use is benign
 * (every thread stores the same pointer). */
#define REAL(name) (real_##name ? real_##name : (resolve((void**)&real_##name, #name), real_##name))
#define DECLARE_REAL(name) static __typeof__(&name) real_##name

static void resolve(void** slot, const char* name) {
    void* p = dlsym(RTLD_NEXT, name);
    memcpy(slot, &p, sizeof p);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void write_stats(void) {
    const char* path = getenv("MPISTAGE_PFS_STATS");
    if (!path || !*path) return;
    FILE* f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%ld %llu %llu %.6f %.6f\n", (long)getpid(),
            (unsigned long long)atomic_load(&g_requests), (unsigned long long)atomic_load(&g_bytes),
            (double)atomic_load(&g_modelled_ns) / 1e9, (double)atomic_load(&g_slept_ns) / 1e9);
    fclose(f);
}

__attribute__((constructor)) static void pfs_init(void) {
    const char* lat = getenv("MPISTAGE_PFS_LATENCY_US");
    const char* bw = getenv("MPISTAGE_PFS_BANDWIDTH");
    const char* root = getenv("MPISTAGE_PFS_ROOT");
    const char* off = getenv("MPISTAGE_PFS_OFF");
    if (lat && *lat) g_latency_ns = (int64_t)(strtod(lat, NULL) * 1000.0);
    if (bw && *bw) {
        const double b = strtod(bw, NULL);
        g_ns_per_byte = b > 0 ? 1e9 / b : 0.0;
    }
    if (root && *root) {
        /* Compare canonical paths: the prefix itself is resolved once. */
        char* canon = realpath(root, NULL);
        snprintf(g_root, sizeof g_root, "%s", canon ? canon : root);
        free(canon);
        g_root_len = strlen(g_root);
    }
    g_off = off && strcmp(off, "1") == 0;
    atexit(write_stats);
}

/* Marks `fd` when it names a regular file under the root. */
static void consider(int fd) {
    if (fd < 0 || fd >= kMaxFd || g_off) return;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return;
    if (g_root_len > 0) {
        char link[64], path[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        const ssize_t n = readlink(link, path, sizeof path - 1);
        if (n < 0) return;
        path[n] = '\0';
        if (strncmp(path, g_root, g_root_len) != 0 ||
            (path[g_root_len] != '/' && path[g_root_len] != '\0')) {
            return;
        }
    }
    atomic_store(&g_tracked[fd], 1);
}

static int tracked(int fd) {
    return fd >= 0 && fd < kMaxFd && atomic_load_explicit(&g_tracked[fd], memory_order_relaxed);
}

/* Charges one request of `bytes` issued at `t0` and sleeps until the model says it is done. */
static void charge(int64_t t0, ssize_t bytes) {
    const int64_t n = bytes > 0 ? bytes : 0;
    const int64_t transfer = (int64_t)((double)n * g_ns_per_byte);
    int64_t free_at = atomic_load(&g_link_free_ns);
    int64_t end;
    do {
        const int64_t arrive = t0 + g_latency_ns;
        end = (arrive > free_at ? arrive : free_at) + transfer;
    } while (!atomic_compare_exchange_weak(&g_link_free_ns, &free_at, end));
    atomic_fetch_add(&g_requests, 1);
    atomic_fetch_add(&g_bytes, (uint64_t)n);
    atomic_fetch_add(&g_modelled_ns, end - t0);
    const int64_t now = now_ns();
    if (end <= now) return;
    struct timespec until = {(time_t)(end / 1000000000), (long)(end % 1000000000)};
    const int saved = errno;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {
    }
    errno = saved;
    atomic_fetch_add(&g_slept_ns, end - now);
}

int __open_2(const char* path, int flags);
int __open64_2(const char* path, int flags);
int __openat_2(int dirfd, const char* path, int flags);
int __openat64_2(int dirfd, const char* path, int flags);
DECLARE_REAL(open);
DECLARE_REAL(open64);
DECLARE_REAL(openat);
DECLARE_REAL(openat64);
DECLARE_REAL(__open_2);
DECLARE_REAL(__open64_2);
DECLARE_REAL(__openat_2);
DECLARE_REAL(__openat64_2);
DECLARE_REAL(close);
DECLARE_REAL(dup2);
DECLARE_REAL(dup3);
DECLARE_REAL(read);
DECLARE_REAL(pread);
DECLARE_REAL(pread64);
DECLARE_REAL(readv);
DECLARE_REAL(preadv);
DECLARE_REAL(preadv64);
DECLARE_REAL(preadv2);
DECLARE_REAL(preadv64v2);

/* ---- opening and closing: which descriptors are data files ---------------------------- */

static mode_t mode_arg(int flags, va_list ap) {
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char* path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    const mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    const int fd = REAL(open)(path, flags, mode);
    consider(fd);
    return fd;
}

int open64(const char* path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    const mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    const int fd = REAL(open64)(path, flags, mode);
    consider(fd);
    return fd;
}

int openat(int dirfd, const char* path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    const mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    const int fd = REAL(openat)(dirfd, path, flags, mode);
    consider(fd);
    return fd;
}

int openat64(int dirfd, const char* path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    const mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    const int fd = REAL(openat64)(dirfd, path, flags, mode);
    consider(fd);
    return fd;
}

int __open_2(const char* path, int flags) {
    const int fd = REAL(__open_2)(path, flags);
    consider(fd);
    return fd;
}
int __open64_2(const char* path, int flags) {
    const int fd = REAL(__open64_2)(path, flags);
    consider(fd);
    return fd;
}
int __openat_2(int dirfd, const char* path, int flags) {
    const int fd = REAL(__openat_2)(dirfd, path, flags);
    consider(fd);
    return fd;
}
int __openat64_2(int dirfd, const char* path, int flags) {
    const int fd = REAL(__openat64_2)(dirfd, path, flags);
    consider(fd);
    return fd;
}

int close(int fd) {
    if (fd >= 0 && fd < kMaxFd) atomic_store(&g_tracked[fd], 0);
    return REAL(close)(fd);
}

/* dup2/dup3 close their target silently: whatever it becomes is not a tracked data file. */
int dup2(int fd, int target) {
    const int got = REAL(dup2)(fd, target);
    if (got >= 0 && got < kMaxFd && got != fd) atomic_store(&g_tracked[got], 0);
    return got;
}

int dup3(int fd, int target, int flags) {
    const int got = REAL(dup3)(fd, target, flags);
    if (got >= 0 && got < kMaxFd) atomic_store(&g_tracked[got], 0);
    return got;
}

/* ---- reads ------------------------------------------------------------------------------ */

#define MODELLED(call, fd)             \
    do {                               \
        if (!tracked(fd)) return call; \
        const int64_t t0 = now_ns();   \
        const ssize_t got = call;      \
        if (got >= 0) charge(t0, got); \
        return got;                    \
    } while (0)

ssize_t read(int fd, void* buf, size_t count) {
    MODELLED(REAL(read)(fd, buf, count), fd);
}
ssize_t pread(int fd, void* buf, size_t count, off_t offset) {
    MODELLED(REAL(pread)(fd, buf, count, offset), fd);
}
ssize_t pread64(int fd, void* buf, size_t count, off64_t offset) {
    MODELLED(REAL(pread64)(fd, buf, count, offset), fd);
}
ssize_t readv(int fd, const struct iovec* iov, int n) {
    MODELLED(REAL(readv)(fd, iov, n), fd);
}
ssize_t preadv(int fd, const struct iovec* iov, int n, off_t offset) {
    MODELLED(REAL(preadv)(fd, iov, n, offset), fd);
}
ssize_t preadv64(int fd, const struct iovec* iov, int n, off64_t offset) {
    MODELLED(REAL(preadv64)(fd, iov, n, offset), fd);
}
ssize_t preadv2(int fd, const struct iovec* iov, int n, off_t offset, int flags) {
    MODELLED(REAL(preadv2)(fd, iov, n, offset, flags), fd);
}
ssize_t preadv64v2(int fd, const struct iovec* iov, int n, off64_t offset, int flags) {
    MODELLED(REAL(preadv64v2)(fd, iov, n, offset, flags), fd);
}

/* ---- mapped files ----------------------------------------------------------------------- */

enum { kMaxMaps = 256 };
static _Atomic uintptr_t g_map_begin[kMaxMaps];
static _Atomic uintptr_t g_map_end[kMaxMaps];

static void record_map(void* p, size_t len) {
    for (int i = 0; i < kMaxMaps; ++i) {
        uintptr_t expected = 0;
        if (atomic_compare_exchange_strong(&g_map_begin[i], &expected, (uintptr_t)p)) {
            atomic_store(&g_map_end[i], (uintptr_t)p + len);
            return;
        }
    }
}

static int in_map(const void* p, size_t len) {
    const uintptr_t a = (uintptr_t)p;
    for (int i = 0; i < kMaxMaps; ++i) {
        const uintptr_t b = atomic_load(&g_map_begin[i]);
        if (b != 0 && a >= b && a + len <= atomic_load(&g_map_end[i])) return 1;
    }
    return 0;
}

DECLARE_REAL(mmap);
DECLARE_REAL(mmap64);
DECLARE_REAL(munmap);
DECLARE_REAL(madvise);

void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t offset) {
    void* p = REAL(mmap)(addr, len, prot, flags, fd, offset);
    if (p != MAP_FAILED && tracked(fd)) record_map(p, len);
    return p;
}
void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off64_t offset) {
    void* p = REAL(mmap64)(addr, len, prot, flags, fd, offset);
    if (p != MAP_FAILED && tracked(fd)) record_map(p, len);
    return p;
}
int munmap(void* addr, size_t len) {
    for (int i = 0; i < kMaxMaps; ++i) {
        if (atomic_load(&g_map_begin[i]) == (uintptr_t)addr) {
            atomic_store(&g_map_end[i], 0);
            atomic_store(&g_map_begin[i], 0);
        }
    }
    return REAL(munmap)(addr, len);
}
int madvise(void* addr, size_t len, int advice) {
    if (advice != 22 /* MADV_POPULATE_READ */ || !in_map(addr, len)) {
        return REAL(madvise)(addr, len, advice);
    }
    const int64_t t0 = now_ns();
    const int rc = REAL(madvise)(addr, len, advice);
    if (rc == 0) charge(t0, (ssize_t)len);
    return rc;
}
