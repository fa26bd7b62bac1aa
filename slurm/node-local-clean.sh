#!/usr/bin/env bash
# Removes a node-local folder (slurm/node-local-copy.sh) on every node of the job; called from
# the job scripts' EXIT trap, so it runs when the job succeeds, fails or is cancelled (scancel
# and the time limit send SIGTERM to the batch script first; the scripts turn it into an exit).
#   slurm/node-local-clean.sh DEST
set -uo pipefail
dest="$1"
[ -n "$dest" ] || exit 0
srun --ntasks="$SLURM_NNODES" --ntasks-per-node=1 rm -rf "$dest" ||
    echo "warning: could not remove $dest on every node" >&2
