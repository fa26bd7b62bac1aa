// `mpistage convert idx`: rank 0 converts; every rank gets the same outcome.
#include <cstdio>

#include "cli/atomic_file.hpp"
#include "cli/commands.hpp"
#include "comm/agree.hpp"
#include "mpistage/convert.hpp"
#include "mpistage/error.hpp"
#include "util/input_file.hpp"

namespace mpistage::cli {

void run_convert(const Communicator& comm, const ConvertArgs& a) {
    run_agreed(comm, [&] {
        if (comm.rank() != 0) return;
        // Probe first: gzopen on a FIFO would block, and "does not exist" must not hide
        // "permission denied".
        detail::probe_input_file(a.images, "convert: IMAGES");
        detail::probe_input_file(a.labels, "convert: LABELS");
        if (a.format != "hdf5" && a.format != "tfrecord") {
            throw ConfigError("convert: unknown --format '" + a.format +
                              "' (expected hdf5 or tfrecord)");
        }
        // The writers build the file beside -o and rename it over: never over a device or a
        // FIFO (that would replace /dev/null itself), nor into a directory.
        if (output_kind(a.output, "-o file") != OutputKind::replace) {
            throw ConfigError("convert: -o '" + a.output +
                              "' is not a regular file: convert writes a whole " + a.format +
                              " file and renames it into place; give a regular file or a new "
                              "path");
        }
        const IdxArray images = read_idx_any(a.images);
        const IdxArray labels = read_idx_any(a.labels);
        if (a.format == "tfrecord") {
            write_idx_tfrecord(images, labels, a.output);
        } else {
            write_idx_hdf5(images, labels, a.output, a.chunk_rows, a.gzip_level);
        }
        std::printf(
            "wrote %s: images [%llu...] %s, labels [%llu] %s\n", a.output.c_str(),
            static_cast<unsigned long long>(images.dims[0]), dtype_name(images.dtype).c_str(),
            static_cast<unsigned long long>(labels.dims[0]), dtype_name(labels.dtype).c_str());
    });
}

}  // namespace mpistage::cli
