// The loader's device delivery (device_delivery.hpp).
#include "loader/device_delivery.hpp"

#include <unistd.h>

#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "comm/agree.hpp"

namespace mpistage::detail {

// Host copies of the small parts of a CUDA batch, and its device block (the lease of every
// CUDA batch the loader yields; `use_on_stream` relies on it).
struct DeviceBatchStore {
    std::vector<std::int64_t> index;
    std::vector<std::uint8_t> valid;
    std::vector<std::vector<std::int64_t>> offsets;  // per field (empty for fixed fields)
    std::shared_ptr<DeviceLease> device;
};

namespace {

std::string rank_list(const std::vector<int>& ranks) {
    std::string s;
    for (std::size_t i = 0; i < ranks.size() && i < 8; ++i) {
        s += (i ? "," : "") + std::to_string(ranks[i]);
    }
    if (ranks.size() > 8) s += ",... (" + std::to_string(ranks.size()) + " ranks)";
    return s;
}

// This process's node, as a number equal on the ranks of one host (a hash of its host name;
// MPI_COMM_TYPE_SHARED groups by host too). Only for the note below: a collision merely names
// two nodes as one.
std::uint64_t host_id() {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) != 0) return 0;
    return static_cast<std::uint64_t>(std::hash<std::string>{}(std::string(name)));
}

// Per rank in the allgather of agree_device.
constexpr std::size_t kDeviceFacts = 6;

// The note for ranks of one node staging to one GPU that no one of them asked for (by
// `cuda:N` or by making it current): the first such group, and how many more; empty when none.
std::string shared_device_note(const std::vector<std::uint64_t>& all, int size) {
    std::map<std::pair<std::uint64_t, std::uint64_t>, std::vector<int>> groups;  // (host, device)
    std::map<std::pair<std::uint64_t, std::uint64_t>, bool> implicit;
    for (int r = 0; r < size; ++r) {
        const std::uint64_t* v = all.data() + kDeviceFacts * static_cast<std::size_t>(r);
        if (!v[0]) continue;  // the CPU
        const auto key = std::make_pair(v[5], v[3]);
        groups[key].push_back(r);
        if (v[4]) implicit[key] = true;
    }
    std::string first;
    std::size_t more = 0;
    for (const auto& [key, ranks] : groups) {
        if (ranks.size() < 2 || !implicit[key]) continue;
        if (!first.empty()) {
            ++more;
            continue;
        }
        first = "mpistage: device: ranks " + rank_list(ranks) +
                " of one node all stage to cuda:" + std::to_string(key.second - 1);
    }
    if (first.empty()) return first;
    if (more > 0) first += " (and " + std::to_string(more) + " more such group(s))";
    return first +
           " without asking for it (node-local rank mod the visible devices); make each rank's "
           "device current before creating the loader (cudaSetDevice / torch.cuda.set_device) "
           "or pass device = \"cuda:N\" to choose";
}

}  // namespace

LoaderDevice agree_device(const Communicator& comm, const LoaderOptions& options) {
    LoaderDevice dev;
    // The node rank is the last fallback of a CUDA choice (no launcher local rank, no current
    // device); the node split that gives it is made only when some rank comes to it. The
    // choice's agreement carries that (no collective more), and the split is then made on every
    // rank at the same point. -1 while unknown: choose_device then takes device 0 and the rank
    // chooses again below.
    const int known_node_rank = comm.has_node_split() ? comm.node_rank() : -1;
    bool wants_node_rank = false;
    const LocalStatus chosen = capture([&] {
        dev = choose_loader_device(options.delivery.device, options.delivery.pin_memory,
                                   known_node_rank, false);
        wants_node_rank = !comm.has_node_split() && dev.device.cuda &&
                          dev.device.origin == DeviceOrigin::local_rank &&
                          launcher_local_rank() < 0;
    });
    if (agree_min_or_throw(comm, chosen, wants_node_rank ? 0 : 1) == 0) {
        comm.split_node();
        run_agreed(comm, [&] {
            if (wants_node_rank) {
                dev = choose_loader_device(options.delivery.device, options.delivery.pin_memory,
                                           comm.node_rank(), false);
            }
        });
    }
    const bool is_auto = parse_device(options.delivery.device).mode == DeviceMode::automatic;
    const std::vector<std::uint64_t> all = comm.allgather(std::vector<std::uint64_t>{
        dev.device.cuda ? 1u : 0u, is_auto ? 1u : 0u, dev.device.fell_back ? 1u : 0u,
        static_cast<std::uint64_t>(dev.device.index + 1),
        dev.device.origin == DeviceOrigin::local_rank ? 1u : 0u, host_id()});
    std::vector<int> cuda_ranks, cpu_ranks, fell_back, explicit_cuda;
    for (int r = 0; r < comm.size(); ++r) {
        const std::uint64_t* v = all.data() + kDeviceFacts * static_cast<std::size_t>(r);
        (v[0] ? cuda_ranks : cpu_ranks).push_back(r);
        if (v[2]) fell_back.push_back(r);
        if (v[0] && !v[1]) explicit_cuda.push_back(r);
    }
    if (!cuda_ranks.empty() && !cpu_ranks.empty() && !explicit_cuda.empty()) {
        throw ConfigError(
            "device: ranks " + rank_list(explicit_cuda) + " asked for a CUDA device but ranks " +
            rank_list(cpu_ranks) + " stage on the CPU" +
            (fell_back.empty() ? std::string(" (device = \"cpu\")") : " (no usable CUDA device)") +
            ": every rank must resolve to the same kind; use device = \"auto\" "
            "everywhere (all CPU then) or give every rank a GPU");
    }
    if (cpu_ranks.empty() && comm.rank() == 0 && options.delivery.log_device_fallback) {
        const std::string note = shared_device_note(all, comm.size());
        static std::once_flag once;  // once per process
        if (!note.empty()) {
            std::call_once(once, [&] {
                std::fprintf(stderr, "%s\n", note.c_str());
                std::fflush(stderr);
            });
        }
    }
    const std::string own_reason = dev.device.reason;
    if (!cuda_ranks.empty() && !cpu_ranks.empty()) {
        dev.device = DeviceChoice();  // all `auto`: the whole job stages on the CPU
        dev.device.fell_back = true;
        dev.pinned = false;
    }
    if (!fell_back.empty()) {
        const std::string reason = comm.broadcast(own_reason, fell_back.front());
        dev.device.fell_back = true;
        dev.device.reason = reason;
        if (comm.size() > 1) {
            dev.device.reason +=
                " on rank(s) " + rank_list(fell_back) + " of " + std::to_string(comm.size());
        }
        if (comm.rank() == 0 && options.delivery.log_device_fallback) {
            static std::once_flag once;  // once per process: one line for the job
            std::call_once(once, [&] {
                std::fprintf(stderr, "%s\n", cpu_fallback_message(dev.device).c_str());
                std::fflush(stderr);
            });
        }
    }
    return dev;
}

std::unique_ptr<DeviceStager> make_loader_stager(const DeviceChoice& device,
                                                 const LoaderOptions& options, std::size_t window) {
    StagerOptions o;
    o.device = device;
    o.non_blocking = options.delivery.non_blocking;
    o.depth = window;
    o.pool_buffers = window + 2;  // the window, the batch in use, the one being dropped
    o.consumer_stream = options.delivery.cuda_stream;
    return std::make_unique<DeviceStager>(std::move(o));
}

HostBatch submit_batch(DeviceStager& stager, HostBatch host, bool slot_pinned) {
    auto store = std::make_shared<DeviceBatchStore>();
    const std::size_t b = host.size();
    store->index.assign(host.index(), host.index() + b);
    store->valid.assign(host.valid(), host.valid() + b);
    std::vector<HostSpan> spans;
    std::vector<HostField> fields = host.fields();
    store->offsets.resize(fields.size());
    for (std::size_t f = 0; f < fields.size(); ++f) {
        HostField& field = fields[f];
        // Fixed fields live in the (pinned) slot block; ragged values and offsets do not.
        spans.push_back({field.data, static_cast<std::size_t>(field.size_bytes),
                         slot_pinned && !field.info->ragged});
        if (field.info->ragged) {
            store->offsets[f].assign(field.offsets, field.offsets + b + 1);
            spans.push_back({field.offsets, (b + 1) * sizeof(std::int64_t), false});
            field.offsets = store->offsets[f].data();
        }
        field.data = nullptr;
    }
    spans.push_back({host.index(), b * sizeof(std::int64_t), slot_pinned});
    spans.push_back({host.valid(), b, slot_pinned});
    stager.submit(spans, host.lease());
    HostBatch shape(host.epoch(), host.step(), b, store->index.data(), store->valid.data(),
                    host.num_valid(), std::move(fields), store);
    return shape;
}

HostBatch take_batch(DeviceStager& stager, HostBatch shape) {
    StagedBatch staged;
    if (!stager.take(staged)) {
        throw Error("loader: internal error: no staged batch for step " +
                    std::to_string(shape.step()));
    }
    auto store = std::static_pointer_cast<DeviceBatchStore>(shape.lease());
    store->device = staged.device_lease;
    std::vector<HostField> fields = shape.fields();
    std::size_t part = 0;
    for (HostField& f : fields) {
        f.device_data = staged.parts[part++];
        if (f.info->ragged) {
            f.device_offsets = reinterpret_cast<const std::int64_t*>(staged.parts[part++]);
        }
    }
    const auto* device_index = reinterpret_cast<const std::int64_t*>(staged.parts[part]);
    const auto* device_valid = reinterpret_cast<const std::uint8_t*>(staged.parts[part + 1]);
    shape.place_on_device(staged.device.index, std::move(fields), store->index.data(),
                          store->valid.data(), device_index, device_valid, store);
    return shape;
}

void refuse_capture(const DeviceStager& stager) {
    if (!stager.consumer_capturing()) return;
    char stream[32];
    std::snprintf(stream, sizeof stream, "%p", stager.consumer_stream());
    throw ConfigError(
        std::string("loader: next() was called while the consumer's CUDA stream (") +
        (stager.consumer_stream() ? stream : "the legacy default stream") +
        ") is capturing a CUDA graph (torch.cuda.graph, cudaStreamBeginCapture): the loader's "
        "copies, events and allocations would invalidate the graph. Call next() outside the "
        "capture and copy the batch into the graph's static input tensors before replaying it");
}

void settle_epoch(DeviceStager& stager, StagingStats& stats) {
    if (stager.consumer_capturing()) return;
    stager.drain();
    stager.trim();
    stats = stager.stats();
}

}  // namespace mpistage::detail

namespace mpistage {

void use_on_stream(const HostBatch& batch, void* cuda_stream) {
    if (batch.device() < 0 || !batch.lease()) return;
    const auto store = std::static_pointer_cast<detail::DeviceBatchStore>(batch.lease());
    if (!store->device) return;
    const detail::DeviceGuard guard(batch.device());
    store->device->use_on(cuda_stream);
}

}  // namespace mpistage
