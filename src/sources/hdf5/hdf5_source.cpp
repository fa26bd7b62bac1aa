#include "mpistage/hdf5_source.hpp"

#include <algorithm>
#include <cstring>

#include "comm/blocking_watch.hpp"
#include "sources/file_rows.hpp"
#include "sources/hdf5/hdf5_impl.hpp"
#include "sources/hdf5/hdf5_types.hpp"
#include "util/file_identity.hpp"

namespace mpistage {

using detail::h5check;

void Hdf5Source::Impl::select_rows(const detail::Hdf5Field& f, hid_t fspace, std::uint64_t row,
                                   std::uint64_t count) const {
    std::vector<hsize_t> start(f.dims.size(), 0);
    std::vector<hsize_t> cnt = f.dims;
    start[0] = row;
    cnt[0] = count;
    h5check(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start.data(), nullptr, cnt.data(),
                                nullptr),
            where(f) + ": H5Sselect_hyperslab(rows " + std::to_string(row) + "+" +
                std::to_string(count) + ")");
}

void Hdf5Source::Impl::read_hdf5_rows(const detail::Hdf5Field& f, std::uint64_t row, std::uint64_t count, std::byte* dst,
                                          hid_t dxpl) const {
    std::lock_guard<std::recursive_mutex> lock(detail::hdf5_mutex());
    const detail::Hdf5ErrorSilencer quiet;
    detail::H5Space fspace(h5check(H5Dget_space(f.dataset.get()), where(f) + ": H5Dget_space"));
    select_rows(f, fspace.get(), row, count);
    const hsize_t mem_elems = count * f.row_elements;
    detail::H5Space mspace(h5check(H5Screate_simple(1, &mem_elems, nullptr), "H5Screate_simple"));
    // Rows whose storage was never allocated, with fill time never: H5Dread leaves the buffer
    // as it was (a slot's or the tier's earlier bytes); zeros instead.
    if (!f.allocated) std::memset(dst, 0, count * f.info.sample_bytes);
    h5check(H5Dread(f.dataset.get(), f.mem_type.get(), mspace.get(), fspace.get(), dxpl, dst),
            where(f) + ": H5Dread(rows " + std::to_string(row) + ".." +
                std::to_string(row + count - 1) + ")");
}


void Hdf5Source::Impl::read_rows(const detail::Hdf5Field& f, std::uint64_t row,
                                 std::uint64_t count, std::byte* dst) const {
    const std::uint64_t rb = std::max<std::uint64_t>(f.info.sample_bytes, 1);
    const std::uint64_t rows_per_piece = std::max<std::uint64_t>(options.max_read_bytes / rb, 1);
    for (std::uint64_t done = 0; done < count;) {
        const std::uint64_t n = std::min(rows_per_piece, count - done);
        std::byte* out = dst + done * f.info.sample_bytes;
        if (f.fast_path) {
            const std::uint64_t off = f.base_offset + (row + done) * f.info.sample_bytes;
            raw.read_exact(out, n * f.info.sample_bytes, off, where(f));
            if (f.byte_swap) detail::swap_bytes(out, n * f.row_elements, dtype_size(f.info.dtype));
        } else {
            read_hdf5_rows(f, row + done, n, out, H5P_DEFAULT);
        }
        done += n;
    }
}

Hdf5Source::Hdf5Source(CommRef comm, const std::string& path, Hdf5Options options)
    : impl_(std::make_unique<Impl>()) {
    impl_->path = path;
    impl_->options = std::move(options);
    if (impl_->options.max_read_bytes == 0) throw ConfigError("hdf5: max_read_bytes must be > 0");
    impl_->open(comm);
}

Hdf5Source::~Hdf5Source() { close(); }

void Hdf5Source::close() noexcept {
    if (!impl_) return;
    std::lock_guard<std::recursive_mutex> lock(detail::hdf5_mutex());
    const detail::Hdf5ErrorSilencer quiet;
    // The last H5Fclose of a file opened with the MPI-IO driver is collective (it closes the
    // MPI file): watched with the source's timeout, so a rank that never arrives ends the job.
    const bool open = impl_->file.get() >= 0 && impl_->comm;
    const detail::BlockingWatch watch(open ? impl_->comm->timeout() : std::chrono::seconds(0),
                                      open ? impl_->comm->size() : 1, "H5Fclose(" + impl_->path + ")",
                                      "teardown: close the HDF5 file");
    impl_->fields.clear();
    impl_->file.reset();
    impl_->closed = true;
}

const std::string& Hdf5Source::path() const noexcept { return impl_->path; }
const std::vector<FieldInfo>& Hdf5Source::fields() const { return impl_->infos; }
std::uint64_t Hdf5Source::num_samples() const { return impl_->num_samples; }
std::uint64_t Hdf5Source::records_in_cut(int rank, int world_size) const {
    return fixed_records_in_cut(impl_->num_samples, impl_->record_bytes, rank, world_size);
}

std::string Hdf5Source::fingerprint() const {
    std::string s = "hdf5:" + impl_->path + ";N=" + std::to_string(impl_->num_samples);
    for (const auto& f : impl_->fields) {
        s += ";" + f.info.name + ":" + dtype_name(f.info.dtype) + ":" + f.layout + ":[";
        for (auto d : f.info.sample_shape) s += std::to_string(d) + ",";
        s += "]";
    }
    return s;
}

bool Hdf5Source::reads_use_mpi() const {
    for (const auto& f : impl_->fields) {
        if (!f.fast_path) return true;
    }
    return false;
}

bool Hdf5Source::file_rows(std::size_t field, detail::FileRows& out) const {
    if (field >= impl_->fields.size()) return false;
    const detail::Hdf5Field& f = impl_->fields[field];
    if (!f.fast_path || f.byte_swap) return false;
    out = {impl_->raw.fd(), impl_->path, f.base_offset, impl_->raw.size_bytes()};
    return true;
}

void Hdf5Source::check_unchanged() const {
    detail::check_file_unchanged(impl_->raw, impl_->opened_identity, "hdf5");
}

void Hdf5Source::read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const {
    impl_->check_open();
    for (std::size_t k = 0; k < count;) {
        if (ids[k] >= impl_->num_samples) {
            throw ConfigError("hdf5: " + impl_->path + ": sample id " + std::to_string(ids[k]) +
                              " out of range (N = " + std::to_string(impl_->num_samples) + ")");
        }
        // Coalesce a run of consecutive ids whose destinations are contiguous in every field.
        std::size_t run = 1;
        while (k + run < count && ids[k + run] == ids[k] + run) {
            bool contiguous = true;
            for (std::size_t fi = 0; fi < impl_->fields.size() && contiguous; ++fi) {
                const auto rb = impl_->fields[fi].info.sample_bytes;
                contiguous = sink.fixed(fi, k + run) == sink.fixed(fi, k) + run * rb;
            }
            if (!contiguous) break;
            ++run;
        }
        for (std::size_t fi = 0; fi < impl_->fields.size(); ++fi) {
            impl_->read_rows(impl_->fields[fi], ids[k], run, sink.fixed(fi, k));
        }
        k += run;
    }
}

}  // namespace mpistage
