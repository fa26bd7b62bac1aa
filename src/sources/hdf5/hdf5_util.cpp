#include "sources/hdf5/hdf5_util.hpp"

namespace mpistage::detail {

std::recursive_mutex& hdf5_mutex() {
    static std::recursive_mutex m;
    return m;
}

namespace {
herr_t walk_cb(unsigned n, const H5E_error2_t* err, void* data) {
    auto* out = static_cast<std::string*>(data);
    char maj[128] = {0};
    char min[128] = {0};
    H5Eget_msg(err->maj_num, nullptr, maj, sizeof maj);
    H5Eget_msg(err->min_num, nullptr, min, sizeof min);
    if (!out->empty()) *out += "; ";
    *out += "#" + std::to_string(n) + " " + (err->func_name ? err->func_name : "?") + ": " +
            (err->desc ? err->desc : "") + " (" + maj + " / " + min + ")";
    return 0;
}
}  // namespace

std::string hdf5_error_stack() {
    std::string out;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_cb, &out);
    H5Eclear2(H5E_DEFAULT);
    if (out.empty()) out = "no HDF5 error stack";
    return out;
}

Hdf5ErrorSilencer::Hdf5ErrorSilencer() noexcept {
    saved_ = H5Eget_auto2(H5E_DEFAULT, &func_, &data_) >= 0;
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

Hdf5ErrorSilencer::~Hdf5ErrorSilencer() {
    if (saved_) H5Eset_auto2(H5E_DEFAULT, func_, data_);
}

}  // namespace mpistage::detail
