// Data-parallel training of a small MLP on Fashion-MNIST with libtorch, fed by mpistage.
//
// Every rank reads its own shard of the training set through an mpistage Loader (equal steps
// on every rank, so the gradient allreduce of each step never hangs), computes the loss of its
// batch summed over the valid samples only (padding slots weigh 0), and one MPI_Allreduce per
// step sums the gradients, the loss and the valid-sample count of all ranks: the update then
// uses the exact mean over the global batch. After each epoch the whole 10,000-image test set
// is evaluated across the ranks with remainder `mask`, so every test image counts once.
//
//   mpistage convert idx train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz -o train.h5
//   mpistage convert idx t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz -o test.h5
//   mpirun -np 4 ./example_train_fashion_mnist train.h5 test.h5 --epochs 3
//
// Options: --epochs N (3), --batch-size B per rank (64), --lr X (Adam, 2e-3), --seed S (0),
// --max-steps N (stop each epoch after N steps; 0 = whole epoch), --torch-threads N (1),
// --device cpu|cuda (cuda: the GPU of this rank's node-local rank; the trainer, not the loader,
// chooses it), --quiet (only the final line).
#include <mpi.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mpistage/mpistage.hpp"
#include "mpistage/torch.hpp"

namespace {

using mpistage::ConfigError;

struct Options {
    std::string train;
    std::string test;
    std::uint64_t epochs = 3;
    std::uint64_t batch_size = 64;
    double lr = 2e-3;
    std::uint64_t seed = 0;
    std::uint64_t max_steps = 0;
    int torch_threads = 1;
    std::string device = "cpu";
    bool quiet = false;
};

std::uint64_t to_count(const std::string& flag, const std::string& text) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || text[0] == '-' || *end != '\0') {
        throw ConfigError(flag + ": expected a non-negative integer, got '" + text + "'");
    }
    return v;
}

Options parse_options(int argc, char** argv) {
    Options o;
    std::vector<std::string> files;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw ConfigError(a + " needs a value");
            return argv[++i];
        };
        if (a == "--epochs")
            o.epochs = to_count(a, value());
        else if (a == "--batch-size")
            o.batch_size = to_count(a, value());
        else if (a == "--lr")
            o.lr = std::stod(value());
        else if (a == "--seed")
            o.seed = to_count(a, value());
        else if (a == "--max-steps")
            o.max_steps = to_count(a, value());
        else if (a == "--torch-threads")
            o.torch_threads = static_cast<int>(to_count(a, value()));
        else if (a == "--device")
            o.device = value();
        else if (a == "--quiet")
            o.quiet = true;
        else if (!a.empty() && a[0] == '-')
            throw ConfigError("unknown option " + a);
        else
            files.push_back(a);
    }
    if (files.size() != 2) {
        throw ConfigError(
            "usage: example_train_fashion_mnist TRAIN.h5 TEST.h5 [--epochs N] "
            "[--batch-size B] [--lr X] [--seed S] [--max-steps N] "
            "[--torch-threads N] [--device cpu|cuda] [--quiet]");
    }
    if (o.device != "cpu" && o.device != "cuda") {
        throw ConfigError("--device: expected cpu or cuda, got '" + o.device + "'");
    }
    o.train = files[0];
    o.test = files[1];
    return o;
}

// 784 → 128 → 10, ReLU: small enough that 4 ranks train an epoch in seconds on 2 CPU cores.
struct MlpImpl : torch::nn::Module {
    MlpImpl()
        : fc1(register_module("fc1", torch::nn::Linear(784, 128))),
          fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}
    torch::Tensor forward(torch::Tensor x) { return fc2->forward(torch::relu(fc1->forward(x))); }
    torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Mlp);

// The device of this rank: the CPU, or the GPU of its node-local rank among the visible ones
// (under Slurm with --gpus-per-task=1 each task sees one GPU: index 0). Collective for cuda.
torch::Device choose_device(const Options& o, const mpistage::Communicator& comm) {
    if (o.device == "cpu") return torch::kCPU;
    // The node rank comes from the node split: collective, so made first, on every rank (the
    // option is the same everywhere), before a check that may fail on one rank only. The
    // loaders built from `comm` afterwards inherit it.
    comm.split_node();
    if (!torch::cuda::is_available()) {
        throw ConfigError("--device cuda: this libtorch has no usable CUDA device");
    }
    const auto count = static_cast<int>(torch::cuda::device_count());
    return torch::Device(torch::kCUDA, static_cast<torch::DeviceIndex>(comm.node_rank() % count));
}

// Collective: every rank starts from rank 0's initial weights.
void broadcast_parameters(Mlp& model, MPI_Comm comm) {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) {
        torch::Tensor host = p.detach().to(torch::kCPU).contiguous();
        MPI_Bcast(host.data_ptr<float>(), static_cast<int>(host.numel()), MPI_FLOAT, 0, comm);
        p.copy_(host);
    }
}

// Images (uint8 [B,28,28]) as normalised float [B,784] on `device`.
torch::Tensor features(const mpistage::TorchBatch& t, torch::Device device) {
    return t["images"]
        .to(device)
        .to(torch::kFloat32)
        .view({-1, 784})
        .div(255.0)
        .sub(0.2860)
        .div(0.3530);
}

// Labels as int64 on `device`; padding slots (whatever they hold) become class 0 (weight 0).
torch::Tensor targets(const mpistage::TorchBatch& t, torch::Device device) {
    const torch::Tensor valid = t.valid.to(device);
    return t["labels"].to(device).to(torch::kInt64).masked_fill(valid.logical_not(), 0);
}

struct StepTotals {
    double loss_sum = 0;  // summed over valid samples of all ranks
    double correct = 0;
    double valid = 0;
};

// Collective: one training step. The local loss is summed over valid samples; one allreduce
// sums [gradients..., loss, correct, valid] over the ranks, then the gradients are divided by
// the global valid count: exactly the gradient of the mean loss over the global batch.
StepTotals train_step(Mlp& model, torch::optim::Optimizer& opt, const mpistage::HostBatch& batch,
                      torch::Device device, MPI_Comm comm) {
    const mpistage::TorchBatch t = mpistage::to_torch(batch);
    const torch::Tensor weight = t.valid.to(device).to(torch::kFloat32);
    const torch::Tensor y = targets(t, device);
    opt.zero_grad();
    const torch::Tensor logits = model->forward(features(t, device));
    const torch::Tensor per_sample = torch::nn::functional::cross_entropy(
        logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    const torch::Tensor loss_sum = (per_sample * weight).sum();
    loss_sum.backward();
    const torch::Tensor correct = (logits.argmax(1).eq(y).to(torch::kFloat32) * weight).sum();

    std::vector<torch::Tensor> parts;
    for (auto& p : model->parameters()) parts.push_back(p.grad().view({-1}));
    parts.push_back(torch::stack({loss_sum.detach(), correct, weight.sum()}));
    torch::Tensor flat = torch::cat(parts).to(torch::kCPU).contiguous();
    MPI_Allreduce(MPI_IN_PLACE, flat.data_ptr<float>(), static_cast<int>(flat.numel()), MPI_FLOAT,
                  MPI_SUM, comm);
    const std::int64_t n = flat.numel();
    StepTotals s{flat[n - 3].item<double>(), flat[n - 2].item<double>(),
                 flat[n - 1].item<double>()};
    if (s.valid == 0) return s;  // a step of padding only: nothing to learn
    flat = flat.div(s.valid).to(device);
    std::int64_t offset = 0;
    for (auto& p : model->parameters()) {
        const std::int64_t k = p.numel();
        p.mutable_grad().copy_(flat.slice(0, offset, offset + k).view_as(p));
        offset += k;
    }
    opt.step();
    return s;
}

struct EpochResult {
    StepTotals totals;
    double first_loss = 0;  // mean loss of the first 10% of the steps
    double last_loss = 0;   // mean loss of the last 10% of the steps
    std::uint64_t steps = 0;
};

// Collective: one epoch (or its first `max_steps` steps, the same on every rank).
EpochResult train_epoch(Mlp& model, torch::optim::Optimizer& opt, mpistage::Loader& loader,
                        std::uint64_t epoch, const Options& o, torch::Device device) {
    model->train();
    std::vector<StepTotals> steps;
    mpistage::EpochRange range = loader.epoch(epoch);
    mpistage::HostBatch batch;
    while ((o.max_steps == 0 || steps.size() < o.max_steps) && range.next(batch)) {
        steps.push_back(train_step(model, opt, batch, device, loader.comm().get()));
    }
    EpochResult r;
    r.steps = steps.size();
    const std::size_t tenth = std::max<std::size_t>(1, steps.size() / 10);
    auto mean_loss = [](auto first, auto last) {
        StepTotals sum;
        for (auto it = first; it != last; ++it) {
            sum.loss_sum += it->loss_sum;
            sum.valid += it->valid;
        }
        return sum.valid > 0 ? sum.loss_sum / sum.valid : 0.0;
    };
    for (const StepTotals& s : steps) {
        r.totals.loss_sum += s.loss_sum;
        r.totals.correct += s.correct;
        r.totals.valid += s.valid;
    }
    if (!steps.empty()) {
        r.first_loss = mean_loss(steps.begin(), steps.begin() + tenth);
        r.last_loss = mean_loss(steps.end() - tenth, steps.end());
    }
    return r;
}

// Collective: accuracy on the whole test set. Remainder `mask` pads the last steps instead of
// dropping samples, so every test image is counted exactly once over all ranks.
double evaluate(Mlp& model, mpistage::Loader& loader, std::uint64_t epoch, torch::Device device) {
    torch::NoGradGuard no_grad;
    model->eval();
    double counts[2] = {0, 0};  // correct, valid
    for (const mpistage::HostBatch& batch : loader.epoch(epoch)) {
        const mpistage::TorchBatch t = mpistage::to_torch(batch);
        const torch::Tensor weight = t.valid.to(device).to(torch::kFloat64);
        const torch::Tensor hit =
            model->forward(features(t, device)).argmax(1).eq(targets(t, device));
        counts[0] += (hit.to(torch::kFloat64) * weight).sum().item<double>();
        counts[1] += weight.sum().item<double>();
    }
    MPI_Allreduce(MPI_IN_PLACE, counts, 2, MPI_DOUBLE, MPI_SUM, loader.comm().get());
    if (counts[1] != static_cast<double>(loader.num_samples())) {
        throw mpistage::Error("evaluation counted " + std::to_string(counts[1]) +
                              " test samples, the test set has " +
                              std::to_string(loader.num_samples()));
    }
    return counts[0] / counts[1];
}

mpistage::LoaderOptions loader_options(const Options& o, mpistage::Shuffle shuffle) {
    mpistage::LoaderOptions l;
    l.plan.batch_size = o.batch_size;
    l.plan.seed = o.seed;
    l.plan.shuffle = shuffle;
    l.plan.remainder = mpistage::Remainder::mask;
    l.pipeline.prefetch = 4;
    l.pipeline.io_threads = 1;
    l.delivery.device =
        o.device;  // cuda: batches arrive on the device (to_torch gives CUDA tensors)
    return l;
}

double max_over_ranks(double v, MPI_Comm comm) {
    MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, comm);
    return v;
}

// Collective: trains and evaluates every epoch; rank 0 prints one line per epoch.
void train(const Options& o) {
    mpistage::Communicator comm(MPI_COMM_WORLD);
    torch::set_num_threads(o.torch_threads);
    torch::manual_seed(o.seed);
    const torch::Device device = choose_device(o, comm);
    mpistage::Hdf5Options h5;
    h5.fields = {"images", "labels"};
    mpistage::Hdf5Source train_source(comm, o.train, h5);
    mpistage::Hdf5Source test_source(comm, o.test, h5);
    mpistage::Loader train_loader(comm, train_source, loader_options(o, mpistage::Shuffle::local));
    mpistage::Loader test_loader(comm, test_source, loader_options(o, mpistage::Shuffle::none));

    Mlp model;
    model->to(device);
    broadcast_parameters(model, comm.get());
    torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(o.lr));
    if (comm.rank() == 0 && !o.quiet) {
        std::printf(
            "training on %d rank(s), %s: %llu train / %llu test images, batch %llu per "
            "rank, %llu steps per epoch\n",
            comm.size(), device.str().c_str(),
            static_cast<unsigned long long>(train_loader.num_samples()),
            static_cast<unsigned long long>(test_loader.num_samples()),
            static_cast<unsigned long long>(o.batch_size),
            static_cast<unsigned long long>(train_loader.totals().steps));
        std::fflush(stdout);
    }
    double accuracy = 0;
    for (std::uint64_t e = 0; e < o.epochs; ++e) {
        const auto start = std::chrono::steady_clock::now();
        const double wait_before = train_loader.stats().wait_time.count();
        const EpochResult r = train_epoch(model, opt, train_loader, e, o, device);
        const double wait =
            max_over_ranks(train_loader.stats().wait_time.count() - wait_before, comm.get());
        accuracy = evaluate(model, test_loader, e, device);
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        if (comm.rank() == 0 && !o.quiet) {
            std::printf(
                "epoch %llu: loss %.4f (first steps %.4f, last steps %.4f), train accuracy "
                "%.2f%%, test accuracy %.2f%% (%llu images), %llu steps, %.1f s, waiting "
                "for data %.2f s (max over ranks)\n",
                static_cast<unsigned long long>(e), r.totals.loss_sum / r.totals.valid,
                r.first_loss, r.last_loss, 100.0 * r.totals.correct / r.totals.valid,
                100.0 * accuracy, static_cast<unsigned long long>(test_loader.num_samples()),
                static_cast<unsigned long long>(r.steps), took.count(), wait);
            std::fflush(stdout);
        }
    }
    if (comm.rank() == 0) std::printf("final test accuracy: %.2f%%\n", 100.0 * accuracy);
    comm.free();
}

}  // namespace

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int rc = 0;
    try {
        train(parse_options(argc, argv));
    } catch (const mpistage::Error& e) {
        // mpistage errors are agreed: every rank has the same one; rank 0 prints it.
        if (rank == 0) std::fprintf(stderr, "example_train_fashion_mnist: %s\n", e.what());
        rc = 2;
    } catch (const std::exception& e) {
        // Not agreed (e.g. a torch error on one rank): end the job rather than hang the others.
        std::fprintf(stderr, "example_train_fashion_mnist: rank %d: %s\n", rank, e.what());
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Finalize();
    return rc;
}
