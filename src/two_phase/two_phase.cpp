// Two-phase reads: read the step's samples of this rank's slab in id order, route them with one
// exchange, and fill the slot from what the other ranks sent.
//
// Message from rank r to rank q for one step: one status byte (0: fine, 1: r failed and sends
// nothing else), then for each sample of q's batch (in batch order) that lies in r's slab: its
// id (uint64) and, per field in the source's order, the fixed bytes or a uint64 length and the
// ragged bytes. Integers are in the machines' native order (the job's ranks share one).
#include "two_phase/two_phase.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <string_view>

#include "comm/agree.hpp"
#include "pipeline/fill.hpp"

namespace mpistage::detail {

namespace {

constexpr char kFine = 0;
constexpr char kFailed = 1;

void append_bytes(std::string& out, const void* p, std::size_t n) {
    if (n > 0) out.append(static_cast<const char*>(p), n);
}

void append_u64(std::string& out, std::uint64_t v) {
    append_bytes(out, &v, sizeof v);
}

/// The samples this rank read, per field, indexed by read order (any write order accepted).
class StagingSink final : public BatchSink {
public:
    /// `data`: one buffer per field, kept by the caller from step to step (capacity reused).
    StagingSink(const std::vector<FieldInfo>& fields, std::size_t count,
                std::vector<std::vector<std::byte>>& data)
        : fields_(fields), data_(data), parts_(fields.size()) {
        data_.resize(fields.size());
        for (std::size_t f = 0; f < fields.size(); ++f) {
            if (fields[f].ragged) {
                data_[f].clear();
                parts_[f].start.assign(count, 0);
                parts_[f].length.assign(count, 0);
            } else {
                data_[f].resize(count * fields[f].sample_bytes);
            }
        }
    }
    std::byte* fixed(std::size_t f, std::size_t k) override {
        return data_[f].data() + k * fields_[f].sample_bytes;
    }
    std::byte* ragged(std::size_t f, std::size_t k, std::uint64_t size_bytes) override {
        Part& p = parts_[f];
        const std::size_t at = data_[f].size();
        data_[f].resize(at + size_bytes);
        p.start[k] = at;
        p.length[k] = size_bytes;
        return data_[f].data() + at;
    }
    /// Appends sample `k` (fixed bytes; ragged: length, then bytes) of every field to `out`.
    void append(std::size_t k, std::string& out) const {
        for (std::size_t f = 0; f < fields_.size(); ++f) {
            const Part& p = parts_[f];
            if (fields_[f].ragged) {
                append_u64(out, p.length[k]);
                append_bytes(out, data_[f].data() + p.start[k], p.length[k]);
            } else {
                append_bytes(out, data_[f].data() + k * fields_[f].sample_bytes,
                             fields_[f].sample_bytes);
            }
        }
    }

private:
    struct Part {  // ragged fields: where sample k lies in data_[f]
        std::vector<std::uint64_t> start;
        std::vector<std::uint64_t> length;
    };
    const std::vector<FieldInfo>& fields_;
    std::vector<std::vector<std::byte>>& data_;
    std::vector<Part> parts_;
};

/// Reads one rank's message in order; every overrun is a FormatError naming sender and step.
class MessageReader {
public:
    MessageReader(std::string_view message, std::size_t& at, int from, std::uint64_t step)
        : message_(message), at_(at), from_(from), step_(step) {}
    const char* take(std::uint64_t n) {
        if (message_.size() - at_ < n) {
            throw FormatError("two-phase: the message of rank " + std::to_string(from_) +
                              " for step " + std::to_string(step_) + " ends at byte " +
                              std::to_string(message_.size()) + ", " + std::to_string(n) +
                              " bytes needed at byte " + std::to_string(at_));
        }
        const char* p = message_.data() + at_;
        at_ += static_cast<std::size_t>(n);
        return p;
    }
    std::uint64_t u64() {
        std::uint64_t v = 0;
        std::memcpy(&v, take(sizeof v), sizeof v);
        return v;
    }

private:
    std::string_view message_;
    std::size_t& at_;
    int from_;
    std::uint64_t step_;
};

}  // namespace

std::vector<std::uint64_t> two_phase_slabs(const Communicator& comm, const Source& source,
                                           std::uint64_t num_samples) {
    const std::uint64_t cut =
        run_agreed_value(comm, [&] { return source.records_in_cut(comm.rank(), comm.size()); });
    const std::vector<std::uint64_t> cuts = comm.allgather(cut);
    std::vector<std::uint64_t> begins(cuts.size() + 1, 0);
    std::partial_sum(cuts.begin(), cuts.end(), begins.begin() + 1);
    if (begins.back() != num_samples) {  // the same on every rank (allgather)
        throw FormatError("two-phase: the byte-range cuts hold " + std::to_string(begins.back()) +
                          " records in all but the source reports " + std::to_string(num_samples));
    }
    return begins;
}

TwoPhaseReader::TwoPhaseReader(const Communicator& comm, const Source& source,
                               std::vector<std::uint64_t> slabs, const PlanOptions& options,
                               std::uint64_t epoch, const EpochStart& start, const EpochPlan& plan)
    : comm_(comm), source_(source), slabs_(std::move(slabs)), options_(options), epoch_(epoch),
      start_(start), plan_(plan) {
    if (options_.sharding != Sharding::global) {
        throw ConfigError("two-phase reads need global sharding (got " +
                          to_string(options_.sharding) + ")");
    }
    if (slabs_.size() != static_cast<std::size_t>(comm_.size()) + 1) {
        throw ConfigError("two-phase: " + std::to_string(slabs_.size()) + " slab bounds for " +
                          std::to_string(comm_.size()) + " ranks");
    }
    if (options_.balance_steps) {
        sample_bytes_ = [&src = source_](std::uint64_t id) { return src.sample_bytes(id); };
    }
}

int TwoPhaseReader::slab_of(std::uint64_t id) const {
    const auto it = std::upper_bound(slabs_.begin(), slabs_.end(), id);
    return static_cast<int>(it - slabs_.begin()) - 1;
}

void TwoPhaseReader::read_own_part(const std::vector<std::int64_t>& step_ids) {
    const std::uint64_t b = options_.batch_size;
    const auto me = static_cast<std::size_t>(comm_.rank());
    // The step's samples in this rank's slab, in (consuming rank, batch position) order;
    // padding (id < 0) is never read.
    std::vector<std::uint64_t> wanted;
    std::vector<std::size_t> dest;
    for (std::size_t i = 0; i < step_ids.size(); ++i) {
        if (step_ids[i] < 0) continue;
        const auto id = static_cast<std::uint64_t>(step_ids[i]);
        if (id < slabs_[me] || id >= slabs_[me + 1]) continue;
        wanted.push_back(id);
        dest.push_back(i / b);
    }
    // Read in id order: the sources sort by offset and coalesce adjacent records into one read.
    std::vector<std::size_t> order(wanted.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t x, std::size_t y) { return wanted[x] < wanted[y]; });
    std::vector<std::uint64_t> sorted(wanted.size());
    std::vector<std::size_t> read_at(wanted.size());
    for (std::size_t k = 0; k < order.size(); ++k) {
        sorted[k] = wanted[order[k]];
        read_at[order[k]] = k;
    }
    StagingSink staged(source_.fields(), sorted.size(), staged_);
    source_.read(sorted.data(), sorted.size(), staged);
    // One message per rank, packed in rank order: `dest` ascends with i (the step's ids are
    // in consuming-rank order), so each rank's samples are appended in its batch order.
    const auto w = static_cast<std::size_t>(comm_.size());
    send_.clear();
    send_offsets_.assign(w + 1, 0);
    std::size_t i = 0;
    for (std::size_t r = 0; r < w; ++r) {
        send_offsets_[r] = send_.size();
        send_.push_back(kFine);
        for (; i < wanted.size() && dest[i] == r; ++i) {
            append_u64(send_, wanted[i]);
            staged.append(read_at[i], send_);
        }
    }
    send_offsets_[w] = send_.size();
    if (i != wanted.size()) {  // a consuming rank outside the world: the step's ids are wrong
        throw Error("two-phase: step ids for " + std::to_string(step_ids.size()) +
                    " slots do not fit " + std::to_string(w) + " ranks");
    }
    counters_.samples_read += wanted.size();
    counters_.bytes_sent += send_.size();
}

void TwoPhaseReader::deliver(Slot& slot, std::uint64_t step) {
    const auto& fields = source_.fields();
    const std::size_t w = recv_offsets_.size() - 1;
    const auto message = [&](std::size_t r) {
        return std::string_view(recv_.data() + recv_offsets_[r],
                                recv_offsets_[r + 1] - recv_offsets_[r]);
    };
    std::vector<std::size_t> at(w, 1);  // past each status byte
    const auto from_peers = [&](const std::uint64_t* ids, std::size_t count, BatchSink& sink) {
        for (std::size_t k = 0; k < count; ++k) {
            const int r = slab_of(ids[k]);
            MessageReader in(message(static_cast<std::size_t>(r)), at[static_cast<std::size_t>(r)],
                             r, step);
            const std::uint64_t id = in.u64();
            if (id != ids[k]) {
                throw FormatError("two-phase: rank " + std::to_string(r) + " sent sample " +
                                  std::to_string(id) + " where sample " + std::to_string(ids[k]) +
                                  " was expected (step " + std::to_string(step) + ")");
            }
            for (std::size_t f = 0; f < fields.size(); ++f) {
                const std::uint64_t n = fields[f].ragged ? in.u64() : fields[f].sample_bytes;
                const char* src = in.take(n);
                std::byte* dst = fields[f].ragged ? sink.ragged(f, k, n) : sink.fixed(f, k);
                if (n > 0) std::memcpy(dst, src, static_cast<std::size_t>(n));
            }
        }
        counters_.samples_received += count;
    };
    fill_slot_with(slot, fields, plan_, step, from_peers);
    for (std::size_t r = 0; r < w; ++r) {
        if (at[r] != message(r).size()) {
            throw FormatError("two-phase: rank " + std::to_string(r) + " sent " +
                              std::to_string(message(r).size() - at[r]) +
                              " bytes beyond the samples of step " + std::to_string(step));
        }
    }
}

LocalStatus TwoPhaseReader::read_step(Slot* slot, std::uint64_t step, LocalStatus status) noexcept {
    const auto w = static_cast<std::size_t>(comm_.size());
    if (!status.failed && !slot) {
        status = capture([] { throw ConfigError("two-phase: no ring slot to read into"); });
    }
    if (!status.failed) {
        status = capture([&] {
            const auto ids = global_step_ids(source_.num_samples(), comm_.size(), options_, epoch_,
                                             start_, step, sample_bytes_);
            const std::uint64_t b = options_.batch_size;
            const auto mine = static_cast<std::uint64_t>(comm_.rank()) * b;
            bool same = true;
            for (std::uint64_t j = 0; j < b && same; ++j) {
                same = ids[mine + j] == plan_.slot_id(step * b + j);
            }
            if (!same) {
                throw Error("two-phase: the ids of step " + std::to_string(step) +
                            " differ from this rank's plan (options changed?)");
            }
            read_own_part(ids);
        });
    }
    // A failed rank still takes part in the exchange, so no rank waits for it.
    if (status.failed) {
        send_.assign(w, kFailed);
        send_offsets_.resize(w + 1);
        std::iota(send_offsets_.begin(), send_offsets_.end(), std::uint64_t{0});
    }
    const LocalStatus exchanged = capture([&] {
        comm_.set_context({"loader: two-phase exchange", static_cast<std::int64_t>(epoch_),
                           static_cast<std::int64_t>(plan_.first_step + step), "", -1});
        comm_.alltoallv(send_, send_offsets_, recv_, recv_offsets_);
    });
    ++counters_.steps;
    if (status.failed) return status;
    if (exchanged.failed) return exchanged;
    for (std::size_t r = 0; r < w; ++r) {
        // A peer failed: its own status carries the error that the agreement will raise.
        if (recv_offsets_[r] == recv_offsets_[r + 1] || recv_[recv_offsets_[r]] != kFine) return {};
    }
    return capture([&] { deliver(*slot, step); });
}

StepReader two_phase_step_reader(const Communicator& comm, const Source& source,
                                 std::uint64_t num_samples, const PlanOptions& options,
                                 std::uint64_t epoch, const EpochStart& start,
                                 const EpochPlan& plan) {
    auto reader = std::make_shared<TwoPhaseReader>(
        comm, source, two_phase_slabs(comm, source, num_samples), options, epoch, start, plan);
    return [reader](Slot* slot, std::uint64_t step, LocalStatus status) {
        return reader->read_step(slot, step, std::move(status));
    };
}

}  // namespace mpistage::detail
