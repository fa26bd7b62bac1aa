#pragma once
// Internals of the SQLite stream source (src/sources/sqlite/): checked handles, the authorizer
// that keeps a query read-only, one rank's connection inside the agreed snapshot, and how a
// result column is delivered (see mpistage/sqlite_source.hpp).

#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <thread>

#include "mpistage/error.hpp"
#include "mpistage/sqlite_source.hpp"

namespace mpistage::detail::sqlite {

struct DbCloser {
    void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
    void operator()(sqlite3_stmt* s) const noexcept { sqlite3_finalize(s); }
};
using Db = std::unique_ptr<sqlite3, DbCloser>;
using Stmt = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

inline std::string db_error(sqlite3* db, const std::string& path, const std::string& what) {
    return "sqlite: " + what + " of '" + path +
           "' failed: " + (db ? sqlite3_errmsg(db) : "out of memory");
}

inline std::string upper(std::string t) {
    for (auto& ch : t) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return t;
}

inline const char* type_name(SqliteType t) {
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

inline const char* storage_name(int type) {
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
inline SqliteType affinity_type(const char* decl) {
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

inline bool one_of(const char* s, std::initializer_list<const char*> names) {
    if (!s) return false;
    const std::string l = upper(s);
    for (const char* n : names) {
        if (l == upper(n)) return true;
    }
    return false;
}

/// Allows what a read-only query does (read tables, call functions, read informational
/// PRAGMAs); denies writes, schema changes, ATTACH/DETACH, transactions and PRAGMAs that set.
inline int authorize(void* ctx, int action, const char* a1, const char* a2, const char*,
                     const char*) {
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

}  // namespace mpistage::detail::sqlite

namespace mpistage {

using detail::sqlite::AuthLog;
using detail::sqlite::authorize;
using detail::sqlite::Db;
using detail::sqlite::db_error;
using detail::sqlite::kWalWriteLock;
using detail::sqlite::Stmt;

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

}  // namespace mpistage
