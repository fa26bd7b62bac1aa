#pragma once
// Shared by the device tests (the real Loader on the CUDA test double, tests/fake_cuda): a
// generated in-memory source with a fixed field "pixels" (uint8 [kPixels]) and a ragged field
// "tokens" (id % 7 + 1 bytes), every byte a function of (sample id, position), and the
// "kernel" that checks a delivered batch on the consumer's stream.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <mpi.h>

#include "fake_cuda.h"
#include "mpistage/hash.hpp"
#include "mpistage/batch.hpp"
#include "mpistage/source.hpp"

namespace device_test {

using namespace mpistage;

constexpr std::int64_t kPixels = 96;

inline std::uint8_t pixel(std::uint64_t id, std::size_t i) {
    return static_cast<std::uint8_t>((id * 131 + i * 7 + 3) & 0xFF);
}
inline std::size_t token_count(std::uint64_t id) {
    return static_cast<std::size_t>(id % 7 + 1);
}
inline std::uint8_t token(std::uint64_t id, std::size_t i) {
    return static_cast<std::uint8_t>((id * 17 + i + 1) & 0xFF);
}

/// N generated samples (identical on every rank: no files, nothing collective).
class GeneratedSource final : public Source {
public:
    explicit GeneratedSource(std::uint64_t n) : n_(n) {
        FieldInfo pixels;
        pixels.name = "pixels";
        pixels.dtype = DType::uint8;
        pixels.sample_shape = {kPixels};
        pixels.sample_bytes = static_cast<std::uint64_t>(kPixels);
        FieldInfo tokens;
        tokens.name = "tokens";
        tokens.dtype = DType::uint8;
        tokens.ragged = true;
        fields_ = {pixels, tokens};
    }
    const std::vector<FieldInfo>& fields() const override { return fields_; }
    std::uint64_t num_samples() const override { return n_; }
    std::uint64_t records_in_cut(int rank, int world_size) const override {
        const auto w = static_cast<std::uint64_t>(world_size);
        const auto r = static_cast<std::uint64_t>(rank);
        return (r + 1) * n_ / w - r * n_ / w;
    }
    std::string fingerprint() const override { return "generated:" + std::to_string(n_); }
    std::uint64_t sample_bytes(std::uint64_t id) const override {
        return static_cast<std::uint64_t>(kPixels) + token_count(id);
    }
    void read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const override {
        for (std::size_t j = 0; j < count; ++j) {
            std::byte* p = sink.fixed(0, j);
            for (std::size_t i = 0; i < static_cast<std::size_t>(kPixels); ++i) {
                p[i] = std::byte{pixel(ids[j], i)};
            }
            std::byte* t = sink.ragged(1, j, token_count(ids[j]));
            for (std::size_t i = 0; i < token_count(ids[j]); ++i)
                t[i] = std::byte{token(ids[j], i)};
        }
    }

private:
    std::uint64_t n_;
    std::vector<FieldInfo> fields_;
};

/// A "kernel" on the consumer's stream: after `run_for` (its compute time, during which it
/// reads), checks the batch's device bytes against the generator, using the host copies of
/// the index and offsets taken when the batch was delivered.
struct BatchKernel {
    std::vector<std::int64_t> ids;
    std::vector<std::int64_t> offsets;
    const std::byte* pixels = nullptr;
    const std::byte* tokens = nullptr;
    const std::int64_t* device_offsets = nullptr;
    const std::int64_t* device_index = nullptr;
    std::chrono::microseconds run_for{0};
    std::atomic<int>* mismatches = nullptr;

    bool holds_truth() const {
        for (std::size_t j = 0; j < ids.size(); ++j) {
            if (device_index[j] != ids[j] || device_offsets[j] != offsets[j]) return false;
            if (ids[j] < 0) continue;
            const auto id = static_cast<std::uint64_t>(ids[j]);
            for (std::size_t i = 0; i < static_cast<std::size_t>(kPixels); ++i) {
                if (pixels[j * kPixels + i] != std::byte{pixel(id, i)}) return false;
            }
            const auto begin = static_cast<std::size_t>(offsets[j]);
            if (offsets[j + 1] - offsets[j] != static_cast<std::int64_t>(token_count(id))) {
                return false;
            }
            for (std::size_t i = 0; i < token_count(id); ++i) {
                if (tokens[begin + i] != std::byte{token(id, i)}) return false;
            }
        }
        return true;
    }
    static void run(void* p) {
        std::unique_ptr<BatchKernel> k(static_cast<BatchKernel*>(p));
        const bool first = k->holds_truth();
        std::this_thread::sleep_for(k->run_for);
        if (!first || !k->holds_truth()) k->mismatches->fetch_add(1);
    }
};

/// Queues a BatchKernel for `b` on `stream`.
inline void launch_kernel(cudaStream_t stream, const HostBatch& b,
                          std::chrono::microseconds run_for, std::atomic<int>& mismatches) {
    auto k = std::make_unique<BatchKernel>();
    k->ids.assign(b.index(), b.index() + b.size());
    const HostField& tokens = b.fields()[1];
    k->offsets.assign(tokens.offsets, tokens.offsets + b.size() + 1);
    k->pixels = b.fields()[0].device_data;
    k->tokens = tokens.device_data;
    k->device_offsets = tokens.device_offsets;
    k->device_index = b.device_index();
    k->run_for = run_for;
    k->mismatches = &mismatches;
    ASSERT_EQ(cudaLaunchHostFunc(stream, &BatchKernel::run, k.get()), cudaSuccess);
    k.release();
}

/// Collective on MPI_COMM_WORLD: true when `text` (an error message) is identical on every rank.
inline bool same_on_every_rank(const std::string& text) {
    std::uint64_t mine = fnv1a64(text), lo = 0, hi = 0;
    MPI_Allreduce(&mine, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&mine, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

}  // namespace device_test
