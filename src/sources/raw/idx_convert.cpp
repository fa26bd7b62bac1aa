// Conversion of IDX files (optionally gzip-compressed) to HDF5 and TFRecord (the library's
// half of `mpistage convert idx`). HDF5 calls are checked (h5check) and their identifiers owned
// (H5Handle) under the process's HDF5 lock, with HDF5's error printing silenced only while
// they run (Hdf5ErrorSilencer).
#include <hdf5.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "mpistage/convert.hpp"
#include "mpistage/error.hpp"
#include "mpistage/raw_source.hpp"
#include "mpistage/tf_example.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "sources/hdf5/hdf5_util.hpp"
#include "sources/tfrecord/example_codec.hpp"
#include "sources/tfrecord/framing.hpp"
#include "util/byte_order.hpp"

namespace mpistage {

IdxArray read_idx_any(const std::string& path) {
    gzFile gz = gzopen(path.c_str(), "rb");  // reads plain files as well
    if (!gz) throw IoError("convert: cannot open '" + path + "': " + std::strerror(errno));
    std::vector<unsigned char> bytes;
    unsigned char buf[1 << 16];
    for (;;) {
        const int n = gzread(gz, buf, sizeof buf);
        if (n < 0) {
            int errnum = 0;
            std::string msg = gzerror(gz, &errnum);
            gzclose(gz);
            throw FormatError("convert: '" + path + "': gzip error after " +
                              std::to_string(bytes.size()) + " bytes: " + msg);
        }
        if (n == 0) break;
        bytes.insert(bytes.end(), buf, buf + n);
    }
    gzclose(gz);
    if (bytes.size() < 4 || bytes[0] != 0 || bytes[1] != 0) {
        throw FormatError("convert: '" + path + "' is not an IDX file (bad magic at offset 0)");
    }
    IdxArray a;
    a.dtype = idx_dtype(bytes[2], "convert: " + path);
    const unsigned nd = bytes[3];
    const std::size_t header = 4 + 4u * nd;
    if (nd == 0 || bytes.size() < header) {
        throw FormatError("convert: '" + path + "': truncated IDX header");
    }
    // Every product is checked: dimensions from an untrusted header can wrap 2^64 (found by
    // fuzz/fuzz_idx_header.cpp: dims 2^31 x 2^31 x 4 with no data).
    const std::string ctx = "convert: '" + path + "'";
    // (dims[1..] first, so a 0-record file with an overflowing sample shape is refused too).
    std::uint64_t sample_elems = 1;
    for (unsigned d = 0; d < nd; ++d) {
        a.dims.push_back(detail::load_be32(bytes.data() + 4 + 4 * d));
        if (d > 0)
            sample_elems = checked_mul(sample_elems, a.dims.back(), ctx + ": IDX sample shape");
    }
    checked_mul(sample_elems, dtype_size(a.dtype), ctx + ": IDX sample size");
    const std::uint64_t elems = checked_mul(a.dims.front(), sample_elems, ctx + ": IDX dimensions");
    const std::size_t es = dtype_size(a.dtype);
    const std::uint64_t body = checked_mul(elems, es, ctx + ": IDX data size");
    if (body > bytes.size() || bytes.size() - body != header) {
        throw FormatError(ctx + ": header declares " + std::to_string(body) +
                          " data bytes after a " + std::to_string(header) +
                          "-byte header, file has " + std::to_string(bytes.size()) + " bytes");
    }
    a.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
    if (es > 1) {  // IDX is big-endian
        for (std::size_t i = 0; i < a.data.size(); i += es) {
            std::reverse(a.data.begin() + static_cast<std::ptrdiff_t>(i),
                         a.data.begin() + static_cast<std::ptrdiff_t>(i + es));
        }
    }
    return a;
}

namespace {

/// The native HDF5 type of `t` (owned by HDF5). @throws ConfigError for a type IDX lacks.
hid_t h5_type(DType t, const std::string& what) {
    switch (t) {
        case DType::uint8:
            return H5T_NATIVE_UINT8;
        case DType::int8:
            return H5T_NATIVE_INT8;
        case DType::int16:
            return H5T_NATIVE_INT16;
        case DType::int32:
            return H5T_NATIVE_INT32;
        case DType::float32:
            return H5T_NATIVE_FLOAT;
        case DType::float64:
            return H5T_NATIVE_DOUBLE;
        default:
            break;
    }
    throw ConfigError(what + ": element type " + dtype_name(t) + " is not an IDX type");
}

/// Writes `a` as dataset `name` of `file` (contiguous, or chunked by `chunk_rows` rows with
/// gzip `gzip_level` when > 0). Call under the HDF5 lock. @throws Hdf5Error naming the call.
void write_dataset(hid_t file, const std::string& name, const IdxArray& a, std::uint64_t chunk_rows,
                   int gzip_level, const std::string& out) {
    const std::string where = "convert: " + out + ": dataset '" + name + "'";
    const hid_t type = h5_type(a.dtype, where);
    std::vector<hsize_t> dims(a.dims.begin(), a.dims.end());
    const detail::H5Space space(
        detail::h5check(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                        where + ": H5Screate_simple"));
    const detail::H5Plist dcpl(
        detail::h5check(H5Pcreate(H5P_DATASET_CREATE), where + ": H5Pcreate(dcpl)"));
    if (chunk_rows > 0) {
        std::vector<hsize_t> chunk = dims;
        chunk[0] = std::max<hsize_t>(std::min<hsize_t>(chunk_rows, dims[0]), 1);
        detail::h5check(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()),
                        where + ": H5Pset_chunk");
        if (gzip_level > 0) {
            detail::h5check(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(gzip_level)),
                            where + ": H5Pset_deflate");
        }
    }
    const detail::H5Dataset ds(detail::h5check(
        H5Dcreate2(file, name.c_str(), type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
        where + ": H5Dcreate2"));
    detail::h5check(H5Dwrite(ds.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, a.data.data()),
                    where + ": H5Dwrite");
}

}  // namespace

void write_idx_hdf5(const IdxArray& images, const IdxArray& labels, const std::string& out,
                    std::uint64_t chunk_rows, int gzip_level) {
    if (images.dims.empty() || labels.dims.empty() || images.dims[0] != labels.dims[0]) {
        throw ConfigError("convert: images and labels differ in record count (" +
                          std::to_string(images.dims.empty() ? 0 : images.dims[0]) + " vs " +
                          std::to_string(labels.dims.empty() ? 0 : labels.dims[0]) + ")");
    }
    const std::string tmp = out + ".tmp";
    {
        std::lock_guard<std::recursive_mutex> lock(detail::hdf5_mutex());
        const detail::Hdf5ErrorSilencer quiet;
        try {
            detail::H5File file(
                detail::h5check(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                                "convert: cannot create '" + tmp + "'"));
            write_dataset(file.get(), "images", images, chunk_rows, gzip_level, out);
            write_dataset(file.get(), "labels", labels, chunk_rows, gzip_level, out);
            // The datasets are closed; the file's close writes the metadata: checked.
            detail::h5check(H5Fclose(file.release()), "convert: closing '" + tmp + "' failed");
        } catch (...) {
            std::remove(tmp.c_str());
            throw;
        }
    }
    if (std::rename(tmp.c_str(), out.c_str()) != 0) {
        throw IoError("convert: cannot rename '" + tmp + "' to '" + out +
                      "': " + std::strerror(errno));
    }
}

void write_idx_tfrecord(const IdxArray& images, const IdxArray& labels, const std::string& out) {
    if (images.dims.empty() || labels.dims.empty() || images.dims[0] != labels.dims[0]) {
        throw ConfigError("convert: images and labels differ in record count");
    }
    const std::uint64_t n = images.dims[0];
    const std::size_t row = images.data.size() / n;
    const std::size_t label_size = dtype_size(labels.dtype);
    const std::string tmp = out + ".tmp";
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    if (!file) throw IoError("convert: cannot create '" + tmp + "'");
    std::vector<std::uint8_t> framed;
    for (std::uint64_t i = 0; i < n; ++i) {
        std::int64_t label = 0;
        const unsigned char* lp = labels.data.data() + i * label_size;
        switch (labels.dtype) {
            case DType::uint8:
                label = *lp;
                break;
            case DType::int8:
                label = static_cast<std::int8_t>(*lp);
                break;
            default: {
                std::int32_t v = 0;
                std::memcpy(&v, lp, std::min<std::size_t>(label_size, sizeof v));
                label = v;
            }
        }
        ExampleBuilder ex;
        ex.add_bytes("image", images.data.data() + i * row, row);
        ex.add_int64s("label", {label});
        const auto payload = ex.serialize();
        framed.clear();
        tfrecord::append_record(framed, payload.data(), payload.size());
        file.write(reinterpret_cast<const char*>(framed.data()),
                   static_cast<std::streamsize>(framed.size()));
    }
    file.close();
    if (!file) throw IoError("convert: writing '" + tmp + "' failed");
    if (std::rename(tmp.c_str(), out.c_str()) != 0) {
        throw IoError("convert: cannot rename '" + tmp + "' to '" + out + "'");
    }
}

}  // namespace mpistage
