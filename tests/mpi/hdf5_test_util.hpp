#pragma once
// Shared helpers of the HDF5 / loader / raw / torch MPI tests.
//
// Everything here that makes an MPI call is collective over MPI_COMM_WORLD and must be called by
// every rank at the same point. Known answers come from independent readers: `h5dump` (run on
// rank 0, its output broadcast), plain ifstream/zlib reads, or SOURCES.md, never from mpistage.

#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "mpistage/error.hpp"
#include "mpistage/source.hpp"

namespace h5t {

inline int rank() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

inline int size() {
    int s = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    return s;
}

inline void barrier() { MPI_Barrier(MPI_COMM_WORLD); }

inline std::uint64_t fnv(const std::string& s) {
    std::uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) {
        h ^= c;
        h *= 1099511628211ull;
    }
    return h;
}

inline std::uint64_t allreduce_u64(std::uint64_t v, MPI_Op op) {
    std::uint64_t out = 0;
    MPI_Allreduce(&v, &out, 1, MPI_UINT64_T, op, MPI_COMM_WORLD);
    return out;
}
inline std::uint64_t sum(std::uint64_t v) { return allreduce_u64(v, MPI_SUM); }
inline std::uint64_t min(std::uint64_t v) { return allreduce_u64(v, MPI_MIN); }
inline std::uint64_t max(std::uint64_t v) { return allreduce_u64(v, MPI_MAX); }

/// Collective: true on every rank when `v` is the same on every rank.
inline bool same_on_all_ranks(std::uint64_t v) { return min(v) == max(v); }

/// Collective: true on every rank when every rank passes true.
inline bool all_true(bool b) { return min(b ? 1 : 0) == 1; }

/// Collective broadcast of a string from `root`.
inline std::string bcast(std::string s, int root = 0) {
    std::uint64_t n = s.size();
    MPI_Bcast(&n, 1, MPI_UINT64_T, root, MPI_COMM_WORLD);
    s.resize(n);
    if (n > 0) MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, root, MPI_COMM_WORLD);
    return s;
}

/// Collective: every rank's values, concatenated in rank order, on every rank.
inline std::vector<std::int64_t> allgatherv(const std::vector<std::int64_t>& mine) {
    const int w = size();
    int n = static_cast<int>(mine.size());
    std::vector<int> counts(static_cast<std::size_t>(w)), displs(static_cast<std::size_t>(w));
    MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
    int total = 0;
    for (int r = 0; r < w; ++r) {
        displs[static_cast<std::size_t>(r)] = total;
        total += counts[static_cast<std::size_t>(r)];
    }
    std::vector<std::int64_t> all(static_cast<std::size_t>(total));
    MPI_Allgatherv(mine.data(), n, MPI_INT64_T, all.data(), counts.data(), displs.data(),
                   MPI_INT64_T, MPI_COMM_WORLD);
    return all;
}

inline std::string shell_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) {
        if (c == '\'') out += "'\\''";
        else out += c;
    }
    return out + "'";
}

/// Not collective: runs `cmd` through the shell, returns (exit status, stdout).
inline std::pair<int, std::string> run_command(const std::string& cmd) {
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return {-1, out};
    char buf[4096];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int status = ::pclose(p);
    return {status, out};
}

inline std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

inline std::string join(const std::vector<std::uint64_t>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s;
}

/// Collective: rank 0 runs `h5dump -d /DATASET [-s START -c COUNT] -y -w 0 -m %.17g -o TMP FILE`,
/// the data values (as text tokens) are broadcast to every rank. Empty when h5dump failed.
inline std::vector<std::string> h5dump_values(const std::string& file, const std::string& dataset,
                                              const std::vector<std::uint64_t>& start = {},
                                              const std::vector<std::uint64_t>& count = {}) {
    std::string text;
    if (rank() == 0) {
        char tmpl[] = "/tmp/mpistage_h5dump_XXXXXX";
        const int fd = ::mkstemp(tmpl);
        if (fd >= 0) {
            ::close(fd);
            std::string cmd = "h5dump -d " + shell_quote("/" + dataset);
            if (!start.empty()) cmd += " -s " + join(start) + " -c " + join(count);
            cmd += " -y -w 0 -m %.17g -o " + shell_quote(tmpl) + " " + shell_quote(file) +
                   " >/dev/null 2>&1";
            const auto [status, out] = run_command(cmd);
            text = status == 0 ? read_file(tmpl) : std::string();
            if (text.empty()) text = " ";
            std::remove(tmpl);
        }
    }
    text = bcast(text, 0);
    std::vector<std::string> tokens;
    std::string cur;
    for (char c : text) {
        if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r') {
            if (!cur.empty()) tokens.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    if (!cur.empty()) tokens.push_back(cur);
    return tokens;
}

template <class T>
std::vector<T> parse_as(const std::vector<std::string>& tokens) {
    std::vector<T> out;
    out.reserve(tokens.size());
    for (const auto& t : tokens) {
        if constexpr (std::is_floating_point_v<T>) {
            out.push_back(static_cast<T>(std::strtod(t.c_str(), nullptr)));
        } else if constexpr (std::is_signed_v<T>) {
            out.push_back(static_cast<T>(std::strtoll(t.c_str(), nullptr, 10)));
        } else {
            out.push_back(static_cast<T>(std::strtoull(t.c_str(), nullptr, 10)));
        }
    }
    return out;
}

/// A BatchSink over one contiguous buffer per field; slot k of field f lives at
/// `pos[k] * sample_bytes` (identity when `pos` is empty), so tests can scatter slots.
class VectorSink final : public mpistage::BatchSink {
public:
    VectorSink(const std::vector<mpistage::FieldInfo>& fields, std::size_t slots,
               std::vector<std::size_t> pos = {})
        : fields_(fields), pos_(std::move(pos)) {
        for (const auto& f : fields) bufs_.emplace_back(f.sample_bytes * slots, std::byte{0xAB});
    }
    std::byte* fixed(std::size_t field, std::size_t slot) override {
        const std::size_t p = pos_.empty() ? slot : pos_[slot];
        return bufs_[field].data() + p * fields_[field].sample_bytes;
    }
    std::byte* ragged(std::size_t, std::size_t, std::uint64_t) override {
        throw mpistage::ConfigError("VectorSink: no ragged fields in these tests");
    }
    template <class T>
    T value(std::size_t field, std::size_t position, std::size_t element = 0) const {
        T v;
        std::memcpy(&v, bufs_[field].data() + position * fields_[field].sample_bytes +
                            element * sizeof(T),
                    sizeof(T));
        return v;
    }
    const std::vector<std::byte>& buffer(std::size_t field) const { return bufs_[field]; }

private:
    std::vector<mpistage::FieldInfo> fields_;
    std::vector<std::size_t> pos_;
    std::vector<std::vector<std::byte>> bufs_;
};

/// Outcome of a call that is expected to throw the same error on every rank.
struct Outcome {
    bool threw = false;
    bool right_type = false;
    int kind = 0;
    std::string message;
};

/// Runs `fn` (which may make collective calls), catching what it throws.
template <class E, class Fn>
Outcome catch_error(Fn&& fn) {
    Outcome o;
    try {
        fn();
    } catch (const E& e) {
        o.threw = o.right_type = true;
        o.kind = static_cast<int>(e.kind());
        o.message = e.what();
    } catch (const mpistage::Error& e) {
        o.threw = true;
        o.kind = static_cast<int>(e.kind());
        o.message = e.what();
    } catch (const std::exception& e) {
        o.threw = true;
        o.kind = -1;
        o.message = e.what();
    }
    return o;
}

/// Collective: checks that `o` is an error of the expected type with the same kind and message
/// on every rank, and that the message contains every string of `must_contain`.
inline void expect_same_error(const Outcome& o, const char* type_name,
                              const std::vector<std::string>& must_contain) {
    EXPECT_TRUE(o.threw) << "rank " << rank() << ": expected " << type_name << ", nothing thrown";
    EXPECT_TRUE(o.right_type) << "rank " << rank() << ": expected " << type_name
                              << ", got kind " << o.kind << ": " << o.message;
    for (const auto& s : must_contain) {
        EXPECT_NE(o.message.find(s), std::string::npos)
            << "rank " << rank() << ": message lacks '" << s << "': " << o.message;
    }
    EXPECT_TRUE(same_on_all_ranks(static_cast<std::uint64_t>(o.kind + 16)))
        << "error kinds differ across ranks; rank " << rank() << " has " << o.kind;
    EXPECT_TRUE(same_on_all_ranks(fnv(o.message)))
        << "messages differ across ranks; rank " << rank() << ": " << o.message;
}

#define H5T_EXPECT_SAME_ERROR(Type, call, ...)                                        \
    ::h5t::expect_same_error(::h5t::catch_error<Type>([&] { call; }), #Type, {__VA_ARGS__})

/// A directory created by rank 0 and removed by rank 0 at destruction (collective both ways).
class TempDir {
public:
    TempDir() {
        std::string p;
        if (rank() == 0) {
            char tmpl[] = "/tmp/mpistage_h5t_XXXXXX";
            const char* d = ::mkdtemp(tmpl);
            p = d ? d : "";
        }
        path_ = bcast(p, 0);
    }
    ~TempDir() {
        if (path_.empty()) return;
        if (!collective_) {
            if (owner_) {
                std::error_code ec;
                std::filesystem::remove_all(path_, ec);
            }
            return;
        }
        barrier();
        if (rank() == 0) {
            std::error_code ec;
            std::filesystem::remove_all(path_, ec);
        }
        barrier();
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::string& path() const { return path_; }
    std::string file(const std::string& name) const { return path_ + "/" + name; }
    /// For process-lifetime directories removed after MPI_Finalize (by rank 0 only).
    void detach_from_mpi() {
        collective_ = false;
        owner_ = rank() == 0;
    }

private:
    std::string path_;
    bool collective_ = true;
    bool owner_ = false;
};

// ---- writing test files with the serial HDF5 C API (rank 0 only) ----------------------------

struct DatasetSpec {
    std::string name;
    hid_t file_type;                 // e.g. H5T_STD_U8LE, H5T_STD_I64BE
    hid_t mem_type;                  // e.g. H5T_NATIVE_UINT8
    std::vector<hsize_t> dims;
    const void* data;
    std::vector<hsize_t> chunk;      // empty: contiguous
    int gzip = 0;
};

/// Not collective: writes `specs` into a new file with the default (serial) driver. True on
/// success.
inline bool write_hdf5(const std::string& path, const std::vector<DatasetSpec>& specs) {
    const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) return false;
    bool ok = true;
    for (const auto& s : specs) {
        const hid_t space = H5Screate_simple(static_cast<int>(s.dims.size()), s.dims.data(), nullptr);
        const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        if (!s.chunk.empty()) {
            H5Pset_chunk(dcpl, static_cast<int>(s.chunk.size()), s.chunk.data());
            if (s.gzip > 0) H5Pset_deflate(dcpl, static_cast<unsigned>(s.gzip));
        }
        const hid_t ds = H5Dcreate2(file, s.name.c_str(), s.file_type, space, H5P_DEFAULT, dcpl,
                                    H5P_DEFAULT);
        ok = ok && ds >= 0 &&
             H5Dwrite(ds, s.mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.data) >= 0;
        if (ds >= 0) H5Dclose(ds);
        H5Pclose(dcpl);
        H5Sclose(space);
    }
    return H5Fclose(file) >= 0 && ok;
}

/// Not collective: gunzips `gz` into `out` with zlib. True on success.
inline bool gunzip_file(const std::string& gz, const std::string& out) {
    gzFile in = gzopen(gz.c_str(), "rb");
    if (!in) return false;
    std::ofstream o(out, std::ios::binary);
    std::vector<char> buf(1 << 20);
    int n = 0;
    bool ok = true;
    while ((n = gzread(in, buf.data(), static_cast<unsigned>(buf.size()))) > 0) {
        o.write(buf.data(), n);
    }
    if (n < 0) ok = false;
    gzclose(in);
    o.close();
    return ok && o.good();
}

// ---- the generated "MNIST-like" dataset: row i is a known function of i -------------------

constexpr std::size_t kPixels = 28 * 28;

inline std::uint8_t gen_pixel(std::uint64_t i, std::size_t k) {
    return static_cast<std::uint8_t>((i * 131u + k * 7u + (i >> 8) * 17u + (k >> 5) * (i & 3)) &
                                     0xFF);
}
inline std::int64_t gen_label(std::uint64_t i) { return static_cast<std::int64_t>(i * 7 + 3); }

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
        DatasetSpec img{"images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {n, 28, 28}, images.data(), {}, 0};
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

/// Process-lifetime files shared by several tests (created on first use, collectively; every
/// rank runs the same tests in the same order, so first use is the same point on every rank).
struct SharedFiles {
    TempDir dir;
    std::string generated_contiguous;   // N = kGeneratedRows, contiguous
    std::string generated_chunked;      // N = kGeneratedRows, chunked + gzip
    std::string fashion_h5;             // Fashion-MNIST t10k as HDF5 (images [N,28,28], labels [N])
    std::string fashion_images_idx;     // decompressed t10k images IDX
    std::string fashion_labels_idx;     // decompressed t10k labels IDX
    std::string fashion_how;            // how fashion_h5 was made
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
    DatasetSpec di{"images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {n, 28, 28}, img.data() + 16,
                   {100, 28, 28}, 4};
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
        f->fashion_h5 = f->dir.file("fashion_t10k.h5");
        f->fashion_images_idx = f->dir.file("t10k-images-idx3-ubyte");
        f->fashion_labels_idx = f->dir.file("t10k-labels-idx1-ubyte");
        bool ok = make_generated_file(f->generated_contiguous, kGeneratedRows, false);
        ok = make_generated_file(f->generated_chunked, kGeneratedRows, true) && ok;
        int fm = 1;
        std::string how;
        if (rank() == 0) {
            const std::string dir = MPISTAGE_FASHION_MNIST_DIR;
            fm = gunzip_file(dir + "/t10k-images-idx3-ubyte.gz", f->fashion_images_idx) &&
                 gunzip_file(dir + "/t10k-labels-idx1-ubyte.gz", f->fashion_labels_idx);
            if (fm) {
                // Preferred: the project's own converter. It calls MPI_Init itself, so it runs
                // as a singleton with the launcher's environment removed; when that fails the
                // file is written with the HDF5 C API instead.
                const std::string cli = MPISTAGE_CLI;
                if (file_exists(cli)) {
                    const std::string cmd =
                        "env -i PATH=/usr/bin:/bin HOME=/tmp OMPI_ALLOW_RUN_AS_ROOT=1 "
                        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 " + shell_quote(cli) +
                        " convert idx " + shell_quote(dir + "/t10k-images-idx3-ubyte.gz") + " " +
                        shell_quote(dir + "/t10k-labels-idx1-ubyte.gz") + " -o " +
                        shell_quote(f->fashion_h5) + " >/dev/null 2>&1";
                    if (std::system(cmd.c_str()) == 0 && file_exists(f->fashion_h5)) how = "mpistage convert idx";
                }
                if (how.empty()) {
                    fm = idx_to_hdf5(f->fashion_images_idx, f->fashion_labels_idx, f->fashion_h5);
                    how = "HDF5 C API";
                }
            }
        }
        MPI_Bcast(&fm, 1, MPI_INT, 0, MPI_COMM_WORLD);
        f->fashion_how = bcast(how, 0);
        f->ok = ok && fm == 1;
        testing::AddGlobalTestEnvironment(new RemoveDirAtTearDown(f->dir.path(), rank() == 0));
        return f;
    }();
    return *files;
}

}  // namespace h5t
