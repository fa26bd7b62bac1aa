#include "plan/batch_fitter.hpp"

#include <algorithm>

namespace mpistage::detail {

bool BatchFitter::add(const SampleCost& c) {
    if (full_) return false;
    const std::uint64_t n = count_ + 1;
    const std::uint64_t tokens = std::max(max_tokens_, c.tokens);
    const bool over_bytes = limits_.batch_bytes > 0 && bytes_ + c.size_bytes > limits_.batch_bytes;
    const bool over_tokens = limits_.batch_tokens > 0 && tokens * n > limits_.batch_tokens;
    if (count_ > 0 && (over_bytes || over_tokens)) {
        full_ = true;
        return false;
    }
    oversize_ = count_ == 0 && (over_bytes || over_tokens);
    count_ = n;
    bytes_ += c.size_bytes;
    max_tokens_ = tokens;
    if (count_ >= limits_.max_samples || oversize_) full_ = true;
    return true;
}

}  // namespace mpistage::detail
