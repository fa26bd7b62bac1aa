#pragma once
/// @file
/// Where the tests find the shared test data: real files written by other tools, with known
/// answers in the directory's SOURCES.md. `$MPISTAGE_TEST_DATA_DIR` at run time wins over the
/// directory CMake found at configure time; a test that needs the data and finds none is
/// skipped with a message saying how to provide it (never a failure, never a silent pass).

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace mpistage_test {

/// The data directory (no trailing slash).
inline std::string data_dir() {
    const char* env = std::getenv("MPISTAGE_TEST_DATA_DIR");
    return env != nullptr && *env != '\0' ? std::string(env) : std::string(MPISTAGE_TEST_DATA_DIR);
}

/// True when the directory holds SOURCES.md (the same answer on every rank of one machine).
inline bool have_data() { return std::filesystem::exists(data_dir() + "/SOURCES.md"); }

inline std::string data_missing_message() {
    return "shared test data not found in '" + data_dir() +
           "': set MPISTAGE_TEST_DATA_DIR to the directory that holds SOURCES.md";
}

}  // namespace mpistage_test

/// First statement of a test that reads the shared data: skips it when the data is absent.
#define MPISTAGE_REQUIRE_TEST_DATA()                                          \
    do {                                                                      \
        if (!::mpistage_test::have_data()) {                                  \
            GTEST_SKIP() << ::mpistage_test::data_missing_message();          \
        }                                                                     \
    } while (0)
