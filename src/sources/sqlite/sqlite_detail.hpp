#pragma once
// Internals of the SQLite stream source (src/sources/sqlite/): checked handles, the authorizer
// that keeps a query read-only, one rank's connection inside the agreed snapshot, and how a
// result column is delivered (see mpistage/sqlite_source.hpp).

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <thread>
#include <vector>

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
    /// Upper-case names of the connection's scalar functions that SQLite does not mark
    /// SQLITE_DETERMINISTIC (from `pragma_function_list`), less those constant for one build.
    std::vector<std::string> nondeterministic;
};

/// Scalar functions without SQLITE_DETERMINISTIC whose value is nevertheless the same for every
/// execution under one SQLite library (every rank links the same one).
inline bool constant_for_one_build(const std::string& upper_name) {
    return upper_name == "SQLITE_VERSION" || upper_name == "SQLITE_SOURCE_ID" ||
           upper_name == "SQLITE_COMPILEOPTION_GET" || upper_name == "SQLITE_COMPILEOPTION_USED";
}

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
        case SQLITE_FUNCTION: {
            // Non-deterministic: what SQLite itself does not mark deterministic (the list of
            // the connection, so functions of a newer SQLite count too), and the known ones in
            // case that list is not compiled in (SQLITE_OMIT_INTROSPECTION_PRAGMAS).
            const std::string name = upper(a2 ? a2 : "");
            const bool listed = std::find(log.nondeterministic.begin(), log.nondeterministic.end(),
                                          name) != log.nondeterministic.end();
            if (listed ||
                one_of(a2, {"random", "randomblob", "changes", "total_changes", "last_insert_rowid",
                            "current_date", "current_time", "current_timestamp"})) {
                if (log.unstable.empty())
                    log.unstable = std::string("it calls ") + (a2 ? a2 : "?") + "()";
            }
            if (one_of(a2, {"date", "time", "datetime", "julianday", "strftime", "unixepoch",
                            "timediff"})) {
                log.date_functions = true;
            }
            return SQLITE_OK;
        }
        case SQLITE_UPDATE:
            // Preparing a table-valued function (`pragma_table_info(...)`, `json_each(...)`)
            // parses its eponymous virtual table's schema, which SQLite reports as an update
            // of sqlite_master's columns; the statement itself is read-only (pragma_* table
            // functions exist only for PRAGMAs without side effects, pragma.html), and a real
            // write is refused by `sqlite3_stmt_readonly` after preparing anyway.
            if (one_of(a1, {"sqlite_master", "sqlite_temp_master"})) return SQLITE_OK;
            if (log.refused.empty()) {
                log.refused =
                    std::string("it writes to the database (UPDATE of ") + (a1 ? a1 : "?") + ")";
            }
            return SQLITE_DENY;
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
        // Serialized (FULLMUTEX): the loader's I/O threads step this connection's row
        // statements while the caller's thread counts rows or checks the snapshot on it
        // (sqlite.org/threadsafe.html); an uncontended mutex per call otherwise.
        const int rc = sqlite3_open_v2(path.c_str(), &raw,
                                       SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX, nullptr);
        db.reset(raw);
        if (rc != SQLITE_OK) throw IoError(db_error(raw, path, "open"));
        sqlite3_busy_timeout(raw, static_cast<int>(busy.count()));
        sqlite3_set_authorizer(raw, authorize, &auth);
        load_nondeterministic();
    }

    /// The connection's scalar functions that SQLite does not mark SQLITE_DETERMINISTIC
    /// (pragma.html#pragma_function_list: `flags` holds SQLITE_DETERMINISTIC, 0x800, since
    /// 3.31); without the pragma `authorize` falls back to its fixed list.
    void load_nondeterministic() {
        sqlite3_stmt* raw = nullptr;
        auth.internal = true;
        const int rc = sqlite3_prepare_v2(db.get(),
                                          "SELECT DISTINCT name FROM pragma_function_list "
                                          "WHERE type = 's' AND (flags & 2048) = 0",
                                          -1, &raw, nullptr);
        auth.internal = false;
        Stmt s(raw);
        if (rc != SQLITE_OK || !raw) return;
        while (sqlite3_step(raw) == SQLITE_ROW) {
            const auto* n = reinterpret_cast<const char*>(sqlite3_column_text(raw, 0));
            const std::string name = detail::sqlite::upper(n ? n : "");
            if (!name.empty() && !detail::sqlite::constant_for_one_build(name)) {
                auth.nondeterministic.push_back(name);
            }
        }
    }

    /// What identifies the database file's content while the snapshot is held: the file at
    /// the path (device, inode), its size and modification time, its header as read through
    /// this connection's file object, and under WAL the wal-index header and the checkpoint's
    /// backfill count (walformat.html §2.1), which change when a writer commits or
    /// checkpoints.
    struct Identity {
        std::uint64_t device = 0, inode = 0, size_bytes = 0;
        std::int64_t mtime_ns = 0;
        std::string header;
        bool wal = false;
        std::string wal_index;
    };

    Identity identity() const {
        Identity id;
        struct stat st {};
        if (::stat(path.c_str(), &st) == 0) {
            id.device = static_cast<std::uint64_t>(st.st_dev);
            id.inode = static_cast<std::uint64_t>(st.st_ino);
            id.size_bytes = static_cast<std::uint64_t>(st.st_size);
            id.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 +
                          static_cast<std::int64_t>(st.st_mtim.tv_nsec);
        }
        id.header = db_header();
        id.wal = id.header.size() == 100 && id.header[18] == 2;
        if (id.wal) id.wal_index = shm_prefix(100);
        return id;
    }

    /// The identity of the file when the agreed snapshot began (set by the source).
    Identity snapshot_identity;

    /// Local: "" while the file at the path is the one whose snapshot this connection reads,
    /// else what changed. A rollback-journal database cannot change legitimately meanwhile
    /// (the read transaction's shared lock keeps writers from committing), so any change of
    /// size, time or header is a write that bypassed SQLite's locks (a copy over it, a
    /// rewrite in place). A WAL writer may commit and checkpoint meanwhile (frames up to this
    /// snapshot only): there a changed size or time counts only when the wal-index shows no
    /// commit or checkpoint since the last check.
    std::string changed_since_snapshot() {
        Identity now = identity();
        Identity& then = snapshot_identity;
        if (now.device != then.device || now.inode != then.inode) {
            return "was replaced by another file (device/inode " + std::to_string(then.device) +
                   "/" + std::to_string(then.inode) + " then, " + std::to_string(now.device) + "/" +
                   std::to_string(now.inode) + " now)";
        }
        const bool same_file = now.size_bytes == then.size_bytes && now.mtime_ns == then.mtime_ns;
        const std::string what =
            "was written to outside SQLite's locks (size " + std::to_string(then.size_bytes) +
            " then, " + std::to_string(now.size_bytes) + " bytes now; modification " + "time " +
            std::to_string(then.mtime_ns) + " then, " + std::to_string(now.mtime_ns) + " ns now)";
        if (!then.wal) {
            if (!same_file) return what;
            if (now.header != then.header) return "had its header rewritten outside SQLite's locks";
            return {};
        }
        if (now.wal != then.wal) return "is no longer in WAL mode (its header was rewritten)";
        if (!same_file && now.wal_index == then.wal_index) return what;
        then = std::move(now);  // a writer's commit or checkpoint: the next check from here
        return {};
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
    std::string wal_index_header() const { return shm_prefix(48); }

    /// The first `n` (at most 32768) bytes of the -shm as mapped by this connection; "" when
    /// it is not mapped.
    std::string shm_prefix(std::size_t n) const {
        sqlite3_file* f = file();
        if (!f || f->pMethods->iVersion < 2 || !f->pMethods->xShmMap) return {};
        void volatile* region = nullptr;
        if (f->pMethods->xShmMap(f, 0, 32768, 0, &region) != SQLITE_OK || !region) return {};
        std::string h(n, '\0');
        std::memcpy(h.data(), const_cast<void*>(region), n);
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
