#pragma once
// The sharding a shuffle implies when the caller names none (internal; the CLI's --shuffle and
// the Python Loader's shuffle= share this rule): shuffle "global" draws from all samples each
// epoch, which only global sharding can serve, so alone it implies sharding "global" (so does
// "chunks", whose chunks are dealt to ranks); any other shuffle keeps the given sharding.

#include <string>

namespace mpistage::detail {

/// Pure: the sharding to use. `shuffle`: the shuffle's name; `sharding_given`: whether the
/// caller named a sharding; `sharding`: that sharding, or the default when none was named.
inline std::string implied_sharding(const std::string& shuffle, bool sharding_given,
                                    const std::string& sharding) {
    return (shuffle == "global" || shuffle == "chunks") && !sharding_given ? std::string("global")
                                                                           : sharding;
}

}  // namespace mpistage::detail
