// libFuzzer target: TFRecord framing, resync and the split agreement over bytes in memory.
// Byte 0 picks the options (policy, payload checks, scan window, simulated world size); the
// rest is the file. Invariants checked besides memory safety: the split at W ranks finds
// exactly the sequential scan's records and skip counts, and fails exactly when it fails.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "mpistage/error.hpp"
#include "sources/tfrecord/framing.hpp"

using namespace mpistage;
using namespace mpistage::tfrecord;

namespace {

struct Outcome {
    bool failed = false;
    std::vector<RecordRef> records;
    std::uint64_t skipped = 0;
    std::uint64_t skipped_bytes = 0;
};

template <class Fn>
Outcome run(Fn fn) {
    Outcome out;
    try {
        for (const auto& s : fn()) {
            out.records.insert(out.records.end(), s.records.begin(), s.records.end());
            out.skipped += s.skipped;
            out.skipped_bytes += s.skipped_bytes;
        }
    } catch (const FormatError&) {
        out.failed = true;
    }
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    const std::uint8_t knobs = data[0];
    ScanOptions o;
    o.on_corrupt = (knobs & 1) != 0 ? OnCorrupt::skip : OnCorrupt::error;
    o.verify_payloads = (knobs & 2) != 0;
    o.window_bytes = (knobs & 4) != 0 ? 64 : 4096;
    const int world = 1 + ((knobs >> 3) & 7);
    const std::vector<ScanFile> files{memory_file("fuzz", data + 1, size - 1)};
    const Outcome seq = run([&] { return std::vector<CutScan>{walk_cut(files, 0, size - 1, o)}; });
    const Outcome split = run([&] { return simulate_split(files, world, o); });
    if (seq.failed != split.failed) __builtin_trap();
    if (seq.failed) return 0;
    if (seq.skipped != split.skipped || seq.skipped_bytes != split.skipped_bytes) __builtin_trap();
    if (seq.records.size() != split.records.size()) __builtin_trap();
    for (std::size_t i = 0; i < seq.records.size(); ++i) {
        const auto& a = seq.records[i];
        const auto& b = split.records[i];
        if (a.offset != b.offset || a.length != b.length || a.file != b.file) __builtin_trap();
        if (a.offset + kFramingBytes + a.length > size - 1) __builtin_trap();
    }
    return 0;
}
