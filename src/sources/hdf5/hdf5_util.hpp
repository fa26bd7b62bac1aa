#pragma once
// Checked HDF5 calls and a move-only handle (internal; HDF5 headers never reach public headers).

#include <hdf5.h>

#include <mutex>
#include <string>
#include <utility>

#include "mpistage/error.hpp"

namespace mpistage::detail {

/// HDF5 is not thread-safe in the Debian parallel build: every HDF5 call in the process goes
/// through this lock.
std::recursive_mutex& hdf5_mutex();

/// HDF5's current error stack as text ("func: description (major/minor)"), then cleared.
std::string hdf5_error_stack();

/// Scoped: turns off HDF5's automatic error printing (the library captures the stack into its
/// exceptions instead) and restores the caller's handler on destruction, so an application's
/// own HDF5 error reporting is left as it was. Use under `hdf5_mutex()`.
class Hdf5ErrorSilencer {
public:
    Hdf5ErrorSilencer() noexcept;
    ~Hdf5ErrorSilencer();
    Hdf5ErrorSilencer(const Hdf5ErrorSilencer&) = delete;
    Hdf5ErrorSilencer& operator=(const Hdf5ErrorSilencer&) = delete;

private:
    H5E_auto2_t func_ = nullptr;
    void* data_ = nullptr;
    bool saved_ = false;
};

/// Throws Hdf5Error naming `what` with HDF5's stack when `status < 0`; returns `status`.
template <typename T>
T h5check(T status, const std::string& what) {
    if (status < 0) throw Hdf5Error(what + ": " + hdf5_error_stack());
    return status;
}

/// Move-only owner of one HDF5 identifier; `Close` is the H5?close function.
template <herr_t (*Close)(hid_t)>
class H5Handle {
public:
    H5Handle() = default;
    explicit H5Handle(hid_t id) : id_(id) {}
    H5Handle(H5Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
    H5Handle& operator=(H5Handle&& o) noexcept {
        if (this != &o) {
            reset();
            id_ = std::exchange(o.id_, H5I_INVALID_HID);
        }
        return *this;
    }
    H5Handle(const H5Handle&) = delete;
    H5Handle& operator=(const H5Handle&) = delete;
    ~H5Handle() { reset(); }
    /// No-throw close (errors are ignored: destructor twin of a checked close).
    void reset() noexcept {
        if (id_ >= 0) Close(id_);
        id_ = H5I_INVALID_HID;
    }
    hid_t get() const noexcept { return id_; }
    /// Gives up ownership, for a checked close by the caller (`h5check(H5Fclose(h.release()))`).
    hid_t release() noexcept { return std::exchange(id_, H5I_INVALID_HID); }
    explicit operator bool() const noexcept { return id_ >= 0; }

private:
    hid_t id_ = H5I_INVALID_HID;
};

using H5File = H5Handle<H5Fclose>;
using H5Dataset = H5Handle<H5Dclose>;
using H5Space = H5Handle<H5Sclose>;
using H5Type = H5Handle<H5Tclose>;
using H5Plist = H5Handle<H5Pclose>;

}  // namespace mpistage::detail
