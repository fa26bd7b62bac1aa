#!/usr/bin/env bash
# Copies data files to a node-local folder (run once per node by the job scripts:
#   srun --ntasks=$SLURM_NNODES --ntasks-per-node=1 slurm/node-local-copy.sh DEST SRC_DIR FILE...
# ) so every rank of the node reads them from local storage instead of the shared file system.
set -euo pipefail
dest="$1"; src="$2"; shift 2
mkdir -p "$dest"
for f in "$@"; do
    cp -u "$src/$f" "$dest/$f"
done
echo "node-local copy on $(hostname): $* -> $dest"
