#!/usr/bin/env python3
"""Layers point one way (CONTRIBUTING.md "One spine"); every MPI collective goes through Communicator.

    util -> comm/device -> sources/index -> plan -> pipeline/tier/two_phase -> loader -> tensor
         -> cli -> python/benchmarks

A file of one layer may include headers of its own layer and of lower layers only. Peers (the
same rank: comm/device, sources/index, pipeline/tier/two_phase) may include each other's
headers, but the include graph between peer folders must not have a cycle. Layers are
assigned to `src/<folder>/` files, to the public headers `include/mpistage/*.hpp` (PUBLIC
below; an unmapped public header fails), to the Python module's C++ sources (`python/`, above
the CLI, whose checks it binds) and to `benchmarks/` (the top: a benchmark may measure any
part). Both spellings of an include are checked: `"mpistage/x.hpp"` and `<mpistage/x.hpp>`
are the same header; `<folder/x.hpp>` is taken for an internal header only when
`src/folder/x.hpp` exists (so libtorch's `<torch/...>` or a system header is never mistaken
for one).

`src/device/` holds the device primitives (CUDA runtime wrappers, pinned host memory, device
choice, the stream-ordered stager and its device pool; no MPI, no other mpistage header but
error.hpp/device.hpp), which the ring and the loader build on (the loader delivers batches on
the device through the stager); `src/tensor/` holds the loader-facing torch view of batches,
above the loader; `src/two_phase/` the two-phase reads, which fill the pipeline's ring slots.

A public header includes only public headers (`mpistage/...`): internal headers in `src/` are
not installed.

Outside `src/comm/` no file calls an MPI collective (COLLECTIVE below, blocking and
non-blocking forms), except the calls in ALLOWED_CALLS, each with its reason. `benchmarks/` is
outside this rule: it measures MPI's own collectives as the baselines the library is compared
against (bench_exchange, scale_count). HDF5's collective
calls (`H5Fopen` with the MPI-IO driver, collective `H5Dread`) are MPI-IO collectives of the
HDF5 source and are not MPI_ calls; they stay in `src/sources/hdf5/`.

Usage: check_layers.py [REPO_ROOT]   (exit 1 and one line per violation when any)
       check_layers.py --self-test    (the checker finds planted violations in a scratch tree)
"""
import os
import re
import sys
import tempfile

RANK = {
    "util": 0,
    "comm": 1,
    "device": 1,  # device primitives: peers of comm, neither includes the other
    "sources": 2,
    "index": 2,
    "plan": 3,
    "pipeline": 4,
    "tier": 4,
    "two_phase": 4,  # includes the pipeline's ring and fill (peers: no cycle)
    "loader": 5,
    "tensor": 6,
    "cli": 7,
    "python": 8,  # python/: the pybind11 module, over the public API and the CLI's checks
    "benchmarks": 8,  # benchmarks/: may measure any part of the library
}

# Public headers: include/mpistage/<name>.hpp -> layer.
PUBLIC = {
    "config": "util",  # generated (have-CUDA, have-torch, version)
    "error": "util",
    "hash": "util",
    "dtype": "util",
    "device": "device",  # DeviceSpec / device choice, implemented by src/device/device_choice.cpp
    "comm": "comm",
    "source": "sources",
    "hdf5_source": "sources",
    "raw_source": "sources",
    "tfrecord_source": "sources",
    "tf_example": "sources",
    "sqlite_source": "sources",
    "stream_source": "sources",  # StreamSource, StreamReader, CallableStreamSource
    "open": "sources",
    "convert": "sources",
    "plan": "plan",
    "tier": "tier",  # Stage, StageRead: implemented by src/tier/memory_tier.cpp
    "state": "loader",
    "batch": "loader",
    "dlpack": "loader",
    "loader": "loader",
    "stop": "loader",
    "stream": "loader",
    "mpistage": "loader",  # the umbrella: the core up to the loader, no CUDA or torch headers
    "torch": "tensor",
}

# Known upward includes: (including file, included header as written) -> reason. None is left
# (issue 38: the tier takes TierSetup/TierStats, the stream source interface is in
# stream_source.hpp). A new one is a debt owned by the named work; remove the entry when it is
# paid (the test also fails on a stale entry).
ALLOWED_INCLUDES = {}

COLLECTIVE = (
    r"I?(Allreduce|Allgatherv?|Gatherv?|Scatterv?|Bcast|Exscan|Scan|Barrier|Alltoall[vw]?|"
    r"Reduce|Reduce_scatter(_block)?|Neighbor_\w+)|"
    r"Comm_(split|split_type|dup|idup|create|create_group|free|spawn|accept|connect)|"
    r"Intercomm_\w+|Cart_create|Graph_create|Dist_graph_create\w*|"
    r"Win_(allocate|allocate_shared|create|create_dynamic|free|fence)|"
    r"File_(open|close|set_view|set_size|preallocate|sync|\w+_all|\w+_all_begin|\w+_ordered)"
)
COLLECTIVE_RE = re.compile(r"\bMPI_(" + COLLECTIVE + r")\s*\(")

# Collective MPI calls allowed outside src/comm/: (file, call) -> reason.
ALLOWED_CALLS = {
    ("src/sources/tfrecord/tfrecord_files.cpp", "File_open"):
        "the TFRecord source's MPI-IO file handles (collective open; agreed by run_agreed)",
    ("src/sources/tfrecord/tfrecord_files.cpp", "File_close"):
        "collective close of those MPI-IO file handles (explicit close(), CONTRIBUTING.md, Ownership)",
}


def strip_code(text):
    """Removes comments and string/char literals (keeps line breaks for line numbers)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + "\n" * text.count("\n", i, j) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


# The trees whose files are checked: the library, its public headers, and what is built on
# them in this repository.
SCANNED = ("src", "include/mpistage", "python", "benchmarks")
# Trees that are layers of their own (the first path component names the layer).
TOP_LAYERS = ("python", "benchmarks")


def layer_of_src(rel):
    parts = rel.split("/")
    if parts[0] == "include":
        return PUBLIC.get(os.path.splitext(parts[-1])[0])
    if parts[0] in TOP_LAYERS:
        return parts[0]
    return parts[1] if parts[1] in RANK else None


def layer_of_include(inc, angled, root):
    """Layer of `#include "inc"` (or `<inc>` when `angled`), or None for headers outside the
    project (or unknown)."""
    parts = inc.split("/")
    if parts[0] == "mpistage":
        name = os.path.splitext(parts[-1])[0]
        return PUBLIC.get(name, "?")
    if parts[0] in RANK and parts[0] not in TOP_LAYERS:
        if angled and not os.path.isfile(os.path.join(root, "src", inc)):
            return None  # a system or third-party header (<torch/...>), not one of ours
        return parts[0]
    return None


# `#include "x"` (group 1) or `#include <x>` (group 2).
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<([^>]+)>)', re.M)


def check(root, allowed_includes, allowed_calls):
    """The violations in the tree at `root`, one line each."""
    files = []
    for top in SCANNED:
        for d, _, names in os.walk(os.path.join(root, top)):
            for name in names:
                if name.endswith((".hpp", ".cpp", ".h", ".cu")):
                    files.append(os.path.relpath(os.path.join(d, name), root))
    files.sort()
    errors = []
    used_includes, used_calls = set(), set()
    peer_edges = {}
    for name in os.listdir(os.path.join(root, "include/mpistage")):
        if name.endswith(".hpp") and os.path.splitext(name)[0] not in PUBLIC:
            errors.append(f"include/mpistage/{name}: public header not mapped to a layer "
                          f"(add it to PUBLIC in tests/lint/check_layers.py)")
    for rel in files:
        mine = layer_of_src(rel)
        if mine is None:
            if not rel.startswith("include/"):  # unmapped public headers are reported above
                errors.append(f"{rel}: not in a known layer ({', '.join(RANK)})")
            continue
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            raw = f.read()
        for m in INCLUDE_RE.finditer(raw):
            angled = m.group(1) is None
            inc = m.group(2) if angled else m.group(1)
            theirs = layer_of_include(inc, angled, root)
            if theirs is None:
                continue
            if rel.startswith("include/") and not inc.startswith("mpistage/"):
                errors.append(f"{rel}: public header includes {inc}, an internal header that "
                              f"is not installed")
                continue
            if theirs == "?":
                errors.append(f"{rel}: includes {inc}, a public header not mapped to a layer")
                continue
            if theirs == mine:
                continue
            if RANK[theirs] == RANK[mine]:
                peer_edges.setdefault(mine, {}).setdefault(theirs, f"{rel} -> {inc}")
                continue
            if RANK[theirs] > RANK[mine]:
                if (rel, inc) in allowed_includes:
                    used_includes.add((rel, inc))
                    continue
                errors.append(f"{rel}: layer '{mine}' includes {inc} of the higher layer "
                              f"'{theirs}'")
        if rel.startswith(("src/comm/", "benchmarks/")):
            continue
        code = strip_code(raw)
        for m in COLLECTIVE_RE.finditer(code):
            call = m.group(1)
            line = code.count("\n", 0, m.start()) + 1
            if (rel, call) in allowed_calls:
                used_calls.add((rel, call))
                continue
            errors.append(f"{rel}:{line}: MPI_{call} outside src/comm/ (use Communicator, "
                          f"which the watchdog watches)")
    for a, outs in peer_edges.items():
        for b, where in outs.items():
            if a < b and a in peer_edges.get(b, {}):
                errors.append(f"peer layers '{a}' and '{b}' include each other: {where}; "
                              f"{peer_edges[b][a]}")
    for key in sorted(set(allowed_includes) - used_includes):
        errors.append(f"stale exception in ALLOWED_INCLUDES (no longer needed): {key}")
    for key in sorted(set(allowed_calls) - used_calls):
        errors.append(f"stale exception in ALLOWED_CALLS (no longer needed): {key}")
    return errors


def self_test():
    """Plants one violation of each kind (and look-alikes that are not) in a scratch tree."""
    planted = {
        "include/mpistage/comm.hpp": '#include "mpistage/error.hpp"\n#include "comm/agree.hpp"\n',
        "include/mpistage/error.hpp": "",
        "include/mpistage/unmapped.hpp": "",
        "src/util/up.cpp": '#include "loader/loader_impl.hpp"\n#include "util/ok.hpp"\n',
        # <loader/not_ours.h> is no file of src/: a system header, not an upward include.
        "src/util/ok.hpp": '#include "mpistage/error.hpp"\n#include <loader/not_ours.h>\n',
        "src/loader/loader_impl.hpp": "",
        # Angle brackets name the same headers as quotes.
        "src/sources/q.cpp": ('#include <mpistage/stream.hpp>\n#include <loader/loader_impl.hpp>\n'
                              '#include <mpistage/source.hpp>\n'),
        "include/mpistage/source.hpp": "#include <mpistage/loader.hpp>\n",
        # The Python module sits above the CLI but calls no collective of its own.
        "python/src/p.cpp": ('#include "cli/args.hpp"\n#include "bindings.hpp"\n'
                             "void p() { MPI_Bcast(a, 1, t, 0, c); }\n"),
        # Benchmarks may include anything mapped and measure MPI's collectives themselves.
        "benchmarks/b.cpp": ('#include "device/host_memory.hpp"\n#include <mpistage/nowhere.hpp>\n'
                             "void b() { MPI_Allreduce(a, b, 1, t, op, c); }\n"),
        "src/comm/split.cpp": "void f() { MPI_Comm_split(a, 0, 0, &b); }\n",
        "src/cli/raw.cpp": ('// MPI_Bcast(x) in a comment\nconst char* s = "MPI_Bcast(y)";\n'
                            "void g() { MPI_Allreduce (a, b, 1, t, op, c); }\n"),
        "src/pipeline/prim.cpp": '#include "device/host_memory.hpp"\n',
        "src/pipeline/stager.cpp": '#include "tensor/torch_view.hpp"\n',
        "src/device/d.cpp": '#include "mpistage/device.hpp"\n#include "pipeline/ring.hpp"\n',
        "src/two_phase/x.cpp": '#include "pipeline/ring.hpp"\n#include "tier/memory_tier.hpp"\n',
        "src/index/i.cpp": '#include "sources/tfrecord/framing.hpp"\n',
        "src/sources/s.cpp": '#include "index/split_agreement.hpp"\n',
        "src/tier/t.cpp": '#include "pipeline/ring.hpp"\n#include "mpistage/stream.hpp"\n',
        "src/tier/w.cpp": "void h() { MPI_Win_free(&w); }\n",
    }
    expected = [
        "include/mpistage/unmapped.hpp: public header not mapped",
        "include/mpistage/comm.hpp: public header includes comm/agree.hpp",
        "src/util/up.cpp: layer 'util' includes loader/loader_impl.hpp",
        "src/cli/raw.cpp:3: MPI_Allreduce outside src/comm/",
        "src/pipeline/stager.cpp: layer 'pipeline' includes tensor/torch_view.hpp",
        "src/device/d.cpp: layer 'device' includes pipeline/ring.hpp",
        "peer layers 'index' and 'sources' include each other",
        "src/tier/t.cpp: layer 'tier' includes mpistage/stream.hpp",
        "src/sources/q.cpp: layer 'sources' includes mpistage/stream.hpp",
        "src/sources/q.cpp: layer 'sources' includes loader/loader_impl.hpp",
        "include/mpistage/source.hpp: layer 'sources' includes mpistage/loader.hpp",
        "python/src/p.cpp:3: MPI_Bcast outside src/comm/",
        "benchmarks/b.cpp: includes mpistage/nowhere.hpp, a public header not mapped",
        "stale exception in ALLOWED_INCLUDES",
    ]
    with tempfile.TemporaryDirectory() as root:
        for rel, text in planted.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write(text)
        errors = check(root, {("src/x.cpp", "loader/y.hpp"): "stale"},
                       {("src/tier/w.cpp", "Win_free"): "allowed"})
    missing = [e for e in expected if not any(line.startswith(e) for line in errors)]
    extra = [line for line in errors if not any(line.startswith(e) for e in expected)]
    for e in missing:
        print(f"self-test: not reported: {e}")
    for line in extra:
        print(f"self-test: reported but not planted: {line}")
    if missing or extra:
        return 1
    print(f"check_layers self-test: {len(expected)} planted violations found, nothing else")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), "..", ".."))
    errors = check(root, ALLOWED_INCLUDES, ALLOWED_CALLS)
    for e in errors:
        print(e)
    if errors:
        print(f"check_layers: {len(errors)} violation(s); the layers: "
              "util -> comm/device -> sources/index -> plan -> pipeline/tier/two_phase -> loader "
              "-> tensor -> cli -> python/benchmarks")
        return 1
    print("check_layers: layers point one way; no MPI collective outside src/comm/ but the "
          "listed exceptions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
