#pragma once
// One item of a stream inside the loader: where it came from, its key, its field bytes, and the
// wire format in which `hash` routing and `rebalance` move items between ranks.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "loader/stream/stream_config.hpp"
#include "mpistage/source.hpp"

namespace mpistage::detail {

struct StreamItem {
    std::uint64_t stream = 0;
    std::uint64_t position = 0;
    std::uint64_t key = 0;
    /// Payload bytes of all fields.
    std::uint64_t size_bytes = 0;
    /// Elements of the token field (0 without a token budget).
    std::uint64_t tokens = 0;
    std::vector<std::vector<std::byte>> fields;
    /// Received from another rank by `rebalance` (not on the wire): such an item is yielded
    /// here, never sent on, so a stream's items reach every rank in the order they were read.
    bool rebalanced = false;
};

/// Local: moves `sample` into an item after checking it against `fields` (count, fixed sizes,
/// ragged element multiples). @throws FormatError naming the stream, position and field.
StreamItem make_item(StreamSample&& sample, const std::vector<FieldInfo>& fields,
                     std::uint64_t stream, std::uint64_t position, const StreamConfig& options);

/// Local: appends the wire form of `item` to `out`.
void encode_item(const StreamItem& item, std::string& out);
/// Local: decodes every item of `in` (concatenated wire forms) and appends them to `out`.
/// @throws FormatError when `in` is truncated.
template <class Container>
void decode_items(const std::string& in, Container& out);

/// Tokens of a sample's `token_field` (elements), 0 when no token budget is set.
std::uint64_t item_tokens(const std::vector<std::vector<std::byte>>& fields,
                          const std::vector<FieldInfo>& infos, const StreamConfig& options);

/// Internal helper of decode_items: decodes one item at `at`, advancing it.
StreamItem decode_one(const std::string& in, std::size_t& at);

template <class Container>
void decode_items(const std::string& in, Container& out) {
    std::size_t at = 0;
    while (at < in.size()) out.push_back(decode_one(in, at));
}

}  // namespace mpistage::detail
