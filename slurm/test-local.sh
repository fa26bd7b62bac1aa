#!/usr/bin/env bash
# Runs slurm/stage.sbatch on a real one-node Slurm cluster started on this machine
# (../shared/tools/start-local-slurm.sh: slurm-wlm + munge, as root) and checks the job's
# verdict. Needs a build with the converted data (scripts/main-job.sh makes build-release/).
#   slurm/test-local.sh [BUILD_DIR] [NTASKS]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-$here/build-release}"
ntasks="${2:-$(nproc)}"
starter=""
for p in "$here/../shared/tools/start-local-slurm.sh" /work/shared/tools/start-local-slurm.sh; do
    [ -f "$p" ] && starter="$p" && break
done
if ! sinfo -h -o %T 2>/dev/null | grep -q idle; then
    [ -n "$starter" ] || { echo "no running Slurm and no start-local-slurm.sh" >&2; exit 1; }
    bash "$starter"
fi
out_dir="$(mktemp -d)"
cd "$out_dir"
BUILD_DIR="$build_dir" sbatch --ntasks="$ntasks" --wait "$here/slurm/stage.sbatch"
cat mpistage-stage-*.out
grep -q '^exactly-once: OK$' mpistage-stage-*.out
echo "slurm stage job: OK ($out_dir)"
