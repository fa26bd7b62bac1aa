#pragma once
/// @file
/// Sizes of the heavy property sweeps. The main suite runs every sweep at its full size. Under
/// the sanitizers (MPISTAGE_TEST_SANITIZED=1, set by tests/CMakeLists.txt in an
/// MPISTAGE_SANITIZE build, where ASan + UBSan cost 3-10x) a sweep runs a smaller size with the
/// same assertions, unless the environment sets MPISTAGE_TEST_FULL_SIZE=1: the sanitizer build
/// registers that as the `*.full_size` tests, label `heavy`, which scripts/test.sh runs only
/// with MPISTAGE_STRESS=1.

#include <cstdlib>
#include <cstring>

namespace mpistage_test {

/// True when the sweeps run at full size (always outside sanitizer builds). Thread safe.
inline bool full_size_sweeps() {
#if MPISTAGE_TEST_SANITIZED
    const char* env = std::getenv("MPISTAGE_TEST_FULL_SIZE");
    return env != nullptr && std::strcmp(env, "1") == 0;
#else
    return true;
#endif
}

/// `full` in the main suite, `reduced` under the sanitizers (see above).
template <class T>
T sweep_size(T full, T reduced) {
    return full_size_sweeps() ? full : reduced;
}

}  // namespace mpistage_test
