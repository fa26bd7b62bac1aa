/// @file
/// The command line's unknown-word and choice messages (src/cli/suggest.cpp) and the format
/// applicability table (src/cli/flag_rules.cpp), on the real `mpistage` command description.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/flag_rules.hpp"
#include "cli/suggest.hpp"
#include "mpistage/error.hpp"

namespace {

using mpistage::ConfigError;
using mpistage::cli::check_command_words;
using mpistage::cli::closest_match;

// The message of the ConfigError `fn` throws ("" when it throws none).
template <class Fn>
std::string error_of(Fn&& fn) {
    try {
        fn();
    } catch (const ConfigError& e) {
        return e.what();
    }
    return {};
}

// Runs check_command_words on the real command description with `words` after "mpistage".
std::string scan(std::vector<const char*> words) {
    // CommandLine owns a CLI::App with every command and option (no MPI needed to build it).
    static mpistage::cli::CommandLine cl;
    words.insert(words.begin(), "mpistage");
    return error_of(
        [&] { check_command_words(cl.app(), static_cast<int>(words.size()), words.data()); });
}

TEST(Suggest, ClosestMatchFindsMisspellings) {
    const std::vector<std::string> opts{"--batch-size", "--epochs", "--seed",   "--shuffle",
                                        "--sharding",   "--field",  "--feature"};
    EXPECT_EQ(closest_match("--batchsize", opts), "--batch-size");
    EXPECT_EQ(closest_match("--batch_size", opts), "--batch-size");
    EXPECT_EQ(closest_match("--BATCH-SIZE", opts), "--batch-size");
    EXPECT_EQ(closest_match("--epoch", opts), "--epochs");
    EXPECT_EQ(closest_match("--shufle", opts), "--shuffle");
    EXPECT_EQ(closest_match("--feild", opts), "--field");       // transposition
    EXPECT_EQ(closest_match("--batch", opts), "--batch-size");  // unique prefix
    EXPECT_EQ(closest_match("--zzzz", opts), "");
    EXPECT_EQ(closest_match("-x", {"-b", "-e", "-q"}), "");  // too short to guess
    EXPECT_EQ(closest_match("stag", {"stage", "convert", "index"}), "stage");
    EXPECT_EQ(closest_match("", opts), "");
}

TEST(Suggest, UnknownOptionIsReportedWithSuggestionNotAsAFile) {
    const std::string msg = scan({"stage", "train.h5", "--batchsize", "64"});
    EXPECT_NE(msg.find("unknown option '--batchsize' for 'mpistage stage'"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("did you mean '--batch-size'?"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("64"), std::string::npos) << msg;
}

TEST(Suggest, UnknownCommandsAreReportedWithTheCommands) {
    std::string msg = scan({"stag", "train.h5"});
    EXPECT_NE(msg.find("unknown command 'stag' for 'mpistage'; did you mean 'stage'?"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("(commands: stage, convert, index)"), std::string::npos) << msg;
    msg = scan({"convert", "idz", "a", "b", "-o", "c"});
    EXPECT_NE(msg.find("unknown command 'idz' for 'mpistage convert'; did you mean 'idx'?"),
              std::string::npos)
        << msg;
}

TEST(Suggest, ValidCommandLinesPass) {
    EXPECT_EQ(scan({"stage", "a.h5", "--batch-size", "64", "-e", "2", "--field", "images"}), "");
    EXPECT_EQ(scan({"stage", "a.h5", "--batch-size=64", "-b64", "-q", "--verify"}), "");
    EXPECT_EQ(scan({"stage", "a.h5", "--seed", "-1"}), "");  // a value, refused later by CLI11
    EXPECT_EQ(scan({"stage", "a.h5", "--json", "-weird-name.json"}), "");  // value of --json
    EXPECT_EQ(scan({"stage", "--", "--not-an-option.h5"}), "");
    EXPECT_EQ(scan({"convert", "idx", "a", "b", "-o", "c", "--format", "tfrecord"}), "");
    EXPECT_EQ(scan({"--version"}), "");
    EXPECT_EQ(scan({"stage", "--help"}), "");
}

TEST(Suggest, ChoicesAreListedInHelpAndCheckedWithSuggestion) {
    mpistage::cli::CommandLine cl;
    const std::string help = cl.app().get_subcommand("stage")->help();
    for (const char* choices : {"{auto,hdf5,idx,tfrecord}", "{none,local,global,chunks}",
                                "{byte_range,global}", "{drop,pad,mask}", "{error,skip}"}) {
        EXPECT_NE(help.find(choices), std::string::npos) << choices << "\n" << help;
    }
    const char* argv[] = {"mpistage", "stage", "a.h5", "--remainder", "mak"};
    try {
        cl.app().parse(5, argv);
        FAIL() << "--remainder mak accepted";
    } catch (const CLI::ValidationError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("'mak' is not one of drop, pad, mask; did you mean 'mask'?"),
                  std::string::npos)
            << msg;
    }
}

// Runs the applicability check for `a` read as `kind` (file "train.h5" or database "rows.db").
std::string refusal(const mpistage::cli::StageArgs& a, mpistage::cli::InputKind kind,
                    bool budget = false) {
    const bool db = kind == mpistage::cli::InputKind::sqlite;
    return error_of([&] {
        mpistage::cli::refuse_inapplicable_flags(a, {kind, budget, db ? "rows.db" : "train.h5"});
    });
}

TEST(FlagRules, FlagsOfOtherFormatsAreRefused) {
    using mpistage::cli::InputKind;
    mpistage::cli::StageArgs a;
    a.files = {"train.h5"};
    a.given = {"files", "--feature"};
    std::string msg = refusal(a, InputKind::hdf5);
    EXPECT_NE(msg.find("--feature does not apply to hdf5 input ('train.h5' detected as hdf5)"),
              std::string::npos)
        << msg;
    EXPECT_EQ(refusal(a, InputKind::tfrecord), "");
    a.given = {"files", "--on-corrupt"};
    msg = refusal(a, InputKind::idx);
    EXPECT_NE(msg.find("--on-corrupt does not apply to idx input"), std::string::npos) << msg;
    a.given = {"files", "--index", "--format"};
    a.format = "hdf5";
    msg = refusal(a, InputKind::hdf5);
    EXPECT_NE(msg.find("--index does not apply to hdf5 input ('train.h5' given as --format hdf5)"),
              std::string::npos)
        << msg;
    a.given = {"files", "--field"};
    EXPECT_EQ(refusal(a, InputKind::hdf5), "");
    EXPECT_EQ(refusal(a, InputKind::idx), "");
    msg = refusal(a, InputKind::tfrecord);
    EXPECT_NE(msg.find("--field does not apply to tfrecord input"), std::string::npos) << msg;
}

TEST(FlagRules, BudgetAndStreamRefusalsNameFlagAndInput) {
    using mpistage::cli::InputKind;
    mpistage::cli::StageArgs a;
    a.given = {"files", "--batch-bytes", "--remainder"};
    a.batch_bytes = 100;
    std::string msg = refusal(a, InputKind::tfrecord, true);
    EXPECT_NE(msg.find("stage: --remainder does not combine with --batch-bytes/--batch-tokens "
                       "(budget batches of tfrecord input"),
              std::string::npos)
        << msg;
    a.given = {"--sqlite", "--query", "--shuffle"};
    msg = refusal(a, InputKind::sqlite);
    EXPECT_NE(msg.find("stage: --shuffle does not apply to sqlite input ('rows.db')"),
              std::string::npos)
        << msg;
    a.given = {"files", "--on-dry"};
    msg = refusal(a, InputKind::hdf5);
    EXPECT_NE(msg.find("stage: --on-dry does not apply to hdf5 input"), std::string::npos) << msg;
    a.given = {"--sqlite", "--query", "--epochs", "--json", "--compute-us", "--batch-bytes"};
    EXPECT_EQ(refusal(a, InputKind::sqlite), "");
}

// A flag added to the stage command must get a row in the applicability table (taken effect,
// or refused by name for the inputs it does not apply to).
TEST(FlagRules, EveryStageOptionHasARule) {
    mpistage::cli::CommandLine cl;
    const std::vector<std::string> ruled = mpistage::cli::ruled_stage_flags();
    for (const CLI::Option* o : cl.stage_command().get_options()) {
        EXPECT_NE(std::find(ruled.begin(), ruled.end(), mpistage::cli::option_name(*o)),
                  ruled.end())
            << mpistage::cli::option_name(*o) << " has no rule in src/cli/flag_rules.cpp";
    }
    for (const std::string& flag : ruled) {
        EXPECT_NE(cl.stage_command().get_option_no_throw(flag), nullptr)
            << flag << " is in the table but not an option of stage";
    }
}

}  // namespace
