// Builds the HostBatch of one stream step from the samples chosen out of the queue.
#include <algorithm>
#include <cstring>

#include "loader/batch_builder.hpp"
#include "loader/stream/stream_engine.hpp"

namespace mpistage {

HostBatch detail::StreamEngine::make_batch(const detail::BatchChoice& choice) {
    std::vector<detail::StreamItem> items;
    items.reserve(choice.take.size());
    const std::size_t k = choice.take.size();
    if (k == 0 || choice.take.back() + 1 == k) {
        // The oldest k samples (take is ascending): off the front, the rest stays in place.
        for (std::size_t i = 0; i < k; ++i) items.push_back(std::move(queue[i]));
        queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
        std::vector<bool> taken(queue.size(), false);
        for (auto i : choice.take) {
            taken[i] = true;
            items.push_back(std::move(queue[i]));
        }
        std::deque<detail::StreamItem> rest;
        for (std::size_t i = 0; i < queue.size(); ++i) {
            if (!taken[i]) rest.push_back(std::move(queue[i]));
        }
        queue = std::move(rest);
    }

    const bool budget = options.batch_bytes > 0 || options.batch_tokens > 0;
    const std::size_t slots = budget ? std::max<std::size_t>(1, items.size())
                                     : static_cast<std::size_t>(options.batch_size);
    const auto& infos = source.fields();
    auto store = std::make_shared<detail::BatchStore>();
    store->index.assign(slots, kPaddingId);
    store->valid.assign(slots, 0);
    store->data.resize(infos.size());
    store->offsets.resize(infos.size());
    std::uint64_t max_tokens = 0;
    for (std::size_t f = 0; f < infos.size(); ++f) {
        auto& data = store->data[f];
        if (!infos[f].ragged) {
            data.assign(slots * infos[f].sample_bytes, std::byte{0});
            for (std::size_t j = 0; j < items.size(); ++j) {
                std::memcpy(data.data() + j * infos[f].sample_bytes, items[j].fields[f].data(),
                            infos[f].sample_bytes);
            }
            continue;
        }
        auto& off = store->offsets[f];
        off.assign(slots + 1, 0);
        for (std::size_t j = 0; j < items.size(); ++j) {
            data.insert(data.end(), items[j].fields[f].begin(), items[j].fields[f].end());
            off[j + 1] = static_cast<std::int64_t>(data.size());
        }
        for (std::size_t j = items.size(); j < slots; ++j) off[j + 1] = off[j];
    }
    for (std::size_t j = 0; j < items.size(); ++j) {
        store->index[j] = stream_item_id(items[j].stream, items[j].position);
        store->valid[j] = 1;
        stats.bytes_read += items[j].size_bytes;
        stats.stream.tokens += items[j].tokens;
        max_tokens = std::max(max_tokens, items[j].tokens);
    }
    stats.stream.padding_tokens += max_tokens * items.size();
    for (const auto& it : items) stats.stream.padding_tokens -= it.tokens;
    ++stats.batches;
    stats.valid_samples += items.size();
    stats.padding_slots += slots - items.size();
    stats.oversize_batches += choice.oversize ? 1 : 0;
    last_oversize = choice.oversize;

    return detail::batch_from_store(infos, std::move(store), 0, steps++, items.size());
}

}  // namespace mpistage
