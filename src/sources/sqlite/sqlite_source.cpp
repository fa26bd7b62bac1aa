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
#include <thread>

#include "comm/agree.hpp"
#include "mpistage/hash.hpp"
#include "util/input_file.hpp"

namespace mpistage {

namespace {

struct DbCloser {
    void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
    void operator()(sqlite3_stmt* s) const noexcept { sqlite3_finalize(s); }
};
using Db = std::unique_ptr<sqlite3, DbCloser>;
using Stmt = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

std::string db_error(sqlite3* db, const std::string& path, const std::string& what) {
    return "sqlite: " + what + " of '" + path +
           "' failed: " + (db ? sqlite3_errmsg(db) : "out of memory");
}

std::string upper(std::string t) {
    for (auto& ch : t) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return t;
}

const char* type_name(SqliteType t) {
    switch (t) {
        case SqliteType::automatic:
            return "automatic";
        case SqliteType::int64:
            return "int64";
        case SqliteType::float64:
            return "float64";
        case SqliteType::text:
            return "text";
        case SqliteType::blob:
            return "blob";
    }
    return "?";
}

const char* storage_name(int type) {
    switch (type) {
        case SQLITE_INTEGER:
            return "INTEGER";
        case SQLITE_FLOAT:
            return "REAL";
        case SQLITE_TEXT:
            return "TEXT";
        case SQLITE_BLOB:
            return "BLOB";
        default:
            return "NULL";
    }
}

/// The field type of a declared column type, by SQLite's affinity rules (datatype3.html §3.1,
/// applied in that order): only INTEGER and REAL affinity hold one storage class reliably
/// enough to be a number field; TEXT, BLOB, NUMERIC and no declared type are bytes.
SqliteType affinity_type(const char* decl) {
    const std::string t = upper(decl ? decl : "");
    if (t.find("INT") != std::string::npos) return SqliteType::int64;
    if (t.find("CHAR") != std::string::npos || t.find("CLOB") != std::string::npos ||
        t.find("TEXT") != std::string::npos) {
        return SqliteType::text;
    }
    if (t.empty() || t.find("BLOB") != std::string::npos) return SqliteType::blob;
    if (t.find("REAL") != std::string::npos || t.find("FLOA") != std::string::npos ||
        t.find("DOUB") != std::string::npos) {
        return SqliteType::float64;
    }
    return SqliteType::text;  // NUMERIC affinity: integers, reals and text mixed
}

/// What the authorizer saw while a statement was prepared.
struct AuthLog {
    std::string refused;   ///< why the statement is refused (empty: allowed)
    std::string unstable;  ///< a non-deterministic function it calls
    bool date_functions = false;
    bool internal = false;  ///< our own statements (BEGIN, COMMIT, the snapshot probe)
};

bool one_of(const char* s, std::initializer_list<const char*> names) {
    if (!s) return false;
    const std::string l = upper(s);
    for (const char* n : names) {
        if (l == upper(n)) return true;
    }
    return false;
}

/// Allows what a read-only query does (read tables, call functions, read informational
/// PRAGMAs); denies writes, schema changes, ATTACH/DETACH, transactions and PRAGMAs that set.
int authorize(void* ctx, int action, const char* a1, const char* a2, const char*, const char*) {
    auto& log = *static_cast<AuthLog*>(ctx);
    if (log.internal) return SQLITE_OK;
    switch (action) {
        case SQLITE_SELECT:
        case SQLITE_READ:
        case SQLITE_RECURSIVE:
            return SQLITE_OK;
        case SQLITE_FUNCTION:
            if (one_of(a2, {"random", "randomblob", "changes", "total_changes", "last_insert_rowid",
                            "current_date", "current_time", "current_timestamp"})) {
                if (log.unstable.empty())
                    log.unstable = std::string("the query calls ") + a2 + "()";
            }
            if (one_of(a2, {"date", "time", "datetime", "julianday", "strftime", "unixepoch",
                            "timediff"})) {
                log.date_functions = true;
            }
            return SQLITE_OK;
        case SQLITE_PRAGMA:
            if (one_of(a1,
                       {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo",
                        "foreign_key_list", "collation_list", "compile_options", "function_list",
                        "module_list", "pragma_list", "table_list", "database_list"}) ||
                (!a2 && one_of(a1, {"user_version", "schema_version", "application_id",
                                    "page_count", "page_size", "freelist_count", "encoding"}))) {
                return SQLITE_OK;
            }
            log.refused = std::string("it sets or runs PRAGMA ") + (a1 ? a1 : "?");
            return SQLITE_DENY;
        case SQLITE_ATTACH:
        case SQLITE_DETACH:
            log.refused = "it attaches or detaches a database";
            return SQLITE_DENY;
        case SQLITE_TRANSACTION:
        case SQLITE_SAVEPOINT:
            log.refused = "it controls a transaction";
            return SQLITE_DENY;
        default:
            if (log.refused.empty()) {
                log.refused = "it writes to the database or its schema (authorizer action " +
                              std::to_string(action) + (a1 ? std::string(" on ") + a1 : "") + ")";
            }
            return SQLITE_DENY;
    }
}

/// The WAL write lock's index among the wal-index locks (walformat.html §2.3: WAL_WRITE_LOCK).
constexpr int kWalWriteLock = 0;

}  // namespace

/// One rank's connection: opened read-only, with the authorizer installed, and (once
/// `begin_snapshot` succeeded) inside the read transaction of the agreed snapshot.
///
/// The headers that identify a version, and the WAL write lock, are reached through the
/// connection's own file object (`SQLITE_FCNTL_FILE_POINTER`, then the documented
/// `sqlite3_io_methods`): no second descriptor of the files is opened, whose close would drop
/// the POSIX locks SQLite holds on them.
struct SqliteSource::Connection {
    std::string path;
    Db db;
    AuthLog auth;
    bool in_transaction = false;
    bool writers_held = false;

    Connection(const std::string& p, std::chrono::milliseconds busy) : path(p) {
        sqlite3* raw = nullptr;
        const int rc = sqlite3_open_v2(path.c_str(), &raw,
                                       SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
        db.reset(raw);
        if (rc != SQLITE_OK) throw IoError(db_error(raw, path, "open"));
        sqlite3_busy_timeout(raw, static_cast<int>(busy.count()));
        sqlite3_set_authorizer(raw, authorize, &auth);
    }

    void exec(const char* sql, const char* what) {
        auth.internal = true;
        const int rc = sqlite3_exec(db.get(), sql, nullptr, nullptr, nullptr);
        auth.internal = false;
        if (rc != SQLITE_OK) {
            throw IoError(db_error(db.get(), path, what));
        }
    }

    /// Ends the read transaction, if any.
    void end() {
        if (in_transaction) exec("COMMIT", "ending the read transaction");
        in_transaction = false;
    }

    sqlite3_file* file() const {
        sqlite3_file* f = nullptr;
        if (sqlite3_file_control(db.get(), "main", SQLITE_FCNTL_FILE_POINTER, &f) != SQLITE_OK ||
            !f || !f->pMethods) {
            return nullptr;
        }
        return f;
    }

    /// The first 100 bytes of the database file (its header), "" when it is shorter.
    std::string db_header() const {
        sqlite3_file* f = file();
        std::string h(100, '\0');
        if (!f || f->pMethods->xRead(f, h.data(), 100, 0) != SQLITE_OK) return {};
        return h;
    }

    bool wal() const {
        const std::string header = db_header();
        return header.size() == 100 && header[18] == 2;  // fileformat2.html §1.3.2
    }

    /// The wal-index header (the first 48 bytes of the -shm, walformat.html §2.1) as mapped
    /// by this connection; "" when it is not mapped.
    std::string wal_index_header() const {
        sqlite3_file* f = file();
        if (!f || f->pMethods->iVersion < 2 || !f->pMethods->xShmMap) return {};
        void volatile* region = nullptr;
        if (f->pMethods->xShmMap(f, 0, 32768, 0, &region) != SQLITE_OK || !region) return {};
        std::string h(48, '\0');
        std::memcpy(h.data(), const_cast<void*>(region), 48);
        return h;
    }

    /// WAL: takes the WAL write lock for a moment (waiting at most `timeout` for a writer's
    /// transaction to end), so that no writer commits while the ranks start their read
    /// transactions; writers wait in their busy handler meanwhile. Best effort: without it
    /// the ranks' versions are still compared. Needs this connection's -shm mapped (after
    /// its first read).
    void hold_writers(std::chrono::milliseconds timeout) {
        sqlite3_file* f = file();
        if (!wal() || !f || f->pMethods->iVersion < 2 || !f->pMethods->xShmLock) return;
        const auto until = std::chrono::steady_clock::now() + timeout;
        for (;;) {
            writers_held =
                f->pMethods->xShmLock(f, kWalWriteLock, 1,
                                      SQLITE_SHM_LOCK | SQLITE_SHM_EXCLUSIVE) == SQLITE_OK;
            if (writers_held || std::chrono::steady_clock::now() >= until) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    void release_writers() {
        sqlite3_file* f = writers_held ? file() : nullptr;
        if (f) f->pMethods->xShmLock(f, kWalWriteLock, 1, SQLITE_SHM_UNLOCK | SQLITE_SHM_EXCLUSIVE);
        writers_held = false;
    }

    /// Starts a read transaction and returns the identity of the version it reads (see the
    /// header); "" when a writer committed while it started (try again).
    std::string begin_snapshot() {
        end();
        const bool is_wal = wal();
        const std::string before = is_wal ? wal_index_header() : std::string();
        exec("BEGIN", "starting a read transaction");
        in_transaction = true;
        Stmt s = prepare_internal("SELECT count(*) FROM sqlite_schema");
        const int rc = sqlite3_step(s.get());
        if (rc != SQLITE_ROW)
            throw IoError(db_error(db.get(), path, "starting a read transaction"));
        if (!is_wal) return "rollback " + db_header();
        const std::string after = wal_index_header();
        return !before.empty() && before == after ? "wal " + after : std::string();
    }

    Stmt prepare_internal(const char* sql) {
        sqlite3_stmt* raw = nullptr;
        auth.internal = true;
        const int rc = sqlite3_prepare_v2(db.get(), sql, -1, &raw, nullptr);
        auth.internal = false;
        if (rc != SQLITE_OK) {
            throw IoError(db_error(db.get(), path, std::string("preparing ") + sql));
        }
        return Stmt(raw);
    }

    /// The text of the last statement `prepare_query` accepted, without what followed it
    /// (a `;`, comments).
    std::string statement;

    /// The user's query, checked: one statement, read-only, returning columns.
    Stmt prepare_query(const std::string& sql) {
        auth.refused.clear();
        sqlite3_stmt* raw = nullptr;
        const char* tail = nullptr;
        const int rc =
            sqlite3_prepare_v2(db.get(), sql.c_str(), static_cast<int>(sql.size()), &raw, &tail);
        Stmt stmt(raw);
        const std::string refused =
            "sqlite: the query on '" + path + "' is refused before it runs: ";
        if (!auth.refused.empty()) {
            throw ConfigError(refused + auth.refused + "; only read-only queries are staged");
        }
        if (rc != SQLITE_OK) throw ConfigError(db_error(db.get(), path, "the query"));
        if (!raw) throw ConfigError("sqlite: the query on '" + path + "' is empty");
        statement.assign(sql.c_str(), tail ? tail : sql.c_str() + sql.size());
        // The tail starts after the statement's `;`.
        while (!statement.empty() && (statement.back() == ';' ||
                                      std::isspace(static_cast<unsigned char>(statement.back())))) {
            statement.pop_back();
        }
        if (tail && *tail) {
            sqlite3_stmt* rest = nullptr;
            const int rc2 = sqlite3_prepare_v2(db.get(), tail, -1, &rest, nullptr);
            Stmt second(rest);
            if (rc2 != SQLITE_OK || rest) {
                throw ConfigError(refused + "it holds more than one statement (after '" +
                                  std::string(sql.c_str(), tail) + "')");
            }
        }
        if (!sqlite3_stmt_readonly(raw)) {
            throw ConfigError(refused + "it is not read-only; only read-only queries are staged");
        }
        if (sqlite3_column_count(raw) == 0) {
            throw ConfigError(refused + "it returns no columns (not a query)");
        }
        return stmt;
    }

    ~Connection() {
        auth.internal = true;
        release_writers();
        if (in_transaction) sqlite3_exec(db.get(), "COMMIT", nullptr, nullptr, nullptr);
    }
};

/// One result column: how it is delivered and where.
struct SqliteSource::Column {
    std::string name;
    SqliteType type = SqliteType::text;  ///< resolved: int64, float64, text or blob
    bool convert = false;
    std::string declared;         ///< the declared type ("" for an expression)
    std::size_t field = 0;        ///< index of its field
    std::size_t valid_field = 0;  ///< index of `<name>.valid` (mask only)
};

namespace {

/// Cursor over the query in the source's snapshot.
class SqliteReader final : public StreamReader {
public:
    SqliteReader(const SqliteOptions& o, const std::vector<SqliteSource::Column>& columns,
                 std::size_t num_fields, int key_column, sqlite3* db, Stmt stmt, std::string where)
        : where_(std::move(where)),
          o_(o),
          columns_(columns),
          num_fields_(num_fields),
          key_column_(key_column),
          db_(db),
          stmt_(std::move(stmt)) {}

    bool next(StreamSample& out) override {
        if (!step()) return false;
        out.fields.resize(num_fields_);
        for (std::size_t c = 0; c < columns_.size(); ++c) read_column(static_cast<int>(c), out);
        out.key = key_column_ < 0 ? 0 : key_of(key_column_);
        ++row_;
        return true;
    }
    std::uint64_t skip(std::uint64_t count) override {
        std::uint64_t n = 0;
        while (n < count && step()) {
            ++n;
            ++row_;
        }
        return n;
    }

private:
    bool step() {
        const int rc = sqlite3_step(stmt_.get());
        if (rc == SQLITE_ROW) return true;
        if (rc == SQLITE_DONE) return false;
        throw IoError(db_error(db_, o_.path, "reading row " + std::to_string(row_) + where_));
    }

    [[noreturn]] void mismatch(int c, int storage, const char* why) const {
        const SqliteSource::Column& col = columns_[static_cast<std::size_t>(c)];
        std::string value;
        if (storage == SQLITE_NULL) {
            value = "NULL";
        } else if (storage == SQLITE_BLOB) {
            value = "BLOB of " + std::to_string(sqlite3_column_bytes(stmt_.get(), c)) + " bytes";
        } else {
            const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(stmt_.get(), c));
            value = std::string(storage_name(storage)) + " value " +
                    (storage == SQLITE_TEXT ? "'" : "") + std::string(t ? t : "").substr(0, 60) +
                    (storage == SQLITE_TEXT ? "'" : "");
        }
        throw FormatError("sqlite: '" + o_.path + "' row " + std::to_string(row_) + where_ +
                          " column '" + col.name + "': " + value + " " + why + " " +
                          type_name(col.type) +
                          (col.declared.empty() ? std::string(" (no declared type)")
                                                : " (declared '" + col.declared + "')") +
                          (storage == SQLITE_NULL
                               ? "; choose a NULL policy (SqliteOptions::nulls, --nulls mask or "
                                 "--nulls fill:VALUE)"
                               : "; type the column (SqliteOptions::columns, --column " + col.name +
                                     ":TYPE) or ask for SQLite's conversion (--column " + col.name +
                                     ":" + type_name(col.type) + ":convert)"));
    }

    static void put8(std::vector<std::byte>& bytes, const void* v) {
        bytes.resize(8);
        std::memcpy(bytes.data(), v, 8);
    }

    void read_column(int c, StreamSample& out) const {
        const SqliteSource::Column& col = columns_[static_cast<std::size_t>(c)];
        auto& bytes = out.fields[col.field];
        const int storage = sqlite3_column_type(stmt_.get(), c);
        const bool masked = o_.nulls == SqliteNulls::mask;
        if (masked)
            out.fields[col.valid_field].assign(
                1, static_cast<std::byte>(storage != SQLITE_NULL ? 1 : 0));
        if (storage == SQLITE_NULL) {
            if (o_.nulls == SqliteNulls::error) mismatch(c, storage, "is not allowed in");
            const double fill = masked ? 0.0 : o_.fill_value;
            if (col.type == SqliteType::int64) {
                const auto v = static_cast<std::int64_t>(fill);
                put8(bytes, &v);
            } else if (col.type == SqliteType::float64) {
                put8(bytes, &fill);
            } else {
                bytes.clear();
            }
            return;
        }
        if (col.type == SqliteType::int64) {
            if (storage != SQLITE_INTEGER && !col.convert) mismatch(c, storage, "does not fit");
            const std::int64_t v = sqlite3_column_int64(stmt_.get(), c);
            put8(bytes, &v);
            return;
        }
        if (col.type == SqliteType::float64) {
            if (storage == SQLITE_INTEGER && !col.convert) {
                // An integer is a float64 only when the double holds it exactly.
                const std::int64_t i = sqlite3_column_int64(stmt_.get(), c);
                const auto d = static_cast<double>(i);
                if (!(d < 9223372036854775808.0) || static_cast<std::int64_t>(d) != i) {
                    mismatch(c, storage, "is not exactly representable in");
                }
                put8(bytes, &d);
                return;
            }
            if (storage != SQLITE_FLOAT && storage != SQLITE_INTEGER && !col.convert) {
                mismatch(c, storage, "does not fit");
            }
            const double v = sqlite3_column_double(stmt_.get(), c);
            put8(bytes, &v);
            return;
        }
        const void* p = storage == SQLITE_BLOB ? sqlite3_column_blob(stmt_.get(), c)
                                               : sqlite3_column_text(stmt_.get(), c);
        const auto n = static_cast<std::size_t>(sqlite3_column_bytes(stmt_.get(), c));
        bytes.resize(p ? n : 0);
        if (p && n) std::memcpy(bytes.data(), p, n);
    }

    std::uint64_t key_of(int c) const {
        if (sqlite3_column_type(stmt_.get(), c) == SQLITE_INTEGER) {
            return static_cast<std::uint64_t>(sqlite3_column_int64(stmt_.get(), c));
        }
        const auto* p = static_cast<const char*>(sqlite3_column_blob(stmt_.get(), c));
        const auto n = static_cast<std::size_t>(sqlite3_column_bytes(stmt_.get(), c));
        return fnv1a64(p ? std::string(p, n) : std::string());
    }

    std::string where_;  ///< which rows of the result this cursor reads ("": all)
    const SqliteOptions& o_;
    const std::vector<SqliteSource::Column>& columns_;
    std::size_t num_fields_;
    int key_column_;
    sqlite3* db_;
    Stmt stmt_;
    std::uint64_t row_ = 0;
};

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

SqliteSource::SqliteSource(const Communicator& comm, SqliteOptions options)
    : options_(std::move(options)) {
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
    run_agreed(comm, [&] {
        if (!agreed) {
            throw IoError("sqlite: '" + options_.path + "' changed while the ranks opened it, " +
                          std::to_string(kSnapshotTries) +
                          " times (a writer committed between the ranks' read transactions); "
                          "the ranks could not agree on one snapshot");
        }
        Stmt stmt = conn_->prepare_query(options_.query);
        unstable_ = conn_->auth.unstable;
        if (unstable_.empty() && conn_->auth.date_functions &&
            upper(options_.query).find("'NOW'") != std::string::npos) {
            unstable_ = "the query calls a date/time function of 'now'";
        }
        const int n = sqlite3_column_count(stmt.get());
        for (const auto& typed : options_.columns) {
            bool found = false;
            for (int c = 0; c < n; ++c)
                found = found || typed.name == sqlite3_column_name(stmt.get(), c);
            if (!found) {
                throw ConfigError("sqlite: typed column '" + typed.name +
                                  "' is not a column of the query");
            }
        }
        for (int c = 0; c < n; ++c) {
            Column col;
            col.name = sqlite3_column_name(stmt.get(), c);
            const char* decl = sqlite3_column_decltype(stmt.get(), c);
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
                throw ConfigError("sqlite: the NULL fill value " +
                                  std::to_string(options_.fill_value) + " of int64 column '" +
                                  col.name + "' is not an integer");
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
        if (!options_.key_column.empty() && key_column_ < 0) {
            throw ConfigError("sqlite: key column '" + options_.key_column +
                              "' is not a column of the query");
        }
        statement_ = conn_->statement;
        if (!options_.range_column.empty()) plan_ranges();
    });
    std::string text;
    for (const auto& f : fields_) text += f.name + ":" + dtype_name(f.dtype) + ";";
    require_same(
        comm,
        {{"columns of the query", text}, {"fingerprint", fingerprint()}, {"order", unstable_}},
        "sqlite: ranks see different data", "every rank must open the same database");
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

void SqliteSource::plan_ranges() {
    int c = -1;
    for (std::size_t k = 0; k < columns_.size(); ++k) {
        if (columns_[k].name == options_.range_column) c = static_cast<int>(k);
    }
    if (c < 0 || columns_[static_cast<std::size_t>(c)].type != SqliteType::int64) {
        throw ConfigError("sqlite: range column '" + options_.range_column +
                          (c < 0 ? "' is not a column of the query"
                                 : "' is not an int64 column (declared INTEGER or typed int64)"));
    }
    const std::string q = quoted_name(options_.range_column);
    Stmt minmax =
        conn_->prepare_query("SELECT min(" + q + "), max(" + q + ") FROM (\n" + statement_ + "\n)");
    if (sqlite3_step(minmax.get()) != SQLITE_ROW) {
        throw IoError(db_error(conn_->db.get(), options_.path, "the key range of the query"));
    }
    if (sqlite3_column_type(minmax.get(), 0) == SQLITE_NULL) {
        bounds_ = {0};  // no key (no rows, or only NULL keys): one range of no rows
        return;
    }
    if (sqlite3_column_type(minmax.get(), 0) != SQLITE_INTEGER ||
        sqlite3_column_type(minmax.get(), 1) != SQLITE_INTEGER) {
        throw ConfigError("sqlite: range column '" + options_.range_column +
                          "' holds values that are not integers (its least or greatest value "
                          "is REAL, TEXT or BLOB)");
    }
    const std::int64_t lo = sqlite3_column_int64(minmax.get(), 0);
    const std::int64_t hi = sqlite3_column_int64(minmax.get(), 1);
    const long double span = static_cast<long double>(hi) - static_cast<long double>(lo) + 1;
    const auto k = static_cast<std::uint64_t>(
        std::min<long double>(static_cast<long double>(options_.range_streams), span));
    for (std::uint64_t i = 0; i < k; ++i) {
        bounds_.push_back(
            lo + static_cast<std::int64_t>(
                     std::floor(span * static_cast<long double>(i) / static_cast<long double>(k))));
    }
}

std::unique_ptr<StreamReader> SqliteSource::open(std::size_t s) const {
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
    Stmt stmt = conn_->prepare_query(options_.query);
    std::uint64_t n = 0;
    for (;;) {
        const int rc = sqlite3_step(stmt.get());
        if (rc == SQLITE_DONE) return n;
        if (rc != SQLITE_ROW)
            throw IoError(db_error(conn_->db.get(), options_.path, "counting the rows"));
        ++n;
    }
}

}  // namespace mpistage
