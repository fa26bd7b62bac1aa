#!/usr/bin/python3
"""Scale model of mpistage (benchmarks/README.md, "Scale model"): per-rank memory, collectives
per step, bytes moved per step and plan time of each mode at W = 64 ... 4096 ranks and
N = 10^9 samples, without running W processes.

The quantities are formulas read off the code (each function below cites the lines it models);
the plan times and plan heap bytes are measured by running the real planner
(`bench_scale_plan`, a pure function, so one process plans any rank of any W). The formulas'
collective counts are checked against real runs at W = 2, 3, 4 (`check`, which runs
`scale_count`: the Loader over files and over a stream with every MPI call counted through the profiling
interface).

Usage:
  scale_model.py table BUILD_DIR [OUT.md]   the tables (markdown), plan times measured
  scale_model.py check BUILD_DIR W [WORK]   real counts at world size W vs the model; exit 1
                                            when any count differs from the model
Defaults of the modelled job (DEFAULTS): N = 10^9 samples of 785 bytes in 2 fixed fields
(Fashion-MNIST-like 28x28 uint8 image + uint8 label), B = 64, prefetch P = 4, R = 4 ranks per
node, stream windows of 4 steps.
"""
import json
import math
import os
import subprocess
import sys

DEFAULTS = {"N": 10**9, "s": 785, "F": 2, "B": 64, "P": 4, "R": 4, "window_steps": 4}
WORLDS = [64, 128, 256, 512, 1024, 2048, 4096]
DIGEST_BLOCK = 1024   # src/loader/consumed.cpp kDigestBlock
RANK_STEP_WORDS = 10  # src/loader/stream/stream_plan.hpp kRankStepWords
TAG_WORDS = 4         # agree_tagged_or_throw: one allreduce of 4 uint64 (src/comm/agree.hpp)
BUDGET_N = 10**6      # budget plans are O(N) per rank: measured here, scaled to N

MODES = [
    # name, tier, sharding/shuffle, extra
    ("file, shuffle none", "file", "none"),
    ("file, shuffle local", "file", "local"),
    ("file, shuffle global", "file", "global"),
    ("memory, shuffle none", "memory", "none"),
    ("memory, shuffle local", "memory", "local"),
    ("memory, shuffle global", "memory", "global"),
    ("two-phase (file, global)", "two-phase", "global"),
    ("budget batches, byte_range", "budget", "local"),
    ("budget batches, global", "budget", "global"),
    ("TFRecord descriptors, global", "tfrecord", "global"),
    ("stream, chunk", "stream-chunk", "-"),
    ("stream, hash", "stream-hash", "-"),
]


def steps_per_epoch(n, w, b):
    """Fixed batches with remainder pad: ceil(N / (W B)) (src/plan/plan.cpp)."""
    return -(-n // (w * b))


def log2(w):
    return max(1.0, math.log2(w))


# ---- collectives per epoch (what `check` compares with real runs) ------------------------

def window_group(p, steps):
    """Steps between the starts of two window agreements (detail::window_shape,
    src/loader/window_agreement.cpp): of a prefetch depth d = min(P, steps), d // 2 steps may be
    in flight (the lag) and the other d - d // 2 lie between starts."""
    d = max(1, min(p, steps))
    return d - d // 2


def loader_collectives(steps, p, two_phase=False, inline=True, promised=False):
    """Collectives of one epoch of a Loader, by MPI call, for `steps` steps:
    - epoch start: one tagged agreement (Loader::epoch, src/loader/loader.cpp: d.sync) and the
      plan agreed with run_agreed (one 1-word allreduce); the I/O threads start after them
      without an agreement (Prefetcher::start);
    - window agreements (EpochRange::Impl::agree_step, src/loader/epoch_range.cpp): a
      non-blocking tagged allreduce started every g = window_group(P, S) steps and completed
      up to P // 2 steps later, plus one at the digest's step when no regular one started
      there: exactly that when every started window already covers the steps (reads on the
      consumer thread: a memory tier within a node, io_threads = 0, src/pipeline/prefetch.cpp);
      with I/O threads a step not yet covered starts one more (at most S more);
    - promised reads (the memory tier): the whole epoch is credited and the lag follows the
      agreed step time (50 ms of steps, WindowState::shape_at, src/loader/window_agreement.cpp),
      so the starts are at most those of the prefetch shape plus one at the epoch's end, and
      at least two (a lag of the whole epoch from step 0, and the end's); never one more for an
      uncovered step;
    - the consumed-id digest, one allreduce of min(S, 1024) words per 1024 steps
      (Loader::Impl::cover_digest, src/loader/consumed.cpp), the first block at the epoch's
      start;
    - two-phase (src/two_phase/two_phase.cpp): the slabs once per epoch (one allgather, agreed: one
      1-word allreduce), and per step a tagged agreement before the exchange
      (SyncKind::exchange) and Communicator::alltoallv = MPI_Ialltoall of sizes + a 1-word
      allreduce of the largest message + MPI_Ialltoallv (src/comm/exchange.cpp); its windows
      hold one step (take_if_ready returns nothing for collective steps).
    Returns {call: (min, max)}."""
    digest = -(-steps // DIGEST_BLOCK)
    if two_phase:
        windows = (steps, steps)
    else:
        g = window_group(p, steps)
        regular = -(-steps // g)
        # The digest of steps [k 1024, (k + 1) 1024) is agreed at step k 1024 (cover_digest,
        # src/loader/consumed.cpp), after a forced completion that starts one more request
        # there unless a regular one started there (the step is a multiple of g).
        extra = sum(1 for k in range(digest) if (k * DIGEST_BLOCK) % g != 0)
        if promised:
            windows = (2, regular + extra + 1)
        else:
            windows = (regular + extra,) * 2 if inline else (regular + extra, steps + regular)
    c = {f"MPI_Iallreduce/{TAG_WORDS}": (1 + windows[0] + (steps if two_phase else 0),
                                         1 + windows[1] + (steps if two_phase else 0)),
         "MPI_Iallreduce/1": (1 + (steps + 1 if two_phase else 0),) * 2,
         f"MPI_Iallreduce/{min(steps, DIGEST_BLOCK)}": (digest, digest)}
    if two_phase:
        c.update({"MPI_Iallgather": (1, 1), "MPI_Ialltoall": (steps, steps),
                  "MPI_Ialltoallv": (steps, steps)})
    return c


def stream_collectives(steps, window, hash_sharding):
    """Collectives of one pass of a stream Loader (StreamEngine::step,
    src/loader/stream/stream_engine.cpp): one allgather of 10 words per agreement; `chunk`
    agrees once per window of `window_steps` full batches, plus the pass's end and the rounds
    near the end where ranks run short (rebalance: Communicator::alltoallv), and each
    agreement that yields steps announces their ids (an allgather and an allgatherv); `hash` reads a
    window's rows ahead and routes them in one alltoallv, then agrees once (the window holds
    fewer steps when routing leaves a rank with fewer than `window_steps` full batches), plus
    a rebalancing alltoallv and agreement whenever a rank is short. Bounds: (min, max) per
    call."""
    windows = -(-steps // window)
    # Every agreement that yields steps is followed by the announcement of the ids of those
    # steps (so that state() is local): an allgather of the counts and an allgatherv, once per
    # window at best, once per step at worst; the last agreement (nobody holds items) has none.
    announce = {"MPI_Iallgatherv": (windows, steps)}
    if hash_sharding:
        return {"MPI_Iallgather": (2 * windows + 1, 3 * steps + 2),
                "MPI_Ialltoallv": (windows + 1, 3 * steps + 3), **announce}
    return {"MPI_Iallgather": (2 * windows + 1, 2 * steps + 1), **announce}


# ---- the steady-state model per step at scale ------------------------------------------------

def model(mode, w, d, plans):
    """One row of the scale table: per-rank memory (bytes), collectives per step (range),
    one-sided operations per step, network bytes sent per rank per step, storage bytes read per
    rank per step, plan seconds per epoch. `plans` holds bench_scale_plan's measurements."""
    name, tier, shuffle = mode
    n, s, f, b, p, r = d["N"], d["s"], d["F"], d["B"], d["P"], d["R"]
    steps = steps_per_epoch(n, w, b)
    agree_bytes = TAG_WORDS * 8 * log2(w)   # recursive doubling: log2 W rounds of 32 bytes
    digest_bytes = 8 * log2(w)              # 1024 words per 1024 steps
    # Ring: P slots of B samples + ids (8 B) + valid (1 B) + read-id scratch (8 B)
    # (src/pipeline/ring.hpp Slot); consumed digests (1024 + P) words (src/loader/consumed.cpp).
    ring = p * b * (s + 17)
    digest_mem = (DIGEST_BLOCK + p) * 8
    plan = plans.get(("fixed global" if shuffle == "global" else "fixed byte_range", w))
    mem = ring + digest_mem + (plan["peak_bytes"] if plan else 0)
    g = window_group(p, steps)
    coll = (1 / g + 1 / DIGEST_BLOCK, 1 + 1 / g + 1 / DIGEST_BLOCK)  # I/O threads: see above
    one_sided = 0.0
    net = agree_bytes / g + digest_bytes / DIGEST_BLOCK
    net_max = agree_bytes * (1 + 1 / g) + digest_bytes / DIGEST_BLOCK
    storage = b * s
    plan_s = plan["seconds"] if plan else 0.0
    note = ""
    if tier == "memory":
        # Staged shard N/W x s in the node window (src/tier/staging.cpp); O(W) tables: layout
        # W x (80 + 16 F) (src/tier/memory_tier.hpp ShardLayout), node map 8 W, begins 8 W.
        staged = n / w * s
        mem += staged + w * (80 + 16 * f) + 16 * w
        # Promised reads: one window every g steps at most (a shallow lag), about one per
        # epoch at least (a lag of 50 ms of steps covering it).
        coll = (1 / DIGEST_BLOCK, 1 / g + 1 / DIGEST_BLOCK)
        net, net_max = digest_bytes / DIGEST_BLOCK, agree_bytes / g + digest_bytes / DIGEST_BLOCK
        storage = 0
        if shuffle == "global":
            # A sample's owner is another node with probability (W - R) / W: one MPI_Get per
            # field, and one MPI_Win_flush_local_all per batch (MemoryTier::read_remote,
            # NodeSegment::get in src/comm/node_segment.cpp); the node's peers' pages are mapped
            # as they are read ((R - 1) N/W s more resident, shared).
            remote = (w - r) / w
            one_sided = b * f * remote + 1
            net += b * s * remote
            net_max += b * s * remote
            note = f"+{(r - 1) * staged / 1e9:.1f} GB peers' pages mapped"
    elif tier == "two-phase":
        # Per step: W B step ids (8 B), the samples read (about B) held twice, received twice
        # (docs/architecture.md "Two-phase reads"); measured: global_step_ids' heap.
        ids = plans.get(("two-phase step ids", w))
        mem += (ids["peak_bytes"] if ids else 8 * w * b) + 4 * b * s
        coll = (5 + 1 / DIGEST_BLOCK,) * 2
        sent = b * (s + 8) * (w - 1) / w + w + 8 * w  # samples + ids, status bytes, sizes
        net = net_max = 2 * agree_bytes + 8 * log2(w) + sent + digest_bytes / DIGEST_BLOCK
        plan_s += steps * (ids["seconds"] if ids else 0.0)
        note = f"{ids['seconds'] * 1e3:.2f} ms/step computing step ids" if ids else ""
    elif tier == "budget":
        key = ("budget global" if shuffle == "global" else "budget byte_range", w)
        bp = plans.get(key)
        if bp:
            scale = n / bp["samples"]
            # global: the whole epoch order and every batch (O(N)); byte_range: every rank's
            # shard is packed to learn the step count (O(N) time), this rank's kept (O(N/W)).
            mem = ring + digest_mem + bp["peak_bytes"] * scale
            plan_s = bp["seconds"] * scale
            note = f"plan measured at N={bp['samples']:.0e}, scaled x{scale:.0f} (O(N))"
    elif tier == "tfrecord":
        # Every record's 16-byte descriptor once per node: 16 N / R per rank (the node window,
        # src/sources/tfrecord/descriptor_window.cpp), plus at open the records the rank found,
        # 16 N / W (up to twice while the scan's vector grows); across nodes every rank
        # receives all 16 N bytes once at open (broadcasts of 2^18 descriptors).
        mem += 16 * n / r + 2 * 16 * n / w
        note = f"open: {16 * n / 1e9:.0f} GB broadcast to every rank (several nodes)"
    elif tier.startswith("stream"):
        # Read-ahead queue of window_steps batches; per agreement an allgather of 10 words from
        # every rank (RankStep, src/loader/stream/stream_plan.hpp): W x 72 bytes received. Then
        # the announcement of what every rank yields at the agreed steps (so that state() is
        # local; StreamEngine::announce, src/loader/stream/stream_state.cpp): an
        # allgatherv (counts, then data) of the item ids as runs (first, count) of 16 bytes,
        # every rank receiving every rank's ids of the window, kept until the steps are taken.
        # chunk: a rank's batch is runs of its chunks (B / chunk_size + 1 runs, chunk_size 64
        # by default); hash: ids of random positions, a run per sample (16 B per sample).
        win = d["window_steps"]
        runs = b if tier == "stream-hash" else b // 64 + 1
        announced = 16 * runs * w  # bytes of one step's ids of every rank
        mem = ring / p + win * b * (s + 64) + w * RANK_STEP_WORDS * 8 + win * announced
        gather = RANK_STEP_WORDS * 8 * (w - 1)  # bytes one rank sends in a ring allgather
        sent_ids = announced * (w - 1) / w + 8 * (w - 1)  # a ring allgatherv, and the counts
        plan_s = 0.0
        storage = b * s
        if tier == "stream-hash":
            # One routing exchange, one agreement and one announcement per window at best,
            # per step at worst.
            coll = (6 / win, 9)
            routed = b * (s + 16) * (w - 1) / w + 8 * w
            net = gather / win + routed + sent_ids
            net_max = gather + 2 * routed + sent_ids
        else:
            coll = (3 / win, 3)
            net = (gather + 8 * (w - 1)) / win + sent_ids
            net_max = gather + sent_ids + 8 * (w - 1)
    return {"mode": name, "world": w, "steps": steps, "memory_bytes": mem, "collectives": coll,
            "one_sided": one_sided, "net_bytes": (net, net_max), "storage_bytes": storage,
            "plan_seconds": plan_s, "note": note}


def measure_plans(build, d):
    exe = os.path.join(build, "benchmarks", "bench_scale_plan")
    # The first world size twice: the first cases of a process pay its allocator's growth.
    out = subprocess.run([exe, str(d["N"]), str(BUDGET_N), str(d["B"]),
                          *map(str, [WORLDS[0]] + WORLDS)],
                         check=True, capture_output=True, text=True).stdout
    plans = {}
    for line in out.splitlines():
        j = json.loads(line)
        plans[(j["case"], j["world"])] = j
    return plans


def fmt_bytes(x):
    for unit, k in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if x >= k:
            return f"{x / k:.3g} {unit}"
    return f"{x:.0f} B"


def fmt_range(lo, hi, f=lambda v: f"{v:.3g}"):
    return f(lo) if abs(hi - lo) <= 1e-9 * max(1.0, abs(hi)) else f"{f(lo)}–{f(hi)}"


def table(build, out_path=None):
    d = DEFAULTS
    plans = measure_plans(build, d)
    rows = {m[0]: [model(m, w, d, plans) for w in WORLDS] for m in MODES}
    head = "| mode | " + " | ".join(f"W={w}" for w in WORLDS) + " |"
    rule = "|---|" + "---:|" * len(WORLDS)
    lines = [f"N = {d['N']:.0e} samples of {d['s']} B ({d['F']} fields), B = {d['B']}, "
             f"prefetch P = {d['P']}, R = {d['R']} ranks per node, stream windows of "
             f"{d['window_steps']} steps; steps per epoch = ceil(N / (W B)): "
             + ", ".join(f"{steps_per_epoch(d['N'], w, d['B']):,}" for w in WORLDS) + "."]

    def section(title, cell):
        lines.extend(["", f"**{title}**", "", head, rule])
        for name, rs in rows.items():
            lines.append(f"| {name} | " + " | ".join(cell(r) for r in rs) + " |")

    section("Per-rank memory beyond MPI's own (bytes)", lambda r: fmt_bytes(r["memory_bytes"]))
    section("Collectives per step per rank (all W-wide; a range where I/O threads may leave a "
            "step uncovered, or where the memory tier's lag follows the step time)", lambda r: fmt_range(*r["collectives"]))
    section("One-sided operations per step per rank (MPI_Get + MPI_Win_flush_local_all)",
            lambda r: f"{r['one_sided']:.3g}")
    section("Network bytes sent per rank per step (data + control)",
            lambda r: fmt_range(*r["net_bytes"], f=fmt_bytes))
    section("Network bytes per step, all ranks (W x the above)",
            lambda r: fmt_range(r["net_bytes"][0] * r["world"], r["net_bytes"][1] * r["world"],
                                f=fmt_bytes))
    section("Plan seconds per epoch per rank (measured with the real planner; budget: "
            f"measured at N = {BUDGET_N:.0e} and scaled linearly)",
            lambda r: f"{r['plan_seconds']:.3g}")
    lines.extend(["", "Storage bytes read per rank per step: B x s = "
                  f"{fmt_bytes(d['B'] * d['s'])} for every file-tier and stream mode, 0 for "
                  "the memory tier after staging (its staging reads N/W x s once).", "",
                  "Notes at W = 4096: " + "; ".join(
                      f"{name}: {rs[-1]['note']}" for name, rs in rows.items() if rs[-1]["note"])])
    text = "\n".join(lines) + "\n"
    if out_path:
        with open(out_path, "w") as fh:
            fh.write(text)
        write_plot_data(rows, os.path.splitext(out_path)[0] + ".dat")
    print(text)


def write_plot_data(rows, path):
    """Two gnuplot data blocks (index 0: network bytes sent per rank per step, the upper end of
    the range; index 1: per-rank memory), one column per mode, one line per W (run.sh plots
    them into OUT-scale.png)."""
    head = "W " + " ".join(f'"{name}"' for name in rows)
    blocks = []
    for key in ("net_bytes", "memory_bytes"):
        lines = [head]
        for i, w in enumerate(WORLDS):
            vals = [rs[i][key][1] if key == "net_bytes" else rs[i][key] for rs in rows.values()]
            lines.append(f"{w} " + " ".join(f"{max(v, 1):.6g}" for v in vals))
        blocks.append("\n".join(lines))
    with open(path, "w") as fh:
        fh.write("\n\n\n".join(blocks) + "\n")


# ---- check against real runs -----------------------------------------------------------------

CHECK_MODES = ["memory-none", "memory-local", "memory-global", "memory-global-nodes",
               "file-none", "file-global", "file-global-threads", "two-phase", "budget-global",
               "tfrecord-global", "tfrecord-memory-global", "stream-chunk", "stream-hash"]


def expected(mode, steps, p):
    if mode.startswith("stream"):
        return stream_collectives(steps, p, mode == "stream-hash")
    return loader_collectives(steps, p, two_phase=mode == "two-phase",
                              inline=mode != "file-global-threads",
                              promised=mode.startswith("memory") or "-memory-" in mode)


def check(build, w, work):
    exe = os.path.join(build, "benchmarks", "scale_count")
    os.makedirs(work, exist_ok=True)
    b, p, n = 16, 4, 2000
    failures = []
    cmd = [os.environ.get("MPIEXEC") or "mpirun", "-np", str(w), "--oversubscribe", "--bind-to",
           "none", exe, work, str(b), str(p), str(n), *CHECK_MODES]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        print(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stdout}{run.stderr}")
        return 1
    out = run.stdout
    reals = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    if [r["mode"] for r in reals] != CHECK_MODES:
        print(f"scale_count printed {len(reals)} of {len(CHECK_MODES)} modes:\n{out}")
        return 1
    for real in reals:
        mode = real["mode"]
        calls = {k: v[0] for k, v in real["calls"].items()}
        want = expected(mode, real["steps"], p)
        collective = {k: v for k, v in calls.items() if not k.startswith("MPI_Get")
                      and k != "MPI_Win_flush_local"}
        if mode.startswith("stream"):  # the rebalancing rounds' other calls are bounded too
            collective = {k: v for k, v in collective.items() if k in want}
        bad = [k for k in set(want) | set(collective)
               if not want.get(k, (0, 0))[0] <= collective.get(k, 0) <= want.get(k, (0, 0))[1]]
        line = f"W={w} {mode:22s} steps={real['steps']:3d} " + ", ".join(
            f"{k}={collective.get(k, 0)} (model {fmt_range(*want.get(k, (0, 0)), f=str)})"
            for k in sorted(set(want) | set(collective)))
        if mode == "memory-global-nodes":
            # MPI_Get per field of every sample owned by another "node" (here every other
            # rank): expected (W - 1)/W of the epoch's W S B slots, one field; the ids are
            # pseudo-random, so within 10 %. One flush per batch that had a remote sample: at
            # most W S, and (B = 16 samples, W - 1 of W remote) all but a few.
            gets = calls.get("MPI_Get", 0)
            flushes = calls.get("MPI_Win_flush_local", 0)
            model_gets = w * real["steps"] * b * (w - 1) / w
            line += (f"; MPI_Get={gets} (model {model_gets:.0f}), flushes={flushes} "
                     f"(model <= {w * real['steps']})")
            if abs(gets - model_gets) > 0.1 * model_gets:
                bad.append("MPI_Get")
            if not 0.9 * w * real["steps"] <= flushes <= w * real["steps"]:
                bad.append("flushes")
        if mode == "two-phase":
            # Bytes rank 0 sends per epoch: a status byte to every rank per step, and per sample
            # it reads (on average B per step: every sample of the epoch once, from its slab)
            # its id and its 64 bytes (TwoPhaseReader::read_own_part); within 5 %.
            sent = real["calls"].get("MPI_Ialltoallv", [0, 0])[1]
            model_sent = real["steps"] * w + real["steps"] * b * (8 + 64)
            line += f"; alltoallv bytes sent by rank 0={sent} (model {model_sent})"
            if abs(sent - model_sent) > 0.05 * model_sent:
                bad.append("alltoallv bytes")
        print(line + ("" if not bad else "   <-- differs: " + ", ".join(bad)))
        if bad:
            failures.append(mode)
    if failures:
        print(f"scale model check at W={w}: FAILED for " + ", ".join(failures))
        return 1
    print(f"scale model check at W={w}: every count within the model")
    return 0


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "table":
        table(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
        return 0
    if len(sys.argv) >= 4 and sys.argv[1] == "check":
        work = sys.argv[4] if len(sys.argv) > 4 else os.path.join(sys.argv[2], "scale_check")
        return check(sys.argv[2], int(sys.argv[3]), work)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
