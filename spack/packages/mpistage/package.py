# Spack recipe for mpistage. From a repository checkout (the URLs below are where the project
# will be published; until then build the checkout itself):
#   spack repo add spack
#   spack dev-build -d . mpistage@main +torch ~cuda
# Variants map one to one onto the CMake options of CMakeLists.txt.

from spack.package import *


class Mpistage(CMakePackage, CudaPackage):
    """MPI-native C++ staging of training data (HDF5, TFRecord, IDX) into balanced,
    exactly-once, equal-step batches, with pinned host buffers and libtorch tensors."""

    homepage = "https://github.com/mpistage/mpistage"
    git = "https://github.com/mpistage/mpistage.git"

    license("Apache-2.0")

    version("main", branch="main")

    variant("torch", default=True, description="Build the libtorch-facing target mpistage::torch")
    variant("tests", default=False, description="Build the GoogleTest suite")
    variant("benchmarks", default=False, description="Build the benchmarks")

    depends_on("cmake@3.19:", type="build")
    depends_on("pkgconfig", type="build")
    depends_on("c", type="build")
    depends_on("cxx", type="build")
    depends_on("mpi")
    depends_on("hdf5@1.10:+mpi")
    depends_on("zlib-api")
    depends_on("isa-l")
    depends_on("cli11")
    depends_on("nlohmann-json")
    depends_on("py-torch", when="+torch")
    depends_on("googletest", when="+tests", type=("build", "test"))
    depends_on("benchmark", when="+benchmarks", type="build")

    def cmake_args(self):
        return [
            self.define_from_variant("MPISTAGE_WITH_TORCH", "torch"),
            self.define_from_variant("MPISTAGE_WITH_CUDA", "cuda"),
            self.define_from_variant("MPISTAGE_BUILD_TESTS", "tests"),
            self.define_from_variant("MPISTAGE_BUILD_BENCHMARKS", "benchmarks"),
        ]
