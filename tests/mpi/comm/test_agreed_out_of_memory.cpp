// A std::bad_alloc inside an agreed step (run_agreed) reaches every rank as the same error,
// naming the failing rank, the phase and file of the communicator's context and the rank's
// resident bytes, instead of a bare "out of memory (std::bad_alloc)".
#include <gtest/gtest.h>
#include <mpi.h>

#include <new>
#include <string>

#include "comm/agree.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/error.hpp"

using namespace mpistage;

TEST(AgreedOutOfMemory, NamesRankPhaseAndFileOnEveryRank) {
    Communicator comm(MPI_COMM_WORLD);
    const int failing = comm.size() - 1;
    comm.set_context({"test: building the index", -1, -1, "records.bin", -1});
    std::string message;
    try {
        run_agreed(comm, [&] {
            if (comm.rank() == failing) throw std::bad_alloc();
        });
    } catch (const Error& e) {
        message = e.what();
    }
    EXPECT_NE(message.find(kOutOfMemory), std::string::npos) << message;
    EXPECT_NE(message.find("on rank " + std::to_string(failing) + " during test: building the "
                           "index"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("records.bin"), std::string::npos) << message;
    EXPECT_NE(message.find("resident "), std::string::npos) << message;
    // The same text on every rank.
    const std::string root = comm.broadcast(message, 0);
    EXPECT_EQ(message, root);
    comm.free();
}
