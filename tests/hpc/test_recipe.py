#!/usr/bin/env python3
"""Checks the Spack recipe (spack/packages/mpistage/package.py) and spack.yaml without Spack.

Spack cannot be installed here, so `spack.package` is replaced by a stub that records the
directives (version, variant, depends_on, conflicts) and implements `define` and
`define_from_variant` as Spack does. The test then checks that
  * the recipe imports and declares a class Mpistage(CMakePackage, CudaPackage);
  * its variants map one to one onto options that CMakeLists.txt declares (each variant drives
    its own options; every user-facing option is driven by a variant or by Spack's --test);
  * +torch / +cuda turn the MPISTAGE_REQUIRE_* options on, ~torch / ~cuda off;
  * cuda_arch becomes CMAKE_CUDA_ARCHITECTURES and +cuda is carried to py-torch (with the arch);
  * every find_package / find_dependency / pkg_check_modules of the build (CMakeLists.txt and
    cmake/*.cmake*, tests/ and benchmarks/ included) has a depends_on of the Spack package that
    provides it, with a type that makes it available where it is used, and every depends_on is
    used by the build;
  * a release version with a sha256, made by scripts/make-release.sh, and maintainers;
  * check() for build-time tests and stand-alone test_* methods (spack test run);
  * spack.yaml builds this checkout (develop path ".") with the recipe's repository.

Usage: test_recipe.py SOURCE_DIR
"""
import ast
import contextlib
import importlib.util
import os
import re
import sys
import types
import unittest
from pathlib import Path

SOURCE = Path(sys.argv.pop(1) if len(sys.argv) > 1 else ".").resolve()
RECIPE = SOURCE / "spack" / "packages" / "mpistage" / "package.py"

# Options of CMakeLists.txt that are for developers of mpistage, not for a package build.
DEVELOPER_OPTIONS = {"MPISTAGE_WERROR", "MPISTAGE_SANITIZE", "MPISTAGE_BUILD_FUZZ"}

DIRECTIVES = []  # (name, args, kwargs) in declaration order


def _directive(name):
    def record(*args, **kwargs):
        DIRECTIVES.append((name, args, kwargs))

    return record


class _Variant:
    def __init__(self, value):
        self.value = value


class FakeSpec:
    """The part of a concrete Spec the recipe uses: variants, satisfies, version."""

    def __init__(self, variants):
        self.variants = {k: _Variant(v) for k, v in variants.items()}
        self.version = "main"

    def satisfies(self, constraint):
        for word in constraint.split():
            if word[0] in "+~":
                wanted = word[0] == "+"
                for name in word[1:].replace("~", "+").split("+"):
                    if self.variants[name].value is not wanted:
                        return False
            elif "=" in word:
                name, value = word.split("=", 1)
                if value not in self.variants[name].value:
                    return False
        return True

    def __getitem__(self, dep):
        prefix = types.SimpleNamespace(bin=types.SimpleNamespace(ctest="/spack/cmake/bin/ctest"))
        package = types.SimpleNamespace(
            cmake_prefix_paths=[f"/spack/{dep}/site-packages/torch/share/cmake"],
            platlib="lib/python3.11/site-packages")
        command = types.SimpleNamespace(path=f"/spack/{dep}/bin/python3")
        return types.SimpleNamespace(package=package, prefix=prefix, command=command)


class CMakePackage:
    run_tests = False

    def __init__(self, spec):
        self.spec = spec

    @staticmethod
    def define(name, value):
        if isinstance(value, bool):
            return f"-D{name}:BOOL={'ON' if value else 'OFF'}"
        return f"-D{name}:STRING={value}"

    def define_from_variant(self, name, variant):
        value = self.spec.variants[variant].value
        return self.define(name, value)


class CudaPackage:
    cuda_arch_values = ("60", "70", "80", "90")


def _stub_spack():
    package = types.ModuleType("spack.package")
    for name in ("version", "variant", "depends_on", "conflicts", "license", "maintainers",
                 "requires", "provides", "patch", "resource", "extends"):
        setattr(package, name, _directive(name))
    package.CMakePackage = CMakePackage
    package.CudaPackage = CudaPackage
    package.join_path = lambda *parts: "/".join(parts)
    package.working_dir = lambda *a, **k: contextlib.nullcontext()
    package.Executable = lambda path: (lambda *a, **k: "")
    package.mkdirp = lambda *a, **k: None
    package.which = lambda *a, **k: None
    package.InstallError = type("InstallError", (Exception,), {})
    package.SkipTest = type("SkipTest", (Exception,), {})
    package.run_after = lambda *a, **k: (lambda f: f)
    package.on_package_attributes = lambda **k: (lambda f: f)
    package.when = lambda *a, **k: contextlib.nullcontext()
    package.__all__ = [n for n in vars(package) if not n.startswith("_")]
    spack = types.ModuleType("spack")
    spack.package = package
    sys.modules["spack"] = spack
    sys.modules["spack.package"] = package


def _load_recipe():
    """The recipe's class, imported once (its directives are recorded in DIRECTIVES)."""
    if "mpistage_recipe_class" in sys.modules:
        return sys.modules["mpistage_recipe_class"]
    _stub_spack()
    spec = importlib.util.spec_from_file_location("mpistage_recipe", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["mpistage_recipe_class"] = module.Mpistage
    return module.Mpistage


def cmake_options():
    """Options `option(NAME ...)` declared by the top-level CMakeLists.txt."""
    text = (SOURCE / "CMakeLists.txt").read_text()
    return set(re.findall(r"^\s*option\(\s*([A-Za-z0-9_]+)", text, re.MULTILINE))


def parse_args(args):
    out = {}
    for a in args:
        m = re.fullmatch(r"-D([A-Za-z0-9_]+):[A-Z]+=(.*)", a)
        assert m, f"not a -DNAME:TYPE=VALUE argument: {a}"
        out[m.group(1)] = m.group(2)
    return out


class RecipeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.Mpistage = _load_recipe()
        cls.variants = {a[0]: k for n, a, k in DIRECTIVES if n == "variant"}
        cls.variants["cuda"] = {"default": False}  # declared by CudaPackage
        cls.variants["cuda_arch"] = {"default": ("none",)}

    def args_for(self, run_tests=False, **overrides):
        values = {name: v.get("default") for name, v in self.variants.items()}
        values.update(overrides)
        pkg = self.Mpistage(FakeSpec(values))
        pkg.run_tests = run_tests
        return parse_args(pkg.cmake_args())

    def test_is_a_cmake_cuda_package(self):
        self.assertTrue(issubclass(self.Mpistage, CMakePackage))
        self.assertTrue(issubclass(self.Mpistage, CudaPackage))
        self.assertTrue(any(n == "version" for n, _, _ in DIRECTIVES))

    def test_variants_map_one_to_one_onto_cmake_options(self):
        declared = cmake_options()
        driven = {}
        for name, v in self.variants.items():
            if name == "cuda_arch" or not isinstance(v.get("default"), bool):
                continue
            on = self.args_for(**{name: True}, cuda_arch=("90",))
            off = self.args_for(**{name: False}, cuda_arch=("90",))
            changed = {k for k in set(on) | set(off) if on.get(k) != off.get(k)}
            booleans = {k for k in changed if on.get(k) in ("ON", "OFF")}
            self.assertTrue(booleans, f"variant {name} drives no CMake option")
            for option in booleans:
                self.assertIn(option, declared, f"variant {name} sets {option}, not in CMakeLists")
                self.assertEqual((on[option], off[option]), ("ON", "OFF"), option)
                self.assertNotIn(option, driven, f"{option} driven by {driven.get(option)} too")
                driven[option] = name
        tests_on = self.args_for(run_tests=True)
        self.assertEqual(tests_on["MPISTAGE_BUILD_TESTS"], "ON")
        self.assertEqual(self.args_for()["MPISTAGE_BUILD_TESTS"], "OFF")
        driven["MPISTAGE_BUILD_TESTS"] = "spack --test"
        missing = declared - set(driven) - DEVELOPER_OPTIONS
        self.assertFalse(missing, f"CMake options no variant drives: {sorted(missing)}")

    def test_requested_features_are_required(self):
        for feature in ("torch", "cuda"):
            up = feature.upper()
            on = self.args_for(**{feature: True}, cuda_arch=("80",))
            self.assertEqual(on[f"MPISTAGE_WITH_{up}"], "ON")
            self.assertEqual(on[f"MPISTAGE_REQUIRE_{up}"], "ON")
            off = self.args_for(**{feature: False})
            self.assertEqual(off[f"MPISTAGE_WITH_{up}"], "OFF")
            self.assertEqual(off[f"MPISTAGE_REQUIRE_{up}"], "OFF")

    def test_cuda_arch_and_torch_dir(self):
        args = self.args_for(cuda=True, cuda_arch=("80", "90"), torch=True)
        self.assertEqual(args["CMAKE_CUDA_ARCHITECTURES"], "80;90")
        self.assertTrue(args["Torch_DIR"].endswith("/torch/share/cmake/Torch"), args["Torch_DIR"])
        self.assertNotIn("CMAKE_CUDA_ARCHITECTURES", self.args_for(cuda=False))
        self.assertNotIn("Torch_DIR", self.args_for(torch=False))

    def test_cuda_is_carried_to_py_torch(self):
        deps = [(a[0], k.get("when", "")) for n, a, k in DIRECTIVES if n == "depends_on"]
        self.assertIn(("py-torch", "+torch"), deps)
        self.assertIn(("py-torch+cuda", "+torch+cuda"), deps)
        for arch in CudaPackage.cuda_arch_values:
            self.assertIn((f"py-torch cuda_arch={arch}", f"+torch+cuda cuda_arch={arch}"), deps)
        self.assertIn(("hdf5@1.10:+mpi", ""), deps)

    def test_python_variant(self):
        # +python: the module for Spack's python, in its site-packages layout under the prefix,
        # and the package extends python; torch only at run time and only with +torch.
        on = self.args_for(python=True)
        self.assertEqual((on["MPISTAGE_WITH_PYTHON"], on["MPISTAGE_REQUIRE_PYTHON"]),
                         ("ON", "ON"))
        self.assertEqual(on["Python3_EXECUTABLE"], "/spack/python/bin/python3")
        self.assertEqual(on["MPISTAGE_PYTHON_INSTALL_DIR"], "lib/python3.11/site-packages")
        off = self.args_for(python=False)
        self.assertEqual((off["MPISTAGE_WITH_PYTHON"], off["MPISTAGE_REQUIRE_PYTHON"]),
                         ("OFF", "OFF"))
        self.assertNotIn("Python3_EXECUTABLE", off)
        self.assertNotIn("MPISTAGE_PYTHON_INSTALL_DIR", off)
        self.assertIn(("extends", ("python",), {"when": "+python"}), DIRECTIVES)
        deps = {(a[0], k.get("when", "")): k.get("type")
                for n, a, k in DIRECTIVES if n == "depends_on"}
        for name in ("py-numpy", "py-mpi4py"):
            self.assertEqual(deps[(name, "+python")], "run", name)
        self.assertEqual(deps[("py-pybind11@2.6:", "+python")], "build")
        self.assertEqual(deps[("py-torch", "+python+torch")], "run")
        self.assertNotIn(("py-torch", "+python"), deps, "torch is optional under +python")
        # The option the recipe sets is one python/CMakeLists.txt declares.
        self.assertIn("set(MPISTAGE_PYTHON_INSTALL_DIR",
                      (SOURCE / "python" / "CMakeLists.txt").read_text())

    def test_spack_test_methods(self):
        self.assertTrue(callable(getattr(self.Mpistage, "check", None)))
        # A CMakePackage runs no install_time_test_callbacks of its own: checks after the
        # install are stand-alone tests (test_* methods with a docstring, `spack test run`).
        self.assertFalse(getattr(self.Mpistage, "install_time_test_callbacks", None),
                         "install-time callbacks are not run for a CMakePackage; use test_*")
        tests = [n for n in vars(self.Mpistage) if n.startswith("test_")]
        for name in ("test_version", "test_consumer", "test_python"):
            self.assertIn(name, tests)
        for name in tests:
            self.assertTrue(getattr(self.Mpistage, name).__doc__, f"{name} has no docstring")
        self.assertNotIn("tests", self.variants, "tests are Spack's --test, not a variant")

    def test_release_version_and_maintainers(self):
        versions = {a[0]: k for n, a, k in DIRECTIVES if n == "version"}
        releases = {v: k for v, k in versions.items() if "sha256" in k}
        self.assertTrue(releases, "no release version(..., sha256=...)")
        project = re.search(r"project\(mpistage VERSION ([0-9.]+)",
                            (SOURCE / "CMakeLists.txt").read_text()).group(1)
        self.assertIn(project, releases, f"no release of the project version {project}")
        for v, k in releases.items():
            self.assertRegex(k["sha256"], r"^[0-9a-f]{64}$", v)
            self.assertNotEqual(set(k["sha256"]), {"0"}, f"{v}: placeholder sha256")
        self.assertIn(f"mpistage-{project}.tar.gz", self.Mpistage.url)
        self.assertTrue(os.access(SOURCE / "scripts" / "make-release.sh", os.X_OK))
        self.assertTrue(any(n == "maintainers" and a for n, a, _ in DIRECTIVES), "no maintainers")


# The Spack package that provides each CMake package (find_package / find_dependency) and each
# pkg-config module (pkg_check_modules) the build uses. None: not a Spack dependency, with why.
CMAKE_PACKAGES = {
    "MPI": "mpi", "HDF5": "hdf5", "ZLIB": "zlib-api", "nlohmann_json": "nlohmann-json",
    "CLI11": "cli11", "PkgConfig": "pkgconfig", "CUDAToolkit": "cuda", "Torch": "py-torch",
    "GTest": "googletest", "benchmark": "benchmark", "Python3": "python",
    "pybind11": "py-pybind11",
    "Threads": None,  # the C library's threads
    "Git": None,  # optional (QUIET): the commit of a checkout; a release tarball carries it
    "mpistage": None,  # the consumer projects of the install tests find this package itself
}
PKG_CONFIG_MODULES = {"libisal": "isa-l", "sqlite3": "sqlite", "libxxhash": "xxhash"}
# The Spack package of each third-party module the Python package (python/mpistage) imports
# at run time; the standard library needs none.
PYTHON_IMPORTS = {"mpi4py": "py-mpi4py", "numpy": "py-numpy", "torch": "py-torch"}
# The standard library needs no depends_on: Python's own list (3.10+), or a fallback list.
PYTHON_STDLIB = set(getattr(sys, "stdlib_module_names", ())) or {
    "atexit", "gc", "itertools", "json", "weakref", "os", "sys", "collections", "typing",
    "contextlib", "functools", "threading", "warnings", "datetime", "socket", "logging", "signal"}
# depends_on that no find_package names: the compilers, and the build tool itself.
NOT_FOUND_BY_CMAKE = {"c", "cxx", "cmake"}


def build_files():
    """CMake files of the build: CMakeLists.txt and cmake/*.cmake(.in), build trees excluded."""
    for path in sorted(SOURCE.rglob("*")):
        rel = path.relative_to(SOURCE)
        if rel.parts[0].startswith(("build", ".")) or not path.is_file():
            continue
        if path.name == "CMakeLists.txt" or path.name.endswith((".cmake", ".cmake.in")):
            yield rel, path.read_text()


def found_packages():
    """(spack name or None, what the build calls, file, where): where is 'test' under tests/,
    'benchmarks' under benchmarks/, else 'build'."""
    out = []
    for rel, text in build_files():
        text = re.sub(r"#[^\n]*", "", text)
        where = {"tests": "test", "benchmarks": "benchmarks"}.get(rel.parts[0], "build")
        for call, name in re.findall(r"\b(find_package|find_dependency)\(\s*([A-Za-z0-9_]+)", text):
            out.append((CMAKE_PACKAGES.get(name, KeyError), f"{call}({name})", rel, where))
        for args in re.findall(r"\bpkg_check_modules\(([^)]*)\)", text):
            words = args.split()[1:]  # the prefix first, then options and modules
            for module in (w for w in words if w not in ("REQUIRED", "QUIET", "IMPORTED_TARGET",
                                                           "NO_CMAKE_PATH", "GLOBAL")):
                module = re.split(r"[<>=]", module)[0]
                out.append((PKG_CONFIG_MODULES.get(module, KeyError),
                            f"pkg_check_modules({module})", rel, where))
    return out


def python_imports():
    """(spack name or KeyError, module, file) for each top-level module python/mpistage/*.py
    imports at run time (relative imports of the package itself excluded)."""
    out = []
    for path in sorted((SOURCE / "python" / "mpistage").glob("*.py")):
        modules = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules += [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.append(node.module.split(".")[0])
        for module in modules:
            if module in PYTHON_STDLIB or module == "mpistage":
                continue
            out.append((PYTHON_IMPORTS.get(module, KeyError), module, path.relative_to(SOURCE)))
    return out


class DependencyTest(unittest.TestCase):
    """The recipe's depends_on against what the build looks for."""

    @classmethod
    def setUpClass(cls):
        cls.Mpistage = _load_recipe()
        cls.deps = {}  # spack name -> list of (types, when)
        for n, a, k in DIRECTIVES:
            if n != "depends_on":
                continue
            name = re.match(r"[A-Za-z0-9_-]+", a[0]).group(0)
            types = k.get("type", ("build", "link"))
            types = (types,) if isinstance(types, str) else tuple(types)
            cls.deps.setdefault(name, []).append((types, k.get("when", "")))

    def test_every_find_package_has_a_depends_on(self):
        found = found_packages()
        self.assertTrue(any(c == "find_package(HDF5)" for _, c, _, _ in found), "parser broken")
        problems = []
        for spack_name, call, rel, where in found:
            if spack_name is KeyError:
                problems.append(f"{rel}: {call}: no Spack package known for it "
                                f"(add it to CMAKE_PACKAGES or PKG_CONFIG_MODULES and a depends_on)")
                continue
            if spack_name is None:
                continue
            if spack_name == "cuda":  # CudaPackage declares depends_on("cuda", when="+cuda")
                if not issubclass(self.Mpistage, CudaPackage):
                    problems.append(f"{rel}: {call}: the recipe is not a CudaPackage")
                continue
            decls = self.deps.get(spack_name)
            if not decls:
                problems.append(f"{rel}: {call}: no depends_on(\"{spack_name}\") in the recipe")
                continue
            types = {t for d in decls for t in d[0]}
            wanted = {"test": {"test"}, "benchmarks": {"build"}, "build": {"build"}}[where]
            if not wanted & types:
                problems.append(f"{rel}: {call}: depends_on(\"{spack_name}\") has type "
                                f"{sorted(types)}, needs {sorted(wanted)} there")
        self.assertFalse(problems, "\n".join(problems))

    def test_libraries_linked_have_link_type(self):
        # What libmpistage links (shared or static) must be type link, or Spack does not put it
        # on the link line and RPATH of a consumer.
        for name in ("mpi", "hdf5", "zlib-api", "isa-l", "xxhash", "sqlite", "py-torch"):
            types = {t for d in self.deps.get(name, []) for t in d[0]}
            self.assertIn("link", types, name)

    def test_every_depends_on_is_used_by_the_build(self):
        used = {s for s, _, _, _ in found_packages() if isinstance(s, str)}
        used |= {s for s, _, _ in python_imports() if isinstance(s, str)}
        unused = set(self.deps) - used - NOT_FOUND_BY_CMAKE
        self.assertFalse(unused, f"depends_on with no find_package in the build: {sorted(unused)}")

    def test_every_python_import_has_a_run_dependency(self):
        # The installed package imports these when a user imports mpistage: Spack must put them
        # in the run environment (type run) under +python.
        for spack_name, module, rel in python_imports():
            self.assertIsNot(spack_name, KeyError,
                             f"{rel}: import {module}: no Spack package known for it "
                             f"(add it to PYTHON_IMPORTS and a depends_on)")
            runs = [w for t, w in self.deps.get(spack_name, []) if "run" in t]
            self.assertTrue(runs, f"{rel}: import {module}: no depends_on(\"{spack_name}\", "
                                  f"type=\"run\")")


class EnvironmentTest(unittest.TestCase):
    def test_spack_yaml_builds_this_checkout(self):
        text = (SOURCE / "spack.yaml").read_text()
        try:
            import yaml
        except ImportError:  # no PyYAML: the lines that matter, textually
            for line in ("spack:", "develop:", "path: .", "- ./spack", "mpistage@main"):
                self.assertIn(line, text)
            return
        env = yaml.safe_load(text)["spack"]
        self.assertTrue(any(s.startswith("mpistage@main") for s in env["specs"]), env["specs"])
        self.assertEqual(env["develop"]["mpistage"]["path"], ".")
        self.assertEqual(env["develop"]["mpistage"]["spec"], "mpistage@main")
        self.assertIn("./spack", env["repos"])
        self.assertTrue((SOURCE / "spack" / "repo.yaml").is_file())


if __name__ == "__main__":
    unittest.main(verbosity=2)
