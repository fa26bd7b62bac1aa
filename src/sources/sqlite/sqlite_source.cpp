// SQLite query as a stream: read-only connections, one prepared cursor per reader, rows as
// items (see mpistage/sqlite_source.hpp).
#include "mpistage/sqlite_source.hpp"

#include <sqlite3.h>

#include <cstring>

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

Db open_db(const std::string& path) {
    sqlite3* raw = nullptr;
    const int rc =
        sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
    Db db(raw);
    if (rc != SQLITE_OK) throw IoError(db_error(raw, path, "open"));
    return db;
}

Stmt prepare(sqlite3* db, const std::string& sql, const std::string& path) {
    sqlite3_stmt* raw = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &raw, nullptr) !=
        SQLITE_OK) {
        throw ConfigError(db_error(db, path, "query '" + sql + "'"));
    }
    if (!raw) throw ConfigError("sqlite: the query of '" + path + "' is empty");
    return Stmt(raw);
}

/// Field type of column `c` from its declared type, else from the first row's value.
DType column_type(sqlite3_stmt* stmt, int c, bool& ragged, bool have_row) {
    ragged = false;
    if (const char* decl = sqlite3_column_decltype(stmt, c)) {
        std::string t(decl);
        for (auto& ch : t) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        if (t.find("INT") != std::string::npos) return DType::int64;
        if (t.find("REAL") != std::string::npos || t.find("FLOA") != std::string::npos ||
            t.find("DOUB") != std::string::npos) {
            return DType::float64;
        }
    } else if (have_row) {
        const int v = sqlite3_column_type(stmt, c);
        if (v == SQLITE_INTEGER) return DType::int64;
        if (v == SQLITE_FLOAT) return DType::float64;
    }
    ragged = true;
    return DType::uint8;
}

class SqliteReader final : public StreamReader {
public:
    SqliteReader(const SqliteOptions& o, const std::vector<FieldInfo>& fields, int key_column)
        : o_(o),
          fields_(fields),
          key_column_(key_column),
          db_(open_db(o.path)),
          stmt_(prepare(db_.get(), o.query, o.path)) {}

    bool next(StreamSample& out) override {
        if (!step()) return false;
        out.fields.resize(fields_.size());
        for (std::size_t f = 0; f < fields_.size(); ++f) read_column(static_cast<int>(f), out);
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
        throw IoError(db_error(db_.get(), o_.path, "reading row " + std::to_string(row_)));
    }
    void read_column(int c, StreamSample& out) const {
        auto& bytes = out.fields[static_cast<std::size_t>(c)];
        const FieldInfo& info = fields_[static_cast<std::size_t>(c)];
        const int type = sqlite3_column_type(stmt_.get(), c);
        if (info.ragged) {
            const void* p = type == SQLITE_BLOB ? sqlite3_column_blob(stmt_.get(), c)
                                                : sqlite3_column_text(stmt_.get(), c);
            const auto n = static_cast<std::size_t>(sqlite3_column_bytes(stmt_.get(), c));
            bytes.resize(p ? n : 0);
            if (p && n) std::memcpy(bytes.data(), p, n);
            return;
        }
        if (type == SQLITE_NULL || type == SQLITE_TEXT || type == SQLITE_BLOB) {
            throw FormatError("sqlite: '" + o_.path + "' row " + std::to_string(row_) +
                              " column '" + info.name + "' is not a number");
        }
        bytes.resize(8);
        if (info.dtype == DType::int64) {
            const std::int64_t v = sqlite3_column_int64(stmt_.get(), c);
            std::memcpy(bytes.data(), &v, 8);
        } else {
            const double v = sqlite3_column_double(stmt_.get(), c);
            std::memcpy(bytes.data(), &v, 8);
        }
    }
    std::uint64_t key_of(int c) const {
        if (sqlite3_column_type(stmt_.get(), c) == SQLITE_INTEGER) {
            return static_cast<std::uint64_t>(sqlite3_column_int64(stmt_.get(), c));
        }
        const auto* p = static_cast<const char*>(sqlite3_column_blob(stmt_.get(), c));
        const auto n = static_cast<std::size_t>(sqlite3_column_bytes(stmt_.get(), c));
        return fnv1a64(p ? std::string(p, n) : std::string());
    }

    const SqliteOptions& o_;
    const std::vector<FieldInfo>& fields_;
    int key_column_;
    Db db_;
    Stmt stmt_;
    std::uint64_t row_ = 0;
};

}  // namespace

SqliteSource::SqliteSource(const Communicator& comm, SqliteOptions options)
    : options_(std::move(options)) {
    run_agreed(comm, [&] {
        size_bytes_ = detail::probe_input_file(options_.path, "sqlite").size_bytes;
        Db db = open_db(options_.path);
        Stmt stmt = prepare(db.get(), options_.query, options_.path);
        const int rc = sqlite3_step(stmt.get());
        if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
            throw IoError(db_error(db.get(), options_.path, "query '" + options_.query + "'"));
        }
        const int n = sqlite3_column_count(stmt.get());
        if (n == 0) throw ConfigError("sqlite: the query returns no columns: " + options_.query);
        for (int c = 0; c < n; ++c) {
            FieldInfo f;
            f.name = sqlite3_column_name(stmt.get(), c);
            f.dtype = column_type(stmt.get(), c, f.ragged, rc == SQLITE_ROW);
            f.sample_bytes = f.ragged ? 0 : 8;
            if (f.name == options_.key_column) key_column_ = c;
            fields_.push_back(std::move(f));
        }
        if (!options_.key_column.empty() && key_column_ < 0) {
            throw ConfigError("sqlite: key column '" + options_.key_column +
                              "' is not a column of the query");
        }
    });
    std::string text;
    for (const auto& f : fields_) text += f.name + ":" + dtype_name(f.dtype) + ";";
    require_same(comm, {{"columns of the query", text}, {"fingerprint", fingerprint()}},
                 "sqlite: ranks see different data", "every rank must open the same database");
}

SqliteSource::~SqliteSource() = default;

std::unique_ptr<StreamReader> SqliteSource::open(std::size_t) const {
    return std::make_unique<SqliteReader>(options_, fields_, key_column_);
}

std::string SqliteSource::fingerprint() const {
    return "sqlite " + options_.path + " (" + std::to_string(size_bytes_) + " bytes) query '" +
           options_.query + "' key '" + options_.key_column + "'";
}

std::uint64_t SqliteSource::count_rows() const {
    Db db = open_db(options_.path);
    Stmt stmt = prepare(db.get(), "SELECT COUNT(*) FROM (" + options_.query + ")", options_.path);
    if (sqlite3_step(stmt.get()) != SQLITE_ROW) {
        throw IoError(db_error(db.get(), options_.path, "counting the rows"));
    }
    return static_cast<std::uint64_t>(sqlite3_column_int64(stmt.get(), 0));
}

}  // namespace mpistage
