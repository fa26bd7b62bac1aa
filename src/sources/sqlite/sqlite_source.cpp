// SQLite query as a stream: one read-only connection per rank inside a read transaction that
// every rank agreed on (one snapshot), the query as written (read-only, checked before it runs),
// rows as items with every value checked against its column's type (see
// mpistage/sqlite_source.hpp).
#include "mpistage/sqlite_source.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "comm/agree.hpp"
#include "comm/call_comm.hpp"
#include "mpistage/hash.hpp"
#include "sources/sqlite/sqlite_detail.hpp"
#include "sources/sqlite/sqlite_reader.hpp"
#include "util/input_file.hpp"

namespace mpistage {

using detail::sqlite::affinity_type;
using detail::sqlite::db_error;
using detail::sqlite::SqliteReader;
using detail::sqlite::type_name;
using detail::sqlite::upper;

namespace {

constexpr int kSnapshotTries = 40;

}  // namespace

void SqliteOptions::validate() const {
    if (path.empty()) throw ConfigError("sqlite: no database path given");
    if (query.empty()) throw ConfigError("sqlite: no query given");
    if (busy_timeout.count() < 0 || busy_timeout.count() > 86400000) {
        throw ConfigError("sqlite: busy_timeout must be 0 to 86400000 ms, not " +
                          std::to_string(busy_timeout.count()));
    }
    if (!std::isfinite(fill_value)) throw ConfigError("sqlite: the fill value must be finite");
    if (!range_column.empty() && (range_streams == 0 || range_streams > (1u << 20))) {
        throw ConfigError("sqlite: range_streams must be 1 to 2^20, not " +
                          std::to_string(range_streams));
    }
    for (std::size_t i = 0; i < columns.size(); ++i) {
        if (columns[i].name.empty()) throw ConfigError("sqlite: a typed column has no name");
        for (std::size_t j = 0; j < i; ++j) {
            if (columns[j].name == columns[i].name) {
                throw ConfigError("sqlite: column '" + columns[i].name + "' is typed twice");
            }
        }
    }
}

std::string SqliteOptions::describe() const {
    std::string t = "key '" + key_column + "' range '" + range_column + "' x" +
                    std::to_string(range_streams) + " nulls " +
                    (nulls == SqliteNulls::error  ? "error"
                     : nulls == SqliteNulls::mask ? "mask"
                                                  : "fill:" + std::to_string(fill_value)) +
                    " columns";
    for (const auto& c : columns) {
        t += " " + c.name + ":" + type_name(c.type) + (c.convert ? ":convert" : "");
    }
    return t;
}

SqliteSource::SqliteSource(CommRef ref, SqliteOptions options) : options_(std::move(options)) {
    // Needed only during the call: the caller's Communicator, or a duplicate of a plain
    // MPI_Comm freed on return (the source's one MPI_Comm_dup).
    const detail::CallComm call(ref);
    const Communicator& comm = call.get();
    run_agreed(comm, [&] {
        options_.validate();
        size_bytes_ = detail::probe_input_file(options_.path, "sqlite").size_bytes;
    });
    // Rank 0 opens first: a WAL left by a writer that died is recovered by the first
    // connection, and the others then wait at most the busy timeout on it, not fail.
    for (int turn = 0; turn < 2; ++turn) {
        run_agreed(comm, [&] {
            if ((comm.rank() == 0) == (turn == 0)) {
                conn_ = std::make_unique<Connection>(options_.path, options_.busy_timeout);
                conn_->begin_snapshot();
                conn_->end();
            }
        });
    }
    agree_snapshot(comm);
    run_agreed(comm, [&] {
        Stmt stmt = conn_->prepare_query(options_.query);
        refuse_nondeterministic(stmt.get());
        type_columns(stmt.get());
        if (!options_.key_column.empty() && key_column_ < 0) {
            throw ConfigError("sqlite: key column '" + options_.key_column +
                              "' is not a column of the query");
        }
        statement_ = conn_->statement;
    });
    if (!options_.range_column.empty()) plan_ranges(comm);
    std::string text;
    for (const auto& f : fields_) text += f.name + ":" + dtype_name(f.dtype) + ";";
    require_same(comm, {{"columns of the query", text}, {"fingerprint", fingerprint()}},
                 "sqlite: ranks see different data", "every rank must open the same database");
}

namespace {

/// A call of a date/time function that reads the clock: the literal 'now', or no time value
/// (`date()`, `unixepoch()`, `strftime('%s')`), as SQLite takes them (lang_datefunc.html).
bool reads_the_clock(const std::string& sql) {
    const std::string u = upper(sql);
    if (u.find("'NOW'") != std::string::npos) return true;
    for (const char* f : {"DATE", "TIME", "DATETIME", "JULIANDAY", "UNIXEPOCH", "STRFTIME"}) {
        const std::string name(f);
        for (std::size_t at = u.find(name); at != std::string::npos; at = u.find(name, at + 1)) {
            if (at > 0 && (std::isalnum(static_cast<unsigned char>(u[at - 1])) || u[at - 1] == '_'))
                continue;
            std::size_t i = at + name.size();
            while (i < u.size() && std::isspace(static_cast<unsigned char>(u[i]))) ++i;
            if (i >= u.size() || u[i] != '(') continue;
            ++i;
            while (i < u.size() && std::isspace(static_cast<unsigned char>(u[i]))) ++i;
            if (i < u.size() && u[i] == ')') return true;  // no time value: now
            if (name != "STRFTIME" || i >= u.size() || u[i] != '\'') continue;
            // strftime(FORMAT) without a time value.
            for (++i; i < u.size(); ++i) {
                if (u[i] == '\'' && i + 1 < u.size() && u[i + 1] == '\'') {
                    ++i;
                } else if (u[i] == '\'') {
                    break;
                }
            }
            for (++i; i < u.size() && std::isspace(static_cast<unsigned char>(u[i]));) ++i;
            if (i < u.size() && u[i] == ')') return true;
        }
    }
    return false;
}

}  // namespace

void SqliteSource::refuse_nondeterministic(sqlite3_stmt* stmt) const {
    // Every sharding runs the query more than once against the snapshot: each rank for its
    // rows (chunk: all of them, skipping others' chunks; hash: its key owner's rows; range:
    // one statement per key range), once more for the row count and the --verify reference,
    // and again at every epoch. Rows are delivered exactly once only when every execution
    // returns the same rows in the same order, so the query must be a function of the
    // snapshot: one rule for every sharding.
    std::string why = conn_->auth.unstable;
    if (why.empty() && conn_->auth.date_functions && reads_the_clock(statement_of(stmt))) {
        why = "it calls a date/time function of 'now' (the clock)";
    }
    const std::string refused =
        "sqlite: the query on '" + options_.path + "' is refused before it runs: ";
    if (!why.empty()) {
        throw ConfigError(
            refused + why +
            ", which is not deterministic: the ranks, the row count and every epoch each run the "
            "query and would get other rows or another order, so rows would be delivered twice "
            "or never. Use deterministic SQL; for a shuffled order, a fixed pseudo-random "
            "expression of a key, e.g. ORDER BY (id * 1103515245 + 7) % 2147483648");
    }
    const int params = sqlite3_bind_parameter_count(stmt);
    if (params > 0) {
        const char* name = sqlite3_bind_parameter_name(stmt, 1);
        throw ConfigError(refused + "it has " + std::to_string(params) + " parameter(s) (" +
                          (name ? std::string("first: ") + name : std::string("first: ?")) +
                          ") and nothing binds them (they would be NULL); write the values "
                          "into the query");
    }
}

std::string SqliteSource::statement_of(sqlite3_stmt* stmt) {
    const char* sql = sqlite3_sql(stmt);
    return sql ? sql : "";
}

void SqliteSource::agree_snapshot(const Communicator& comm) {
    // One snapshot: every rank's read transaction reads the same version of the database.
    // Rank 0 starts first (holding WAL writers back; under a rollback journal its shared lock
    // keeps writers from committing), then the others; then the versions are compared.
    bool agreed = false;
    for (int attempt = 0; attempt < kSnapshotTries && !agreed; ++attempt) {
        std::string identity;
        for (int turn = 0; turn < 2; ++turn) {
            run_agreed(comm, [&] {
                if ((comm.rank() == 0) != (turn == 0)) return;
                if (comm.rank() == 0) conn_->hold_writers(options_.busy_timeout);
                identity = conn_->begin_snapshot();
            });
        }
        const std::uint64_t h =
            identity.empty() ? static_cast<std::uint64_t>(comm.rank()) + 1 : fnv1a64(identity);
        const std::vector<std::uint64_t> all = comm.allgather(h);
        conn_->release_writers();
        agreed = std::all_of(all.begin(), all.end(), [&](std::uint64_t x) { return x == all[0]; });
        if (!agreed) std::this_thread::sleep_for(std::chrono::milliseconds(1 + 2 * attempt));
    }
    if (agreed) conn_->snapshot_identity = conn_->identity();
    run_agreed(comm, [&] {
        if (!agreed) {
            throw IoError("sqlite: '" + options_.path + "' changed while the ranks opened it, " +
                          std::to_string(kSnapshotTries) +
                          " times (a writer committed between the ranks' read transactions); "
                          "the ranks could not agree on one snapshot");
        }
    });
}

void SqliteSource::type_columns(sqlite3_stmt* stmt) {
    const int n = sqlite3_column_count(stmt);
    // Fields are found by name (typed columns, the key and range columns, Python's batch
    // dictionaries), so every result column needs a name of its own.
    const std::string refused =
        "sqlite: the query on '" + options_.path + "' is refused before it runs: ";
    for (int c = 0; c < n; ++c) {
        const char* raw = sqlite3_column_name(stmt, c);
        const std::string name = raw ? raw : "";
        if (name.empty()) {
            throw ConfigError(refused + "result column " + std::to_string(c + 1) +
                              " has an empty name; name it with AS");
        }
        for (int d = 0; d < c; ++d) {
            if (name == sqlite3_column_name(stmt, d)) {
                throw ConfigError(refused + "result columns " + std::to_string(d + 1) + " and " +
                                  std::to_string(c + 1) + " are both named '" + name +
                                  "'; give each column its own name with AS");
            }
        }
        if (options_.nulls == SqliteNulls::mask) {
            // The NULL mask adds a field `<column>.valid` for every column.
            for (int d = 0; d < n; ++d) {
                if (d != c && name == std::string(sqlite3_column_name(stmt, d)) + ".valid") {
                    throw ConfigError(refused + "result column " + std::to_string(c + 1) +
                                      " is named '" + name + "', the name of the NULL mask of "
                                      "column '" + sqlite3_column_name(stmt, d) +
                                      "' (--nulls mask); rename it with AS");
                }
            }
        }
    }
    for (const auto& typed : options_.columns) {
        bool found = false;
        for (int c = 0; c < n; ++c) found = found || typed.name == sqlite3_column_name(stmt, c);
        if (!found) {
            throw ConfigError("sqlite: typed column '" + typed.name +
                              "' is not a column of the query");
        }
    }
    for (int c = 0; c < n; ++c) {
        Column col;
        col.name = sqlite3_column_name(stmt, c);
        const char* decl = sqlite3_column_decltype(stmt, c);
        col.declared = decl ? decl : "";
        col.type = affinity_type(decl);
        for (const auto& typed : options_.columns) {
            if (typed.name != col.name) continue;
            if (typed.type != SqliteType::automatic) col.type = typed.type;
            col.convert = typed.convert;
        }
        if (col.type == SqliteType::int64 && options_.nulls == SqliteNulls::fill &&
            (std::trunc(options_.fill_value) != options_.fill_value ||
             std::fabs(options_.fill_value) >= 9.2e18)) {
            throw ConfigError("sqlite: the NULL fill value " + std::to_string(options_.fill_value) +
                              " of int64 column '" + col.name + "' is not an integer");
        }
        FieldInfo f;
        f.name = col.name;
        f.ragged = col.type == SqliteType::text || col.type == SqliteType::blob;
        f.dtype = col.type == SqliteType::int64     ? DType::int64
                  : col.type == SqliteType::float64 ? DType::float64
                                                    : DType::uint8;
        f.sample_bytes = f.ragged ? 0 : 8;
        if (f.name == options_.key_column) key_column_ = c;
        col.field = fields_.size();
        fields_.push_back(std::move(f));
        if (options_.nulls == SqliteNulls::mask) {
            FieldInfo v;
            v.name = col.name + ".valid";
            v.dtype = DType::uint8;
            v.sample_bytes = 1;
            col.valid_field = fields_.size();
            fields_.push_back(std::move(v));
        }
        columns_.push_back(std::move(col));
    }
}

SqliteSource::~SqliteSource() = default;

namespace {

std::string quoted_name(const std::string& name) {
    std::string q = "\"";
    for (char ch : name) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
}

}  // namespace

std::string SqliteSource::range_sql(std::size_t s) const {
    const std::string c = quoted_name(options_.range_column);
    // The newlines end a trailing `--` comment of the statement.
    std::string sql = "SELECT * FROM (\n" + statement_ + "\n) WHERE ";
    if (s == bounds_.size()) return sql + c + " IS NULL";
    // Half-open ranges between integer bounds cover every number (a REAL between two bounds
    // too); text and blobs sort after numbers, into the last range (and fail its typing).
    const bool lower = s > 0;
    const bool upper = s + 1 < bounds_.size();
    if (!lower && !upper) return sql + c + " IS NOT NULL";
    if (lower) sql += c + " >= ?1";
    if (lower && upper) sql += " AND ";
    if (upper) sql += c + " < ?2";
    return sql;
}

void SqliteSource::plan_ranges(const Communicator& comm) {
    // {keys present, least key, greatest key}: on rank 0 only (without an index on the column
    // each is a scan of the result), then broadcast.
    std::vector<std::uint64_t> span(3, 0);
    run_agreed(comm, [&] {
        int c = -1;
        for (std::size_t k = 0; k < columns_.size(); ++k) {
            if (columns_[k].name == options_.range_column) c = static_cast<int>(k);
        }
        if (c < 0 || columns_[static_cast<std::size_t>(c)].type != SqliteType::int64) {
            throw ConfigError("sqlite: range column '" + options_.range_column +
                              (c < 0
                                   ? "' is not a column of the query"
                                   : "' is not an int64 column (declared INTEGER or typed int64)"));
        }
        if (comm.rank() != 0) return;
        const std::string q = quoted_name(options_.range_column);
        // min() and max() in statements of their own: SQLite answers a lone min() or max() of
        // an indexed column (the INTEGER PRIMARY KEY) by one seek, both in one by a full scan.
        std::int64_t bound[2] = {0, 0};
        for (int k = 0; k < 2; ++k) {
            Stmt stmt = conn_->prepare_query(std::string(k == 0 ? "SELECT min(" : "SELECT max(") +
                                             q + ") FROM (\n" + statement_ + "\n)");
            if (sqlite3_step(stmt.get()) != SQLITE_ROW) {
                throw IoError(
                    db_error(conn_->db.get(), options_.path, "the key range of the query"));
            }
            const int type = sqlite3_column_type(stmt.get(), 0);
            if (type == SQLITE_NULL) return;  // no key (no rows, or only NULL keys)
            if (type != SQLITE_INTEGER) {
                throw ConfigError("sqlite: range column '" + options_.range_column +
                                  "' holds values that are not integers (its least or greatest "
                                  "value is REAL, TEXT or BLOB)");
            }
            bound[k] = sqlite3_column_int64(stmt.get(), 0);
        }
        span = {1, static_cast<std::uint64_t>(bound[0]), static_cast<std::uint64_t>(bound[1])};
    });
    span = comm.broadcast(span, 0);
    if (span[0] == 0) {
        bounds_ = {0};  // one range of no rows
        return;
    }
    const auto lo = static_cast<std::int64_t>(span[1]);
    const auto hi = static_cast<std::int64_t>(span[2]);
    const long double width = static_cast<long double>(hi) - static_cast<long double>(lo) + 1;
    const auto k = static_cast<std::uint64_t>(
        std::min<long double>(static_cast<long double>(options_.range_streams), width));
    for (std::uint64_t i = 0; i < k; ++i) {
        bounds_.push_back(lo +
                          static_cast<std::int64_t>(std::floor(width * static_cast<long double>(i) /
                                                               static_cast<long double>(k))));
    }
}

void SqliteSource::check_unchanged() const {
    const std::string why = conn_->changed_since_snapshot();
    if (!why.empty()) {
        throw IoError("sqlite: '" + options_.path + "' " + why +
                      " since the ranks agreed on its snapshot: its rows are no longer that "
                      "snapshot's (pages read from now on would come from the new content). "
                      "Restart the job to read the new database");
    }
}

std::unique_ptr<StreamReader> SqliteSource::open(std::size_t s) const {
    check_unchanged();
    if (options_.range_column.empty()) {
        return std::make_unique<SqliteReader>(options_, columns_, fields_.size(), key_column_,
                                              conn_->db.get(), conn_->prepare_query(options_.query),
                                              "");
    }
    Stmt stmt = conn_->prepare_query(range_sql(s));
    std::string where = " of the rows with " + options_.range_column + " IS NULL";
    if (s < bounds_.size()) {
        if (s > 0) sqlite3_bind_int64(stmt.get(), 1, bounds_[s]);
        if (s + 1 < bounds_.size()) sqlite3_bind_int64(stmt.get(), 2, bounds_[s + 1]);
        where = " of the rows with " + options_.range_column +
                (s > 0 ? " >= " + std::to_string(bounds_[s]) : std::string()) +
                (s > 0 && s + 1 < bounds_.size() ? " and" : "") +
                (s + 1 < bounds_.size() ? " < " + std::to_string(bounds_[s + 1]) : std::string());
    }
    return std::make_unique<SqliteReader>(options_, columns_, fields_.size(), key_column_,
                                          conn_->db.get(), std::move(stmt), where);
}

std::size_t SqliteSource::num_streams() const {
    return options_.range_column.empty() ? 1 : bounds_.size() + 1;
}

std::string SqliteSource::fingerprint() const {
    return "sqlite " + options_.path + " (" + std::to_string(size_bytes_) + " bytes) query '" +
           options_.query + "' " + options_.describe();
}

std::uint64_t SqliteSource::count_rows() const {
    std::uint64_t n = 0;
    for (std::size_t s = 0; s < num_streams(); ++s) n += count_rows(s);
    return n;
}

std::uint64_t SqliteSource::count_rows(std::size_t stream) const {
    // The stream's own cursor stepped to its end without reading values (its skip()).
    return open(stream)->skip(std::numeric_limits<std::uint64_t>::max());
}

}  // namespace mpistage
