// DynamicLoader: budget-sized batches of files with equal steps (see mpistage/dynamic_loader.hpp).
#include "mpistage/dynamic_loader.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "comm/agree.hpp"
#include "mpistage/hash.hpp"

namespace mpistage {

namespace {

/// Owns the memory of one dynamic batch; HostBatch::lease keeps it alive.
struct DynamicBatchStore {
    std::vector<std::int64_t> index;
    std::vector<std::uint8_t> valid;
    std::vector<std::vector<std::byte>> data;
    std::vector<std::vector<std::int64_t>> offsets;
};

/// Fixed fields straight into the batch's contiguous buffer; ragged values per slot, joined
/// after the read (a source may ask for the next slot before writing the previous one).
class DynamicSink final : public BatchSink {
public:
    DynamicSink(const std::vector<FieldInfo>& fields, DynamicBatchStore& store, std::size_t slots)
        : fields_(fields), store_(store), ragged_(fields.size()) {
        for (std::size_t f = 0; f < fields.size(); ++f) {
            if (fields[f].ragged) {
                ragged_[f].resize(slots);
            } else {
                store.data[f].assign(slots * fields[f].sample_bytes, std::byte{0});
            }
        }
    }
    std::byte* fixed(std::size_t field, std::size_t slot) override {
        return store_.data[field].data() + slot * fields_[field].sample_bytes;
    }
    std::byte* ragged(std::size_t field, std::size_t slot, std::uint64_t size_bytes) override {
        auto& v = ragged_[field][slot];
        v.assign(size_bytes, std::byte{0});
        return v.data();
    }
    /// Concatenates the ragged values and writes their offsets (slots + 1 entries).
    void join() {
        for (std::size_t f = 0; f < fields_.size(); ++f) {
            if (!fields_[f].ragged) continue;
            auto& off = store_.offsets[f];
            auto& data = store_.data[f];
            off.assign(ragged_[f].size() + 1, 0);
            for (std::size_t j = 0; j < ragged_[f].size(); ++j) {
                data.insert(data.end(), ragged_[f][j].begin(), ragged_[f][j].end());
                off[j + 1] = static_cast<std::int64_t>(data.size());
            }
        }
    }

private:
    const std::vector<FieldInfo>& fields_;
    DynamicBatchStore& store_;
    std::vector<std::vector<std::vector<std::byte>>> ragged_;
};

}  // namespace

struct DynamicLoader::Impl {
    Impl(const Communicator& c, const Source& s, DynamicLoaderOptions o)
        : comm(c.get()), source(s), options(std::move(o)) {}

    Communicator comm;
    const Source& source;
    DynamicLoaderOptions options;
    DynamicCostFn cost;
    std::uint64_t num_samples = 0;
    std::uint64_t epoch = 0;
    std::uint64_t step = 0;
    bool started = false;
    bool last_oversize = false;
    DynamicEpochPlan plan;
    DynamicLoaderStats stats;

    /// Reads this rank's batch of `step` (or builds a masked one) into `out`. Local.
    void read_step(HostBatch& out);
};

void DynamicLoaderOptions::validate() const {
    plan.validate();
    batching.validate();
    if (timeout.count() < 0) {
        throw ConfigError("dynamic loader: timeout " + std::to_string(timeout.count()) +
                          " s is negative (0 turns the watchdog off)");
    }
}

DynamicCostFn dynamic_cost_function(const Source& source, const DynamicLoaderOptions& options) {
    const auto& fields = source.fields();
    std::uint64_t fixed = 0;
    std::size_t ragged = 0;
    for (const FieldInfo& f : fields) {
        fixed += f.ragged ? 0 : f.sample_bytes;
        ragged += f.ragged ? 1 : 0;
    }
    std::uint64_t element = 1;
    if (options.batching.batch_tokens > 0) {
        const std::size_t t = options.token_field;
        if (t >= fields.size() || !fields[t].ragged) {
            throw ConfigError("dynamic loader: the token field (index " + std::to_string(t) +
                              (t < fields.size() ? ", '" + fields[t].name + "'" : std::string()) +
                              ") is not a ragged field of the source");
        }
        if (ragged != 1) {
            throw ConfigError(
                "dynamic loader: a token budget needs a source with exactly one "
                "ragged field (tokens come from the sample's bytes); this one has " +
                std::to_string(ragged));
        }
        element = std::max<std::uint64_t>(1, dtype_size(fields[t].dtype));
    }
    const Source* src = &source;
    return [src, fixed, element](std::uint64_t id) {
        const std::uint64_t bytes = src->sample_bytes(id);
        return DynamicSampleCost{bytes, (bytes > fixed ? bytes - fixed : 0) / element};
    };
}

DynamicLoader::DynamicLoader(const Communicator& comm, const Source& source,
                             DynamicLoaderOptions options)
    : impl_(std::make_unique<Impl>(comm, source, std::move(options))) {
    Impl& d = *impl_;
    d.comm.set_context({"dynamic loader: construction", -1, -1, "", -1});
    run_agreed(d.comm, [&] {
        d.options.validate();
        d.num_samples = source.num_samples();
        if (d.num_samples == 0) {
            throw ConfigError("dynamic loader: the source has no samples: nothing to shard");
        }
        d.cost = dynamic_cost_function(source, d.options);
    });
    const PlanOptions& p = d.options.plan;
    require_same(d.comm,
                 {{"seed", std::to_string(p.seed)},
                  {"sharding", to_string(p.sharding)},
                  {"shuffle", to_string(p.shuffle)},
                  {"batching", d.options.batching.describe()},
                  {"token_field", std::to_string(d.options.token_field)},
                  {"num_samples", std::to_string(d.num_samples)},
                  {"dataset fingerprint", "hash " + std::to_string(fnv1a64(source.fingerprint()))},
                  {"timeout", std::to_string(d.options.timeout.count()) + " s"}},
                 "dynamic loader: options differ across ranks",
                 "every rank must pass the same options and the same files");
    d.comm.set_timeout(d.options.timeout);
}

DynamicLoader::~DynamicLoader() = default;
DynamicLoader::DynamicLoader(DynamicLoader&&) noexcept = default;
DynamicLoader& DynamicLoader::operator=(DynamicLoader&&) noexcept = default;

void DynamicLoader::start_epoch(std::uint64_t epoch) {
    Impl& d = *impl_;
    d.comm.set_context({"dynamic loader: plan", static_cast<std::int64_t>(epoch), -1, "", -1});
    run_agreed(d.comm, [&] {
        d.plan = plan_dynamic_epoch(d.num_samples, d.comm.size(), d.comm.rank(), d.options.plan,
                                    d.options.batching, epoch, d.cost);
    });
    d.epoch = epoch;
    d.step = 0;
    d.started = true;
}

void DynamicLoader::Impl::read_step(HostBatch& out) {
    const bool real = step < plan.batches.size();
    const std::vector<std::uint64_t> none;
    const std::vector<std::uint64_t>& ids = real ? plan.batches[step].ids : none;
    const std::size_t slots = std::max<std::size_t>(1, ids.size());
    const auto& infos = source.fields();
    auto store = std::make_shared<DynamicBatchStore>();
    store->index.assign(slots, kPaddingId);
    store->valid.assign(slots, 0);
    store->data.resize(infos.size());
    store->offsets.resize(infos.size());
    DynamicSink sink(infos, *store, slots);
    if (!ids.empty()) source.read(ids.data(), ids.size(), sink);
    sink.join();
    for (std::size_t j = 0; j < ids.size(); ++j) {
        store->index[j] = static_cast<std::int64_t>(ids[j]);
        store->valid[j] = 1;
    }
    out = HostBatch();
    out.epoch_ = epoch;
    out.step_ = step;
    out.batch_size_ = slots;
    out.index_ = store->index.data();
    out.valid_ = store->valid.data();
    out.num_valid_ = ids.size();
    for (std::size_t f = 0; f < infos.size(); ++f) {
        HostField hf;
        hf.info = &infos[f];
        hf.data = store->data[f].data();
        hf.size_bytes = store->data[f].size();
        hf.offsets = infos[f].ragged ? store->offsets[f].data() : nullptr;
        out.fields_.push_back(hf);
    }
    out.lease_ = std::move(store);
    last_oversize = real && plan.batches[step].oversize;
    ++stats.batches;
    stats.padding_steps += real ? 0 : 1;
    stats.valid_samples += ids.size();
    stats.bytes_read += real ? plan.batches[step].size_bytes : 0;
    stats.oversize_batches += last_oversize ? 1 : 0;
}

bool DynamicLoader::next(HostBatch& out) {
    Impl& d = *impl_;
    if (!d.started) throw ConfigError("dynamic loader: next() before start_epoch()");
    if (d.step >= d.plan.steps) return false;  // the same on every rank: steps are agreed
    d.comm.set_context({"dynamic loader: agree on batch", static_cast<std::int64_t>(d.epoch),
                        static_cast<std::int64_t>(d.step), "", -1});
    agree_or_throw(d.comm, capture([&] { d.read_step(out); }));
    ++d.step;
    return true;
}

std::uint64_t DynamicLoader::steps() const noexcept {
    return impl_->plan.steps;
}
bool DynamicLoader::last_oversize() const noexcept {
    return impl_->last_oversize;
}
const DynamicEpochPlan& DynamicLoader::plan() const noexcept {
    return impl_->plan;
}
std::uint64_t DynamicLoader::num_samples() const noexcept {
    return impl_->num_samples;
}
const DynamicLoaderStats& DynamicLoader::stats() const noexcept {
    return impl_->stats;
}

}  // namespace mpistage
