#pragma once
// The cursor of the SQLite stream source: steps the query in the source's snapshot and checks
// every value against its column's type (see mpistage/sqlite_source.hpp).

#include "mpistage/hash.hpp"
#include "sources/sqlite/sqlite_detail.hpp"

namespace mpistage::detail::sqlite {

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
        read_row(out);
        out.key = key_column_ < 0 ? 0 : key_of(key_column_);
        return true;
    }
    bool next_kept(StreamSample& out, const std::function<bool(std::uint64_t key)>& keep) override {
        if (key_column_ < 0) return StreamReader::next_kept(out, keep);
        for (;;) {
            if (!step()) return false;
            // The key column only; the row's other values are read when it is kept.
            const std::uint64_t key = key_of(key_column_);
            if (!keep(key)) {
                ++row_;
                continue;
            }
            read_row(out);
            out.key = key;
            return true;
        }
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
    /// The current row's fields into `out`; on to the next row's number.
    void read_row(StreamSample& out) {
        out.fields.resize(num_fields_);
        for (std::size_t c = 0; c < columns_.size(); ++c) read_column(static_cast<int>(c), out);
        ++row_;
    }
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

}  // namespace mpistage::detail::sqlite
