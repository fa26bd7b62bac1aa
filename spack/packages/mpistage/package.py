# Spack recipe for mpistage. From a repository checkout, the environment in spack.yaml (at the
# root of the checkout) builds this checkout with its dependencies:
#   spack env activate . && spack install            # add --test=root to run the test suite
# or, without the environment:
#   spack repo add spack
#   spack install mpistage@0.1.0 +torch ~cuda          # the release tarball (url below)
#   spack dev-build -d . mpistage@main +torch ~cuda    # this checkout
#
# Variants map one to one onto the CMake options of CMakeLists.txt, and every find_package /
# pkg_check_modules of the build has its depends_on here (tests/hpc/test_recipe.py checks
# both). A requested feature is required: +torch and +cuda set MPISTAGE_REQUIRE_TORCH and
# MPISTAGE_REQUIRE_CUDA, so a configuration that cannot find libtorch or the CUDA toolkit
# fails with a message instead of building without them.
#
# A release: scripts/make-release.sh <tag> writes mpistage-<version>.tar.gz (git archive of
# the tag, without this recipe) and prints the version(...) line with its sha256 for below.

import os

from spack.package import *  # noqa: F401,F403

try:  # Spack >= 1.0 keeps the build systems in the builtin repository
    from spack_repo.builtin.build_systems.cmake import CMakePackage  # noqa: F811
    from spack_repo.builtin.build_systems.cuda import CudaPackage  # noqa: F811
except ImportError:
    pass


class Mpistage(CMakePackage, CudaPackage):
    """MPI-native C++ staging of training data (HDF5, TFRecord, IDX, SQLite) into balanced,
    exactly-once, equal-step batches, with pinned host buffers and libtorch tensors."""

    homepage = "https://github.com/mpistage/mpistage"
    url = "https://github.com/mpistage/mpistage/releases/download/v0.1.0/mpistage-0.1.0.tar.gz"
    git = "https://github.com/mpistage/mpistage.git"

    maintainers("mpistage-hpc", "mpistage-lead")

    license("Apache-2.0")

    version("main", branch="main")
    # `scripts/make-release.sh 7304ef8610ee08032a797c2181dd3fc618da11ba`: the commit the 0.1.0
    # tarball was made from (tag it v0.1.0 when the release is published).
    version("0.1.0", sha256="d335bb0a6454834f3c48412a3dff741ced6fc5f7608dd955401927a2a76902c7")

    variant("torch", default=True, description="Build the libtorch-facing target mpistage::torch")
    variant("shared", default=True, description="Build shared libraries")
    variant("examples", default=True, description="Build the examples (the trainer needs +torch)")
    variant("benchmarks", default=False, description="Build the benchmarks")
    variant("python", default=False, description="Build the Python module mpistage (pybind11)")

    # Build tools. CMake's own modules (FindMPI, FindHDF5, FindZLIB, FindPkgConfig) come with it.
    depends_on("cmake@3.19:", type="build")
    depends_on("pkgconfig", type="build")
    depends_on("c", type="build")
    depends_on("cxx", type="build")
    # Libraries libmpistage links (the package's CMake config re-finds MPI for consumers).
    depends_on("mpi")
    depends_on("hdf5@1.10:+mpi")
    depends_on("zlib-api")
    depends_on("isa-l")
    depends_on("xxhash")
    depends_on("sqlite@3:")
    # Header-only, used only while building (the CLI's parser, the state and report JSON).
    depends_on("cli11@2:", type="build")
    depends_on("nlohmann-json@3:", type="build")
    depends_on("py-torch", when="+torch")
    # A CUDA build of mpistage hands pinned batches to CUDA tensors: torch must have CUDA too,
    # for the same GPU architectures. (CudaPackage adds depends_on("cuda") with +cuda.)
    depends_on("py-torch+cuda", when="+torch+cuda")
    for _arch in CudaPackage.cuda_arch_values:
        depends_on(f"py-torch cuda_arch={_arch}", when=f"+torch+cuda cuda_arch={_arch}")
    depends_on("benchmark", when="+benchmarks", type="build")
    # +python: the module mpistage (python/), installed into the Python's site-packages
    # layout of this prefix; extends() puts it on PYTHONPATH for `spack load mpistage`. torch
    # is optional (+torch): without it the module delivers numpy arrays (tensors="numpy").
    extends("python", when="+python")
    depends_on("python@3.8:", when="+python")
    depends_on("py-pybind11@2.6:", when="+python", type="build")
    depends_on("py-numpy", when="+python", type="run")
    depends_on("py-mpi4py", when="+python", type="run")
    depends_on("py-torch", when="+python+torch", type="run")
    # Build-time tests (`spack install --test=root`, Spack's check): GoogleTest for the suite,
    # Python for the lint and recipe tests.
    depends_on("googletest", type="test")
    depends_on("python@3.8:", type="test")

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
        if spec.satisfies("+python"):
            # The interpreter the module is built for, and its site-packages relative to this
            # prefix (python/CMakeLists.txt sets the extension's RUNPATH from it to lib/).
            python = spec["python"]
            args.append(self.define("Python3_EXECUTABLE", python.command.path))
            args.append(self.define("MPISTAGE_PYTHON_INSTALL_DIR", python.package.platlib))
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
        runs and the install test, which needs the installed prefix (the stand-alone tests
        below do that part)."""
        with working_dir(self.build_directory):
            ctest = Executable(self.spec["cmake"].prefix.bin.ctest)
            ctest("--output-on-failure", "-LE", "stress|install")

    # ---- stand-alone tests: `spack test run mpistage` -------------------------------------

    def _mpiexec(self):
        for name in ("mpiexec", "mpirun", "srun"):
            path = join_path(self.spec["mpi"].prefix.bin, name)
            if os.path.exists(path):
                return Executable(path)
        exe = which("mpiexec", "mpirun", "srun")
        if exe is None:
            raise InstallError("no mpiexec, mpirun or srun to start 2 ranks")
        return exe

    def test_version(self):
        """mpistage --version names the version, MPI, HDF5 and (+torch) torch"""
        out = Executable(self.prefix.bin.mpistage)("--version", output=str.split, error=str.split)
        expected = ["mpistage ", "commit:", "MPI:", "HDF5:"]
        if not self.spec.satisfies("@main"):
            expected[0] = f"mpistage {self.spec.version}"
        if self.spec.satisfies("+torch"):
            expected.append("torch: yes")
        for word in expected:
            if word not in out:
                raise InstallError(f"'{word}' missing from mpistage --version: {out}")

    def test_python(self):
        """+python: the installed module imports with Spack's python (no PYTHONPATH beyond
        Spack's own, no LD_LIBRARY_PATH) and names this version"""
        if not self.spec.satisfies("+python"):
            raise SkipTest("built without +python")
        python = Executable(self.spec["python"].command.path)
        out = python("-c", "import mpistage; print(mpistage.__version__)", output=str.split,
                     error=str.split)
        if not self.spec.satisfies("@main") and str(self.spec.version) not in out:
            raise InstallError(f"mpistage.__version__ is not {self.spec.version}: {out}")

    def test_consumer(self):
        """build the installed example consumer with CMake and run it at 2 ranks: it stages
        one epoch of an IDX pair it writes and checks every sample arrived exactly once"""
        source = join_path(self.prefix.share.mpistage.examples, "consumer")
        cmake = Executable(self.spec["cmake"].prefix.bin.cmake)
        cmake("-S", source, "-B", "consumer-build", f"-DCMAKE_PREFIX_PATH={self.prefix}",
              f"-DMPI_HOME={self.spec['mpi'].prefix}")
        cmake("--build", "consumer-build")
        mkdirp("consumer-work")
        # A failed check exits non-zero, which fails this test part.
        self._mpiexec()("-n", "2", join_path("consumer-build", "x"), "consumer-work")
