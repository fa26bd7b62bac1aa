// libFuzzer target: the DALI index parser and its validation against data, in memory.
// Bytes 0-1 give the length of the index text; the rest is the data file. Invariants checked
// besides memory safety: parsing the text in two slices at any cut yields exactly the lines of
// parsing it whole (each line once), and every kept record lies inside the data.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mpistage/error.hpp"
#include "sources/tfrecord/dali_index.hpp"

using namespace mpistage;

namespace {

bool same(const tfrecord::DaliEntry& a, const tfrecord::DaliEntry& b) {
    return a.offset == b.offset && a.size == b.size && a.malformed == b.malformed &&
           a.file == b.file;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 3) return 0;
    const std::size_t text_len = std::min<std::size_t>(size - 3, (data[0] << 8) | data[1]);
    const std::uint8_t knobs = data[2];
    const std::string_view text(reinterpret_cast<const char*>(data + 3), text_len);
    const std::uint8_t* bytes = data + 3 + text_len;
    const std::size_t nbytes = size - 3 - text_len;

    std::vector<tfrecord::DaliEntry> whole;
    const std::uint64_t lines = tfrecord::parse_dali_lines(text, 0, text.size(), true, 0, whole);
    const std::size_t cut = text.empty() ? 0 : (knobs * 131u) % (text.size() + 1);
    std::vector<tfrecord::DaliEntry> halves;
    const std::uint64_t first = tfrecord::parse_dali_lines(text, 0, cut, true, 0, halves);
    const std::size_t n_first = halves.size();
    const std::uint64_t second =
        tfrecord::parse_dali_lines(text, cut, text.size(), true, 0, halves);
    if (first + second != lines || halves.size() != whole.size()) __builtin_trap();
    for (std::size_t i = 0; i < whole.size(); ++i) {
        if (!same(whole[i], halves[i])) __builtin_trap();
        if (i >= n_first) halves[i].line += first;
        if (halves[i].line != whole[i].line) __builtin_trap();
    }
    for (auto& en : whole) ++en.line;

    const std::vector<tfrecord::ScanFile> files{tfrecord::memory_file("data", bytes, nbytes)};
    tfrecord::ScanOptions o;
    o.on_corrupt = (knobs & 1) != 0 ? OnCorrupt::skip : OnCorrupt::error;
    o.verify_payloads = (knobs & 2) != 0;
    try {
        const auto kept = tfrecord::validate_dali_entries(whole, files, {"index"}, o);
        for (const auto& r : kept.records) {
            if (r.offset + tfrecord::kFramingBytes + r.length > nbytes) __builtin_trap();
        }
        tfrecord::check_dali_tiling(kept.records.data(), kept.records.size(), {nbytes}, {"index"},
                                    {"data"}, o.on_corrupt);
    } catch (const FormatError&) {
    }
    return 0;
}
