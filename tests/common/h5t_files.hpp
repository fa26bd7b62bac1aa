#pragma once
// Part of the shared MPI test helpers (namespace h5t, see tests/mpi/hdf5_test_util.hpp): test
// files written with the serial HDF5 C API and zlib on rank 0, the generated "MNIST-like"
// dataset, and the process-lifetime files shared by several tests (shared_files()).

#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "h5t_h5dump.hpp"
#include "h5t_mpi.hpp"
#include "prepared_data.hpp"

namespace h5t {

// ---- writing test files with the serial HDF5 C API (rank 0 only) ----------------------------

struct DatasetSpec {
    std::string name;
    hid_t file_type;  // e.g. H5T_STD_U8LE, H5T_STD_I64BE
    hid_t mem_type;   // e.g. H5T_NATIVE_UINT8
    std::vector<hsize_t> dims;
    const void* data;
    std::vector<hsize_t> chunk;  // empty: contiguous
    int gzip = 0;
};

/// Not collective: writes `specs` into a new file with the default (serial) driver. True on
/// success.
inline bool write_hdf5(const std::string& path, const std::vector<DatasetSpec>& specs) {
    const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) return false;
    bool ok = true;
    for (const auto& s : specs) {
        const hid_t space =
            H5Screate_simple(static_cast<int>(s.dims.size()), s.dims.data(), nullptr);
        const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        if (!s.chunk.empty()) {
            H5Pset_chunk(dcpl, static_cast<int>(s.chunk.size()), s.chunk.data());
            if (s.gzip > 0) H5Pset_deflate(dcpl, static_cast<unsigned>(s.gzip));
        }
        const hid_t ds =
            H5Dcreate2(file, s.name.c_str(), s.file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        ok = ok && ds >= 0 && H5Dwrite(ds, s.mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.data) >= 0;
        if (ds >= 0) H5Dclose(ds);
        H5Pclose(dcpl);
        H5Sclose(space);
    }
    return H5Fclose(file) >= 0 && ok;
}

// ---- the generated "MNIST-like" dataset: row i is a known function of i -------------------

constexpr std::size_t kPixels = 28 * 28;

inline std::uint8_t gen_pixel(std::uint64_t i, std::size_t k) {
    return static_cast<std::uint8_t>((i * 131u + k * 7u + (i >> 8) * 17u + (k >> 5) * (i & 3)) &
                                     0xFF);
}
inline std::int64_t gen_label(std::uint64_t i) {
    return static_cast<std::int64_t>(i * 7 + 3);
}

/// Collective: rank 0 writes `images` uint8 [n,28,28] and `labels` int64 big-endian [n] with
/// the functions above (contiguous, or chunked + gzip), then every rank waits. Returns success
/// (same on every rank).
inline bool make_generated_file(const std::string& path, std::uint64_t n, bool chunked_gzip) {
    int ok = 1;
    if (rank() == 0) {
        std::vector<std::uint8_t> images(n * kPixels);
        std::vector<std::int64_t> labels(n);
        for (std::uint64_t i = 0; i < n; ++i) {
            for (std::size_t k = 0; k < kPixels; ++k) images[i * kPixels + k] = gen_pixel(i, k);
            labels[i] = gen_label(i);
        }
        DatasetSpec img{"images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {n, 28, 28}, images.data(), {},
                        0};
        DatasetSpec lab{"labels", H5T_STD_I64BE, H5T_NATIVE_INT64, {n}, labels.data(), {}, 0};
        if (chunked_gzip) {
            img.chunk = {std::min<hsize_t>(n, 10), 28, 28};
            img.gzip = 4;
            lab.chunk = {std::min<hsize_t>(n, 16)};
            lab.gzip = 4;
        }
        ok = write_hdf5(path, {img, lab}) ? 1 : 0;
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return ok == 1;
}

/// Collective: the decompressed Fashion-MNIST file `name` (e.g. "train-labels-idx1-ubyte"),
/// prepared once per build tree by rank 0 (tests/common/prepared_data.hpp); read only. The
/// same path on every rank; "" on every rank when the dataset is absent.
inline std::string fashion_file(const std::string& name) {
    return bcast(rank() == 0 ? mpistage_test::fashion_mnist_idx(name) : std::string(), 0);
}

/// Process-lifetime files shared by several tests (created on first use, collectively; every
/// rank runs the same tests in the same order, so first use is the same point on every rank).
struct SharedFiles {
    TempDir dir;
    std::string generated_contiguous;  // N = kGeneratedRows, contiguous
    std::string generated_chunked;     // N = kGeneratedRows, chunked + gzip
    // Fashion-MNIST t10k, prepared once per build tree (read only: shared by every test process)
    std::string fashion_h5;          // as HDF5 (images uint8 [N,28,28], labels uint8 [N])
    std::string fashion_images_idx;  // decompressed images IDX
    std::string fashion_labels_idx;  // decompressed labels IDX
    std::string fashion_how;         // how fashion_h5 was made
    bool ok = false;
};

constexpr std::uint64_t kGeneratedRows = 157;

inline bool file_exists(const std::string& p) {
    std::error_code ec;
    return std::filesystem::is_regular_file(p, ec);
}

/// Writes the Fashion-MNIST IDX arrays as HDF5 with the serial HDF5 C API (rank 0 only).
inline bool idx_to_hdf5(const std::string& images_idx, const std::string& labels_idx,
                        const std::string& out) {
    const std::string img = read_file(images_idx);
    const std::string lab = read_file(labels_idx);
    if (img.size() < 16 || lab.size() < 8) return false;
    const hsize_t n = (lab.size() - 8);
    if (img.size() != 16 + n * kPixels) return false;
    DatasetSpec di{
        "images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {n, 28, 28}, img.data() + 16, {100, 28, 28}, 4};
    DatasetSpec dl{"labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, {n}, lab.data() + 8, {}, 0};
    return write_hdf5(out, {di, dl});
}

/// Removes a directory at the end of RUN_ALL_TESTS (before the shared main's final allreduce,
/// so a failing run that mpirun tears down early leaves nothing behind). Not collective.
class RemoveDirAtTearDown final : public testing::Environment {
public:
    RemoveDirAtTearDown(std::string path, bool owner) : path_(std::move(path)), owner_(owner) {}
    void TearDown() override {
        if (!owner_ || path_.empty()) return;
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }

private:
    std::string path_;
    bool owner_;
};

inline SharedFiles& shared_files() {
    // Destroyed at exit, after MPI_Finalize: rank 0 then removes the directory (no MPI call).
    static std::unique_ptr<SharedFiles> files = [] {
        auto f = std::make_unique<SharedFiles>();
        f->dir.detach_from_mpi();
        f->generated_contiguous = f->dir.file("generated_contiguous.h5");
        f->generated_chunked = f->dir.file("generated_chunked_gzip.h5");
        bool ok = make_generated_file(f->generated_contiguous, kGeneratedRows, false);
        ok = make_generated_file(f->generated_chunked, kGeneratedRows, true) && ok;
        int fm = 1;
        std::string how;
        if (rank() == 0) {
            // Prepared once per build tree (tests/common/prepared_data.hpp), not per process:
            // the IDX files gunzipped, the HDF5 copy written from them with the HDF5 C API (an
            // independent writer; the project's converter is tested by FormatsAgree and e2e).
            f->fashion_images_idx = mpistage_test::fashion_mnist_idx("t10k-images-idx3-ubyte");
            f->fashion_labels_idx = mpistage_test::fashion_mnist_idx("t10k-labels-idx1-ubyte");
            const std::string dir = mpistage_test::fashion_mnist_dir();
            if (!f->fashion_images_idx.empty() && !f->fashion_labels_idx.empty()) {
                f->fashion_h5 = mpistage_test::prepared_file(
                    "fashion_t10k.h5",
                    {dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz"},
                    [&f](const std::string& tmp) {
                        return idx_to_hdf5(f->fashion_images_idx, f->fashion_labels_idx, tmp);
                    });
            }
            fm = f->fashion_h5.empty() ? 0 : 1;
            how = "HDF5 C API, prepared once per build tree";
        }
        MPI_Bcast(&fm, 1, MPI_INT, 0, MPI_COMM_WORLD);
        f->fashion_how = bcast(how, 0);
        f->fashion_h5 = bcast(f->fashion_h5, 0);
        f->fashion_images_idx = bcast(f->fashion_images_idx, 0);
        f->fashion_labels_idx = bcast(f->fashion_labels_idx, 0);
        f->ok = ok && fm == 1;
        testing::AddGlobalTestEnvironment(new RemoveDirAtTearDown(f->dir.path(), rank() == 0));
        return f;
    }();
    return *files;
}

}  // namespace h5t
