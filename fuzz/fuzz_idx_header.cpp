// libFuzzer target: the two IDX header parsers, fed the same bytes.
//   parse_idx_header (src/sources/raw/raw_source.cpp): the header of a file RawSource stages;
//   read_idx_any (src/cli/convert.cpp): a whole (possibly gzip'd) IDX file for `convert idx`.
// Both take a path, not a buffer, so each input goes into one memfd (memory, no disk) that both
// open through /proc/self/fd/N. Errors must be mpistage::Error; anything else (another
// exception, a sanitizer report) is a finding. Differential check: on plain (not gzip) input
// the parsers must agree on acceptance and, when both accept, on dtype and shape.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "mpistage/convert.hpp"
#include "mpistage/error.hpp"
#include "mpistage/raw_source.hpp"

namespace {

/// The path of a memfd holding exactly `data`; the same fd is reused for every input.
std::string memfd_with(const std::uint8_t* data, std::size_t size) {
    static const int fd = memfd_create("fuzz_idx", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, 0) != 0) std::abort();
    std::size_t done = 0;
    while (done < size) {
        const ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
        if (n <= 0) std::abort();
        done += static_cast<std::size_t>(n);
    }
    return "/proc/self/fd/" + std::to_string(fd);
}

template <class F>
auto accepted(F&& parse) -> std::optional<decltype(parse())> {
    try {
        return parse();
    } catch (const mpistage::Error&) {
        return std::nullopt;  // a clean rejection: FormatError / IoError naming the file
    }
}

[[noreturn]] void finding(const char* what) {
    std::fprintf(stderr, "fuzz_idx_header: %s\n", what);
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string path = memfd_with(data, size);
    const auto header = accepted([&] { return mpistage::parse_idx_header(path, "f"); });
    const auto whole = accepted([&] { return mpistage::read_idx_any(path); });
    const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    if (gzip) {
        if (header) finding("parse_idx_header accepted gzip input");
        return 0;
    }
    if (header.has_value() != whole.has_value()) {
        finding(header ? "parse_idx_header accepts what read_idx_any rejects"
                       : "read_idx_any accepts what parse_idx_header rejects");
    }
    if (!header) return 0;
    if (header->dtype != whole->dtype || whole->dims.empty() ||
        whole->dims[0] != header->num_records ||
        whole->dims.size() != header->sample_shape.size() + 1) {
        finding("parsers disagree on dtype or shape");
    }
    for (std::size_t d = 0; d < header->sample_shape.size(); ++d) {
        if (static_cast<std::uint64_t>(header->sample_shape[d]) != whole->dims[d + 1]) {
            finding("parsers disagree on a dimension");
        }
    }
    const std::uint64_t sample = header->num_records == 0 ? 0 : whole->data.size() / header->num_records;
    if (header->header_bytes + whole->data.size() != size ||
        sample * header->num_records != whole->data.size()) {
        finding("read_idx_any's data does not match the header's byte count");
    }
    return 0;
}
