#pragma once
// Shared helpers of the Loader-over-HDF5 MPI tests: a configuration of the loader, a batch
// checker (exactly once, masks, row data against the generator and h5dump), epoch consumption.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "../hdf5_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"

namespace loader_test {

using namespace mpistage;

struct Config {
    std::uint64_t batch = 1;
    Remainder remainder = Remainder::drop;
    Sharding sharding = Sharding::byte_range;
    Shuffle shuffle = Shuffle::none;
    std::size_t prefetch = 1;
    std::size_t io_threads = 0;
    Stage stage = Stage::none;
    /// LoaderOptions::stage_ranks_per_node (1: every other rank is a "remote node").
    int ranks_per_node = 0;

    std::string str() const {
        std::ostringstream s;
        s << "B=" << batch << " remainder=" << to_string(remainder)
          << " sharding=" << to_string(sharding) << " shuffle=" << to_string(shuffle)
          << " prefetch=" << prefetch << " io_threads=" << io_threads
          << " stage=" << to_string(stage);
        if (ranks_per_node > 0) s << " ranks_per_node=" << ranks_per_node;
        return s.str();
    }
    LoaderOptions options() const {
        LoaderOptions o;
        o.plan.batch_size = batch;
        o.plan.remainder = remainder;
        o.plan.sharding = sharding;
        o.plan.shuffle = shuffle;
        o.plan.seed = 1234;
        o.pipeline.prefetch = prefetch;
        o.pipeline.io_threads = io_threads;
        o.delivery.pin_memory = false;
        o.tier.stage = stage;
        o.tier.stage_ranks_per_node = ranks_per_node;
        return o;
    }
};

/// Truth of one sample: its image bytes and label (as int64).
struct Row {
    std::vector<std::uint8_t> image;
    std::int64_t label = 0;
};

/// h5dump's rows for chosen ids (images [N,28,28] uint8, labels [N]), on every rank.
inline std::map<std::int64_t, Row> h5dump_rows(const std::string& file,
                                               const std::vector<std::uint64_t>& ids) {
    std::map<std::int64_t, Row> rows;
    for (const auto id : ids) {
        Row r;
        r.image = h5t::parse_as<std::uint8_t>(
            h5t::h5dump_values(file, "images", {id, 0, 0}, {1, 28, 28}));
        const auto l = h5t::parse_as<std::int64_t>(h5t::h5dump_values(file, "labels", {id}, {1}));
        EXPECT_EQ(r.image.size(), h5t::kPixels) << "h5dump row " << id << " of " << file;
        EXPECT_EQ(l.size(), 1u) << "h5dump label " << id << " of " << file;
        r.label = l.empty() ? -999 : l[0];
        rows[static_cast<std::int64_t>(id)] = r;
    }
    return rows;
}

inline std::int64_t label_at(const HostField& f, std::size_t slot) {
    if (f.info->dtype == DType::uint8) return std::to_integer<std::int64_t>(f.data[slot]);
    std::int64_t v = 0;
    std::memcpy(&v, f.data + slot * 8, 8);
    return v;
}

/// Checks one batch; returns the number of problems (first few reported).
struct BatchChecker {
    Remainder remainder;
    std::uint64_t batch;
    std::uint64_t n;
    std::function<bool(std::int64_t id, const std::uint8_t* image, std::int64_t label)> row_ok;
    const std::map<std::int64_t, Row>* dumped = nullptr;
    std::string what;
    std::uint64_t problems = 0;
    std::uint64_t dump_checks = 0;

    void fail(const std::string& msg) {
        if (++problems <= 5) ADD_FAILURE() << "rank " << h5t::rank() << " " << what << ": " << msg;
    }

    void check(const HostBatch& b, std::vector<std::int64_t>* valid_ids, bool count_dump) {
        if (b.size() != batch) fail("batch size " + std::to_string(b.size()));
        if (b.fields().size() != 2) {
            fail("fields " + std::to_string(b.fields().size()));
            return;
        }
        const HostField& img = b.fields()[0];
        const HostField& lab = b.fields()[1];
        if (img.info->name != "images" || lab.info->name != "labels") fail("field names");
        if (img.size_bytes != batch * h5t::kPixels) fail("image bytes");
        std::size_t nvalid = 0;
        for (std::size_t s = 0; s < b.size(); ++s) {
            const std::int64_t id = b.index()[s];
            const bool valid = b.valid()[s] != 0;
            nvalid += valid;
            const auto* image = reinterpret_cast<const std::uint8_t*>(img.data) + s * h5t::kPixels;
            const std::int64_t label = label_at(lab, s);
            if (valid) {
                if (id < 0 || static_cast<std::uint64_t>(id) >= n) {
                    fail("valid slot with id " + std::to_string(id));
                    continue;
                }
                if (valid_ids) valid_ids->push_back(id);
            } else if (remainder == Remainder::drop) {
                fail("invalid slot under drop");
            } else if (remainder == Remainder::mask) {
                if (id != kPaddingId) fail("masked slot with id " + std::to_string(id));
                bool zero = label == 0;
                for (std::size_t k = 0; k < h5t::kPixels; ++k) zero = zero && image[k] == 0;
                if (!zero) fail("masked slot " + std::to_string(s) + " has non-zero data");
                continue;
            } else if (id < 0 || static_cast<std::uint64_t>(id) >= n) {  // pad: real data
                fail("pad slot with id " + std::to_string(id));
                continue;
            }
            if (!row_ok(id, image, label))
                fail("slot " + std::to_string(s) + " id " + std::to_string(id) +
                     " data differs from its row");
            if (dumped) {
                const auto it = dumped->find(id);
                if (it != dumped->end()) {
                    if (count_dump && valid) ++dump_checks;
                    if (!std::equal(it->second.image.begin(), it->second.image.end(), image) ||
                        it->second.label != label) {
                        fail("id " + std::to_string(id) + " differs from h5dump's row");
                    }
                }
            }
        }
        if (nvalid != b.num_valid())
            fail("num_valid " + std::to_string(b.num_valid()) + " vs " + std::to_string(nvalid));
    }
};

/// Consumes one epoch, keeping the previous batch alive across `next` when prefetch >= 2 and
/// re-checking it afterwards. Collective.
struct EpochOutcome {
    std::vector<std::int64_t> valid_ids;
    std::uint64_t batches = 0;
    std::uint64_t steps = 0;
    bool threw = false;
    std::string error;
};

inline EpochOutcome consume_epoch(Loader& loader, std::uint64_t epoch, BatchChecker& chk,
                                  bool keep_prev) {
    EpochOutcome out;
    try {
        auto range = loader.epoch(epoch);
        out.steps = range.steps();
        HostBatch prev;
        HostBatch cur;
        while (range.next(cur)) {
            if (cur.step() != out.batches)
                chk.fail("step " + std::to_string(cur.step()) + " at position " +
                         std::to_string(out.batches));
            if (cur.epoch() != epoch) chk.fail("epoch " + std::to_string(cur.epoch()));
            chk.check(cur, &out.valid_ids, true);
            if (keep_prev && prev.size() > 0) {
                if (prev.lease() == cur.lease())
                    chk.fail("previous and current batch share a slot");
                chk.check(prev, nullptr, false);  // still intact after the next batch arrived
            }
            if (keep_prev) prev = cur;
            ++out.batches;
        }
    } catch (const std::exception& e) {
        out.threw = true;
        out.error = e.what();
    }
    return out;
}

/// Collective checks of one epoch: equal steps, exactly once (or the kept prefix with drop).
inline void check_epoch_collectively(const Loader& loader, const EpochOutcome& o, const Config& c,
                                     std::uint64_t n, const std::string& what) {
    EXPECT_FALSE(o.threw) << what << ": " << o.error;
    EXPECT_EQ(h5t::min(o.batches), h5t::max(o.batches))
        << what << ": ranks yielded different batch counts";
    EXPECT_EQ(o.batches, o.steps) << what;
    EXPECT_EQ(o.batches, loader.totals().steps) << what;
    const auto all = h5t::allgatherv(o.valid_ids);
    std::set<std::int64_t> distinct(all.begin(), all.end());
    EXPECT_EQ(distinct.size(), all.size()) << what << ": a sample was yielded twice";
    EXPECT_EQ(all.size(), loader.totals().valid_samples) << what;
    if (c.remainder == Remainder::drop) {
        EXPECT_EQ(loader.totals().valid_samples + loader.totals().dropped_samples, n) << what;
        EXPECT_EQ(loader.totals().valid_samples, loader.totals().steps * c.batch * h5t::size())
            << what;
    } else {
        EXPECT_EQ(all.size(), n) << what;
        if (!distinct.empty()) {
            EXPECT_EQ(*distinct.begin(), 0) << what;
            EXPECT_EQ(*distinct.rbegin(), static_cast<std::int64_t>(n) - 1) << what;
        }
    }
}

inline bool generated_row_ok(std::int64_t id, const std::uint8_t* image, std::int64_t label) {
    const auto i = static_cast<std::uint64_t>(id);
    for (std::size_t k = 0; k < h5t::kPixels; ++k) {
        if (image[k] != h5t::gen_pixel(i, k)) return false;
    }
    return label == h5t::gen_label(i);
}

}  // namespace loader_test
