#include "index/split_agreement.hpp"

#include <string>

#include "mpistage/error.hpp"

namespace mpistage::index {

int first_mismatch(const std::vector<CutClaim>& claims) {
    for (std::size_t r = 0; r < claims.size(); ++r) {
        if (claims[r].broken) return static_cast<int>(r);
        if (r > 0 && claims[r].start != claims[r - 1].stop) return static_cast<int>(r);
    }
    return -1;
}

int agree_split(const std::function<std::vector<CutClaim>()>& exchange,
                const std::function<void(int rank, std::uint64_t from)>& rewalk) {
    int rounds = 0;
    for (;;) {
        const std::vector<CutClaim> claims = exchange();
        const int m = first_mismatch(claims);
        if (m < 0) return rounds;
        // Each round proves rank m's start, and the lowest mismatch only moves up.
        if (rounds > static_cast<int>(claims.size())) {
            throw FormatError("tfrecord split: start agreement did not converge after " +
                              std::to_string(rounds) + " rounds (rank " + std::to_string(m) + ")");
        }
        rewalk(m, m == 0 ? 0 : claims[static_cast<std::size_t>(m - 1)].stop);
        ++rounds;
    }
}

}  // namespace mpistage::index
