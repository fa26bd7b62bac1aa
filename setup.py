"""pip's build of the Python module mpistage (pyproject.toml; docs/python.md, "Install with pip").

The extension `mpistage._mpistage` is not compiled by setuptools: `build_ext` runs the project's
CMake build (the one path that builds the module, python/CMakeLists.txt), then installs its
CMake components `python` (the extension, RUNPATH `$ORIGIN` first) and `python_bundle`
(libmpistage under its SONAME) into a staging prefix and copies those two files into the
package. The installed package therefore needs no LD_LIBRARY_PATH and no build tree, and can be
moved. The pure-Python files come from python/mpistage through setuptools' build_py.

Environment:
  CMAKE_ARGS                extra arguments for the CMake configuration (shell words), e.g.
                            "-DCMAKE_BUILD_TYPE=RelWithDebInfo -DMPISTAGE_WITH_CUDA=OFF"; they
                            come after setup.py's own, so they win.
  MPISTAGE_CMAKE_BUILD_DIR  an already configured build directory of this checkout (with the
                            Python module for this interpreter's ABI) to build and take the
                            module from, instead of configuring a fresh one under build-pip/.
  MPISTAGE_JOBS             parallel build jobs (as scripts/build.sh; default: CMake's
                            CMAKE_BUILD_PARALLEL_LEVEL, else the number of CPUs).
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def project_version():
    """The version of project(mpistage VERSION x.y.z) in CMakeLists.txt: one source of truth."""
    match = re.search(r"project\(\s*mpistage\s+VERSION\s+([0-9][0-9.]*)",
                      (ROOT / "CMakeLists.txt").read_text())
    if not match:
        raise RuntimeError("setup.py: no `project(mpistage VERSION ...)` in CMakeLists.txt")
    return match.group(1)


class CMakeExtension(Extension):
    """An extension whose sources CMake compiles (python/CMakeLists.txt, target mpistage_python)."""

    def __init__(self, name):
        super().__init__(name, sources=[])


def run(cmd, **kwargs):
    print("setup.py:", " ".join(shlex.quote(str(c)) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, **kwargs)


def read_bundle(build_dir):
    """python/bundle.txt of a configured build (python/CMakeLists.txt writes it): key=value."""
    path = build_dir / "python" / "bundle.txt"
    if not path.is_file():
        raise RuntimeError(
            f"setup.py: {path} is missing: {build_dir} was not configured with the Python module "
            "(MPISTAGE_WITH_PYTHON=ON and Python 3 headers + pybind11 found; see its CMake output)")
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


class CMakeBuild(build_ext):
    def configure(self, build_dir):
        args = [
            "-S", ROOT, "-B", build_dir,
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DMPISTAGE_WITH_PYTHON=ON", "-DMPISTAGE_REQUIRE_PYTHON=ON",
            # Only the library and the module are built; the module does not link libtorch.
            "-DMPISTAGE_BUILD_TESTS=OFF", "-DMPISTAGE_BUILD_BENCHMARKS=OFF",
            "-DMPISTAGE_BUILD_EXAMPLES=OFF", "-DMPISTAGE_WITH_TORCH=OFF",
        ]
        # pybind11 as a Python package (Debian's python3-pybind11, or pip's) has its CMake files.
        try:
            import pybind11
            args.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
        except ImportError:
            pass
        extra = shlex.split(os.environ.get("CMAKE_ARGS", ""))
        # As scripts/build.sh: Ninja and ccache when present.
        if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists() and \
                not any(a.startswith("-G") for a in extra):
            args += ["-G", "Ninja"]
        if shutil.which("ccache") and not any("COMPILER_LAUNCHER" in a for a in extra):
            args += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
            os.environ.setdefault("CCACHE_BASEDIR", str(ROOT))
            os.environ.setdefault("CCACHE_NOHASHDIR", "1")
        run(["cmake", *args, *extra])

    def build_extension(self, ext):
        reuse = os.environ.get("MPISTAGE_CMAKE_BUILD_DIR")
        if reuse:
            build_dir = Path(reuse).resolve()
            if not (build_dir / "CMakeCache.txt").is_file():
                raise RuntimeError(f"setup.py: MPISTAGE_CMAKE_BUILD_DIR={reuse} is not a "
                                   "configured CMake build directory (no CMakeCache.txt)")
        else:
            build_dir = Path(self.build_temp).resolve() / "cmake"
            build_dir.mkdir(parents=True, exist_ok=True)
            self.configure(build_dir)
        jobs = os.environ.get("MPISTAGE_JOBS") or os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") \
            or str(self.parallel or os.cpu_count() or 1)
        run(["cmake", "--build", build_dir, "--target", "mpistage_python", "--parallel", jobs])

        bundle = read_bundle(build_dir)
        target = Path(self.get_ext_fullpath(ext.name))
        if bundle["extension"] != target.name:
            raise RuntimeError(
                f"setup.py: {build_dir} builds {bundle['extension']} (for {bundle['python']}) but "
                f"{sys.executable} loads {target.name}: configure it for this interpreter "
                "(-DPython3_EXECUTABLE) or leave MPISTAGE_CMAKE_BUILD_DIR unset")

        stage = Path(self.build_temp).resolve() / "stage"
        shutil.rmtree(stage, ignore_errors=True)
        for component in ("python", "python_bundle"):
            run(["cmake", "--install", build_dir, "--prefix", stage, "--component", component])
        found = sorted(stage.rglob(f"mpistage/{bundle['extension']}"))
        if len(found) != 1:
            raise RuntimeError(f"setup.py: expected one mpistage/{bundle['extension']} under "
                               f"{stage}, found {[str(f) for f in found]}")
        package = found[0].parent
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(found[0], target)
        # The SONAME file only (a symlink to the versioned file in the staging prefix): a wheel
        # stores symlinks as copies, so copying the whole chain would ship the library twice.
        shutil.copyfile(package / bundle["soname"], target.parent / bundle["soname"])


# setuptools' own build folder: inside the reused CMake build directory, else build-pip/
# (matching .gitignore's build*/), never the default `build/` that README's CMake commands use.
_reuse = os.environ.get("MPISTAGE_CMAKE_BUILD_DIR")
setup(
    version=project_version(),
    ext_modules=[CMakeExtension("mpistage._mpistage")],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": os.path.join(_reuse, "pip") if _reuse else "build-pip"}},
)
