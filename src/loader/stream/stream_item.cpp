// Stream items: validation against the declared fields and the wire format between ranks.
#include "loader/stream/stream_item.hpp"

#include <cstring>

#include "mpistage/error.hpp"

namespace mpistage::detail {

namespace {

void put_u64(std::string& out, std::uint64_t v) {
    char b[8];
    std::memcpy(b, &v, 8);
    out.append(b, 8);
}

std::uint64_t get_u64(const std::string& in, std::size_t& at) {
    if (in.size() - at < 8) throw FormatError("stream: truncated item in a message between ranks");
    std::uint64_t v = 0;
    std::memcpy(&v, in.data() + at, 8);
    at += 8;
    return v;
}

std::string where(std::uint64_t stream, std::uint64_t position) {
    return "stream " + std::to_string(stream) + ", item " + std::to_string(position);
}

}  // namespace

std::uint64_t item_tokens(const std::vector<std::vector<std::byte>>& fields,
                          const std::vector<FieldInfo>& infos, const StreamConfig& options) {
    if (options.batch_tokens == 0) return 0;
    const std::size_t f = options.token_field;
    return fields[f].size() / dtype_size(infos[f].dtype);
}

StreamItem make_item(StreamSample&& sample, const std::vector<FieldInfo>& fields,
                     std::uint64_t stream, std::uint64_t position, const StreamConfig& options) {
    if (sample.fields.size() != fields.size()) {
        throw FormatError("stream: " + where(stream, position) + " has " +
                          std::to_string(sample.fields.size()) + " fields; the source declares " +
                          std::to_string(fields.size()));
    }
    StreamItem item;
    item.stream = stream;
    item.position = position;
    item.key = sample.key;
    for (std::size_t f = 0; f < fields.size(); ++f) {
        const std::uint64_t n = sample.fields[f].size();
        const bool bad =
            fields[f].ragged ? n % dtype_size(fields[f].dtype) != 0 : n != fields[f].sample_bytes;
        if (bad) {
            throw FormatError("stream: " + where(stream, position) + ": field '" + fields[f].name +
                              "' has " + std::to_string(n) + " bytes; expected " +
                              (fields[f].ragged
                                   ? "a multiple of " + std::to_string(dtype_size(fields[f].dtype))
                                   : std::to_string(fields[f].sample_bytes)));
        }
        item.size_bytes += n;
    }
    item.tokens = item_tokens(sample.fields, fields, options);
    item.fields = std::move(sample.fields);
    sample.fields.assign(fields.size(), {});
    return item;
}

void encode_item(const StreamItem& item, std::string& out) {
    put_u64(out, item.stream);
    put_u64(out, item.position);
    put_u64(out, item.key);
    put_u64(out, item.tokens);
    put_u64(out, item.fields.size());
    for (const auto& f : item.fields) {
        put_u64(out, f.size());
        out.append(reinterpret_cast<const char*>(f.data()), f.size());
    }
}

StreamItem decode_one(const std::string& in, std::size_t& at) {
    StreamItem item;
    item.stream = get_u64(in, at);
    item.position = get_u64(in, at);
    item.key = get_u64(in, at);
    item.tokens = get_u64(in, at);
    const std::uint64_t nf = get_u64(in, at);
    item.fields.resize(nf);
    for (auto& f : item.fields) {
        const std::uint64_t n = get_u64(in, at);
        if (in.size() - at < n) throw FormatError("stream: truncated item between ranks");
        f.resize(n);
        if (n > 0) std::memcpy(f.data(), in.data() + at, n);  // an empty field has no data()
        at += n;
        item.size_bytes += n;
    }
    return item;
}

}  // namespace mpistage::detail
