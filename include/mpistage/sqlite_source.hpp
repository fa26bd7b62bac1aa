#pragma once
/// @file
/// A database query as a stream. Every rank opens the database read-only, all ranks agree on one
/// snapshot of it (one read transaction per rank, held for the source's lifetime, checked equal
/// across ranks), and each runs the query as written inside that snapshot; the stream loader
/// shards the rows by chunk (rows of chunk c go to rank c mod W; every rank steps through the
/// result), by a key column (`hash`), or, with `SqliteOptions::range_column`, by key ranges
/// pushed into the SQL (one sub-stream per range, whole ranges to ranks under
/// `StreamSharding::source`: each rank reads only its rows). Rows are items; columns are
/// fields, typed so that a value is never silently converted.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpistage/comm.hpp"
#include "mpistage/stream_source.hpp"

struct sqlite3_stmt;

namespace mpistage {

/// The type a result column is delivered as.
enum class SqliteType {
    /// From the column's declared type by SQLite's affinity rules (datatype3.html §3.1):
    /// INTEGER affinity → `int64`, REAL → `float64`, TEXT → `text`, BLOB (or no declared type:
    /// an expression) and NUMERIC (values of any storage class) → `text`'s bytes.
    automatic,
    /// int64 scalar: INTEGER values only.
    int64,
    /// float64 scalar: REAL values, and INTEGER values a double holds exactly.
    float64,
    /// Ragged uint8: SQLite's text representation of the value (text as stored, without its
    /// terminator; an INTEGER or REAL as SQLite prints it, as `CAST(x AS TEXT)`; a BLOB's bytes).
    text,
    /// Ragged uint8: the same bytes as `text` (named for columns that hold blobs).
    blob,
};

/// An explicit type for one result column (overrides the declared type).
struct SqliteColumn {
    /// Name of the result column (as `sqlite3_column_name` reports it).
    std::string name;
    SqliteType type = SqliteType::automatic;
    /// True: a value of another storage class is converted with SQLite's own rules
    /// (`sqlite3_column_int64` / `sqlite3_column_double`, e.g. 2.75 → 2, 'abc' → 0) instead of
    /// being a FormatError.
    bool convert = false;
};

/// What a NULL value becomes.
enum class SqliteNulls {
    /// A FormatError naming the row and column.
    error,
    /// Every column gets a companion field `<name>.valid` (uint8 scalar: 1 = a value, 0 = NULL);
    /// a NULL's value is 0 (numbers) or empty (bytes).
    mask,
    /// A NULL number becomes `fill_value`, a NULL text or blob empty bytes.
    fill,
};

/// Which database and query, and how values are typed.
struct SqliteOptions {
    /// Path of the SQLite database file (opened read-only, never created or changed).
    std::string path;
    /// One read-only, deterministic statement (SELECT, VALUES or WITH … SELECT; a trailing `;`
    /// and comments are fine), used as written; see `SqliteSource` for what is refused. Give
    /// it an ORDER BY when rows must keep their positions across runs (resume uses positions
    /// in the result; within one run all ranks read one snapshot with one SQLite library, so
    /// every execution returns the same rows in the same order).
    std::string query;
    /// Column whose value is the item key of `StreamSharding::hash` (integers as themselves,
    /// text and blobs hashed with FNV-1a); empty: key 0.
    std::string key_column;
    /// Key ranges pushed into the SQL (empty: off): an int64 result column (e.g. the INTEGER
    /// PRIMARY KEY) whose [min, max] is cut into `range_streams` equal ranges, each a
    /// sub-stream `SELECT * FROM (query) WHERE column >= a AND column < b` (a last one holds
    /// the rows whose key is NULL), so that under `StreamSharding::source` every rank reads
    /// only its own ranges (with an index on the column, SQLite seeks to them) instead of
    /// stepping through the whole result. The query then runs as that sub-query.
    std::string range_column;
    /// Number of key ranges (fewer when the key span is smaller); 1 to 2^20.
    std::uint64_t range_streams = 64;
    /// Explicit column types (any subset of the result columns, each named once).
    std::vector<SqliteColumn> columns;
    SqliteNulls nulls = SqliteNulls::error;
    /// The value of a NULL number under `SqliteNulls::fill` (int64 columns: must be integral).
    double fill_value = 0;
    /// How long an open or a read waits for a lock held by a writer (or WAL recovery) before it
    /// fails with SQLite's "database is locked".
    std::chrono::milliseconds busy_timeout{10000};

    /// Local. @throws ConfigError for an empty path or query, a column named twice or without
    /// a name, a negative busy timeout, or a non-integral fill value of an int64 column.
    void validate() const;
    /// Local: the options as text (for fingerprints).
    std::string describe() const;
};

/// The rows of one query as a single stream. Fields follow the result columns (types as in
/// `SqliteType`; with `SqliteNulls::mask` each followed by `<name>.valid`). Every value is checked
/// against its column's type: a REAL in an int64 column, text in a number column or a NULL under
/// `SqliteNulls::error` is a FormatError naming the row (0-based position in the result), the
/// column, the value and the type, unless the column asks for `convert`.
///
/// Snapshot: the constructor opens one connection per rank (rank 0 first, so that it recovers a
/// WAL left by a dead writer before the others wait on it; busy timeout `busy_timeout`), starts
/// a read transaction on every rank and checks across ranks that all of them read the same
/// version of the database (WAL: the WAL-index header of the `-shm` file, walformat.html §2.1,
/// read before and after the transaction started; rollback journal: the file change counter in
/// the database header, fileformat2.html §1.3, stable while the shared lock is held), retrying a
/// few times when a writer committed in between. The transaction stays open until the source
/// is destroyed, so every reader, every epoch and `count_rows` see that snapshot; a writer can
/// keep committing to a WAL database meanwhile (a rollback-journal writer waits). WAL databases
/// need every rank on the host that owns the `-shm` file, as SQLite requires.
///
/// Deterministic SQL only, for every sharding: the query runs several times against the
/// snapshot (each rank for its rows, each key range, the row count, the `--verify` reference,
/// every epoch), and rows are delivered exactly once only when every run returns the same rows
/// in the same order. Refused with a ConfigError before anything runs: a call of a scalar
/// function SQLite does not mark SQLITE_DETERMINISTIC (random(), randomblob(), changes(),
/// current_timestamp, … as `pragma_function_list` lists them; sqlite_version() and the
/// compile-option functions are constant for the one library every rank links), a date/time
/// function given the literal 'now' or no time value (`date()`, `strftime('%s')`), and
/// parameters (`?`, `:name`), which nothing binds. Not refused: LIMIT/OFFSET or an ORDER BY
/// that leaves ties — within one snapshot the same statement under the same SQLite returns the
/// same rows in the same order (a key range's `WHERE` over such a query is applied to its
/// result: SQLite neither flattens a LIMIT subquery into an outer WHERE nor pushes the WHERE
/// into it), but which rows a LIMIT picks may change when the database is rewritten, so a
/// resumed run needs a total order. Also refused: result columns with an empty or repeated
/// name (and, under `SqliteNulls::mask`, a column named like another's `<name>.valid`).
/// Table-valued functions (`pragma_table_info(...)`, `json_each(...)`) are read-only and
/// allowed.
///
/// Identity: `open` (every stream, every epoch) checks that the file at the path is still the
/// one whose snapshot the ranks hold (device, inode, size, modification time, header; under
/// WAL a changed size or time counts only when no commit or checkpoint shows in the
/// wal-index) and otherwise throws an IoError (agreed by the loader): a database copied over
/// or rewritten in place between epochs is not read silently.
///
/// Thread safety: the source's own calls (`open`, `count_rows`, the checks) from one thread at
/// a time; its readers share its connection, opened serialized (`SQLITE_OPEN_FULLMUTEX`), so a
/// reader may be stepped on another thread (a loader's I/O thread,
/// `LoaderOptions::pipeline.io_threads`) while the caller's thread uses the source, one thread at a
/// time per reader.
class SqliteSource final : public StreamSource {
public:
    /// Collective over `comm`: every rank checks the file (regular file, readable), opens it
    /// read-only, agrees on the snapshot and prepares the query. Only a single read-only
    /// statement is accepted; writes, ATTACH/DETACH, VACUUM, transactions and setting PRAGMAs are
    /// refused before anything runs (`sqlite3_stmt_readonly` and an authorizer). Errors (missing
    /// file, SQL error, refused statement, unknown key or typed column, database locked) are the
    /// same exception on every rank, and ranks whose fields differ get a ConfigError.
    /// `comm` is borrowed for the call (see `CommRef`): the source keeps no communicator; given
    /// a plain `MPI_Comm` it works on a duplicate of its own, its one `MPI_Comm_dup`, freed on
    /// return.
    /// @throws IoError, ConfigError, FormatError naming the path and SQLite's message.
    SqliteSource(CommRef comm, SqliteOptions options);
    ~SqliteSource() override;
    SqliteSource(const SqliteSource&) = delete;
    SqliteSource& operator=(const SqliteSource&) = delete;

    const std::vector<FieldInfo>& fields() const override { return fields_; }
    /// 1, or with `range_column` the number of key ranges + 1 (the NULL keys).
    std::size_t num_streams() const override;
    /// Local: a cursor running the query (stream `stream`'s key range of it) from its first
    /// row in the source's snapshot.
    std::unique_ptr<StreamReader> open(std::size_t stream) const override;
    /// Path, query, key column, typing options and file size.
    std::string fingerprint() const override;
    /// True with a key column (`SqliteOptions::key_column`): a reader skips a row another rank
    /// owns after reading only its key (`HashReading::keys`, the default of `hash` sharding).
    bool keys_first() const override { return key_column_ >= 0; }
    /// Local: the number of rows of the query in the source's snapshot: the sum of
    /// `count_rows(s)` over every stream. @throws IoError naming the path and SQLite's message.
    std::uint64_t count_rows() const;
    /// Local: the rows of stream `stream` (the query as written, or with `range_column` its
    /// key range), stepped to the end without reading values, so that ranks can count the key
    /// ranges they read and sum. @throws IoError naming the path and SQLite's message.
    std::uint64_t count_rows(std::size_t stream) const;
    const SqliteOptions& options() const noexcept { return options_; }

    /// Internal: how one result column is delivered (defined where the source is).
    struct Column;

private:
    SqliteOptions options_;
    std::vector<FieldInfo> fields_;
    std::vector<Column> columns_;
    int key_column_ = -1;
    std::uint64_t size_bytes_ = 0;
    /// The query's statement as SQLite parsed it (without a trailing `;` or comment).
    std::string statement_;
    /// With `range_column`: the lower bound of each key range, ascending.
    std::vector<std::int64_t> bounds_;
    std::string range_sql(std::size_t stream) const;
    /// Collective: the key ranges from the least and greatest key (found on rank 0 only).
    void plan_ranges(const Communicator& comm);
    /// Collective: every rank's connection in a read transaction on one version.
    void agree_snapshot(const Communicator& comm);
    /// Local: columns and fields from the prepared query's result columns. @throws ConfigError
    /// for an empty or repeated column name.
    void type_columns(sqlite3_stmt* stmt);
    /// Local. @throws ConfigError when the prepared query is not deterministic (see the class).
    void refuse_nondeterministic(sqlite3_stmt* stmt) const;
    static std::string statement_of(sqlite3_stmt* stmt);
    /// Local. @throws IoError when the file changed since the snapshot was agreed.
    void check_unchanged() const;
    /// This rank's connection, inside the read transaction of the agreed snapshot.
    struct Connection;
    std::unique_ptr<Connection> conn_;
};

}  // namespace mpistage
