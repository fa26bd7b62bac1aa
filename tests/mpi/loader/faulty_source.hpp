#pragma once
// A source that fails on demand, for the loader's error tests (test_loader_safety.cpp,
// test_loader_lag.cpp).
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "../hdf5_test_util.hpp"
#include "mpistage/error.hpp"
#include "mpistage/source.hpp"

namespace loader_test {

using namespace mpistage;

/// Forwards to an inner source; `read` throws IoError when asked for `trigger` (-1: never).
class FaultySource final : public Source {
public:
    explicit FaultySource(const Source& inner) : inner_(inner) {}
    const std::vector<FieldInfo>& fields() const override { return inner_.fields(); }
    std::uint64_t num_samples() const override { return inner_.num_samples(); }
    std::uint64_t records_in_cut(int r, int w) const override {
        return inner_.records_in_cut(r, w);
    }
    std::string fingerprint() const override { return "faulty:" + inner_.fingerprint(); }
    bool reads_use_mpi() const override { return inner_.reads_use_mpi(); }
    void read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const override {
        const std::int64_t t = trigger_.load();
        for (std::size_t k = 0; k < count && t >= 0; ++k) {
            if (ids[k] == static_cast<std::uint64_t>(t)) {
                throw IoError("test: injected read failure at sample " + std::to_string(t) +
                              " on rank " + std::to_string(h5t::rank()));
            }
        }
        reads_.fetch_add(1);
        inner_.read(ids, count, sink);
    }
    void set_trigger(std::int64_t id) { trigger_.store(id); }
    std::uint64_t reads() const { return reads_.load(); }

private:
    const Source& inner_;
    std::atomic<std::int64_t> trigger_{-1};
    mutable std::atomic<std::uint64_t> reads_{0};
};

}  // namespace loader_test
