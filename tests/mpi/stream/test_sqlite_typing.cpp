// SQLite source typing (issue: values silently converted): a database written by Python's
// sqlite3 module with REAL values in INTEGER columns, text in numeric columns, NULLs in every
// type, columns of NUMERIC and no declared type, and mixed-type expressions. Every column is
// staged on its own at 1-4 ranks; each value must arrive exactly as Python's sqlite3 module
// reads it (the known answer, written by Python), or the run must fail on every rank with a
// FormatError naming the first row that does not fit and the column. Never a converted value
// without `convert`.
#include <sqlite3.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "mpistage/sqlite_source.hpp"
#include "stream_test_util.hpp"

namespace {

using namespace stream_test;

int world_rank() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

// Writes the database and, for every (expression, row), what Python's sqlite3 module reads:
// "EXPR<TAB>ROW<TAB>KIND<TAB>VALUE<TAB>TEXT" with KIND i/f/s/b/n (int, float, str, bytes, None),
// VALUE the int in decimal or the float in float.hex(), TEXT hex of SQLite's text form of the
// value (CAST(x AS TEXT); for blobs their bytes).
const char* kPython = R"PY(
import sqlite3, sys
db_path, out_path = sys.argv[1], sys.argv[2]
db = sqlite3.connect(db_path)
db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, i INTEGER, r REAL, s TEXT, b BLOB, "
           "n NUMERIC, d DATE, x)")
rows = []
for k in range(300):
    i = [k * 7 - 900, 2.75, -1.5, None, 'abc', 2**62, b'\x01\x02'][k % 7] if k % 5 == 0 else k - 150
    r = [k / 8.0, None, 'x', 3, 1e300, -0.0][k % 6] if k % 4 == 0 else k * 0.1
    s = [None, 'héllo', '', 42, 2.5, b'raw'][k % 6] if k % 3 == 0 else 'row%d' % k
    b = [None, b'', b'\x00\xff' * (k % 5), 7, 'txt'][k % 5]
    n = [None, 1, 2.5, '3x', 1e20, '12'][k % 6]
    d = [None, '2020-01-02', 20200102, 1.25][k % 4]
    x = [None, 1, 1.5, 'mixed', b'\x07'][k % 5]
    rows.append((k, i, r, s, b, n, d, x))
db.executemany("INSERT INTO t VALUES(?,?,?,?,?,?,?,?)", rows)
db.commit()
exprs = ["i", "r", "s", "b", "n", "d", "x",
         "CASE WHEN id % 5 = 0 THEN id ELSE id * 1.5 END",
         "CASE WHEN id = 0 THEN 7 ELSE 1e300 END",
         "i + 0.5", "coalesce(s, b)"]
db.text_factory = bytes  # text as stored (bytes), not decoded; its type from typeof()
with open(out_path, "w") as out:
    for e in exprs:
        q = "SELECT %s, typeof(%s), CAST(%s AS TEXT) FROM t ORDER BY id" % (e, e, e)
        for row, (v, kind, t) in enumerate(db.execute(q)):
            kind = kind.decode()
            if kind == "null":
                k, val, text = "n", "", b""
            elif kind == "integer":
                k, val, text = "i", str(v), t
            elif kind == "real":
                k, val, text = "f", v.hex(), t
            elif kind == "text":
                k, val, text = "s", "", v
            else:
                k, val, text = "b", "", v
            out.write("%s\t%d\t%s\t%s\t%s\n" % (e, row, k, val, text.hex()))
)PY";

struct Value {
    char kind = 'n';
    std::int64_t i = 0;
    double f = 0;
    std::string bytes;  ///< SQLite's text form (blobs: the bytes)
};

std::string unhex(const std::string& h) {
    std::string out;
    for (std::size_t k = 0; k + 1 < h.size(); k += 2) {
        out.push_back(static_cast<char>(std::stoi(h.substr(k, 2), nullptr, 16)));
    }
    return out;
}

struct Known {
    std::string db;
    std::map<std::string, std::vector<Value>> values;  ///< by expression, in row order
};

const Known& known() {
    static Known k = [] {
        Known out;
        const std::string dir = (std::filesystem::temp_directory_path() /
                                 ("sqlite_typing_" + std::to_string(getppid())))
                                    .string();
        out.db = dir + ".db";
        const std::string answers = dir + ".txt";
        int ok = 1;
        if (world_rank() == 0) {
            std::remove(out.db.c_str());
            std::ofstream(dir + ".py") << kPython;
            const std::string cmd = "python3 " + dir + ".py " + out.db + " " + answers;
            ok = std::system(cmd.c_str()) == 0 ? 1 : 0;
        }
        MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
        EXPECT_EQ(ok, 1) << "python3 with sqlite3 could not write the test database";
        std::ifstream in(answers);
        for (std::string line; std::getline(in, line);) {
            std::vector<std::string> part;
            std::stringstream ss(line);
            for (std::string p; std::getline(ss, p, '\t');) part.push_back(p);
            part.resize(5);
            Value v;
            v.kind = part[2][0];
            if (v.kind == 'i') v.i = std::stoll(part[3]);
            if (v.kind == 'f') v.f = std::strtod(part[3].c_str(), nullptr);
            v.bytes = unhex(part[4]);
            out.values[part[0]].push_back(v);
        }
        return out;
    }();
    return k;
}

/// What staging one expression delivered on this rank: row → field bytes (value, validity).
struct Delivered {
    std::map<std::int64_t, std::pair<std::string, int>> rows;
    std::string error;  ///< "FormatError: …" when the run failed
    std::vector<FieldInfo> fields;
};

Delivered stage(const std::string& expr, SqliteOptions o) {
    Delivered d;
    Communicator comm(MPI_COMM_WORLD);
    o.path = known().db;
    o.query = "SELECT " + expr + " AS v FROM t ORDER BY id";
    try {
        SqliteSource source(comm, o);
        d.fields = source.fields();
        LoaderOptions so;
        so.stream.chunk_size = 17;
        so.plan.batch_size = so.plan.budget.max_batch_samples = 8;
        Stream loader(comm, source, so);
        HostBatch b;
        while (loader.next(b)) {
            for (std::size_t j = 0; j < b.size(); ++j) {
                if (!b.valid()[j]) continue;
                const HostField& f = b.fields()[0];
                std::string bytes;
                if (f.info->ragged) {
                    bytes.assign(reinterpret_cast<const char*>(f.data) + f.offsets[j],
                                 static_cast<std::size_t>(f.offsets[j + 1] - f.offsets[j]));
                } else {
                    bytes.assign(reinterpret_cast<const char*>(f.data) + j * 8, 8);
                }
                const int valid = b.fields().size() > 1
                                      ? static_cast<int>(b.fields()[1].as<std::uint8_t>()[j])
                                      : 1;
                d.rows[b.index()[j] & ((std::int64_t{1} << 40) - 1)] = {bytes, valid};
            }
        }
    } catch (const FormatError& e) {
        d.error = std::string("FormatError: ") + e.what();
    } catch (const Error& e) {
        d.error = std::string("Error: ") + e.what();
    }
    return d;
}

std::string bytes_of(std::int64_t v) {
    return std::string(reinterpret_cast<const char*>(&v), 8);
}
std::string bytes_of(double v) {
    return std::string(reinterpret_cast<const char*>(&v), 8);
}

/// The contract, restated independently: does `v` fit `type`, and which bytes it arrives as.
bool fits(const Value& v, SqliteType type, std::string& bytes) {
    if (type == SqliteType::int64) {
        bytes = bytes_of(v.i);
        return v.kind == 'i';
    }
    if (type == SqliteType::float64) {
        if (v.kind == 'f') {
            bytes = bytes_of(v.f);
            return true;
        }
        // An int fits when a double holds it exactly (checked in long double arithmetic).
        const auto d = static_cast<double>(v.i);
        bytes = bytes_of(d);
        return v.kind == 'i' && static_cast<long double>(d) == static_cast<long double>(v.i);
    }
    bytes = v.bytes;
    return true;
}

/// Checks one staged expression against the known answer under `nulls` (mask or error): typed
/// `type` explicitly, or (`declared` true) left to its declared type, which must give `type`.
void check(const std::string& expr, SqliteType type, SqliteNulls nulls, bool declared = false) {
    SqliteOptions o;
    o.nulls = nulls;
    if (!declared) o.columns = {{"v", type, false}};
    const Delivered d = stage(expr, o);
    const std::vector<Value>& want = known().values.at(expr);
    ASSERT_EQ(want.size(), 300u);
    // The rows that must fail.
    std::vector<bool> bad(want.size(), false);
    bool any_bad = false;
    for (std::size_t r = 0; r < want.size(); ++r) {
        std::string bytes;
        const bool null_fails = want[r].kind == 'n' && nulls == SqliteNulls::error;
        bad[r] = null_fails || (want[r].kind != 'n' && !fits(want[r], type, bytes));
        any_bad = any_bad || bad[r];
    }
    const std::string what = expr + " as " + std::to_string(static_cast<int>(type));
    if (any_bad) {
        // The ranks owning failing rows fail; every rank gets the same FormatError, naming
        // one of those rows (the lowest failing rank's) and the column.
        EXPECT_EQ(d.error.rfind("FormatError: ", 0), 0u) << what << ": " << d.error;
        const auto at = d.error.find(" row ");
        ASSERT_NE(at, std::string::npos) << what << ": " << d.error;
        const auto row = std::stoull(d.error.substr(at + 5));
        ASSERT_LT(row, want.size()) << d.error;
        EXPECT_TRUE(bad[row]) << what << ": the error names a row that fits: " << d.error;
        EXPECT_NE(d.error.find("row " + std::to_string(row) + " column 'v'"), std::string::npos)
            << what << ": " << d.error;
        return;
    }
    ASSERT_EQ(d.error, "") << what;
    // Union over ranks: each row once, with its value.
    std::vector<std::int64_t> flat;
    for (const auto& [row, value] : d.rows) flat.push_back(row);
    const auto all = all_ids(flat);
    EXPECT_EQ(all.size(), want.size()) << what;
    for (const auto& [row, value] : d.rows) {
        const Value& v = want[static_cast<std::size_t>(row)];
        if (v.kind == 'n') {
            EXPECT_EQ(value.second, 0) << what << " row " << row;
            continue;
        }
        std::string bytes;
        fits(v, type, bytes);
        EXPECT_EQ(value.second, 1) << what << " row " << row;
        EXPECT_EQ(value.first, bytes) << what << " row " << row << " kind " << v.kind;
    }
}

TEST(SqliteTyping, DeclaredTypesDeliverStoredValuesOrNameTheRow) {
    (void)known();
    // Automatic types: INTEGER → int64, REAL → float64, TEXT/BLOB/NUMERIC/DATE/none → bytes.
    const std::vector<std::pair<std::string, SqliteType>> automatic = {
        {"i", SqliteType::int64}, {"r", SqliteType::float64}, {"s", SqliteType::text},
        {"b", SqliteType::blob},  {"n", SqliteType::text},    {"d", SqliteType::text},
        {"x", SqliteType::text}};
    for (const auto& [expr, as] : automatic) {
        SqliteOptions o;
        o.nulls = SqliteNulls::mask;
        o.path = known().db;
        o.query = "SELECT " + expr + " AS v FROM t";
        Communicator comm(MPI_COMM_WORLD);
        SqliteSource source(comm, o);
        ASSERT_EQ(source.fields().size(), 2u);
        EXPECT_EQ(source.fields()[1].name, "v.valid");
        EXPECT_EQ(source.fields()[0].ragged, as == SqliteType::text || as == SqliteType::blob);
        // The values, typed as declared: exact or a FormatError naming the row.
        check(expr, as, SqliteNulls::mask, true);
        check(expr, SqliteType::float64, SqliteNulls::mask);
    }
}

TEST(SqliteTyping, ExpressionsAreTextUnlessTyped) {
    (void)known();
    for (const std::string expr :
         {"CASE WHEN id % 5 = 0 THEN id ELSE id * 1.5 END",
          "CASE WHEN id = 0 THEN 7 ELSE 1e300 END", "i + 0.5", "coalesce(s, b)"}) {
        check(expr, SqliteType::text, SqliteNulls::mask, true);  // SQLite's text form
        check(expr, SqliteType::float64, SqliteNulls::mask);
        check(expr, SqliteType::int64, SqliteNulls::mask);
    }
}

TEST(SqliteTyping, NullsAreAnErrorOnlyWhenAskedSo) {
    (void)known();
    check("i", SqliteType::int64, SqliteNulls::error);
    check("s", SqliteType::text, SqliteNulls::error);
    // fill: a NULL number becomes the fill value.
    SqliteOptions o;
    o.nulls = SqliteNulls::fill;
    o.fill_value = -7;
    o.columns = {{"v", SqliteType::int64, true}};
    const Delivered d = stage("i", o);
    ASSERT_EQ(d.error, "");
    for (const auto& [row, value] : d.rows) {
        const Value& v = known().values.at("i")[static_cast<std::size_t>(row)];
        if (v.kind == 'n') EXPECT_EQ(value.first, bytes_of(std::int64_t{-7})) << row;
        if (v.kind == 'i') EXPECT_EQ(value.first, bytes_of(v.i)) << row;
    }
}

TEST(SqliteTyping, ConvertAsksForSqlitesConversion) {
    (void)known();
    SqliteOptions o;
    o.nulls = SqliteNulls::mask;
    o.columns = {{"v", SqliteType::int64, true}};
    const Delivered d = stage("i", o);
    ASSERT_EQ(d.error, "");
    for (const auto& [row, value] : d.rows) {
        const Value& v = known().values.at("i")[static_cast<std::size_t>(row)];
        // SQLite's own conversion of a REAL truncates toward zero (2.75 → 2, −1.5 → −1).
        if (v.kind == 'f') EXPECT_EQ(value.first, bytes_of(static_cast<std::int64_t>(v.f))) << row;
        if (v.kind == 'i') EXPECT_EQ(value.first, bytes_of(v.i)) << row;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) {
        const std::string base = known().db.substr(0, known().db.size() - 3);
        for (const char* ext : {".db", ".py", ".txt"}) std::remove((base + ext).c_str());
    }
}

}  // namespace
