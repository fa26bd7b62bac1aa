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
  * the build-time test method and the install-time callback exist;
  * spack.yaml builds this checkout (develop path ".") with the recipe's repository.

Usage: test_recipe.py SOURCE_DIR
"""
import contextlib
import importlib.util
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
        package = types.SimpleNamespace(cmake_prefix_paths=[f"/spack/{dep}/site-packages/torch/share/cmake"])
        return types.SimpleNamespace(package=package, prefix=prefix)


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
                 "requires", "provides", "patch", "resource"):
        setattr(package, name, _directive(name))
    package.CMakePackage = CMakePackage
    package.CudaPackage = CudaPackage
    package.join_path = lambda *parts: "/".join(parts)
    package.working_dir = lambda *a, **k: contextlib.nullcontext()
    package.Executable = lambda path: (lambda *a, **k: "")
    package.which = lambda *a, **k: None
    package.InstallError = type("InstallError", (Exception,), {})
    package.run_after = lambda *a, **k: (lambda f: f)
    package.on_package_attributes = lambda **k: (lambda f: f)
    package.when = lambda *a, **k: contextlib.nullcontext()
    package.__all__ = [n for n in vars(package) if not n.startswith("_")]
    spack = types.ModuleType("spack")
    spack.package = package
    sys.modules["spack"] = spack
    sys.modules["spack.package"] = package


def _load_recipe():
    _stub_spack()
    spec = importlib.util.spec_from_file_location("mpistage_recipe", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
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

    def test_spack_test_methods(self):
        self.assertTrue(callable(getattr(self.Mpistage, "check", None)))
        for name in self.Mpistage.install_time_test_callbacks:
            self.assertTrue(callable(getattr(self.Mpistage, name, None)), name)
        self.assertTrue(callable(getattr(self.Mpistage, "test_version", None)))
        self.assertNotIn("tests", self.variants, "tests are Spack's --test, not a variant")


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
