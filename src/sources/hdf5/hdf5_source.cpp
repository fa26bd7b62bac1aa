#include "mpistage/hdf5_source.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "sources/hdf5/hdf5_util.hpp"
#include "util/posix_file.hpp"

namespace mpistage {

using detail::h5check;
using detail::hdf5_mutex;

namespace {

struct Field {
    FieldInfo info;
    detail::H5Dataset dataset;
    hid_t mem_type = H5I_INVALID_HID;   // native type of info.dtype (owned by HDF5)
    std::vector<hsize_t> dims;          // full dataset dims, dims[0] = N
    std::uint64_t row_elements = 1;     // product of dims[1..]
    bool fast_path = false;             // contiguous, raw pread at base_offset
    bool byte_swap = false;             // file order differs from native (fast path only)
    std::uint64_t base_offset = 0;      // H5Dget_offset
    std::string layout;                 // for messages and the fingerprint
};

DType dtype_of(hid_t type, const std::string& path, const std::string& dataset) {
    const H5T_class_t cls = H5Tget_class(type);
    const std::size_t size = H5Tget_size(type);
    if (cls == H5T_INTEGER) {
        const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
        switch (size) {
        case 1: return is_signed ? DType::int8 : DType::uint8;
        case 2: return is_signed ? DType::int16 : DType::uint16;
        case 4: return is_signed ? DType::int32 : DType::uint32;
        case 8: return is_signed ? DType::int64 : DType::uint64;
        default: break;
        }
    } else if (cls == H5T_FLOAT) {
        if (size == 4) return DType::float32;
        if (size == 8) return DType::float64;
    }
    static const std::map<H5T_class_t, const char*> names = {
        {H5T_INTEGER, "integer"}, {H5T_FLOAT, "float"}, {H5T_STRING, "string"},
        {H5T_BITFIELD, "bitfield"}, {H5T_OPAQUE, "opaque"}, {H5T_COMPOUND, "compound"},
        {H5T_REFERENCE, "reference"}, {H5T_ENUM, "enum"}, {H5T_VLEN, "variable-length"},
        {H5T_ARRAY, "array"}};
    const auto it = names.find(cls);
    throw ConfigError("hdf5: " + path + ": dataset '" + dataset + "' has an unsupported type (" +
                      (it != names.end() ? it->second : "unknown class") + ", " +
                      std::to_string(size) +
                      " bytes); fields must be fixed-size integers or 4/8-byte floats");
}

hid_t native_type(DType t) {
    switch (t) {
    case DType::uint8: return H5T_NATIVE_UINT8;
    case DType::int8: return H5T_NATIVE_INT8;
    case DType::uint16: return H5T_NATIVE_UINT16;
    case DType::int16: return H5T_NATIVE_INT16;
    case DType::uint32: return H5T_NATIVE_UINT32;
    case DType::int32: return H5T_NATIVE_INT32;
    case DType::uint64: return H5T_NATIVE_UINT64;
    case DType::int64: return H5T_NATIVE_INT64;
    case DType::float32: return H5T_NATIVE_FLOAT;
    case DType::float64: return H5T_NATIVE_DOUBLE;
    case DType::boolean: return H5T_NATIVE_UINT8;
    }
    return H5T_NATIVE_UINT8;
}

void swap_bytes(std::byte* p, std::uint64_t count, std::size_t elem) {
    if (elem <= 1) return;
    for (std::uint64_t i = 0; i < count; ++i, p += elem) std::reverse(p, p + elem);
}

struct VisitData {
    std::vector<std::string> names;
};

herr_t visit_cb(hid_t, const char* name, const H5O_info_t* info, void* data) {
    if (info->type == H5O_TYPE_DATASET) static_cast<VisitData*>(data)->names.emplace_back(name);
    return 0;
}

}  // namespace

struct Hdf5Source::Impl {
    std::string path;
    Hdf5Options options;
    int rank = 0;
    const Communicator* comm = nullptr;
    detail::H5File file;
    std::vector<Field> fields;
    std::vector<FieldInfo> infos;
    std::uint64_t num_samples = 0;
    std::uint64_t record_bytes = 0;
    detail::PosixFile raw;  // for the pread fast path

    std::string where(const Field& f) const { return "hdf5: " + path + ": dataset '" + f.info.name + "'"; }

    void open_field(const std::string& name, bool explicit_field) {
        Field f;
        f.info.name = name;
        const std::string ctx = "hdf5: " + path + ": dataset '" + name + "'";
        htri_t exists = H5Lexists(file.get(), name.c_str(), H5P_DEFAULT);
        if (exists <= 0) {
            detail::hdf5_error_stack();  // clear
            throw ConfigError(ctx + " does not exist in the file");
        }
        detail::H5Plist dapl(h5check(H5Pcreate(H5P_DATASET_ACCESS), ctx + ": H5Pcreate"));
        h5check(H5Pset_chunk_cache(dapl.get(), 521, options.chunk_cache_bytes, 1.0),
                ctx + ": H5Pset_chunk_cache");
        f.dataset = detail::H5Dataset(h5check(H5Dopen2(file.get(), name.c_str(), dapl.get()),
                                              ctx + ": H5Dopen2"));
        detail::H5Space space(h5check(H5Dget_space(f.dataset.get()), ctx + ": H5Dget_space"));
        const H5S_class_t cls = H5Sget_simple_extent_type(space.get());
        if (cls == H5S_NULL) {
            throw ConfigError(ctx + " has a NULL dataspace (no elements): nothing to shard");
        }
        if (cls == H5S_SCALAR) {
            throw ConfigError(ctx + " has a scalar dataspace (one element, no dimension 0): "
                                    "nothing to shard");
        }
        const int ndims = h5check(H5Sget_simple_extent_ndims(space.get()), ctx + ": ndims");
        f.dims.resize(static_cast<std::size_t>(ndims));
        h5check(H5Sget_simple_extent_dims(space.get(), f.dims.data(), nullptr), ctx + ": dims");
        detail::H5Type type(h5check(H5Dget_type(f.dataset.get()), ctx + ": H5Dget_type"));
        f.info.dtype = dtype_of(type.get(), path, name);
        f.mem_type = native_type(f.info.dtype);
        for (std::size_t d = 1; d < f.dims.size(); ++d) {
            f.info.sample_shape.push_back(static_cast<std::int64_t>(f.dims[d]));
            f.row_elements *= f.dims[d];
        }
        f.info.sample_bytes = checked_sample_bytes(f.info.sample_shape, f.info.dtype, ctx);

        detail::H5Plist dcpl(h5check(H5Dget_create_plist(f.dataset.get()), ctx + ": dcpl"));
        const int nfilters = H5Pget_nfilters(dcpl.get());
        for (int i = 0; i < nfilters; ++i) {
            unsigned flags = 0;
            unsigned config = 0;
            std::size_t nelmts = 0;
            char fname[256] = {0};
            const H5Z_filter_t id =
                H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &nelmts, nullptr,
                               sizeof fname, fname, &config);
            if (id < 0) throw Hdf5Error(ctx + ": H5Pget_filter2: " + detail::hdf5_error_stack());
            if (H5Zfilter_avail(id) <= 0) {
                detail::hdf5_error_stack();
                throw Hdf5Error(ctx + " needs HDF5 filter " + std::to_string(id) + " ('" +
                                (fname[0] ? fname : "unnamed") +
                                "'), which is not available in this HDF5 build (is its plugin "
                                "installed and on HDF5_PLUGIN_PATH?)");
            }
        }
        const H5D_layout_t layout = H5Pget_layout(dcpl.get());
        f.layout = layout == H5D_CONTIGUOUS ? "contiguous"
                   : layout == H5D_CHUNKED  ? "chunked"
                   : layout == H5D_COMPACT  ? "compact"
                                            : "virtual";
        // The pread fast path reads raw bytes at H5Dget_offset, so it is only taken when those
        // bytes are exactly the native type (or its byte-swapped twin: same precision, offset,
        // sign and float layout) and live in this very file: not behind an external link, not
        // in external raw storage.
        if (layout == H5D_CONTIGUOUS && nfilters == 0 && H5Pget_external_count(dcpl.get()) == 0 &&
            in_this_file(f.dataset.get())) {
            const haddr_t offset = H5Dget_offset(f.dataset.get());
            detail::hdf5_error_stack();
            bool swap = false;
            if (offset != HADDR_UNDEF && same_as_native(type.get(), f.mem_type, swap)) {
                f.fast_path = true;
                f.byte_swap = swap;
                f.base_offset = offset;
            }
        }
        (void)explicit_field;
        fields.push_back(std::move(f));
    }

    // True when `object` lives in the opened file (an external link resolves to another file).
    bool in_this_file(hid_t object) const {
        const hid_t owner = H5Iget_file_id(object);
        if (owner < 0) {
            detail::hdf5_error_stack();
            return false;
        }
        auto name_of = [](hid_t f) {
            const ssize_t n = H5Fget_name(f, nullptr, 0);
            std::string out(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
            if (n > 0) H5Fget_name(f, out.data(), out.size() + 1);
            return out;
        };
        const bool same = name_of(owner) == name_of(file.get());
        H5Fclose(owner);
        return same;
    }

    // True when `file_type` equals the native `mem_type`, or equals it with the opposite byte
    // order (then `swap` is set).
    static bool same_as_native(hid_t file_type, hid_t mem_type, bool& swap) {
        swap = false;
        if (H5Tequal(file_type, mem_type) > 0) return true;
        detail::H5Type twin(H5Tcopy(mem_type));
        if (!twin) return false;
        const H5T_order_t order = H5Tget_order(mem_type);
        if (H5Tset_order(twin.get(), order == H5T_ORDER_LE ? H5T_ORDER_BE : H5T_ORDER_LE) < 0) {
            detail::hdf5_error_stack();
            return false;
        }
        swap = H5Tequal(file_type, twin.get()) > 0;
        detail::hdf5_error_stack();
        return swap;
    }

    std::vector<std::string> discover() {
        VisitData data;
        h5check(H5Ovisit2(file.get(), H5_INDEX_NAME, H5_ITER_INC, visit_cb, &data, H5O_INFO_BASIC),
                "hdf5: " + path + ": H5Ovisit");
        // Keep datasets of rank >= 1 with a supported type, grouped by dimension 0.
        std::map<hsize_t, std::vector<std::string>> by_rows;
        for (const auto& name : data.names) {
            detail::H5Dataset d(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT));
            if (!d) {
                detail::hdf5_error_stack();
                continue;
            }
            detail::H5Space s(H5Dget_space(d.get()));
            if (H5Sget_simple_extent_type(s.get()) != H5S_SIMPLE) continue;
            const int nd = H5Sget_simple_extent_ndims(s.get());
            if (nd < 1) continue;
            std::vector<hsize_t> dims(static_cast<std::size_t>(nd));
            H5Sget_simple_extent_dims(s.get(), dims.data(), nullptr);
            detail::H5Type t(H5Dget_type(d.get()));
            const H5T_class_t c = H5Tget_class(t.get());
            const std::size_t sz = H5Tget_size(t.get());
            const bool ok = (c == H5T_INTEGER && (sz == 1 || sz == 2 || sz == 4 || sz == 8)) ||
                            (c == H5T_FLOAT && (sz == 4 || sz == 8));
            if (ok && dims[0] > 0) by_rows[dims[0]].push_back(name);
        }
        detail::hdf5_error_stack();
        if (by_rows.empty()) {
            throw ConfigError("hdf5: " + path +
                              ": no dataset with a fixed-size numeric type and at least one "
                              "dimension: nothing to shard");
        }
        if (by_rows.size() > 1) {
            std::string listing;
            for (const auto& [rows, names] : by_rows) {
                for (const auto& n : names) listing += " " + n + "[" + std::to_string(rows) + "]";
            }
            throw ConfigError("hdf5: " + path +
                              ": datasets differ in dimension 0, name the fields to use "
                              "(--field):" + listing);
        }
        return by_rows.begin()->second;
    }

    void open(const Communicator& c) {
        comm = &c;
        rank = c.rank();
        std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
        detail::hdf5_silence();
        // 1. Every rank checks the file on its own, then all agree (a missing file on one node
        //    must not leave the others inside a collective open).
        run_agreed(c, [&] {
            raw = detail::PosixFile(path);
            const htri_t is_h5 = H5Fis_hdf5(path.c_str());
            detail::hdf5_error_stack();
            if (is_h5 <= 0) {
                throw FormatError("hdf5: " + path + ": not an HDF5 file (no HDF5 signature at "
                                  "byte offset 0, 512, 1024, ...)");
            }
        });
        // 2. Collective open through the MPI-IO driver on the library's communicator.
        run_agreed(c, [&] {
            detail::H5Plist fapl(h5check(H5Pcreate(H5P_FILE_ACCESS), "hdf5: H5Pcreate(fapl)"));
            h5check(H5Pset_fapl_mpio(fapl.get(), c.get(), MPI_INFO_NULL),
                    "hdf5: H5Pset_fapl_mpio");
            file = detail::H5File(
                h5check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()),
                        "hdf5: " + path + ": H5Fopen (MPI-IO)"));
        });
        // 3. Fields: same file, same answers on every rank, but agree anyway.
        run_agreed(c, [&] {
            std::vector<std::string> names = options.fields;
            const bool explicit_fields = !names.empty();
            if (!explicit_fields) names = discover();
            for (std::size_t i = 0; i < names.size(); ++i) {
                for (std::size_t j = 0; j < i; ++j) {
                    if (names[i] == names[j]) {
                        throw ConfigError("hdf5: " + path + ": field '" + names[i] +
                                          "' is given more than once");
                    }
                }
            }
            for (const auto& n : names) open_field(n, explicit_fields);
            num_samples = fields.front().dims[0];
            for (const auto& f : fields) {
                if (f.dims[0] != num_samples) {
                    std::string listing;
                    for (const auto& g : fields) {
                        listing += " " + g.info.name + "[" + std::to_string(g.dims[0]) + "]";
                    }
                    throw ConfigError("hdf5: " + path +
                                      ": fields are not aligned on dimension 0:" + listing);
                }
            }
            if (num_samples == 0) {
                throw ConfigError("hdf5: " + path + ": dataset '" + fields.front().info.name +
                                  "' has 0 rows: nothing to shard");
            }
            for (const auto& f : fields) {
                infos.push_back(f.info);
                record_bytes += f.info.sample_bytes;
            }
        });
    }

    void read_hdf5_rows(const Field& f, std::uint64_t row, std::uint64_t count, std::byte* dst,
                        hid_t dxpl) const {
        std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
        detail::H5Space fspace(h5check(H5Dget_space(f.dataset.get()), where(f) + ": H5Dget_space"));
        std::vector<hsize_t> start(f.dims.size(), 0);
        std::vector<hsize_t> cnt = f.dims;
        start[0] = row;
        cnt[0] = count;
        h5check(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start.data(), nullptr,
                                    cnt.data(), nullptr),
                where(f) + ": H5Sselect_hyperslab(rows " + std::to_string(row) + "+" +
                    std::to_string(count) + ")");
        const hsize_t mem_elems = count * f.row_elements;
        detail::H5Space mspace(h5check(H5Screate_simple(1, &mem_elems, nullptr), "H5Screate_simple"));
        h5check(H5Dread(f.dataset.get(), f.mem_type, mspace.get(), fspace.get(), dxpl, dst),
                where(f) + ": H5Dread(rows " + std::to_string(row) + ".." +
                    std::to_string(row + count - 1) + ")");
    }

    // Reads `count` consecutive rows into contiguous `dst`, in pieces of at most max_read_bytes.
    void read_rows(const Field& f, std::uint64_t row, std::uint64_t count, std::byte* dst) const {
        const std::uint64_t rb = std::max<std::uint64_t>(f.info.sample_bytes, 1);
        const std::uint64_t rows_per_piece = std::max<std::uint64_t>(options.max_read_bytes / rb, 1);
        for (std::uint64_t done = 0; done < count;) {
            const std::uint64_t n = std::min(rows_per_piece, count - done);
            std::byte* out = dst + done * f.info.sample_bytes;
            if (f.fast_path) {
                const std::uint64_t off = f.base_offset + (row + done) * f.info.sample_bytes;
                raw.read_exact(out, n * f.info.sample_bytes, off, where(f));
                if (f.byte_swap) swap_bytes(out, n * f.row_elements, dtype_size(f.info.dtype));
            } else {
                read_hdf5_rows(f, row + done, n, out, H5P_DEFAULT);
            }
            done += n;
        }
    }
};

Hdf5Source::Hdf5Source(const Communicator& comm, const std::string& path, Hdf5Options options)
    : impl_(std::make_unique<Impl>()) {
    impl_->path = path;
    impl_->options = std::move(options);
    if (impl_->options.max_read_bytes == 0) throw ConfigError("hdf5: max_read_bytes must be > 0");
    impl_->open(comm);
}

Hdf5Source::~Hdf5Source() { close(); }

void Hdf5Source::close() noexcept {
    if (!impl_) return;
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    impl_->fields.clear();
    impl_->file.reset();
}

const std::string& Hdf5Source::path() const noexcept { return impl_->path; }
const std::vector<FieldInfo>& Hdf5Source::fields() const { return impl_->infos; }
std::uint64_t Hdf5Source::num_samples() const { return impl_->num_samples; }
std::uint64_t Hdf5Source::total_bytes() const { return impl_->num_samples * impl_->record_bytes; }
std::uint64_t Hdf5Source::records_in_cut(int rank, int world_size) const {
    return fixed_records_in_cut(impl_->num_samples, impl_->record_bytes, rank, world_size);
}
std::uint64_t Hdf5Source::sample_bytes(std::uint64_t) const { return impl_->record_bytes; }

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

void Hdf5Source::read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const {
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

std::uint64_t Hdf5Source::read_rows_collective(std::size_t field, std::uint64_t row_begin,
                                               std::uint64_t row_count, std::byte* dst) const {
    const Communicator& comm = *impl_->comm;
    std::uint64_t my_pieces = 0;
    std::uint64_t rows_per_piece = 1;
    LocalStatus status;
    try {
        if (field >= impl_->fields.size()) {
            throw ConfigError("hdf5: field index " + std::to_string(field) + " out of range");
        }
        const Field& f = impl_->fields[field];
        if (row_begin + row_count > impl_->num_samples || row_begin + row_count < row_begin) {
            throw ConfigError(impl_->where(f) + ": rows " + std::to_string(row_begin) + "+" +
                              std::to_string(row_count) + " exceed N = " +
                              std::to_string(impl_->num_samples));
        }
        rows_per_piece = std::max<std::uint64_t>(
            impl_->options.max_read_bytes / std::max<std::uint64_t>(f.info.sample_bytes, 1), 1);
        my_pieces = (row_count + rows_per_piece - 1) / rows_per_piece;
    } catch (...) {
        status = LocalStatus::from_current_exception();
    }
    agree_or_throw(comm, status);
    const Field& f = impl_->fields[field];
    const std::uint64_t calls = comm.allreduce_max(my_pieces);

    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    detail::H5Plist dxpl(h5check(H5Pcreate(H5P_DATASET_XFER), "hdf5: H5Pcreate(dxpl)"));
    h5check(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE), "hdf5: H5Pset_dxpl_mpio");
    for (std::uint64_t i = 0; i < calls; ++i) {
        // After a local failure this rank keeps taking part with empty selections, so the
        // others are never left waiting inside a collective; the error is agreed afterwards.
        const bool have = !status.failed && i < my_pieces;
        try {
            detail::H5Space fspace(h5check(H5Dget_space(f.dataset.get()), "H5Dget_space"));
            hsize_t one = 1;
            detail::H5Space mspace;
            std::byte* out = dst;
            if (have) {
                const std::uint64_t row = row_begin + i * rows_per_piece;
                const std::uint64_t n = std::min(rows_per_piece, row_begin + row_count - row);
                std::vector<hsize_t> start(f.dims.size(), 0);
                std::vector<hsize_t> cnt = f.dims;
                start[0] = row;
                cnt[0] = n;
                h5check(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start.data(), nullptr,
                                            cnt.data(), nullptr),
                        impl_->where(f) + ": H5Sselect_hyperslab");
                const hsize_t elems = n * f.row_elements;
                mspace = detail::H5Space(h5check(H5Screate_simple(1, &elems, nullptr), "H5Screate"));
                out = dst + (row - row_begin) * f.info.sample_bytes;
            } else {
                h5check(H5Sselect_none(fspace.get()), "H5Sselect_none(file)");
                mspace = detail::H5Space(h5check(H5Screate_simple(1, &one, nullptr), "H5Screate"));
                h5check(H5Sselect_none(mspace.get()), "H5Sselect_none(memory)");
            }
            std::byte dummy{};
            h5check(H5Dread(f.dataset.get(), f.mem_type, mspace.get(), fspace.get(), dxpl.get(),
                            out ? out : &dummy),
                    impl_->where(f) + ": collective H5Dread (call " + std::to_string(i + 1) +
                        " of " + std::to_string(calls) + ")");
        } catch (...) {
            if (!status.failed) status = LocalStatus::from_current_exception();
        }
    }
    agree_or_throw(comm, status);
    return calls;
}

}  // namespace mpistage
