#pragma once
/// @file
/// Test inputs prepared once per build tree instead of once per test process (and per rank):
/// the decompressed Fashion-MNIST IDX files and anything else derived only from files outside
/// the code under test. A prepared file lives in the build tree's cache directory
/// (MPISTAGE_TEST_CACHE_DIR, set by tests/CMakeLists.txt) under a key made of its name and the
/// size and modification time of every source it is made from, so a changed source gives a new
/// file. Creation is safe between concurrent test processes: each writes a temporary file of its
/// own and renames it into place (atomic on one file system), so no reader ever sees a partial
/// file and a lost race only costs the loser its work.
///
/// Nothing here makes an MPI call; MPI tests call these on one rank and broadcast the result
/// (see h5t::fashion_file in h5t_files.hpp). Never cache here what mpistage itself writes (a
/// converter's output): a rebuilt converter would read the stale file of the previous build.

#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

namespace mpistage_test {

/// The Fashion-MNIST directory CMake found (the Debian dataset-fashion-mnist files, *.gz).
inline std::string fashion_mnist_dir() {
    return MPISTAGE_FASHION_MNIST_DIR;
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

/// Not collective. The prepared file `name` made by `make(tmp_path)` from `sources`: returns its
/// path in the cache, making it first when absent (`make` writes the whole file at the path it
/// is given and returns success). Returns "" when a source is missing or `make` fails. Safe to
/// call from concurrent processes; not thread safe within one process.
inline std::string prepared_file(const std::string& name, const std::vector<std::string>& sources,
                                 const std::function<bool(const std::string&)>& make) {
    namespace fs = std::filesystem;
    std::uint64_t key = 1469598103934665603ull;  // FNV-1a over name and sources' identity
    auto mix = [&key](const std::string& s) {
        for (unsigned char c : s) {
            key ^= c;
            key *= 1099511628211ull;
        }
    };
    mix(name);
    for (const auto& src : sources) {
        std::error_code ec;
        const auto size = fs::file_size(src, ec);
        if (ec) return "";
        const auto mtime = fs::last_write_time(src, ec);
        if (ec) return "";
        mix(src + "|" + std::to_string(size) + "|" +
            std::to_string(mtime.time_since_epoch().count()));
    }
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(key));
    const fs::path dir = fs::path(MPISTAGE_TEST_CACHE_DIR) / hex;
    const fs::path out = dir / name;
    std::error_code ec;
    if (fs::is_regular_file(out, ec)) return out.string();
    fs::create_directories(dir, ec);
    const fs::path tmp = dir / (name + ".tmp." + std::to_string(::getpid()));
    if (!make(tmp.string())) {
        fs::remove(tmp, ec);
        return "";
    }
    fs::rename(tmp, out, ec);  // replaces a file another process renamed first: same content
    if (ec) {
        fs::remove(tmp, ec);
        return fs::is_regular_file(out, ec) ? out.string() : "";
    }
    return out.string();
}

/// Not collective. The decompressed Fashion-MNIST file `name` (e.g. "t10k-images-idx3-ubyte",
/// from `<fashion_mnist_dir()>/<name>.gz`), prepared once per build tree; "" when the dataset
/// is absent or cannot be decompressed.
inline std::string fashion_mnist_idx(const std::string& name) {
    const std::string gz = fashion_mnist_dir() + "/" + name + ".gz";
    return prepared_file(name, {gz},
                         [&gz](const std::string& tmp) { return gunzip_file(gz, tmp); });
}

}  // namespace mpistage_test
