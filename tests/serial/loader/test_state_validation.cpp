// LoaderState validation without MPI (docs/resume.md, "Validation"): parsing checks types and
// ranges (a negative number is an error, never a wrap-around), and check_resume_point accepts
// exactly the resume points a run can save. Valid states are simulated with the formulas of
// the contract (global: the first S·W·B positions; byte_range: the planner's totals), at
// world sizes up to 1024 and with a change of world size in the history; every mutation of a
// number (±1, 0, huge, another state's value) is refused unless it leaves the state as it was.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loader/state_check.hpp"
#include "mpistage/error.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/state.hpp"

namespace {

using namespace mpistage;

LoaderState fixed_state(Sharding sharding, std::uint64_t n, int w, std::uint64_t b,
                        std::uint64_t steps) {
    LoaderState s;
    s.dataset_fingerprint = "0123456789abcdef";
    s.consumed_digest = "fedcba9876543210";  // checked against the plan by restore only
    s.num_samples = n;
    s.plan.batch_size = b;
    s.plan.sharding = sharding;
    s.plan.shuffle = sharding == Sharding::global ? Shuffle::global : Shuffle::local;
    s.plan.remainder = Remainder::mask;
    s.world_size = w;
    s.epoch = 3;
    s.steps_consumed = steps;
    if (sharding == Sharding::global) {
        s.samples_consumed = std::min<std::uint64_t>(n, steps * static_cast<std::uint64_t>(w) * b);
    } else {
        s.samples_consumed = plan_totals(n, w, s.plan).valid_samples -
                             plan_totals(n, w, s.plan, {steps, 0}).valid_samples;
    }
    return s;
}

bool accepted(const LoaderState& s) {
    try {
        detail::check_resume_point(s);
        return true;
    } catch (const ConfigError&) {
        return false;
    }
}

/// Every mutation of each number of `s` that changes it is refused.
void expect_mutations_refused(const LoaderState& s, const LoaderState& other,
                              const std::string& at) {
    constexpr std::uint64_t kHuge = std::numeric_limits<std::uint64_t>::max();
    using Field = std::uint64_t LoaderState::*;
    const std::vector<std::pair<const char*, Field>> fields = {
        {"steps_consumed", &LoaderState::steps_consumed},
        {"samples_consumed", &LoaderState::samples_consumed},
        {"run_start_steps", &LoaderState::run_start_steps},
        {"run_start_samples", &LoaderState::run_start_samples}};
    for (const auto& [name, field] : fields) {
        const std::uint64_t v = s.*field;
        for (const std::uint64_t m :
             {v + 1, v - 1, std::uint64_t{0}, kHuge, kHuge / 2, other.*field}) {
            if (m == v) continue;
            LoaderState x = s;
            x.*field = m;
            EXPECT_FALSE(accepted(x)) << at << ": " << name << " " << v << " -> " << m;
        }
    }
    for (const int w :
         {s.world_size + 1, s.world_size - 1, 0, kMaxStateWorldSize + 1, other.world_size}) {
        if (w == s.world_size || s.steps_consumed == s.run_start_steps) continue;
        LoaderState x = s;
        x.world_size = w;
        EXPECT_FALSE(accepted(x)) << at << ": world_size " << s.world_size << " -> " << w;
    }
    for (const std::uint64_t b : {s.plan.batch_size + 1, s.plan.batch_size - 1, std::uint64_t{0},
                                  kHuge, other.plan.batch_size}) {
        if (b == s.plan.batch_size || s.steps_consumed == 0) continue;
        LoaderState x = s;
        x.plan.batch_size = b;
        // A batch size that implies the same point (the epoch's end capped at N) is no change.
        if (b > 0 && accepted(x) && x.samples_consumed == s.samples_consumed &&
            b * static_cast<std::uint64_t>(s.world_size) >= s.num_samples) {
            continue;
        }
        EXPECT_FALSE(accepted(x)) << at << ": batch_size " << s.plan.batch_size << " -> " << b;
    }
}

TEST(StateValidation, SimulatedStatesAreAcceptedAndEveryMutationRefused) {
    int checked = 0;
    for (const Sharding sharding : {Sharding::global, Sharding::byte_range}) {
        for (const std::uint64_t n : {1ull, 10ull, 157ull, 1000ull}) {
            for (const int w : {1, 2, 3, 4, 7, 1024}) {
                for (const std::uint64_t b : {1ull, 3ull, 16ull}) {
                    const std::uint64_t steps =
                        plan_totals(n, w, fixed_state(sharding, n, w, b, 0).plan).steps;
                    const LoaderState other = fixed_state(sharding, n, w, b, steps / 2 + 1);
                    // About 20 resume points per epoch, the first and the last included.
                    const std::uint64_t stride = std::max<std::uint64_t>(1, steps / 20);
                    std::vector<std::uint64_t> points;
                    for (std::uint64_t k = 0; k < steps; k += stride) points.push_back(k);
                    if (steps > 0 && points.back() != steps - 1) points.push_back(steps - 1);
                    for (const std::uint64_t k : points) {
                        const LoaderState s = fixed_state(sharding, n, w, b, k);
                        const std::string at = to_string(sharding) + " N=" + std::to_string(n) +
                                               " W=" + std::to_string(w) +
                                               " B=" + std::to_string(b) +
                                               " k=" + std::to_string(k);
                        EXPECT_TRUE(accepted(s)) << at;
                        expect_mutations_refused(s, other, at);
                        ++checked;
                    }
                    // The end of the epoch is the next epoch's start, never a resume point.
                    LoaderState end = fixed_state(sharding, n, w, b, steps);
                    EXPECT_FALSE(accepted(end)) << "end of epoch, N=" << n << " W=" << w;
                }
            }
        }
    }
    EXPECT_GT(checked, 100);
}

// Global sharding: 5 steps at W=4, then a resume at W=3 and 2 more steps. The state names the
// run start (the W=4 part), so samples_consumed follows from the steps at W=3.
TEST(StateValidation, HistoryOfAnotherWorldSizeIsCheckedFromTheRunStart) {
    LoaderState s = fixed_state(Sharding::global, 1000, 3, 4, 0);
    s.run_start_steps = 5;
    s.run_start_samples = 5 * 4 * 4;
    s.steps_consumed = 7;
    s.samples_consumed = 80 + 2 * 3 * 4;
    EXPECT_TRUE(accepted(s));
    expect_mutations_refused(s, fixed_state(Sharding::global, 1000, 4, 4, 9), "W 4 then 3");
}

std::string valid_json() {
    return fixed_state(Sharding::global, 157, 2, 3, 4).to_json();
}

std::string with(const std::string& key, const nlohmann::json& value) {
    nlohmann::json j = nlohmann::json::parse(valid_json());
    j[key] = value;
    return j.dump();
}

TEST(StateValidation, ParsingRefusesNegativeFractionalHugeAndMistypedValues) {
    EXPECT_NO_THROW(LoaderState::from_json(valid_json(), "t"));
    const nlohmann::json j = nlohmann::json::parse(valid_json());
    for (const auto& [key, value] : j.items()) {
        if (!value.is_number()) continue;
        for (const nlohmann::json bad :
             {nlohmann::json(-1), nlohmann::json(-5), nlohmann::json(1.5), nlohmann::json(1e30),
              nlohmann::json("7"), nlohmann::json(true), nlohmann::json(nullptr)}) {
            try {
                (void)LoaderState::from_json(with(key, bad), "t.json");
                ADD_FAILURE() << key << " = " << bad.dump() << " was accepted";
            } catch (const ConfigError& e) {
                const std::string m = e.what();
                EXPECT_NE(m.find("t.json"), std::string::npos) << m;
                if (key != "format_version") EXPECT_NE(m.find(key), std::string::npos) << m;
            }
        }
    }
    // Out of range, with the limit in the message.
    const std::pair<const char*, const char*> cases[] = {
        {"world_size", "16777216"},
        {"batch_size", "must be at least 1"},
        {"num_samples", "at least 1"},
        {"samples_consumed", "exceeds num_samples"},
        {"format_version", "versions 1 to 5"}};
    const nlohmann::json values[] = {1ull << 40, 0, 0, 158, 6};
    for (std::size_t k = 0; k < std::size(cases); ++k) {
        try {
            (void)LoaderState::from_json(with(cases[k].first, values[k]), "t.json");
            ADD_FAILURE() << cases[k].first << " = " << values[k].dump() << " was accepted";
        } catch (const ConfigError& e) {
            EXPECT_NE(std::string(e.what()).find(cases[k].second), std::string::npos)
                << cases[k].first << ": " << e.what();
        }
    }
    // The largest unsigned value parses exactly (no wrap-around), then the numbers refuse it.
    const LoaderState big =
        LoaderState::from_json(with("seed", std::numeric_limits<std::uint64_t>::max()), "t");
    EXPECT_EQ(big.plan.seed, std::numeric_limits<std::uint64_t>::max());
    const LoaderState far = LoaderState::from_json(
        with("steps_consumed", std::numeric_limits<std::uint64_t>::max()), "t");
    EXPECT_EQ(far.steps_consumed, std::numeric_limits<std::uint64_t>::max());
    EXPECT_FALSE(accepted(far));
}

TEST(StateValidation, ConsumedDigestIsSixteenHexDigitsFromVersionFour) {
    EXPECT_EQ(LoaderState::from_json(valid_json(), "t").consumed_digest, "fedcba9876543210");
    for (const nlohmann::json bad :
         {nlohmann::json(""), nlohmann::json("fedcba987654321"),
          nlohmann::json("fedcba98765432100"), nlohmann::json("FEDCBA9876543210"),
          nlohmann::json("fedcba987654321g"), nlohmann::json(7), nlohmann::json(nullptr)}) {
        try {
            (void)LoaderState::from_json(with("consumed_digest", bad), "t.json");
            ADD_FAILURE() << bad.dump() << " was accepted";
        } catch (const ConfigError& e) {
            EXPECT_NE(std::string(e.what()).find("consumed_digest"), std::string::npos) << e.what();
        }
    }
    nlohmann::json j = nlohmann::json::parse(valid_json());
    j.erase("consumed_digest");
    EXPECT_THROW((void)LoaderState::from_json(j.dump(), "t.json"), ConfigError);
    // Version 3 had no digest: read with none (a restore computes it, see docs/resume.md).
    j["format_version"] = 3;
    const LoaderState v3 = LoaderState::from_json(j.dump(), "v3");
    EXPECT_TRUE(v3.consumed_digest.empty());
    EXPECT_EQ(v3.format_version, LoaderState::kFormatVersion);
}

TEST(StateValidation, OldVersionsAreReadWithTheEndsFingerprint) {
    nlohmann::json j = nlohmann::json::parse(valid_json());
    j["format_version"] = 2;
    j.erase("fingerprint_level");
    j.erase("run_start_steps");
    j.erase("run_start_samples");
    j.erase("consumed_digest");
    const LoaderState s = LoaderState::from_json(j.dump(), "v2");
    EXPECT_EQ(s.fingerprint_level, FingerprintLevel::ends);
    EXPECT_EQ(s.run_start_steps, s.steps_consumed);
    EXPECT_EQ(s.format_version, LoaderState::kFormatVersion);
    EXPECT_EQ(LoaderState::from_json(s.to_json(), "again"), s);
    EXPECT_THROW(parse_fingerprint_level("ends"), ConfigError);
    EXPECT_EQ(parse_fingerprint_level("ends", true), FingerprintLevel::ends);
}

// Versions 3 and 4 wrote "sampled" for the level that also covered every sample's size: it is
// read as `sampled_v4` (and checked at that level on restore), written back by that word, and
// never taken as an option; from version 5 "sampled" is the bounded level.
TEST(StateValidation, SampledOfVersionsThreeAndFourIsReadAsSampledV4) {
    nlohmann::json j = nlohmann::json::parse(valid_json());
    j["fingerprint_level"] = "sampled";
    EXPECT_EQ(LoaderState::from_json(j.dump(), "v5").fingerprint_level, FingerprintLevel::sampled);
    j["format_version"] = 4;
    const LoaderState v4 = LoaderState::from_json(j.dump(), "v4");
    EXPECT_EQ(v4.fingerprint_level, FingerprintLevel::sampled_v4);
    EXPECT_EQ(v4.format_version, LoaderState::kFormatVersion);
    EXPECT_NE(v4.to_json().find("\"fingerprint_level\":\"sampled_v4\""), std::string::npos)
        << v4.to_json();
    EXPECT_EQ(LoaderState::from_json(v4.to_json(), "again"), v4);
    j["fingerprint_level"] = "full";  // computed the same way in every version
    EXPECT_EQ(LoaderState::from_json(j.dump(), "v4 full").fingerprint_level,
              FingerprintLevel::full);
    j["format_version"] = 3;
    j["fingerprint_level"] = "sampled";
    j.erase("consumed_digest");
    const LoaderState v3 = LoaderState::from_json(j.dump(), "v3");
    EXPECT_EQ(v3.fingerprint_level, FingerprintLevel::sampled_v4);
    EXPECT_EQ(LoaderState::from_json(v3.to_json(), "again"), v3);
    EXPECT_THROW(parse_fingerprint_level("sampled_v4"), ConfigError);
    EXPECT_EQ(parse_fingerprint_level("sampled_v4", true), FingerprintLevel::sampled_v4);
    LoaderOptions o;
    o.safety.fingerprint = FingerprintLevel::sampled_v4;
    try {
        o.validate();
        ADD_FAILURE() << "sampled_v4 accepted as an option";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("versions 3 and 4"), std::string::npos) << e.what();
    }
}

}  // namespace
