// libFuzzer target: the gzip path of TFRecord files: streaming inflate with its framing check
// and limits, then the walk over the decompressed stream, on compressed bytes in memory.
// Every outcome is either records or a FormatError; limits keep each run small.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "mpistage/error.hpp"
#include "sources/tfrecord/framing.hpp"
#include "sources/tfrecord/gzip_stream.hpp"

using namespace mpistage;
using namespace mpistage::tfrecord;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const ScanFile compressed = memory_file("fuzz.gz", data, size);
    for (OnCorrupt policy : {OnCorrupt::error, OnCorrupt::skip}) {
        GzipLimits limits;
        limits.max_decompressed_bytes = std::uint64_t{4} << 20;
        limits.max_decompression_ratio = 2000;
        limits.piece_bytes = 1024 + size % 4096;  // small pieces exercise the refills
        try {
            const auto bytes = inflate_tfrecord("fuzz.gz", size, compressed.read, limits, policy);
            if (bytes.size() > limits.max_decompressed_bytes) __builtin_trap();
            ScanOptions o;
            o.on_corrupt = policy;
            o.verify_payloads = true;
            const std::vector<ScanFile> files{memory_file("fuzz", bytes.data(), bytes.size())};
            const auto scan = walk_cut(files, 0, bytes.size(), o);
            for (const auto& r : scan.records) {
                if (r.offset + kFramingBytes + r.length > bytes.size()) __builtin_trap();
            }
        } catch (const FormatError&) {
        }
    }
    return 0;
}
