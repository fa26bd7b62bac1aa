// N synthetic cameras with different frame rates and recording lengths, staged by mpistage's
// StreamLoader: cameras are assigned to ranks by declared weight (frames per second × seconds),
// batches are sized by a byte budget (frames carry a variable number of detections), and when
// cameras run dry at different times the other ranks share their remaining frames, so every
// rank yields the same number of steps and nothing hangs. At the end the ranks check that every
// frame arrived exactly once and print the verdict.
//
//   mpirun -np 4 example_camera_streams [cameras] [budget_bytes]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "mpistage/stream.hpp"

namespace {

using namespace mpistage;

constexpr std::int64_t kHeight = 24;
constexpr std::int64_t kWidth = 32;

struct Camera {
    std::uint64_t fps;
    std::uint64_t seconds;
    std::uint64_t frames() const { return fps * seconds; }
};

/// Camera c: 5-60 fps, recording for 1-12 s (camera 0 is off: zero frames).
std::vector<Camera> make_cameras(std::size_t n) {
    std::vector<Camera> cams;
    for (std::size_t c = 0; c < n; ++c) {
        cams.push_back({5 + (c * 13) % 56, c == 0 ? 0 : 1 + (c * 7) % 12});
    }
    return cams;
}

std::uint8_t pixel(std::uint64_t camera, std::uint64_t frame, std::int64_t i) {
    return static_cast<std::uint8_t>(camera * 31 + frame * 7 + static_cast<std::uint64_t>(i));
}

/// Fields: the grey image, its timestamp in microseconds, and 0-20 detections (x, y, w, h).
std::vector<FieldInfo> camera_fields() {
    return {{"image", DType::uint8, {kHeight, kWidth}, 0, false},
            {"timestamp_us", DType::int64, {}, 0, false},
            {"detections", DType::float32, {}, 0, true}};
}

CallableStreamSource::Generator camera_generator(std::uint64_t c, Camera cam) {
    std::uint64_t f = 0;
    return [c, cam, f](StreamSample& out) mutable {
        if (f == cam.frames()) return false;
        out.fields.resize(3);
        out.fields[0].resize(kHeight * kWidth);
        for (std::int64_t i = 0; i < kHeight * kWidth; ++i) {
            out.fields[0][static_cast<std::size_t>(i)] = std::byte{pixel(c, f, i)};
        }
        const std::int64_t t = static_cast<std::int64_t>(f * 1000000 / cam.fps);
        out.fields[1].resize(8);
        std::memcpy(out.fields[1].data(), &t, 8);
        out.fields[2].assign(((c + f) % 21) * 4 * sizeof(float), std::byte{0});
        ++f;
        return true;
    };
}

/// True when every frame of the batch holds the pixels its camera drew.
bool frames_intact(const HostBatch& b) {
    const auto* img = b.fields()[0].as<std::uint8_t>();
    for (std::size_t j = 0; j < b.size(); ++j) {
        if (!b.valid()[j]) continue;
        const auto id = static_cast<std::uint64_t>(b.index()[j]);
        const std::uint64_t cam = id >> 40, frame = id & ((1ull << 40) - 1);
        for (std::int64_t i = 0; i < kHeight * kWidth; i += 97) {
            if (img[j * kHeight * kWidth + static_cast<std::size_t>(i)] != pixel(cam, frame, i)) {
                return false;
            }
        }
    }
    return true;
}

/// Collective: every rank's frame ids on rank 0 (empty elsewhere).
std::vector<std::int64_t> gather_ids(const std::vector<std::int64_t>& mine, int rank, int w) {
    int n = static_cast<int>(mine.size());
    std::vector<int> counts(static_cast<std::size_t>(w)), displs(static_cast<std::size_t>(w));
    MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    int total = 0;
    for (int r = 0; r < w; ++r) {
        displs[static_cast<std::size_t>(r)] = total;
        total += counts[static_cast<std::size_t>(r)];
    }
    std::vector<std::int64_t> all(rank == 0 ? static_cast<std::size_t>(total) : 0);
    MPI_Gatherv(mine.data(), n, MPI_INT64_T, all.data(), counts.data(), displs.data(), MPI_INT64_T,
                0, MPI_COMM_WORLD);
    return all;
}

int run(int argc, char** argv) {
    Communicator comm(MPI_COMM_WORLD);
    const std::size_t n = argc > 1 ? std::stoul(argv[1]) : 9;
    const std::uint64_t budget = argc > 2 ? std::stoull(argv[2]) : 16384;
    const auto cams = make_cameras(n);
    std::vector<double> weights;
    for (const auto& c : cams)
        weights.push_back(static_cast<double>(std::max<std::uint64_t>(1, c.frames())));
    CallableStreamSource source(
        camera_fields(), n, [cams](std::size_t c) { return camera_generator(c, cams[c]); },
        "synthetic cameras " + std::to_string(n), weights);

    StreamOptions o;
    o.sharding = StreamSharding::source;       // one rank per camera, balanced by frames
    o.remainder = StreamRemainder::rebalance;  // dry ranks get frames from the others
    o.batch_size = 64;
    o.batch_bytes = budget;
    o.timeout = std::chrono::seconds(60);
    StreamLoader loader(comm, source, o);

    std::vector<std::int64_t> ids;
    std::uint64_t steps = 0, corrupt = 0;
    HostBatch b;
    while (loader.next(b)) {
        ++steps;
        corrupt += frames_intact(b) ? 0 : 1;
        for (std::size_t j = 0; j < b.size(); ++j) {
            if (b.valid()[j]) ids.push_back(b.index()[j]);
        }
    }
    const auto all_steps = comm.allgather(steps);
    const std::uint64_t bad = comm.allreduce_sum(corrupt);
    std::vector<std::int64_t> all = gather_ids(ids, comm.rank(), comm.size());
    int ok = 1;
    if (comm.rank() == 0) {
        std::vector<std::int64_t> expected;
        std::uint64_t frames = 0;
        for (std::size_t c = 0; c < n; ++c) {
            for (std::uint64_t f = 0; f < cams[c].frames(); ++f)
                expected.push_back(stream_item_id(c, f));
            frames += cams[c].frames();
        }
        std::sort(all.begin(), all.end());
        const bool once = all == expected;
        const bool equal = std::all_of(all_steps.begin(), all_steps.end(),
                                       [&](auto s) { return s == all_steps[0]; });
        std::printf("camera_streams: %zu cameras, %llu frames, %d ranks, byte budget %llu\n", n,
                    static_cast<unsigned long long>(frames), comm.size(),
                    static_cast<unsigned long long>(budget));
        std::printf("steps: %llu on every rank: %s\n",
                    static_cast<unsigned long long>(all_steps[0]), equal ? "yes" : "NO");
        std::printf("each frame exactly once: %s (%zu delivered, %llu corrupt batches)\n",
                    once && bad == 0 ? "OK" : "FAILED", all.size(),
                    static_cast<unsigned long long>(bad));
        ok = once && equal && bad == 0;
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rc = 0;
    try {
        rc = run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "camera_streams: %s\n", e.what());
        rc = 2;
    }
    MPI_Finalize();
    return rc;
}
