#pragma once
// Shared by the budget-batch MPI tests of the Loader: a TFRecord file of heavy-tailed record
// sizes whose lengths and payload bytes come from the generator below (independent of
// mpistage), so every batch can be checked byte for byte.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../tfrecord_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hash.hpp"
#include "sources/tfrecord/framing.hpp"

namespace budget_test {

using namespace mpistage;

inline constexpr std::uint64_t kRecords = 700;

/// Payload length of record i: Pareto-like, 1 byte .. 40 kB (a few over the budgets below).
inline std::uint64_t record_length(std::uint64_t i) {
    const double u = (static_cast<double>(mix64(i + 99) >> 11) + 1.0) / 9007199254740993.0;
    return static_cast<std::uint64_t>(std::min(40000.0, 30.0 / std::pow(u, 1.0 / 1.1)));
}
inline std::uint8_t payload_byte(std::uint64_t i, std::uint64_t k) {
    return static_cast<std::uint8_t>((i * 31 + k * 7) & 0xFF);
}

/// Collective: rank 0 writes kRecords records of the lengths above; returns the path.
inline std::string write_variable_tfrecord(const Communicator& comm) {
    const std::string path = tfrecord_test::shared_tmp_dir(comm) + "/variable.tfrecord";
    if (comm.rank() == 0) {
        std::vector<std::uint8_t> bytes;
        for (std::uint64_t i = 0; i < kRecords; ++i) {
            std::vector<std::uint8_t> payload(record_length(i));
            for (std::uint64_t k = 0; k < payload.size(); ++k) payload[k] = payload_byte(i, k);
            tfrecord::append_record(bytes, payload.data(), payload.size());
        }
        tfrecord_test::spit(path, bytes);
    }
    comm.barrier();
    return path;
}

}  // namespace budget_test
