// The `mpistage` executable: stage (the main job), convert, index. Parses the command line on
// every rank, agrees on it, runs the command, and prints each (agreed) error once, on rank 0.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/report.hpp"
#include "comm/blocking_watch.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/error.hpp"

namespace {

using namespace mpistage;

// Collective: parses, agrees, runs the command. Returns the exit code.
int run_command(cli::CommandLine& cl, int argc, char** argv) {
    // Parsed before the communicator exists, so that its construction (collective: a
    // duplicate and a node split, each under the watchdog) already has the user's --timeout.
    cl.parse_local(argc, argv);
    int world_size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (world_size == 1 && cl.help_or_version()) {
        cl.print_help_or_version();
        return 0;
    }
    Communicator comm(MPI_COMM_WORLD, cl.watchdog_timeout());
    int rc = 0;
    switch (cl.agree_parsed(comm)) {
        case cli::Command::stage:
            rc = cli::run_stage(comm, cl.stage);
            break;
        case cli::Command::convert_idx:
            cli::run_convert(comm, cl.convert);
            break;
        case cli::Command::index:
            cli::run_index(comm, cl.index);
            break;
        case cli::Command::none:
            break;  // --help or --version was printed
    }
    // Every rank leaves together, through a watched barrier that names a missing rank and ends
    // the job with MPI_Abort (srun, unlike mpirun, does not end the other tasks when one exits
    // with an error inside MPI_Finalize, the fallback below).
    comm.set_context([] {
        CollectiveContext c;
        c.phase = "the end of the run";
        return c;
    }());
    comm.barrier();
    comm.free();
    return rc;
}

// True when every rank prints its copy of an agreed error (MPISTAGE_ERRORS_ON_EVERY_RANK=1),
// which shows that the ranks agree; by default only rank 0 prints it.
bool errors_on_every_rank() {
    const char* v = std::getenv("MPISTAGE_ERRORS_ON_EVERY_RANK");
    return v != nullptr && std::strcmp(v, "1") == 0;
}

// Local: prints an (agreed) error once: on rank 0 as "mpistage: ConfigError: [rank R and K
// other rank(s)] ..." (the agreed message names the failing ranks), or on every rank as
// "mpistage: rank R: ConfigError: ..."; rank 0 also records it in the --json report.
void report_error(const cli::CommandLine& cl, int rank, int world_size, const Error& e) {
    const std::string kind = cli::error_kind_name(e.kind());
    if (errors_on_every_rank()) {
        std::fprintf(stderr, "mpistage: rank %d: %s: %s\n", rank, kind.c_str(), e.what());
    } else if (rank == 0) {
        std::fprintf(stderr, "mpistage: %s: %s\n", kind.c_str(), e.what());
    }
    if (rank != 0 || cl.command() != cli::Command::stage || cl.stage.json.empty()) return;
    try {
        cli::write_error_json(cl.stage.json, world_size, e);
    } catch (const std::exception& w) {
        std::fprintf(stderr, "mpistage: warning: rank 0 could not record the error: %s\n",
                     w.what());
    }
}

}  // namespace

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0;
    int world_size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    int rc = 0;
    std::chrono::seconds finalize_timeout = kDefaultCollectiveTimeout;
    {
        cli::CommandLine cl;
        try {
            rc = run_command(cl, argc, argv);
        } catch (const Error& e) {
            // Errors are agreed: every rank has the same one and exits 2; rank 0 prints it.
            report_error(cl, rank, world_size, e);
            rc = 2;
        } catch (const std::exception& e) {
            // Not agreed between ranks: abort the job rather than leave others hanging.
            std::fprintf(stderr, "mpistage: rank %d: fatal: %s\n", rank, e.what());
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        finalize_timeout = cl.watchdog_timeout();
    }
    // MPI_Finalize waits for the other ranks: a rank that never arrives would hold this one
    // forever. After the deadline this rank reports and exits (code 70) without MPI_Abort (not
    // callable inside MPI_Finalize); the launcher then ends the rest of the job.
    const detail::BlockingWatch watch(finalize_timeout, world_size, "MPI_Finalize",
                                      "teardown: finalize MPI", /*abort_mpi=*/false);
    MPI_Finalize();
    return rc;
}
