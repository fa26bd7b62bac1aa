// The Loader end to end over HDF5 files: exactly once, equal steps, masked/padded slots, data of
// every slot equal to its row (checked against h5dump for chosen sample ids), batches that stay
// valid after the next one arrives; over batch sizes, remainder policies, shuffles, prefetch
// depths and I/O thread counts.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <map>
#include <set>
#include <iostream>
#include <sstream>

#include "../hdf5_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"

using namespace mpistage;

namespace {

struct Config {
    std::uint64_t batch = 1;
    Remainder remainder = Remainder::drop;
    Sharding sharding = Sharding::byte_range;
    Shuffle shuffle = Shuffle::none;
    std::size_t prefetch = 1;
    std::size_t io_threads = 0;

    std::string str() const {
        std::ostringstream s;
        s << "B=" << batch << " remainder=" << to_string(remainder) << " sharding="
          << to_string(sharding) << " shuffle=" << to_string(shuffle) << " prefetch=" << prefetch
          << " io_threads=" << io_threads;
        return s.str();
    }
    LoaderOptions options() const {
        LoaderOptions o;
        o.plan.batch_size = batch;
        o.plan.remainder = remainder;
        o.plan.sharding = sharding;
        o.plan.shuffle = shuffle;
        o.plan.seed = 1234;
        o.prefetch = prefetch;
        o.io_threads = io_threads;
        o.pin_memory = false;
        return o;
    }
};

/// Truth of one sample: its image bytes and label (as int64).
struct Row {
    std::vector<std::uint8_t> image;
    std::int64_t label = 0;
};

/// h5dump's rows for chosen ids (images [N,28,28] uint8, labels [N]), on every rank.
std::map<std::int64_t, Row> h5dump_rows(const std::string& file, const std::vector<std::uint64_t>& ids) {
    std::map<std::int64_t, Row> rows;
    for (const auto id : ids) {
        Row r;
        r.image = h5t::parse_as<std::uint8_t>(h5t::h5dump_values(file, "images", {id, 0, 0}, {1, 28, 28}));
        const auto l = h5t::parse_as<std::int64_t>(h5t::h5dump_values(file, "labels", {id}, {1}));
        EXPECT_EQ(r.image.size(), h5t::kPixels) << "h5dump row " << id << " of " << file;
        EXPECT_EQ(l.size(), 1u) << "h5dump label " << id << " of " << file;
        r.label = l.empty() ? -999 : l[0];
        rows[static_cast<std::int64_t>(id)] = r;
    }
    return rows;
}

std::int64_t label_at(const HostField& f, std::size_t slot) {
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
            if (!row_ok(id, image, label)) fail("slot " + std::to_string(s) + " id " + std::to_string(id) + " data differs from its row");
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
        if (nvalid != b.num_valid()) fail("num_valid " + std::to_string(b.num_valid()) + " vs " + std::to_string(nvalid));
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

EpochOutcome consume_epoch(Loader& loader, std::uint64_t epoch, BatchChecker& chk, bool keep_prev) {
    EpochOutcome out;
    try {
        auto range = loader.epoch(epoch);
        out.steps = range.steps();
        HostBatch prev;
        HostBatch cur;
        while (range.next(cur)) {
            if (cur.step() != out.batches) chk.fail("step " + std::to_string(cur.step()) + " at position " + std::to_string(out.batches));
            if (cur.epoch() != epoch) chk.fail("epoch " + std::to_string(cur.epoch()));
            chk.check(cur, &out.valid_ids, true);
            if (keep_prev && prev.size() > 0) {
                if (prev.lease() == cur.lease()) chk.fail("previous and current batch share a slot");
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
void check_epoch_collectively(const Loader& loader, const EpochOutcome& o, const Config& c,
                              std::uint64_t n, const std::string& what) {
    EXPECT_FALSE(o.threw) << what << ": " << o.error;
    EXPECT_EQ(h5t::min(o.batches), h5t::max(o.batches)) << what << ": ranks yielded different batch counts";
    EXPECT_EQ(o.batches, o.steps) << what;
    EXPECT_EQ(o.batches, loader.totals().steps) << what;
    const auto all = h5t::allgatherv(o.valid_ids);
    std::set<std::int64_t> distinct(all.begin(), all.end());
    EXPECT_EQ(distinct.size(), all.size()) << what << ": a sample was yielded twice";
    EXPECT_EQ(all.size(), loader.totals().valid_samples) << what;
    if (c.remainder == Remainder::drop) {
        EXPECT_EQ(loader.totals().valid_samples + loader.totals().dropped_samples, n) << what;
        EXPECT_EQ(loader.totals().valid_samples, loader.totals().steps * c.batch * h5t::size()) << what;
    } else {
        EXPECT_EQ(all.size(), n) << what;
        if (!distinct.empty()) {
            EXPECT_EQ(*distinct.begin(), 0) << what;
            EXPECT_EQ(*distinct.rbegin(), static_cast<std::int64_t>(n) - 1) << what;
        }
    }
}

bool generated_row_ok(std::int64_t id, const std::uint8_t* image, std::int64_t label) {
    const auto i = static_cast<std::uint64_t>(id);
    for (std::size_t k = 0; k < h5t::kPixels; ++k) {
        if (image[k] != h5t::gen_pixel(i, k)) return false;
    }
    return label == h5t::gen_label(i);
}

}  // namespace

// The generated files' rows are what h5dump says (the writer is checked by an independent reader
// before any loader result is compared with the generating function).
TEST(LoaderHdf5, GeneratedFilesMatchH5dump) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    const std::uint64_t n = h5t::kGeneratedRows;
    for (const auto& file : {files.generated_contiguous, files.generated_chunked}) {
        const auto rows = h5dump_rows(file, {0, 1, 77, n - 2, n - 1});
        for (const auto& [id, row] : rows) {
            EXPECT_TRUE(row.image.size() == h5t::kPixels && generated_row_ok(id, row.image.data(), row.label))
                << file << " row " << id;
        }
    }
}

// Every combination of B x remainder x shuffle x prefetch x io_threads on the contiguous file
// (pread fast path, big-endian labels swapped), and a rotating subset on the chunked gzip file
// (H5Dread path).
TEST(LoaderHdf5, SweepExactlyOnceEqualStepsAndRowData) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    const std::uint64_t n = h5t::kGeneratedRows;
    const std::vector<std::uint64_t> dump_ids = {0, 1, 38, 39, 40, 77, 78, 117, 118, n - 2, n - 1};
    const auto dumped_contig = h5dump_rows(files.generated_contiguous, dump_ids);
    const auto dumped_chunked = h5dump_rows(files.generated_chunked, dump_ids);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source contiguous(comm, files.generated_contiguous);
    Hdf5Source chunked(comm, files.generated_chunked);
    EXPECT_FALSE(contiguous.reads_use_mpi());
    EXPECT_TRUE(chunked.reads_use_mpi());
    ASSERT_EQ(contiguous.num_samples(), n);
    ASSERT_EQ(chunked.num_samples(), n);
    ASSERT_EQ(contiguous.fields().size(), 2u);  // discovered: images, labels (name order)

    const std::vector<std::uint64_t> batches = {1, 5, 16};
    const std::vector<Remainder> rems = {Remainder::drop, Remainder::pad, Remainder::mask};
    const std::vector<std::pair<Sharding, Shuffle>> orders = {
        {Sharding::byte_range, Shuffle::none}, {Sharding::byte_range, Shuffle::local},
        {Sharding::global, Shuffle::global}};
    std::uint64_t index = 0;
    for (const auto b : batches) {
        for (const auto rem : rems) {
            for (const auto& [sharding, shuffle] : orders) {
                for (std::size_t prefetch = 1; prefetch <= 3; ++prefetch) {
                    for (std::size_t threads = 0; threads <= 2; ++threads) {
                        const bool use_chunked = (index++ % 5) == 0;
                        const Source& src = use_chunked ? static_cast<const Source&>(chunked) : contiguous;
                        Config c{b, rem, sharding, shuffle, prefetch, threads};
                        const std::string what = c.str() + (use_chunked ? " chunked-gzip" : " contiguous");
                        Loader loader(comm, src, c.options());
                        BatchChecker chk{rem, b, n, generated_row_ok, use_chunked ? &dumped_chunked : &dumped_contig, what};
                        // Two epochs when shuffling (different order, each exactly once).
                        const std::uint64_t epochs = shuffle == Shuffle::none ? 1 : 2;
                        std::vector<std::int64_t> first_order;
                        for (std::uint64_t e = 0; e < epochs; ++e) {
                            const std::uint64_t before = chk.dump_checks;
                            const auto o = consume_epoch(loader, e, chk, prefetch >= 2);
                            const std::string we = what + " epoch " + std::to_string(e);
                            check_epoch_collectively(loader, o, c, n, we);
                            if (rem != Remainder::drop) {
                                // Each h5dump-checked id was staged exactly once as a valid sample.
                                EXPECT_EQ(h5t::sum(chk.dump_checks - before), dump_ids.size()) << we;
                            }
                            if (e == 0) {
                                first_order = o.valid_ids;
                            } else {
                                const bool same = h5t::min(first_order == o.valid_ids ? 1 : 0) == 1;
                                const bool long_enough = h5t::min(first_order.size()) > 4;
                                EXPECT_FALSE(same && long_enough) << we << ": same order as epoch 0";
                            }
                        }
                        EXPECT_EQ(h5t::sum(chk.problems), 0u) << what;
                    }
                }
            }
        }
    }
    chunked.close();
    contiguous.close();
    comm.free();
}

// Acceptance: "a tensor staged for sample i equals row i read with h5dump", on real data
// (Fashion-MNIST t10k converted to HDF5), every slot also against the IDX bytes (zlib + ifstream).
TEST(LoaderHdf5, FashionMnistRowsEqualH5dumpAndIdx) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    if (h5t::rank() == 0) std::cout << "[ info ] fashion_t10k.h5 made with " << files.fashion_how << std::endl;
    const std::string images_idx = h5t::read_file(files.fashion_images_idx);
    const std::string labels_idx = h5t::read_file(files.fashion_labels_idx);
    constexpr std::uint64_t n = 10000;
    EXPECT_EQ(images_idx.size(), 16 + n * h5t::kPixels);
    EXPECT_EQ(labels_idx.size(), 8 + n);
    const bool idx_ok = images_idx.size() == 16 + n * h5t::kPixels && labels_idx.size() == 8 + n;
    const std::vector<std::uint64_t> dump_ids = {0, 1, 2, 1234, 4999, 5000, 7777, 9998, 9999};
    const auto dumped = h5dump_rows(files.fashion_h5, dump_ids);
    // h5dump's rows equal the IDX bytes too (so the converted file is right).
    for (const auto& [id, row] : dumped) {
        if (!idx_ok) break;
        EXPECT_TRUE(std::equal(row.image.begin(), row.image.end(),
                               reinterpret_cast<const std::uint8_t*>(images_idx.data()) + 16 + id * h5t::kPixels))
            << "h5dump row " << id << " differs from the IDX file";
        EXPECT_EQ(row.label, static_cast<unsigned char>(labels_idx[8 + id])) << id;
    }
    auto idx_row_ok = [&](std::int64_t id, const std::uint8_t* image, std::int64_t label) {
        if (!idx_ok) return true;
        const auto* want = reinterpret_cast<const std::uint8_t*>(images_idx.data()) + 16 + id * h5t::kPixels;
        return std::equal(want, want + h5t::kPixels, image) &&
               label == static_cast<unsigned char>(labels_idx[8 + id]);
    };
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.fashion_h5, [] { Hdf5Options o; o.fields = {"images", "labels"}; return o; }());
    ASSERT_EQ(src.num_samples(), n);
    EXPECT_EQ(src.fields()[0].sample_shape, (std::vector<std::int64_t>{28, 28}));
    EXPECT_EQ(src.fields()[0].dtype, DType::uint8);
    EXPECT_EQ(src.fields()[1].dtype, DType::uint8);
    const std::vector<Config> configs = {
        {64, Remainder::mask, Sharding::byte_range, Shuffle::local, 3, 2},
        {100, Remainder::pad, Sharding::global, Shuffle::global, 2, 1},
        {333, Remainder::drop, Sharding::byte_range, Shuffle::none, 2, 0},
    };
    for (const auto& c : configs) {
        Loader loader(comm, src, c.options());
        BatchChecker chk{c.remainder, c.batch, n, idx_row_ok, &dumped, c.str() + " fashion"};
        const auto o = consume_epoch(loader, 3, chk, true);
        check_epoch_collectively(loader, o, c, n, chk.what);
        EXPECT_EQ(h5t::sum(chk.problems), 0u) << chk.what;
        if (c.remainder != Remainder::drop) {
            EXPECT_EQ(h5t::sum(chk.dump_checks), dump_ids.size()) << chk.what << ": every dumped id once";
        }
    }
    src.close();
    comm.free();
}

// The documented loop `for (const HostBatch& b : loader.epoch(e))` works at every prefetch depth,
// including 1 (the iterator's own batch must not count as a held slot when it asks for the next).
TEST(LoaderHdf5, RangeForLoopAtEveryPrefetchDepth) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    const std::uint64_t n = h5t::kGeneratedRows;
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    for (std::size_t prefetch = 1; prefetch <= 2; ++prefetch) {
        for (std::size_t threads = 0; threads <= 1; ++threads) {
            Config c{4, Remainder::mask, Sharding::byte_range, Shuffle::none, prefetch, threads};
            Loader loader(comm, src, c.options());
            BatchChecker chk{c.remainder, c.batch, n, generated_row_ok, nullptr, c.str() + " range-for"};
            std::vector<std::int64_t> ids;
            std::uint64_t batches = 0;
            std::string error;
            try {
                for (const HostBatch& b : loader.epoch(0)) {
                    chk.check(b, &ids, false);
                    ++batches;
                }
            } catch (const std::exception& e) {
                error = e.what();
            }
            EXPECT_EQ(error, "") << c.str();
            EXPECT_EQ(h5t::min(batches), h5t::max(batches)) << c.str();
            EXPECT_EQ(batches, loader.totals().steps) << c.str();
            const auto all = h5t::allgatherv(ids);
            EXPECT_EQ(std::set<std::int64_t>(all.begin(), all.end()).size(), n) << c.str();
            EXPECT_EQ(all.size(), n) << c.str();
            EXPECT_EQ(h5t::sum(chk.problems), 0u) << c.str();
        }
    }
    src.close();
    comm.free();
}

// N < W and N = 1: every rank still yields the same number of batches; with mask the ranks
// without samples get masked batches, never a zero-sample batch without flags.
TEST(LoaderHdf5, FewerRowsThanRanks) {
    h5t::TempDir dir;
    const std::string path = dir.file("tiny.h5");
    ASSERT_TRUE(h5t::make_generated_file(path, 1, false));
    const auto dumped = h5dump_rows(path, {0});
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, path);
    ASSERT_EQ(src.num_samples(), 1u);
    for (const auto rem : {Remainder::mask, Remainder::pad}) {
        Config c{3, rem, Sharding::byte_range, Shuffle::none, 2, 1};
        Loader loader(comm, src, c.options());
        BatchChecker chk{rem, 3, 1, generated_row_ok, &dumped, c.str() + " N=1"};
        const auto o = consume_epoch(loader, 0, chk, true);
        check_epoch_collectively(loader, o, c, 1, chk.what);
        EXPECT_EQ(o.batches, 1u);
        EXPECT_EQ(h5t::sum(chk.problems), 0u) << chk.what;
        EXPECT_EQ(h5t::sum(chk.dump_checks), 1u) << chk.what;
    }
    src.close();
    comm.free();
}
