/* LD_PRELOAD fault injector for the watchdog tests (tests/e2e/watchdog_blocking.sh).
 *
 * On entering the call named by MPISTAGE_FAULT_CALL (one of MPI_File_open, H5Fopen,
 * MPI_Win_allocate_shared, MPI_File_read_at_all, H5Dread, pread, madvise, and at setup and
 * teardown MPI_Comm_dup, MPI_Comm_split_type, MPI_Win_free, MPI_File_close, H5Fclose (the close
 * of a file's last handle only) and MPI_Finalize), the process whose
 * world rank is MPISTAGE_FAULT_RANK (read from the launcher's environment: OMPI_COMM_WORLD_RANK,
 * PMI_RANK or SLURM_PROCID) stops itself (MPISTAGE_FAULT_ACTION=stop, SIGSTOP, the default) or dies
 * (kill, SIGKILL), or, with MPISTAGE_FAULT_ACTION=truncate, cuts the file MPISTAGE_FAULT_FILE
 * to MPISTAGE_FAULT_SIZE bytes once and lets the call proceed (a file truncated during a read),
 * or, with MPISTAGE_FAULT_ACTION=rewrite, overwrites 4096 bytes of MPISTAGE_FAULT_FILE at
 * offset MPISTAGE_FAULT_SIZE once, keeping its size (a same-size edit during a read),
 * or, with MPISTAGE_FAULT_ACTION=enodev and MPISTAGE_FAULT_CALL=mmap, makes every mmap of the
 * file MPISTAGE_FAULT_FILE (its path as /proc/self/fd shows it) fail with ENODEV (a file system
 * that cannot map).
 * MPISTAGE_FAULT_SKIP=n lets the first n entries pass. For pread, only reads of at least
 * MPISTAGE_FAULT_MIN_BYTES bytes count as entries (the memory tier's staging preads of
 * megabytes, not the small metadata reads of opening a file); madvise counts only with
 * MADV_POPULATE_READ (22) over at least that many bytes (the memory tier's mapped staging
 * reading a shard's pages in). Every other process,
 * and every other call, goes straight to the real function (dlsym(RTLD_NEXT)). Calls made
 * inside the MPI or HDF5 libraries are interposed as well (HDF5's MPI-IO driver calls
 * MPI_File_open and MPI_File_read_at_all through the dynamic linker). Test tool only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <hdf5.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int world_rank(void) {
    const char* names[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
        const char* v = getenv(names[i]);
        if (v) return atoi(v);
    }
    return -1;
}

/* Called on entry to `call`: stops or kills this process when it is the chosen one. */
static void maybe_fault(const char* call) {
    static int entries = 0;
    const char* want = getenv("MPISTAGE_FAULT_CALL");
    const char* rank = getenv("MPISTAGE_FAULT_RANK");
    if (!want || !rank || strcmp(want, call) != 0 || atoi(rank) != world_rank()) return;
    const char* skip = getenv("MPISTAGE_FAULT_SKIP");
    if (entries++ < (skip ? atoi(skip) : 0)) return;
    const char* action = getenv("MPISTAGE_FAULT_ACTION");
    if (action && strcmp(action, "truncate") == 0) {
        /* Once: the file is cut to MPISTAGE_FAULT_SIZE bytes, then the call proceeds. */
        const char* path = getenv("MPISTAGE_FAULT_FILE");
        const char* size = getenv("MPISTAGE_FAULT_SIZE");
        if (entries == (skip ? atoi(skip) : 0) + 1 && path && size) {
            const int rc = truncate(path, (off_t)atoll(size));
            fprintf(stderr, "fault_inject: world rank %d truncated %s to %s bytes on entering %s%s\n",
                    world_rank(), path, size, call, rc == 0 ? "" : " (FAILED)");
            fflush(stderr);
        }
        return;
    }
    if (action && strcmp(action, "rewrite") == 0) {
        /* Once: 4096 bytes at offset MPISTAGE_FAULT_SIZE inverted in place, then the call
         * proceeds; the file keeps its size. */
        const char* path = getenv("MPISTAGE_FAULT_FILE");
        const char* offset = getenv("MPISTAGE_FAULT_SIZE");
        if (entries == (skip ? atoi(skip) : 0) + 1 && path && offset) {
            unsigned char block[4096];
            int ok = 0;
            FILE* f = fopen(path, "r+b");
            if (f && fseeko(f, (off_t)atoll(offset), SEEK_SET) == 0 &&
                fread(block, 1, sizeof block, f) == sizeof block) {
                for (size_t i = 0; i < sizeof block; ++i) block[i] = (unsigned char)~block[i];
                ok = fseeko(f, (off_t)atoll(offset), SEEK_SET) == 0 &&
                     fwrite(block, 1, sizeof block, f) == sizeof block;
            }
            if (f && fclose(f) != 0) ok = 0;
            fprintf(stderr, "fault_inject: world rank %d rewrote 4096 bytes of %s at offset %s on entering %s%s\n",
                    world_rank(), path, offset, call, ok ? "" : " (FAILED)");
            fflush(stderr);
        }
        return;
    }
    const int kill_it = action && strcmp(action, "kill") == 0;
    fprintf(stderr, "fault_inject: world rank %d %s on entering %s\n", world_rank(),
            kill_it ? "killed" : "stopped", call);
    fflush(stderr);
    raise(kill_it ? SIGKILL : SIGSTOP);
}

#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

int MPI_File_open(MPI_Comm comm, const char* filename, int amode, MPI_Info info, MPI_File* fh) {
    maybe_fault("MPI_File_open");
    return REAL(MPI_File_open)(comm, filename, amode, info, fh);
}

int MPI_Win_allocate_shared(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
                            void* baseptr, MPI_Win* win) {
    maybe_fault("MPI_Win_allocate_shared");
    return REAL(MPI_Win_allocate_shared)(size, disp_unit, info, comm, baseptr, win);
}

int MPI_File_read_at_all(MPI_File fh, MPI_Offset offset, void* buf, int count,
                         MPI_Datatype datatype, MPI_Status* status) {
    maybe_fault("MPI_File_read_at_all");
    return REAL(MPI_File_read_at_all)(fh, offset, buf, count, datatype, status);
}

ssize_t pread(int fd, void* buf, size_t count, off_t offset) {
    const char* min = getenv("MPISTAGE_FAULT_MIN_BYTES");
    if (!min || count >= (size_t)atoll(min)) maybe_fault("pread");
    return REAL(pread)(fd, buf, count, offset);
}

void* mmap(void* addr, size_t length, int prot, int flags, int fd, off_t offset) {
    const char* want = getenv("MPISTAGE_FAULT_CALL");
    const char* rank = getenv("MPISTAGE_FAULT_RANK");
    const char* action = getenv("MPISTAGE_FAULT_ACTION");
    const char* min = getenv("MPISTAGE_FAULT_MIN_BYTES");
    const char* file = getenv("MPISTAGE_FAULT_FILE");
    char link[64], path[4096];
    ssize_t n = -1;
    if (fd >= 0 && file && want && strcmp(want, "mmap") == 0) {
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        n = readlink(link, path, sizeof path - 1);
    }
    if (n > 0 && (path[n] = '\0', strcmp(path, file) == 0) && rank && atoi(rank) == world_rank() &&
        action && strcmp(action, "enodev") == 0 && (!min || length >= (size_t)atoll(min))) {
        fprintf(stderr, "fault_inject: world rank %d refused mmap of %zu bytes (ENODEV)\n",
                world_rank(), length);
        fflush(stderr);
        errno = ENODEV;
        return MAP_FAILED;
    }
    return REAL(mmap)(addr, length, prot, flags, fd, offset);
}

int madvise(void* addr, size_t length, int advice) {
    const char* min = getenv("MPISTAGE_FAULT_MIN_BYTES");
    if (advice == 22 && (!min || length >= (size_t)atoll(min))) maybe_fault("madvise");
    return REAL(madvise)(addr, length, advice);
}

hid_t H5Fopen(const char* filename, unsigned flags, hid_t fapl_id) {
    maybe_fault("H5Fopen");
    return REAL(H5Fopen)(filename, flags, fapl_id);
}

herr_t H5Dread(hid_t dset_id, hid_t mem_type_id, hid_t mem_space_id, hid_t file_space_id,
               hid_t plist_id, void* buf) {
    maybe_fault("H5Dread");
    return REAL(H5Dread)(dset_id, mem_type_id, mem_space_id, file_space_id, plist_id, buf);
}

/* Setup and teardown (issue "The last silent edges"): the communicator's construction, window
 * and file teardown, the last close of an HDF5 file, and MPI_Finalize. */
int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* newcomm) {
    maybe_fault("MPI_Comm_dup");
    return REAL(MPI_Comm_dup)(comm, newcomm);
}

int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm* newcomm) {
    maybe_fault("MPI_Comm_split_type");
    return REAL(MPI_Comm_split_type)(comm, split_type, key, info, newcomm);
}

int MPI_Win_free(MPI_Win* win) {
    maybe_fault("MPI_Win_free");
    return REAL(MPI_Win_free)(win);
}

int MPI_File_close(MPI_File* fh) {
    maybe_fault("MPI_File_close");
    return REAL(MPI_File_close)(fh);
}

/* Only the close of a file's last open handle counts (the collective one that closes the MPI
 * file), not the closes of extra file handles taken while datasets are open. */
herr_t H5Fclose(hid_t file_id) {
    if (H5Fget_obj_count(file_id, H5F_OBJ_ALL) <= 1) maybe_fault("H5Fclose");
    return REAL(H5Fclose)(file_id);
}

int MPI_Finalize(void) {
    maybe_fault("MPI_Finalize");
    return REAL(MPI_Finalize)();
}
