// `mpistage index`: DALI index files of TFRecord files, scanned in parallel.
#include <cstdio>

#include "cli/commands.hpp"
#include "comm/agree.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "util/input_file.hpp"

namespace mpistage::cli {

void run_index(const Communicator& comm, const IndexArgs& a) {
    run_agreed(comm, [&] {
        for (const auto& f : a.files) detail::probe_input_file(f, "index: FILE");
    });
    require_same(comm, {{"FILE", join_words(a.files)}, {"--output", join_words(a.outputs)}},
                 "index: ranks were given different arguments", kSameCommandAdvice);
    std::vector<std::string> outputs = a.outputs;
    if (outputs.empty()) {
        for (const auto& f : a.files) outputs.push_back(f + ".idx");
    }
    write_dali_index(comm, a.files, outputs);
    if (comm.rank() == 0) {
        for (const auto& f : outputs) std::printf("wrote %s\n", f.c_str());
    }
}

}  // namespace mpistage::cli
