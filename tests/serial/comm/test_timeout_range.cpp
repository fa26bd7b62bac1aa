// Watchdog deadlines out of range are refused by name, before any collective (issue "Nothing
// silent", item 3: --timeout 1e10 used to overflow the deadline and abort a healthy job).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "loader/stream/stream_config.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/error.hpp"
#include "mpistage/loader.hpp"

namespace {

using std::chrono::seconds;

std::string refusal(seconds timeout) {
    try {
        mpistage::check_timeout(timeout, "test");
    } catch (const mpistage::ConfigError& e) {
        return e.what();
    }
    return {};
}

TEST(TimeoutRange, AcceptsZeroDefaultAndTheLimit) {
    EXPECT_EQ(refusal(seconds(0)), "");
    EXPECT_EQ(refusal(seconds(300)), "");
    EXPECT_EQ(refusal(mpistage::kMaxTimeout), "");
}

TEST(TimeoutRange, RefusesNegativeAndHugeWithTheLimitInTheMessage) {
    for (const seconds t : {seconds(-1), mpistage::kMaxTimeout + seconds(1), seconds(10000000000LL),
                            seconds::max()}) {
        const std::string msg = refusal(t);
        ASSERT_NE(msg, "") << t.count();
        EXPECT_NE(msg.find("test: timeout " + std::to_string(t.count())), std::string::npos) << msg;
        EXPECT_NE(msg.find(std::to_string(mpistage::kMaxTimeout.count())), std::string::npos)
            << msg;
    }
}

TEST(TimeoutRange, LoaderAndStreamOptionsRefuseIt) {
    mpistage::LoaderOptions loader;
    loader.safety.timeout = seconds(10000000000LL);
    EXPECT_THROW(loader.validate(), mpistage::ConfigError);
    // The settings of a loader over streams come from the same LoaderOptions, checked alike.
    EXPECT_THROW(mpistage::detail::stream_config(loader), mpistage::ConfigError);
}

}  // namespace
