/// @file
/// The command line's unknown-word and choice messages (src/cli/suggest.cpp) and the format
/// flags check (src/cli/format_flags.cpp), on the real `mpistage` command description.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/format_flags.hpp"
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
    for (const char* choices : {"{auto,hdf5,idx,tfrecord}", "{none,local,global}",
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

TEST(FormatFlags, FlagsOfOtherFormatsAreRefused) {
    mpistage::cli::StageArgs a;
    a.files = {"train.h5"};
    a.features = {"label:int64"};
    std::string msg = error_of([&] { mpistage::cli::check_flags_apply(a, "hdf5"); });
    EXPECT_NE(msg.find("--feature does not apply to hdf5 input ('train.h5' detected as hdf5)"),
              std::string::npos)
        << msg;
    EXPECT_EQ(error_of([&] { mpistage::cli::check_flags_apply(a, "tfrecord"); }), "");
    a.features.clear();
    a.on_corrupt = "skip";
    msg = error_of([&] { mpistage::cli::check_flags_apply(a, "idx"); });
    EXPECT_NE(msg.find("--on-corrupt does not apply to idx input"), std::string::npos) << msg;
    a.on_corrupt = "error";
    a.index_paths = {"x.idx"};
    a.format = "hdf5";
    msg = error_of([&] { mpistage::cli::check_flags_apply(a, "hdf5"); });
    EXPECT_NE(msg.find("--index does not apply to hdf5 input ('train.h5' given as --format hdf5)"),
              std::string::npos)
        << msg;
    a.index_paths.clear();
    a.fields = {"images"};
    EXPECT_EQ(error_of([&] { mpistage::cli::check_flags_apply(a, "hdf5"); }), "");
    EXPECT_EQ(error_of([&] { mpistage::cli::check_flags_apply(a, "idx"); }), "");
    msg = error_of([&] { mpistage::cli::check_flags_apply(a, "tfrecord"); });
    EXPECT_NE(msg.find("--field does not apply to tfrecord input"), std::string::npos) << msg;
}

}  // namespace
