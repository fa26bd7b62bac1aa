// Opening an HDF5 source: the collective open and the discovery of its fields.
#include <map>

#include "comm/agree.hpp"
#include "comm/blocking_watch.hpp"
#include "sources/hdf5/hdf5_impl.hpp"
#include "sources/hdf5/hdf5_types.hpp"
#include "util/descriptor_limit.hpp"
#include "util/file_identity.hpp"
#include "util/input_file.hpp"

namespace mpistage {

using detail::h5check;

namespace {

struct VisitData {
    std::vector<std::string> names;
};

herr_t visit_cb(hid_t, const char* name, const H5O_info_t* info, void* data) {
    if (info->type == H5O_TYPE_DATASET) static_cast<VisitData*>(data)->names.emplace_back(name);
    return 0;
}

/// Whether a dataset's storage is wholly allocated (every row written or given its fill value
/// on disk). Contiguous: H5Dget_space_status. Chunked: every chunk exists (H5Dget_num_chunks;
/// H5Dget_space_status compares the chunks' stored, compressed, bytes with the full size, so a
/// wholly written gzip dataset reads as partly allocated). Compact and virtual: true.
bool storage_allocated(hid_t dataset, H5D_layout_t layout, hid_t dcpl,
                       const std::vector<hsize_t>& dims) {
    if (layout == H5D_CONTIGUOUS) {
        H5D_space_status_t status = H5D_SPACE_STATUS_ERROR;
        return H5Dget_space_status(dataset, &status) >= 0 && status == H5D_SPACE_STATUS_ALLOCATED;
    }
    if (layout != H5D_CHUNKED) return true;
    std::vector<hsize_t> chunk(dims.size(), 0);
    if (H5Pget_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()) !=
        static_cast<int>(chunk.size())) {
        return false;
    }
    hsize_t expected = 1;
    for (std::size_t d = 0; d < dims.size(); ++d) {
        if (chunk[d] == 0) return false;
        expected *= (dims[d] + chunk[d] - 1) / chunk[d];
    }
    // HDF5 1.10.8 refuses H5S_ALL here: the dataset's own dataspace.
    const detail::H5Space space(H5Dget_space(dataset));
    hsize_t stored = 0;
    return space.get() >= 0 && H5Dget_num_chunks(dataset, space.get(), &stored) >= 0 &&
           stored == expected;
}

// " (datasets in the file: a, b/c)": what a user who named a missing dataset can choose from.
std::string dataset_listing(hid_t file) {
    VisitData data;
    if (H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_INC, visit_cb, &data, H5O_INFO_BASIC) < 0) return {};
    std::string out;
    for (const auto& n : data.names) out += (out.empty() ? "" : ", ") + n;
    return out.empty() ? " (the file holds no dataset)" : " (datasets in the file: " + out + ")";
}

}  // namespace

void Hdf5Source::Impl::open(const CommRef& ref) {
    // The source's one MPI_Comm_dup, kept for its collective reads (a plain MPI_Comm: the
    // launcher check first). The agreements below run on the caller's Communicator when one
    // was given (its watchdog settings, as before), else on this duplicate.
    comm.emplace(ref.duplicate());
    const Communicator& c = ref.communicator() != nullptr ? *ref.communicator() : *comm;
    std::lock_guard<std::recursive_mutex> lock(detail::hdf5_mutex());
    const detail::Hdf5ErrorSilencer quiet;
    // 1. Every rank checks the file on its own, then all agree (a missing file on one node
    //    must not leave the others inside a collective open).
    run_agreed(c, [&] {
        // The file is held twice (a POSIX descriptor and HDF5's MPI-IO file).
        detail::require_descriptors(2, "'" + path + "'", "hdf5");
        detail::probe_input_file(path, "hdf5");
        raw = detail::PosixFile(path);
        const htri_t is_h5 = H5Fis_hdf5(path.c_str());
        const std::string stack = detail::hdf5_error_stack();
        if (is_h5 < 0) {
            // HDF5 could not open the file to look: out of descriptors is not "not HDF5".
            const std::string note = detail::descriptor_note();
            if (!note.empty()) {
                throw IoError("hdf5: " + path + ": cannot open it to check its signature" + note +
                              ": " + stack);
            }
        }
        if (is_h5 <= 0) {
            throw FormatError("hdf5: " + path + ": not an HDF5 file (no HDF5 signature at "
                              "byte offset 0, 512, 1024, ...)");
        }
    });
    // 2. The same file on every rank? A different file (another node's copy, a file being
    //    rewritten) would send ranks into different collectives inside H5Fopen.
    opened_identity = detail::file_identity(raw);
    require_same(c, "contents of " + path, opened_identity, "hdf5",
                 "every rank must open the same, unchanging file");
    // 3. Collective open through the MPI-IO driver on the library's communicator.
    run_agreed(c, [&] {
        detail::H5Plist fapl(h5check(H5Pcreate(H5P_FILE_ACCESS), "hdf5: H5Pcreate(fapl)"));
        h5check(H5Pset_fapl_mpio(fapl.get(), comm->get(), MPI_INFO_NULL),
                "hdf5: H5Pset_fapl_mpio");
        const detail::BlockingWatch watch(*comm, "H5Fopen(" + path + ")");
        const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get());
        file =
            detail::H5File(h5check(id, "hdf5: " + path + ": H5Fopen (MPI-IO)" +
                                           (id < 0 ? detail::descriptor_note() : std::string())));
    });
    // 4. Fields: same file, same answers on every rank, but agree anyway.
    run_agreed(c, [&] { open_fields(); });
}

void Hdf5Source::Impl::open_fields() {
    std::vector<std::string> names = options.fields;
    if (names.empty()) names = discover();
    for (std::size_t i = 0; i < names.size(); ++i) {
        for (std::size_t j = 0; j < i; ++j) {
            if (names[i] == names[j]) {
                throw ConfigError("hdf5: " + path + ": field '" + names[i] +
                                  "' is given more than once");
            }
        }
    }
    for (const auto& n : names) open_field(n);
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
}

void Hdf5Source::Impl::open_field(const std::string& name) {
    detail::Hdf5Field f;
    f.info.name = name;
    const std::string ctx = "hdf5: " + path + ": dataset '" + name + "'";
    htri_t exists = H5Lexists(file.get(), name.c_str(), H5P_DEFAULT);
    if (exists <= 0) {
        const std::string listing = dataset_listing(file.get());
        detail::hdf5_error_stack();  // clear
        throw ConfigError(ctx + " does not exist in the file" + listing);
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
    f.info.dtype = detail::dtype_of(type.get(), path, name);
    f.mem_type = detail::memory_type(f.info.dtype);
    for (std::size_t d = 1; d < f.dims.size(); ++d) {
        f.info.sample_shape.push_back(static_cast<std::int64_t>(f.dims[d]));
        f.row_elements *= f.dims[d];
    }
    f.info.sample_bytes = checked_sample_bytes(f.info.sample_shape, f.info.dtype, ctx);

    detail::H5Plist dcpl(h5check(H5Dget_create_plist(f.dataset.get()), ctx + ": dcpl"));
    check_filters(dcpl.get(), ctx);
    const int nfilters = H5Pget_nfilters(dcpl.get());
    const H5D_layout_t layout = H5Pget_layout(dcpl.get());
    f.layout = layout == H5D_CONTIGUOUS ? "contiguous"
               : layout == H5D_CHUNKED  ? "chunked"
               : layout == H5D_COMPACT  ? "compact"
                                        : "virtual";
    // The pread fast path reads raw bytes at H5Dget_offset, so it is only taken when those
    // bytes are exactly the native type (or its byte-swapped twin: same precision, offset,
    // sign and float layout) and live in this very file: not behind an external link, not
    // in external raw storage; and only when its storage is allocated: for a dataset never
    // written, H5Dget_offset is not always HADDR_UNDEF (in a file with a user block it is
    // HADDR_UNDEF plus the block's size), and H5Dread serves the fill value there.
    f.allocated = storage_allocated(f.dataset.get(), layout, dcpl.get(), f.dims);
    detail::hdf5_error_stack();
    if (layout == H5D_CONTIGUOUS && nfilters == 0 && H5Pget_external_count(dcpl.get()) == 0 &&
        in_this_file(f.dataset.get()) && f.allocated) {
        const haddr_t offset = H5Dget_offset(f.dataset.get());
        detail::hdf5_error_stack();
        bool swap = false;
        if (offset != HADDR_UNDEF && detail::same_as_native(type.get(), f.mem_type.get(), swap)) {
            f.fast_path = true;
            f.byte_swap = swap;
            f.base_offset = offset;
        }
    }
    fields.push_back(std::move(f));
}


void Hdf5Source::Impl::check_filters(hid_t dcpl, const std::string& ctx) const {
    const int nfilters = H5Pget_nfilters(dcpl);
    for (int i = 0; i < nfilters; ++i) {
        unsigned flags = 0;
        unsigned config = 0;
        std::size_t nelmts = 0;
        char fname[256] = {0};
        const H5Z_filter_t id =
            H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &nelmts, nullptr,
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
}

bool Hdf5Source::Impl::in_this_file(hid_t object) const {
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

std::vector<std::string> Hdf5Source::Impl::discover() {
    VisitData data;
    h5check(H5Ovisit2(file.get(), H5_INDEX_NAME, H5_ITER_INC, visit_cb, &data, H5O_INFO_BASIC),
            "hdf5: " + path + ": H5Ovisit");
    // Keep datasets of rank >= 1 with a supported type, grouped by dimension 0; say why the
    // others are left out.
    std::map<hsize_t, std::vector<std::string>> by_rows;
    for (const auto& name : data.names) {
        detail::H5Dataset d(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT));
        if (!d) {
            detail::hdf5_error_stack();
            left_out.push_back("'" + name + "' (cannot be opened)");
            continue;
        }
        detail::H5Space s(H5Dget_space(d.get()));
        const int nd = H5Sget_simple_extent_type(s.get()) == H5S_SIMPLE
                           ? H5Sget_simple_extent_ndims(s.get())
                           : 0;
        if (nd < 1) {
            left_out.push_back("'" + name + "' (scalar or empty dataspace: no dimension 0)");
            continue;
        }
        std::vector<hsize_t> dims(static_cast<std::size_t>(nd));
        H5Sget_simple_extent_dims(s.get(), dims.data(), nullptr);
        detail::H5Type t(H5Dget_type(d.get()));
        if (!detail::field_dtype(t.get())) {
            left_out.push_back("'" + name + "' (" + detail::type_class_name(t.get()) + ", " +
                               std::to_string(H5Tget_size(t.get())) + " bytes: not a field type)");
        } else if (dims[0] == 0) {
            left_out.push_back("'" + name + "' (0 rows)");
        } else {
            by_rows[dims[0]].push_back(name);
        }
    }
    detail::hdf5_error_stack();
    if (by_rows.empty()) {
        throw ConfigError(
            "hdf5: " + path +
            ": no dataset with a fixed-size numeric or h5py boolean type and at least one "
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

std::vector<std::string> Hdf5Source::notes() const {
    const auto& out = impl_->left_out;
    if (out.empty()) return {};
    std::string listing;
    const std::size_t shown = std::min<std::size_t>(out.size(), 10);
    for (std::size_t i = 0; i < shown; ++i) listing += (i ? ", " : "") + out[i];
    if (out.size() > shown) listing += ", and " + std::to_string(out.size() - shown) + " more";
    return {"hdf5: " + impl_->path + ": " + std::to_string(out.size()) +
            " dataset(s) left out of the default field list: " + listing +
            "; name the fields to choose them yourself"};
}

}  // namespace mpistage
