// The dynamic-batching flags of `mpistage stage` for FILE input (see dynamic_args.hpp).
#include "cli/dynamic_args.hpp"

#include "cli/stream_args.hpp"

namespace mpistage::cli {

bool DynamicStageArgs::active(const StreamStageArgs& s) const {
    return !s.active() && (s.batch_bytes > 0 || batch_tokens > 0);
}

bool DynamicStageArgs::given(const std::string& name) const {
    const CLI::Option* o = cmd ? cmd->get_option_no_throw(name) : nullptr;
    return o != nullptr && o->count() > 0;
}

void add_stage_dynamic_options(CLI::App& cmd, DynamicStageArgs& d) {
    d.cmd = &cmd;
    CLI::Option* sqlite = cmd.get_option("--sqlite");
    cmd.add_option("--batch-tokens", d.batch_tokens,
                   "FILE input: token budget of a batch (samples x longest sample of "
                   "--token-field, in elements); 0 = off")
        ->capture_default_str()
        ->excludes(sqlite);
    cmd.add_option("--token-field", d.token_field,
                   "FILE input with --batch-tokens: the ragged field whose length counts as "
                   "tokens (default: the source's only ragged field)")
        ->excludes(sqlite);
    cmd.add_option("--bucket-window", d.bucket_window,
                   "FILE input with --batch-bytes/--batch-tokens: sort the samples of this many "
                   "consecutive batches by length and batch them again (less padding); 0 = off")
        ->capture_default_str()
        ->excludes(sqlite);
}

}  // namespace mpistage::cli
