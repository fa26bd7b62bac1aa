# Sourced by the e2e scripts of SQLite streams: arguments MPISTAGE_CLI WORK_DIR. Sets cli, work,
# mpiexec, defines fail, enters WORK_DIR (created); exits 77 (skipped) without Python's sqlite3,
# which writes the databases and gives the known answers.
cli="$1"; work="$2"
if ! python3 -c 'import sqlite3' 2>/dev/null; then
    echo "SKIP: python3 with the sqlite3 module is needed to generate the database"
    exit 77
fi
mpiexec="${MPIEXEC:-mpirun}"
mkdir -p "$work"
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
