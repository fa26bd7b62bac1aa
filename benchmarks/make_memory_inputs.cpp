// Inputs of benchmarks/memory_rss.sh (per-rank peak RSS against N):
//   make_memory_inputs hdf5 PATH N       dataset "x" of N uint8 rows, chunked (2^20 rows a
//                                        chunk), no chunk written: reads give the fill value
//                                        (0) and the file is a few KB whatever N is
//   make_memory_inputs tfrecord PATH N   N TFRecord records of a one-byte payload (17 bytes
//                                        each with framing: 1.7 GB at N = 10^8)
#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sources/tfrecord/crc32c.hpp"

namespace {

int write_hdf5(const std::string& path, std::uint64_t n) {
    const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) return 1;
    const hsize_t dims[1] = {n};
    const hsize_t chunk[1] = {std::min<hsize_t>(n, hsize_t{1} << 20)};
    const hid_t space = H5Screate_simple(1, dims, nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, chunk);
    const hid_t ds = H5Dcreate2(file, "x", H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    const bool ok = ds >= 0;
    if (ds >= 0) H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    return H5Fclose(file) >= 0 && ok ? 0 : 1;
}

int write_tfrecord(const std::string& path, std::uint64_t n) {
    // One record: uint64 length, uint32 masked CRC32C(length), payload, uint32 masked CRC(payload).
    unsigned char rec[17];
    const std::uint64_t length = 1;
    std::memcpy(rec, &length, 8);  // little-endian hosts only (x86-64, aarch64)
    const std::uint32_t lcrc = mpistage::masked_crc32c(rec, 8);
    std::memcpy(rec + 8, &lcrc, 4);
    rec[12] = 7;
    const std::uint32_t dcrc = mpistage::masked_crc32c(rec + 12, 1);
    std::memcpy(rec + 13, &dcrc, 4);
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return 1;
    constexpr std::uint64_t kPerBlock = std::uint64_t{1} << 16;
    std::vector<unsigned char> block(kPerBlock * sizeof rec);
    for (std::uint64_t k = 0; k < kPerBlock; ++k) std::memcpy(&block[k * sizeof rec], rec, sizeof rec);
    for (std::uint64_t done = 0; done < n;) {
        const std::uint64_t m = std::min(kPerBlock, n - done);
        if (std::fwrite(block.data(), sizeof rec, m, f) != m) {
            std::fclose(f);
            return 1;
        }
        done += m;
    }
    return std::fclose(f) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s hdf5|tfrecord PATH N\n", argv[0]);
        return 2;
    }
    const std::string kind = argv[1];
    const std::uint64_t n = std::strtoull(argv[3], nullptr, 10);
    if (n == 0) return 2;
    if (kind == "hdf5") return write_hdf5(argv[2], n);
    if (kind == "tfrecord") return write_tfrecord(argv[2], n);
    std::fprintf(stderr, "%s: unknown kind '%s'\n", argv[0], argv[1]);
    return 2;
}
