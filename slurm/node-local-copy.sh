#!/usr/bin/env bash
# Copies data files to a node-local folder on every node of the job with sbcast (Slurm's
# broadcast: the controller fans the file out to the nodes, instead of every node reading the
# shared file system at once). Run it from the batch script itself, not under srun:
#   slurm/node-local-copy.sh DEST SRC_DIR FILE...
# DEST is created on every node (one task per node). Remove it at the end of the job, also on
# failure (the job scripts do it from a trap on EXIT: slurm/node-local-clean.sh).
set -euo pipefail
dest="$1"; src="$2"; shift 2
srun --ntasks="$SLURM_NNODES" --ntasks-per-node=1 mkdir -p "$dest"
for f in "$@"; do
    sbcast --force --compress "$src/$f" "$dest/$f"
done
echo "node-local copy on $SLURM_NNODES node(s) (sbcast): $* -> $dest"
