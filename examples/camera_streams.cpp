// N synthetic cameras with different frame rates and recording lengths, staged by mpistage's
// Loader over a stream source: cameras are assigned to ranks by declared weight (frames per
// second × seconds),
// batches are sized by a byte budget (frames carry a variable number of detections), and when
// cameras run dry at different times the other ranks share their remaining frames, so every
// rank yields the same number of steps and nothing hangs. At the end rank 0 prints, per camera,
// which ranks saw its frames and in which order, and checks that every frame arrived exactly
// once and that every rank saw each camera's frames in the order the camera recorded them.
//
//   mpirun -np 4 example_camera_streams [CAMERAS] [BUDGET_BYTES] [--batch-size N]
//                                       [--remainder rebalance|mask]
//   example_camera_streams --help
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "mpistage/loader.hpp"

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

struct Args {
    std::size_t cameras = 9;
    std::uint64_t budget_bytes = 16384;
    std::uint64_t batch_size = 64;
    std::string remainder = "rebalance";
};

/// Collective: parses the command line with CLI11 on every rank; rank 0 prints --help or a
/// parse error. Returns -1 to go on, else the exit code (the same on every rank: the worst).
int parse(int argc, char** argv, const Communicator& comm, Args& a) {
    CLI::App app{
        "Synthetic cameras staged by mpistage's Loader (source sharding): prints "
        "per camera the ranks that saw its frames and in which order, and checks exactly "
        "once, equal steps and per-camera frame order.",
        "example_camera_streams"};
    app.add_option("cameras", a.cameras, "number of cameras (camera 0 records nothing)")
        ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20))
        ->capture_default_str();
    app.add_option("budget_bytes", a.budget_bytes, "byte budget of a batch (0: off)")
        ->capture_default_str();
    app.add_option("-b,--batch-size", a.batch_size, "largest number of frames in a batch")
        ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20))
        ->capture_default_str();
    app.add_option("--remainder", a.remainder, "when cameras run dry: share frames or pad")
        ->check(CLI::IsMember({"rebalance", "mask"}))
        ->capture_default_str();
    int rc = -1;
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        std::ostringstream out, err;
        rc = app.exit(e, out, err);
        if (comm.rank() == 0) {
            std::fputs(out.str().c_str(), stdout);
            std::fputs(err.str().c_str(), stderr);
        }
    }
    // Ranks may have been given different arguments: agree on the worst outcome.
    const std::uint64_t worst = comm.allreduce_max(static_cast<std::uint64_t>(rc + 1));
    return static_cast<int>(worst) - 1;
}

/// "0-131,140,139" : the frames in delivery order, ascending runs of consecutive frames joined.
std::string runs_text(const std::vector<std::uint64_t>& frames) {
    std::string out;
    for (std::size_t i = 0; i < frames.size();) {
        std::size_t j = i;
        while (j + 1 < frames.size() && frames[j + 1] == frames[j] + 1) ++j;
        if (!out.empty()) out += ",";
        out += std::to_string(frames[i]);
        if (j > i) out += "-" + std::to_string(frames[j]);
        i = j + 1;
    }
    return out;
}

int run(int argc, char** argv) {
    Communicator comm(MPI_COMM_WORLD);
    Args a;
    if (const int rc = parse(argc, argv, comm, a); rc >= 0) return rc;
    const std::size_t n = a.cameras;
    const auto cams = make_cameras(n);
    std::vector<double> weights;
    for (const auto& c : cams)
        weights.push_back(static_cast<double>(std::max<std::uint64_t>(1, c.frames())));
    CallableStreamSource source(
        camera_fields(), n, [cams](std::size_t c) { return camera_generator(c, cams[c]); },
        "synthetic cameras " + std::to_string(n), weights);

    LoaderOptions o;
    o.stream.sharding = StreamSharding::source;  // one rank per camera, balanced by frames
    o.stream.remainder = a.remainder == "mask"
                             ? StreamRemainder::mask
                             : StreamRemainder::rebalance;  // dry ranks get frames
    // Batches of a.batch_size frames, or (with a byte budget) as many as fit, at most that many.
    o.plan.batch_size = a.batch_size;
    o.plan.budget.batch_bytes = a.budget_bytes;
    o.plan.budget.max_batch_samples = a.batch_size;
    o.safety.timeout = std::chrono::seconds(60);
    // The generators run on an I/O thread (read ahead while the loop works): they only touch
    // their own camera's state, so that is safe.
    Loader loader(comm, source, o);

    std::vector<std::int64_t> ids;  // this rank's frames, in delivery order
    std::uint64_t steps = 0, corrupt = 0;
    for (const HostBatch& b : loader.epoch(0)) {
        ++steps;
        corrupt += frames_intact(b) ? 0 : 1;
        for (std::size_t j = 0; j < b.size(); ++j) {
            if (b.valid()[j]) ids.push_back(b.index()[j]);
        }
    }
    const auto all_steps = comm.allgather(steps);
    const std::uint64_t bad = comm.allreduce_sum(corrupt);
    const std::uint64_t moved = comm.allreduce_sum(loader.stats().stream.items_sent);
    const auto counts = comm.allgather(static_cast<std::uint64_t>(ids.size()));
    std::vector<std::int64_t> all = comm.gatherv(ids, 0);  // rank-major, delivery order
    std::uint64_t ok = 1;
    if (comm.rank() == 0) {
        // seen[camera][rank]: the frames that rank yielded, in the order it yielded them.
        std::vector<std::map<int, std::vector<std::uint64_t>>> seen(n);
        std::size_t at = 0;
        for (int r = 0; r < comm.size(); ++r) {
            for (std::uint64_t k = 0; k < counts[static_cast<std::size_t>(r)]; ++k, ++at) {
                const auto id = static_cast<std::uint64_t>(all[at]);
                const std::uint64_t cam = id >> 40;
                if (cam < n) seen[cam][r].push_back(id & ((1ull << 40) - 1));
            }
        }
        std::vector<std::int64_t> expected;
        std::uint64_t frames = 0;
        for (std::size_t c = 0; c < n; ++c) {
            for (std::uint64_t f = 0; f < cams[c].frames(); ++f)
                expected.push_back(stream_item_id(c, f));
            frames += cams[c].frames();
        }
        std::printf(
            "camera_streams: %zu cameras, %llu frames, %d ranks, source sharding, %s, "
            "byte budget %llu\n",
            n, static_cast<unsigned long long>(frames), comm.size(), a.remainder.c_str(),
            static_cast<unsigned long long>(a.budget_bytes));
        std::printf("camera  fps  seconds  frames  rank: frames in the order it saw them\n");
        bool in_order = true;
        for (std::size_t c = 0; c < n; ++c) {
            std::string where;
            for (const auto& [r, f] : seen[c]) {
                in_order = in_order && std::is_sorted(f.begin(), f.end()) &&
                           std::adjacent_find(f.begin(), f.end()) == f.end();
                where += (where.empty() ? "" : " | ") + ("rank " + std::to_string(r)) + ": " +
                         runs_text(f);
            }
            std::printf("%6zu %4llu %8llu %7llu  %s\n", c,
                        static_cast<unsigned long long>(cams[c].fps),
                        static_cast<unsigned long long>(cams[c].seconds),
                        static_cast<unsigned long long>(cams[c].frames()),
                        where.empty() ? "(no frames)" : where.c_str());
        }
        std::sort(all.begin(), all.end());
        const bool once = all == expected;
        const bool equal = std::all_of(all_steps.begin(), all_steps.end(),
                                       [&](auto s) { return s == all_steps[0]; });
        std::printf("steps: %llu on every rank: %s\n",
                    static_cast<unsigned long long>(all_steps[0]), equal ? "yes" : "NO");
        std::printf("each frame exactly once: %s (%zu delivered, %llu corrupt batches)\n",
                    once && bad == 0 ? "OK" : "FAILED", all.size(),
                    static_cast<unsigned long long>(bad));
        std::printf("frames moved between ranks: %llu\n", static_cast<unsigned long long>(moved));
        std::printf("frame order per camera on every rank: %s\n", in_order ? "OK" : "FAILED");
        ok = once && equal && bad == 0 && in_order ? 1 : 0;
    }
    ok = comm.broadcast(std::vector<std::uint64_t>{ok}, 0)[0];
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
