#include "sources/tfrecord/gzip_stream.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "mpistage/error.hpp"
#include "sources/tfrecord/crc32c.hpp"
#include "util/byte_order.hpp"

namespace mpistage::tfrecord {

namespace {

/// Move-only owner of a zlib inflate stream (gzip or zlib header auto-detected).
class InflateStream {
public:
    explicit InflateStream(const std::string& name) {
        if (inflateInit2(&zs_, 15 + 32) != Z_OK) {
            throw IoError("tfrecord: " + name + ": inflateInit2 failed");
        }
    }
    InflateStream(const InflateStream&) = delete;
    InflateStream& operator=(const InflateStream&) = delete;
    ~InflateStream() { inflateEnd(&zs_); }
    z_stream& get() noexcept { return zs_; }

private:
    z_stream zs_{};
};

/// Follows record headers through the growing decompressed bytes, checking each length CRC as
/// soon as its 12 bytes are there (payloads are skipped, not read).
class HeaderFollower {
public:
    HeaderFollower(const std::string& name, OnCorrupt on_corrupt)
        : name_(name), on_corrupt_(on_corrupt) {}

    void advance(const std::vector<std::uint8_t>& out) {
        while (!stopped_ && out.size() >= next_ && out.size() - next_ >= kHeaderBytes) {
            const std::uint8_t* h = out.data() + next_;
            const std::uint64_t length = detail::load_le64(h);
            if (detail::load_le32(h + 8) != masked_crc32c(h, 8)) {
                if (on_corrupt_ == OnCorrupt::skip) {
                    stopped_ = true;  // the walk over the whole stream resyncs and counts
                    return;
                }
                throw FormatError("tfrecord: " + name_ +
                                  " (decompressed): not a TFRecord / truncated record at offset " +
                                  std::to_string(next_) +
                                  " (length CRC32C mismatch, length field " +
                                  std::to_string(length) + ")");
            }
            if (length > UINT64_MAX - next_ - kFramingBytes) {
                stopped_ = true;  // cannot fit anywhere; the walk reports it
                return;
            }
            next_ += kFramingBytes + length;
        }
    }

private:
    const std::string& name_;
    OnCorrupt on_corrupt_;
    std::uint64_t next_ = 0;
    bool stopped_ = false;
};

[[noreturn]] void gzip_error(const std::string& name, const std::string& what,
                             std::uint64_t in_offset) {
    throw FormatError("tfrecord: " + name + ": " + what + " near compressed offset " +
                      std::to_string(in_offset));
}

void check_limits(const std::string& name, std::uint64_t out_bytes, std::uint64_t in_bytes,
                  std::uint64_t in_offset, const GzipLimits& limits) {
    if (out_bytes > limits.max_decompressed_bytes) {
        throw FormatError("tfrecord: " + name + ": decompresses to more than " +
                          std::to_string(limits.max_decompressed_bytes) +
                          " bytes (max_decompressed_bytes; stopped near compressed offset " +
                          std::to_string(in_offset) + ")");
    }
    if (limits.max_decompression_ratio != 0 && in_bytes > 0 &&
        out_bytes / in_bytes >= limits.max_decompression_ratio) {
        throw FormatError("tfrecord: " + name + ": decompresses to more than " +
                          std::to_string(limits.max_decompression_ratio) +
                          " times its compressed size of " + std::to_string(in_bytes) +
                          " bytes (max_decompression_ratio; stopped near compressed offset " +
                          std::to_string(in_offset) + ")");
    }
}

}  // namespace

std::vector<std::uint8_t> inflate_tfrecord(const std::string& name, std::uint64_t compressed_bytes,
                                           const ReadAt& read, const GzipLimits& limits,
                                           OnCorrupt on_corrupt) {
    InflateStream stream(name);
    z_stream& zs = stream.get();
    HeaderFollower follower(name, on_corrupt);
    const std::uint64_t piece = std::max<std::uint64_t>(limits.piece_bytes, 1024);
    std::vector<std::uint8_t> in;
    std::vector<std::uint8_t> out;
    std::uint64_t in_offset = 0;  // compressed bytes consumed
    std::uint64_t in_end = 0;     // compressed bytes read into `in`
    bool member_done = false;
    bool out_full = false;  // zlib may hold pending output after filling the buffer
    for (;;) {
        if (zs.avail_in == 0 && in_end < compressed_bytes) {
            in.resize(static_cast<std::size_t>(std::min(piece, compressed_bytes - in_end)));
            read(in_end, in.data(), in.size());
            in_end += in.size();
            zs.next_in = in.data();
            zs.avail_in = static_cast<uInt>(in.size());
        }
        if (member_done) {
            // Another gzip member may follow (zero padding between members is skipped).
            while (zs.avail_in > 0 && *zs.next_in == 0) {
                ++zs.next_in;
                --zs.avail_in;
                ++in_offset;
            }
            if (zs.avail_in == 0) {
                if (in_end >= compressed_bytes) break;
                continue;
            }
            if (inflateReset(&zs) != Z_OK) gzip_error(name, "inflateReset failed", in_offset);
            member_done = false;
        }
        if (zs.avail_in == 0 && !out_full) gzip_error(name, "truncated gzip stream", in_offset);
        const std::size_t old_size = out.size();
        const std::uint64_t room =
            std::min<std::uint64_t>(std::max<std::uint64_t>(old_size, 1u << 16), piece);
        // Geometric growth, but never reserving past the limit (plus one step).
        const std::uint64_t need = old_size + room;
        if (need > out.capacity()) {
            const std::uint64_t cap = std::min<std::uint64_t>(2 * std::uint64_t{out.capacity()},
                                                              limits.max_decompressed_bytes + room);
            out.reserve(static_cast<std::size_t>(std::max(need, cap)));
        }
        out.resize(static_cast<std::size_t>(need));
        zs.next_out = out.data() + old_size;
        zs.avail_out = static_cast<uInt>(room);
        const uInt avail_in_before = zs.avail_in;
        const int rc = inflate(&zs, Z_NO_FLUSH);
        in_offset += avail_in_before - zs.avail_in;
        out_full = zs.avail_out == 0;
        out.resize(out.size() - zs.avail_out);
        if (rc == Z_STREAM_END) {
            member_done = true;
        } else if (rc != Z_OK && !(rc == Z_BUF_ERROR && zs.avail_in == 0)) {
            gzip_error(name,
                       std::string("gzip data corrupt (") +
                           (zs.msg != nullptr ? zs.msg : "error " + std::to_string(rc)) + ")",
                       in_offset);
        }
        check_limits(name, out.size(), compressed_bytes, in_offset, limits);
        follower.advance(out);
    }
    out.shrink_to_fit();
    return out;
}

}  // namespace mpistage::tfrecord
