#!/usr/bin/env bash
# ctest python.pip_install (labels python;install): the module as pip installs it, used as a
# user would, never from the build tree.
#
#   pip_install.sh SOURCE_DIR BUILD_DIR WORK PYTHON MPIEXEC
#
#   1. a venv of PYTHON with --system-site-packages (torch, mpi4py, numpy, h5py, pytest);
#   2. `pip wheel --no-build-isolation .`: the wheel holds the package (the pure-Python files,
#      the extension, libmpistage under its SONAME) and nothing else, no build tree;
#   3. `pip install --no-build-isolation .` into the venv; the installed extension's RUNPATH is
#      $ORIGIN-relative and it loads the libmpistage beside it;
#   4. from another directory, `mpirun -n 2 v/bin/python -m pytest SOURCE_DIR/tests/python`.
#
# Steps 2 and 3 reuse BUILD_DIR (setup.py's MPISTAGE_CMAKE_BUILD_DIR): the build of a fresh clone
# configures and compiles its own (docs/python.md, "Install with pip"); here the same setup.py
# path only builds the target mpistage_python (already built) and installs its components.
set -euo pipefail
src="$1" build="$2" work="$3" python="$4" mpiexec="$5"
# Nothing of the build tree may leak in through the environment.
unset PYTHONPATH LD_LIBRARY_PATH LD_PRELOAD
rm -rf "$work"
mkdir -p "$work/elsewhere" "$work/wheel"
export MPISTAGE_CMAKE_BUILD_DIR="$build" PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1

"$python" -m venv --system-site-packages "$work/v"
v="$work/v/bin/python"

# --no-deps for the wheel only: the dependencies (numpy, mpi4py) come from the system site.
(cd "$src" && "$v" -m pip wheel --no-build-isolation --no-deps -q -w "$work/wheel" .)
wheel=("$work"/wheel/mpistage-*.whl)
[ "${#wheel[@]}" -eq 1 ] && [ -f "${wheel[0]}" ] ||
    { echo "pip wheel: no single wheel in $work/wheel" >&2; exit 1; }
"$v" - "${wheel[0]}" "$src" <<'PY'
import sys, zipfile
from pathlib import Path
wheel, src = sys.argv[1], Path(sys.argv[2])
names = zipfile.ZipFile(wheel).namelist()
package = sorted(n for n in names if not n.startswith("mpistage-"))  # minus the .dist-info
expected_py = sorted(f"mpistage/{p.name}" for p in (src / "python" / "mpistage").glob("*.py"))
py = sorted(n for n in package if n.endswith(".py"))
so = sorted(n for n in package if not n.endswith(".py"))
assert py == expected_py, f"wheel's Python files {py} != python/mpistage/*.py {expected_py}"
assert len(so) == 2 and any(n.startswith("mpistage/_mpistage.") for n in so) and \
    any(n.startswith("mpistage/libmpistage.so.") for n in so), \
    f"wheel's binaries {so}: expected the extension and libmpistage.so.<soversion>"
print(f"pip wheel: {Path(wheel).name}: {len(py)} Python files, {so}")
PY

(cd "$src" && "$v" -m pip install --no-build-isolation -q .)

cd "$work/elsewhere"
ext="$("$v" -c 'import mpistage._mpistage as m; print(m.__file__)')"
case "$ext" in
"$work/v/"*) ;;
*) echo "pip install: mpistage._mpistage is $ext, not the venv's copy" >&2; exit 1 ;;
esac
runpath="$(readelf -d "$ext" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')"
echo "installed extension: $ext, RUNPATH $runpath"
case "$runpath" in
'$ORIGIN'|'$ORIGIN:'*) ;;
*) echo "pip install: the extension's RUNPATH '$runpath' does not start with \$ORIGIN" >&2; exit 1 ;;
esac
if tr ':' '\n' <<<"$runpath" | grep -v '^\$ORIGIN'; then
    echo "pip install: absolute entries in the extension's RUNPATH (above)" >&2
    exit 1
fi
lib="$(ldd "$ext" | sed -n 's/^\s*libmpistage\.so[^ ]* => \(\S*\).*/\1/p')"
[ "$lib" = "$(dirname "$ext")/$(basename "$lib")" ] ||
    { echo "pip install: the extension loads libmpistage from '$lib', not from beside it" >&2; exit 1; }

"$mpiexec" -n 2 --oversubscribe "$v" -m pytest -q -p no:cacheprovider "$src/tests/python"
