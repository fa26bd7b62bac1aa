# Spack recipe for mpistage. From a repository checkout, the environment in spack.yaml (at the
# root of the checkout) builds this checkout with its dependencies:
#   spack env activate . && spack install            # add --test=root to run the test suite
# or, without the environment:
#   spack repo add spack
#   spack dev-build -d . mpistage@main +torch ~cuda
#
# Variants map one to one onto the CMake options of CMakeLists.txt (tests/hpc/test_recipe.py
# checks it). A requested feature is required: +torch and +cuda set MPISTAGE_REQUIRE_TORCH and
# MPISTAGE_REQUIRE_CUDA, so a configuration that cannot find libtorch or the CUDA toolkit fails
# with a message instead of building without them.

from spack.package import *  # noqa: F401,F403

try:  # Spack >= 1.0 keeps the build systems in the builtin repository
    from spack_repo.builtin.build_systems.cmake import CMakePackage  # noqa: F811
    from spack_repo.builtin.build_systems.cuda import CudaPackage  # noqa: F811
except ImportError:
    pass


class Mpistage(CMakePackage, CudaPackage):
    """MPI-native C++ staging of training data (HDF5, TFRecord, IDX) into balanced,
    exactly-once, equal-step batches, with pinned host buffers and libtorch tensors."""

    homepage = "https://github.com/mpistage/mpistage"
    git = "https://github.com/mpistage/mpistage.git"

    license("Apache-2.0")

    # No release is tagged yet: `main` builds the branch, and spack.yaml's `develop` entry
    # builds the local checkout under this version.
    version("main", branch="main")

    variant("torch", default=True, description="Build the libtorch-facing target mpistage::torch")
    variant("shared", default=True, description="Build shared libraries")
    variant("examples", default=True, description="Build the examples (the trainer needs +torch)")
    variant("benchmarks", default=False, description="Build the benchmarks")
    variant("python", default=False, description="Build the Python module mpistage (pybind11)")

    depends_on("cmake@3.19:", type="build")
    depends_on("pkgconfig", type="build")
    depends_on("c", type="build")
    depends_on("cxx", type="build")
    depends_on("mpi")
    depends_on("hdf5@1.10:+mpi")
    depends_on("zlib-api")
    depends_on("isa-l")
    depends_on("xxhash")
    depends_on("cli11")
    depends_on("nlohmann-json")
    depends_on("py-torch", when="+torch")
    # A CUDA build of mpistage hands pinned batches to CUDA tensors: torch must have CUDA too,
    # for the same GPU architectures.
    depends_on("py-torch+cuda", when="+torch+cuda")
    for _arch in CudaPackage.cuda_arch_values:
        depends_on(f"py-torch cuda_arch={_arch}", when=f"+torch+cuda cuda_arch={_arch}")
    depends_on("benchmark", when="+benchmarks", type="build")
    depends_on("python@3.8:", when="+python")
    depends_on("py-pybind11@2.6:", when="+python", type="build")
    depends_on("py-numpy", when="+python", type="run")
    depends_on("py-mpi4py", when="+python", type="run")
    # The test suite is built and run by `spack install --test=root` (Spack's `check`).
    depends_on("googletest", type="test")

    conflicts("+cuda cuda_arch=none", msg="+cuda needs cuda_arch=<arch> (e.g. cuda_arch=90)")

    def cmake_args(self):
        spec = self.spec
        args = [
            self.define_from_variant("MPISTAGE_WITH_TORCH", "torch"),
            self.define_from_variant("MPISTAGE_REQUIRE_TORCH", "torch"),
            self.define_from_variant("MPISTAGE_WITH_CUDA", "cuda"),
            self.define_from_variant("MPISTAGE_REQUIRE_CUDA", "cuda"),
            self.define_from_variant("BUILD_SHARED_LIBS", "shared"),
            self.define_from_variant("MPISTAGE_BUILD_EXAMPLES", "examples"),
            self.define_from_variant("MPISTAGE_BUILD_BENCHMARKS", "benchmarks"),
            self.define_from_variant("MPISTAGE_WITH_PYTHON", "python"),
            self.define_from_variant("MPISTAGE_REQUIRE_PYTHON", "python"),
            self.define("MPISTAGE_BUILD_TESTS", self.run_tests),
        ]
        if spec.satisfies("+cuda"):
            archs = [a for a in spec.variants["cuda_arch"].value if a != "none"]
            args.append(self.define("CMAKE_CUDA_ARCHITECTURES", ";".join(archs)))
        if spec.satisfies("+torch"):
            # py-torch installs TorchConfig.cmake inside its Python package.
            args.append(
                self.define(
                    "Torch_DIR", join_path(spec["py-torch"].package.cmake_prefix_paths[0], "Torch")
                )
            )
        return args

    def check(self):
        """Build-time tests (`spack install --test=root`): the suite but the multi-hour stress
        runs and the install test, which needs the installed prefix."""
        with working_dir(self.build_directory):
            ctest = Executable(self.spec["cmake"].prefix.bin.ctest)
            ctest("--output-on-failure", "-LE", "stress|install")

    install_time_test_callbacks = ["check_installed_version"]

    def _version_text(self):
        """What the installed `mpistage --version` prints; checks it names its build features."""
        out = Executable(self.prefix.bin.mpistage)("--version", output=str, error=str)
        for word in ("mpistage", "MPI", "HDF5"):
            if word not in out:
                raise InstallError(f"'{word}' missing from mpistage --version: {out}")
        return out

    def check_installed_version(self):
        """Install-time smoke test: the installed CLI starts and reports its build features."""
        out = self._version_text()
        if self.spec.satisfies("+torch") and "torch" not in out:
            raise InstallError(f"+torch, but mpistage --version names no torch: {out}")

    def test_version(self):
        """Stand-alone test (`spack test run mpistage`): `mpistage --version` runs."""
        self._version_text()
