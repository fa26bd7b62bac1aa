#!/usr/bin/env bash
# Runs a command with the GPU of this task's node-local rank (SLURM_LOCALID) as its only
# visible device: when Slurm lists several GPUs in CUDA_VISIBLE_DEVICES for a task (no
# --gpu-bind, or --gres=gpu:N per node), task L of the node gets the L-th one (mod the count).
# Tasks that already see one GPU (--gpus-per-task=1 with binding) keep it. The trainer then
# uses cuda:0, so mpistage never has to change the current device.
#   srun --mpi=pmix slurm/bind-local-gpu.sh COMMAND [ARGS...]
set -euo pipefail
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ] && [ "${CUDA_VISIBLE_DEVICES}" != "NoDevFiles" ]; then
    IFS=, read -r -a gpus <<< "$CUDA_VISIBLE_DEVICES"
    local_rank="${SLURM_LOCALID:-${OMPI_COMM_WORLD_LOCAL_RANK:-0}}"
    export CUDA_VISIBLE_DEVICES="${gpus[$(( local_rank % ${#gpus[@]} ))]}"
fi
if [ -n "${MPISTAGE_SHOW_BINDING:-}" ]; then
    echo "binding: task ${SLURM_PROCID:-?} node-local ${SLURM_LOCALID:-?} on $(hostname):" \
        "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-none}" >&2
fi
exec "$@"
