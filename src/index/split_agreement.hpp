#pragma once
// The start agreement of the index-free split (internal). Each rank scans its byte cut from a
// resynchronised start; rank 0 starts at byte 0, a true boundary, and a walk from a true
// boundary only visits true boundaries, so rank r+1's start must equal the position where rank
// r's walk stopped. The lowest rank whose start differs (or whose unproven walk broke) re-walks
// from its predecessor's stop; this repeats until all agree (at most W rounds, normally none).
// The MPI source and the serial simulation both run `agree_split`; only `exchange` and `rewalk`
// differ (allgather and one rank's walk, or reading and replacing a vector element).

#include <cstdint>
#include <functional>
#include <vector>

namespace mpistage::index {

/// One rank's claim after scanning its cut.
struct CutClaim {
    std::uint64_t start = 0;  ///< global position where its walk started
    std::uint64_t stop = 0;   ///< first record boundary at or after its cut end
    bool broken = false;      ///< its unproven walk met a bad header or payload
};

/// The lowest rank r with `broken` or (r ≥ 1 and `start[r] != stop[r-1]`); −1 when all agree.
/// Pure.
int first_mismatch(const std::vector<CutClaim>& claims);

/// Runs the agreement rounds. `exchange()` returns every rank's current claim (identical on all
/// ranks); `rewalk(m, from)` re-walks rank m's cut, trusted, from `from` (0 for m = 0).
/// Collective exactly when `exchange` and `rewalk` are. Returns the number of rounds.
/// @throws FormatError if the rounds do not converge within W (a broken walk invariant).
int agree_split(const std::function<std::vector<CutClaim>()>& exchange,
                const std::function<void(int rank, std::uint64_t from)>& rewalk);

}  // namespace mpistage::index
