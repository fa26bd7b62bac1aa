// A node window leaves the process's MPI thread level as MPI_Init_thread gave it. Its capacity
// check reads Open MPI's osc_sm_backing_directory through the MPI tool interface, and Open MPI
// 4.1's MPI_T_init_thread stores the level it is asked for as the process's: asking for
// MPI_THREAD_SINGLE there made MPI_Query_thread report a single-threaded process in a
// MPI_THREAD_MULTIPLE job, and the loader then read the memory tier across nodes without its
// I/O threads (found by test_loader_io_threads; the tests run with MPI_THREAD_MULTIPLE).
#include <gtest/gtest.h>
#include <mpi.h>

#include "comm/node_map.hpp"
#include "comm/node_segment.hpp"
#include "mpistage/comm.hpp"

using namespace mpistage;

TEST(NodeSegment, LeavesTheThreadLevelAsMpiInitGaveIt) {
    int before = -1;
    MPI_Query_thread(&before);
    ASSERT_EQ(before, MPI_THREAD_MULTIPLE) << "the MPI test main asks for MPI_THREAD_MULTIPLE";
    Communicator comm(MPI_COMM_WORLD);
    {
        const detail::NodeMap nodes = detail::make_node_map(comm, 0);
        detail::NodeSegment segment(comm, nodes, 4096);
        EXPECT_NE(segment.mine(), nullptr);
        int during = -1;
        MPI_Query_thread(&during);
        EXPECT_EQ(during, before);
    }
    int after = -1;
    MPI_Query_thread(&after);
    EXPECT_EQ(after, before);
    comm.free();
}
