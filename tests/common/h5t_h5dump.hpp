#pragma once
// Part of the shared MPI test helpers (namespace h5t, see tests/mpi/hdf5_test_util.hpp): known
// answers from independent readers, `h5dump` run on rank 0 with its output broadcast, and plain
// file reads.

#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "h5t_mpi.hpp"

namespace h5t {

inline std::string shell_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) {
        if (c == '\'')
            out += "'\\''";
        else
            out += c;
    }
    return out + "'";
}

/// Not collective: runs `cmd` through the shell, returns (exit status, stdout).
inline std::pair<int, std::string> run_command(const std::string& cmd) {
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return {-1, out};
    char buf[4096];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int status = ::pclose(p);
    return {status, out};
}

inline std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

inline std::string join(const std::vector<std::uint64_t>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s;
}

/// Collective: rank 0 runs `h5dump -d /DATASET [-s START -c COUNT] -y -w 0 -m %.17g -o TMP FILE`,
/// the data values (as text tokens) are broadcast to every rank. Empty when h5dump failed.
inline std::vector<std::string> h5dump_values(const std::string& file, const std::string& dataset,
                                              const std::vector<std::uint64_t>& start = {},
                                              const std::vector<std::uint64_t>& count = {}) {
    std::string text;
    if (rank() == 0) {
        char tmpl[] = "/tmp/mpistage_h5dump_XXXXXX";
        const int fd = ::mkstemp(tmpl);
        if (fd >= 0) {
            ::close(fd);
            std::string cmd = "h5dump -d " + shell_quote("/" + dataset);
            if (!start.empty()) cmd += " -s " + join(start) + " -c " + join(count);
            cmd += " -y -w 0 -m %.17g -o " + shell_quote(tmpl) + " " + shell_quote(file) +
                   " >/dev/null 2>&1";
            const auto [status, out] = run_command(cmd);
            text = status == 0 ? read_file(tmpl) : std::string();
            if (text.empty()) text = " ";
            std::remove(tmpl);
        }
    }
    text = bcast(text, 0);
    std::vector<std::string> tokens;
    std::string cur;
    for (char c : text) {
        if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r') {
            if (!cur.empty()) tokens.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    if (!cur.empty()) tokens.push_back(cur);
    return tokens;
}

template <class T>
std::vector<T> parse_as(const std::vector<std::string>& tokens) {
    std::vector<T> out;
    out.reserve(tokens.size());
    for (const auto& t : tokens) {
        if constexpr (std::is_floating_point_v<T>) {
            out.push_back(static_cast<T>(std::strtod(t.c_str(), nullptr)));
        } else if constexpr (std::is_signed_v<T>) {
            out.push_back(static_cast<T>(std::strtoll(t.c_str(), nullptr, 10)));
        } else {
            out.push_back(static_cast<T>(std::strtoull(t.c_str(), nullptr, 10)));
        }
    }
    return out;
}

}  // namespace h5t
