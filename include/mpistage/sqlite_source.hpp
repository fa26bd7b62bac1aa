#pragma once
/// @file
/// A database query as a stream: every rank runs the same SQLite query through its own read-only
/// cursor; the stream loader shards the rows by chunk (rows of chunk c go to rank c mod W) or by
/// a key column (`hash`). Rows are items; columns are fields.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpistage/comm.hpp"
#include "mpistage/stream.hpp"

namespace mpistage {

/// Which database and query.
struct SqliteOptions {
    /// Path of the SQLite database file (opened read-only, never created).
    std::string path;
    /// A SELECT statement. Give it an ORDER BY when rows must keep their positions across runs
    /// (resume uses positions in the result).
    std::string query;
    /// Column whose value is the item key of `StreamSharding::hash` (integers as themselves,
    /// text and blobs hashed with FNV-1a); empty: key 0.
    std::string key_column;
};

/// The rows of one query as a single stream. Fields follow the result columns: declared
/// INTEGER-like types → int64 scalar, REAL-like → float64 scalar, anything else (TEXT, BLOB,
/// expressions of unknown type) → ragged uint8 bytes (text without its terminator). A NULL in an
/// int64 or float64 column is a FormatError naming the row and column; a NULL text or blob is
/// empty. `open` may be called from one thread at a time per reader; each reader has its own
/// connection.
class SqliteSource final : public StreamSource {
public:
    /// Collective over `comm`: every rank checks the file (regular file, readable), opens it
    /// read-only and prepares the query; errors (missing file, SQL error, unknown key column)
    /// are the same exception on every rank, and ranks whose fields differ get a ConfigError.
    /// @throws IoError, ConfigError, FormatError naming the path and SQLite's message.
    SqliteSource(const Communicator& comm, SqliteOptions options);
    ~SqliteSource() override;

    const std::vector<FieldInfo>& fields() const override { return fields_; }
    std::size_t num_streams() const override { return 1; }
    /// Local: a new read-only connection running the query from its first row.
    std::unique_ptr<StreamReader> open(std::size_t stream) const override;
    /// Path, query, key column and file size.
    std::string fingerprint() const override;
    /// Local: the number of rows of the query (`SELECT COUNT(*) FROM (query)`), for checks.
    /// @throws IoError naming the path and SQLite's message.
    std::uint64_t count_rows() const;
    const SqliteOptions& options() const noexcept { return options_; }

private:
    SqliteOptions options_;
    std::vector<FieldInfo> fields_;
    int key_column_ = -1;
    std::uint64_t size_bytes_ = 0;
};

}  // namespace mpistage
