#pragma once
// Filling one batch under a sample count and a byte or token budget: the one rule that file
// budgets (src/plan/budget_plan.cpp) and streams (src/loader/stream/stream_plan.cpp) apply.

#include <cstdint>

namespace mpistage::detail {

/// Cost of one sample for a budget: payload bytes, and tokens (only read with a token budget).
struct SampleCost {
    std::uint64_t size_bytes = 0;
    std::uint64_t tokens = 0;
};

/// The limits of one batch. A budget of 0 is off.
struct BatchLimits {
    /// Most samples in one batch (≥ 1).
    std::uint64_t max_samples = 1;
    /// Byte budget: the sum of the samples' `size_bytes`.
    std::uint64_t batch_bytes = 0;
    /// Token budget: samples × the batch's largest `tokens` (what padding to the longest
    /// sample computes on).
    std::uint64_t batch_tokens = 0;
};

/// Accumulates samples into one batch while they fit the limits. Plain value; not thread-safe.
class BatchFitter {
public:
    explicit BatchFitter(const BatchLimits& limits) : limits_(limits) {}
    /// Adds `c` when it fits (the first sample always fits); false when the batch is full.
    bool add(const SampleCost& c);
    std::uint64_t count() const noexcept { return count_; }
    /// True once a sample was refused or the count limit reached.
    bool full() const noexcept { return full_; }
    /// True when the only sample exceeds a budget.
    bool oversize() const noexcept { return oversize_; }
    std::uint64_t size_bytes() const noexcept { return bytes_; }
    std::uint64_t max_tokens() const noexcept { return max_tokens_; }

private:
    BatchLimits limits_;
    std::uint64_t count_ = 0;
    std::uint64_t bytes_ = 0;
    std::uint64_t max_tokens_ = 0;
    bool full_ = false;
    bool oversize_ = false;
};

}  // namespace mpistage::detail
