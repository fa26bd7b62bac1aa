// SQLite source: one snapshot and one order on every rank, the query as written, robust opening.
//  - trailing ';', a trailing comment and WITH queries run as written; writes, VACUUM INTO,
//    ATTACH, setting PRAGMAs and a second statement are refused on every rank before anything
//    runs, and no file is created or changed (checksums of the directory before and after);
//  - ORDER BY random(): refused by the source for every sharding (not deterministic); the
//    advised fixed pseudo-random order yields every row exactly once under hash sharding
//    (checked by row content);
//  - a writer committing to a WAL database during the run: every rank reads one snapshot (the
//    union of rows is exactly the first N rows the writer had committed, N = count_rows());
//  - a WAL database left by a writer killed inside a transaction opens at every rank count.
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "mpistage/sqlite_source.hpp"
#include "stream_test_util.hpp"

namespace {

using namespace stream_test;
namespace fs = std::filesystem;

int world_rank() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

/// A fresh directory shared by the ranks (rank 0 creates it).
std::string fresh_dir(const std::string& name) {
    const std::string dir =
        (fs::temp_directory_path() / ("mpistage_sqlite_" + name + "_" + std::to_string(getppid())))
            .string();
    if (world_rank() == 0) {
        fs::remove_all(dir);
        fs::create_directories(dir);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return dir;
}

/// Rank 0 writes `n` rows t(id INTEGER PRIMARY KEY, v INTEGER, s TEXT) with the sqlite3 API.
void write_rows(const std::string& path, int n, bool wal) {
    if (world_rank() == 0) {
        sqlite3* db = nullptr;
        EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
        if (wal) sqlite3_exec(db, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr);
        sqlite3_exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, v INTEGER, s TEXT); BEGIN",
                     nullptr, nullptr, nullptr);
        sqlite3_stmt* st = nullptr;
        sqlite3_prepare_v2(db, "INSERT INTO t VALUES(?, ?, ?)", -1, &st, nullptr);
        for (int i = 0; i < n; ++i) {
            const std::string s = "row" + std::to_string(i);
            sqlite3_bind_int(st, 1, i);
            sqlite3_bind_int(st, 2, i * 3);
            sqlite3_bind_text(st, 3, s.c_str(), -1, SQLITE_TRANSIENT);
            EXPECT_EQ(sqlite3_step(st), SQLITE_DONE);
            sqlite3_reset(st);
        }
        sqlite3_finalize(st);
        sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
        sqlite3_close(db);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/// Every file of `dir` with the FNV-1a hash of its bytes.
std::map<std::string, std::uint64_t> checksums(const std::string& dir) {
    std::map<std::string, std::uint64_t> out;
    for (const auto& e : fs::directory_iterator(dir)) {
        std::ifstream in(e.path(), std::ios::binary);
        std::stringstream s;
        s << in.rdbuf();
        out[e.path().filename().string()] = fnv1a64(s.str());
    }
    return out;
}

/// Column 0 (int64) of every valid row this rank yielded, and the steps.
std::vector<std::int64_t> consume_ids(Stream& loader, std::uint64_t& steps) {
    std::vector<std::int64_t> ids;
    HostBatch b;
    steps = 0;
    while (loader.next(b)) {
        ++steps;
        for (std::size_t j = 0; j < b.size(); ++j) {
            if (b.valid()[j]) ids.push_back(b.fields()[0].as<std::int64_t>()[j]);
        }
    }
    return ids;
}

std::vector<std::int64_t> iota_ids(std::int64_t n) {
    std::vector<std::int64_t> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
    return v;
}

TEST(SqliteSnapshot, QueriesRunAsWrittenAndWritesAreRefusedBeforeTheyRun) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string dir = fresh_dir("sql");
    const std::string db = dir + "/rows.db";
    write_rows(db, 500, false);
    const auto before = checksums(dir);
    for (const std::string& q : std::vector<std::string>{
             "SELECT id, v FROM t;", "SELECT id, v FROM t -- all rows",
             "SELECT id, v FROM t; -- end\n",
             "/* lead */ WITH w AS (SELECT id, v FROM t) SELECT id, v FROM w ORDER BY id;",
             "WITH RECURSIVE n(id, v) AS (SELECT 0, 0 UNION ALL SELECT id + 1, v FROM n "
             "WHERE id < 499) SELECT id, v FROM n"}) {
        SqliteOptions so{db, q, ""};
        // The recursive CTE's columns are expressions (no declared type): typed explicitly.
        so.columns = {{"id", SqliteType::int64, false}, {"v", SqliteType::int64, false}};
        SqliteSource source(comm, so);
        EXPECT_EQ(source.count_rows(), 500u) << q;
        LoaderOptions o;
        o.stream.chunk_size = 13;
        Stream loader(comm, source, o);
        std::uint64_t steps = 0;
        auto all = all_ids(consume_ids(loader, steps));
        std::sort(all.begin(), all.end());
        EXPECT_EQ(all, iota_ids(500)) << q;
    }
    const std::string target = dir + "/copy.db";
    const std::string other = dir + "/other.db";
    for (const std::string& q : std::vector<std::string>{
             "DELETE FROM t", "UPDATE t SET v = 0", "INSERT INTO t VALUES(1000, 1, 'x')",
             "CREATE TABLE u(x)", "DROP TABLE t", "VACUUM", "VACUUM INTO '" + target + "'",
             "ATTACH '" + other + "' AS o", "PRAGMA user_version = 5", "PRAGMA journal_mode = WAL",
             "BEGIN IMMEDIATE", "SELECT id FROM t; DELETE FROM t", "SELECT 1; SELECT 2", "",
             "  -- nothing\n"}) {
        std::string message;
        try {
            SqliteSource source(comm, {db, q, ""});
        } catch (const ConfigError& e) {
            message = e.what();
        }
        EXPECT_NE(message, "") << "not refused: " << q;
        // The same message on every rank.
        const auto lengths = min_max(message.size());
        EXPECT_EQ(lengths.first, lengths.second) << q;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    EXPECT_EQ(checksums(dir), before) << "a refused statement created or changed a file";
    EXPECT_FALSE(fs::exists(target));
    EXPECT_FALSE(fs::exists(other));
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(dir);
}

TEST(SqliteSnapshot, RandomOrderIsRefusedAndAFixedShuffleIsExactlyOnceByKey) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string dir = fresh_dir("random");
    const std::string db = dir + "/rows.db";
    write_rows(db, 3000, false);
    // Refused by the source itself, whatever the loader's sharding would be: every run of
    // the query (each rank, the count, each epoch) would order or pick rows differently.
    for (const char* key : {"", "id"}) {
        std::string message;
        try {
            SqliteSource refused(comm, {db, "SELECT id, v, s FROM t ORDER BY random()", key});
        } catch (const ConfigError& e) {
            message = e.what();
        }
        EXPECT_NE(message.find("random()"), std::string::npos) << message;
        EXPECT_NE(message.find("not deterministic"), std::string::npos) << message;
    }
    // The advised replacement: a fixed pseudo-random order of the key.
    const std::string q = "SELECT id, v, s FROM t ORDER BY (id * 1103515245 + 7) % 2147483648";
    SqliteSource source(comm, {db, q, "id"});
    LoaderOptions o;
    o.stream.sharding = StreamSharding::hash;
    o.plan.batch_size = o.plan.budget.max_batch_samples = 16;
    Stream loader(comm, source, o);
    // Rows by content: id, v and s must belong together and each row come exactly once.
    HostBatch b;
    std::vector<std::int64_t> mine;
    std::uint64_t bad = 0;
    while (loader.next(b)) {
        for (std::size_t j = 0; j < b.size(); ++j) {
            if (!b.valid()[j]) continue;
            const std::int64_t id = b.fields()[0].as<std::int64_t>()[j];
            const std::int64_t v = b.fields()[1].as<std::int64_t>()[j];
            const auto& s = b.fields()[2];
            const std::string text(reinterpret_cast<const char*>(s.data) + s.offsets[j],
                                   static_cast<std::size_t>(s.offsets[j + 1] - s.offsets[j]));
            bad += (v != id * 3 || text != "row" + std::to_string(id)) ? 1 : 0;
            mine.push_back(id);
        }
    }
    EXPECT_EQ(bad, 0u);
    auto all = all_ids(mine);
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, iota_ids(3000));
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(dir);
}

TEST(SqliteSnapshot, KeyRangesPushedIntoTheSqlYieldEveryRowOnce) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string dir = fresh_dir("range");
    const std::string db = dir + "/rows.db";
    // Keys spread over a wide span (negative, huge, repeated) and NULL keys.
    std::vector<std::pair<std::int64_t, std::string>> want;  // (key or -1 for NULL, s)
    if (world_rank() == 0) {
        sqlite3* h = nullptr;
        EXPECT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
        sqlite3_exec(h, "CREATE TABLE u(k INTEGER, s TEXT); BEGIN", nullptr, nullptr, nullptr);
        sqlite3_stmt* st = nullptr;
        sqlite3_prepare_v2(h, "INSERT INTO u VALUES(?, ?)", -1, &st, nullptr);
        for (int i = 0; i < 2000; ++i) {
            const std::string text = "s" + std::to_string(i);
            if (i % 97 == 0) {
                sqlite3_bind_null(st, 1);
            } else {
                const std::int64_t k = (i % 3 == 0 ? -1 : 1) * (std::int64_t{i} * 4611686018427LL) +
                                       (i % 5 == 0 ? 7 : 0);
                sqlite3_bind_int64(st, 1, k);
            }
            sqlite3_bind_text(st, 2, text.c_str(), -1, SQLITE_TRANSIENT);
            EXPECT_EQ(sqlite3_step(st), SQLITE_DONE);
            sqlite3_reset(st);
        }
        sqlite3_finalize(st);
        sqlite3_exec(h, "COMMIT", nullptr, nullptr, nullptr);
        sqlite3_close(h);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (std::uint64_t ranges : {1u, 7u, 64u}) {
        SqliteOptions so{db, "SELECT k, s FROM u ORDER BY k; -- by key", ""};
        so.range_column = "k";
        so.range_streams = ranges;
        so.nulls = SqliteNulls::mask;
        SqliteSource source(comm, so);
        EXPECT_EQ(source.num_streams(), ranges + 1);
        EXPECT_EQ(source.count_rows(), 2000u);
        // The CLI's count: each rank its own key ranges (stream s on rank s mod W), summed.
        std::uint64_t mine = 0;
        for (auto s = static_cast<std::size_t>(comm.rank()); s < source.num_streams();
             s += static_cast<std::size_t>(comm.size())) {
            mine += source.count_rows(s);
        }
        EXPECT_EQ(comm.allreduce_sum(mine), 2000u) << ranges << " ranges";
        LoaderOptions o;
        o.stream.sharding = StreamSharding::source;
        o.plan.batch_size = o.plan.budget.max_batch_samples = 32;
        Stream loader(comm, source, o);
        HostBatch b;
        std::vector<std::int64_t> rows;  // s's number, and the key (0 for NULL) beside it
        while (loader.next(b)) {
            for (std::size_t j = 0; j < b.size(); ++j) {
                if (!b.valid()[j]) continue;
                const auto& f = b.fields()[2];
                const std::string text(reinterpret_cast<const char*>(f.data) + f.offsets[j],
                                       static_cast<std::size_t>(f.offsets[j + 1] - f.offsets[j]));
                const int i = std::stoi(text.substr(1));
                const bool null_key = b.fields()[1].as<std::uint8_t>()[j] == 0;
                const std::int64_t k = b.fields()[0].as<std::int64_t>()[j];
                const std::int64_t expect_k =
                    (i % 3 == 0 ? -1 : 1) * (std::int64_t{i} * 4611686018427LL) +
                    (i % 5 == 0 ? 7 : 0);
                EXPECT_EQ(null_key, i % 97 == 0) << i;
                if (!null_key) EXPECT_EQ(k, expect_k) << i;
                rows.push_back(i);
            }
        }
        auto all = all_ids(rows);
        std::sort(all.begin(), all.end());
        EXPECT_EQ(all, iota_ids(2000)) << ranges << " ranges";
    }
    // Not an integer column: refused on every rank.
    SqliteOptions text_key{db, "SELECT k, s FROM u", ""};
    text_key.range_column = "s";
    EXPECT_THROW(SqliteSource(comm, text_key), ConfigError);
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(dir);
}

TEST(SqliteSnapshot, ConcurrentWalWriterEveryRankReadsOneSnapshot) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string dir = fresh_dir("wal");
    const std::string db = dir + "/rows.db";
    write_rows(db, 20000, true);
    // The writer: another process (Python's sqlite3), one row per commit, until told to stop.
    const std::string script = dir + "/writer.py";
    if (world_rank() == 0) {
        std::ofstream(script) << "import os, sqlite3, sys, time\n"
                                 "db = sqlite3.connect(sys.argv[1], isolation_level=None, "
                                 "timeout=30)\n"
                                 "i = 20000\n"
                                 "while not os.path.exists(sys.argv[2]):\n"
                                 "    db.execute('INSERT INTO t VALUES(?, ?, ?)', (i, i * 3, "
                                 "'row%d' % i))\n"
                                 "    i += 1\n"
                                 "    if i == 20020: open(sys.argv[3], 'w').close()\n"
                                 "    time.sleep(0.0003)\n"
                                 "db.close()\n"
                                 "open(sys.argv[4], 'w').close()\n";
        const std::string cmd = "python3 " + script + " " + db + " " + dir + "/stop " + dir +
                                "/started " + dir + "/done &";
        EXPECT_EQ(std::system(cmd.c_str()), 0);
        for (int t = 0; t < 30000 && !fs::exists(dir + "/started"); ++t) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        EXPECT_TRUE(fs::exists(dir + "/started"));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (int pass = 0; pass < 2; ++pass) {
        SqliteSource source(comm, {db, "SELECT id, v FROM t", ""});
        const std::uint64_t n = source.count_rows();
        const auto counts = min_max(n);
        EXPECT_EQ(counts.first, counts.second) << "ranks counted different snapshots";
        LoaderOptions o;
        o.stream.chunk_size = 50;
        o.plan.batch_size = o.plan.budget.max_batch_samples = 64;
        Stream loader(comm, source, o);
        EXPECT_GT(n, 20000u);
        // One snapshot: exactly the first n rows the writer had committed, each once; the
        // next epoch reads the same snapshot, whatever the writer committed meanwhile.
        for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
            loader.epoch(epoch);
            std::uint64_t steps = 0;
            auto all = all_ids(consume_ids(loader, steps));
            std::sort(all.begin(), all.end());
            EXPECT_EQ(all, iota_ids(static_cast<std::int64_t>(n)))
                << "pass " << pass << " epoch " << epoch;
        }
    }
    if (world_rank() == 0) {
        std::ofstream(dir + "/stop").close();
        for (int t = 0; t < 30000 && !fs::exists(dir + "/done"); ++t) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(dir);
}

TEST(SqliteSnapshot, WalOfAWriterKilledInsideATransactionOpens) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string dir = fresh_dir("dead");
    const std::string db = dir + "/rows.db";
    write_rows(db, 1000, true);
    int ok = 1;
    if (world_rank() == 0) {
        // A writer that dies (SIGKILL) inside a transaction, its WAL and -shm left behind.
        const std::string cmd =
            "python3 -c \"import os, signal, sqlite3; d = sqlite3.connect('" + db +
            "', isolation_level=None); d.execute('BEGIN'); "
            "[d.execute('INSERT INTO t VALUES(?, ?, ?)', (i, i * 3, 'x' * 1000)) for i in "
            "range(1000, 21000)]; os.kill(os.getpid(), signal.SIGKILL)\" 2>/dev/null";
        const int rc = std::system(cmd.c_str());
        // 20 MB, more than the page cache: spilled into the WAL before the writer died.
        ok = (rc != 0 && fs::exists(db + "-wal") && fs::file_size(db + "-wal") > 0) ? 1 : 0;
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    EXPECT_EQ(ok, 1) << "the killed writer did not leave a WAL";
    SqliteSource source(comm, {db, "SELECT id, v FROM t ORDER BY id", ""});
    EXPECT_EQ(source.count_rows(), 1000u);
    Stream loader(comm, source, LoaderOptions{});
    std::uint64_t steps = 0;
    auto all = all_ids(consume_ids(loader, steps));
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, iota_ids(1000));
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(dir);
}

}  // namespace
