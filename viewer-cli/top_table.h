// The table `fragscope top` prints, from the collector's JSON answer (session_server.h): one row
// per process and device. Separate from the command so tests can render it without a daemon.
#ifndef FRAGSCOPE_VIEWER_CLI_TOP_TABLE_H_
#define FRAGSCOPE_VIEWER_CLI_TOP_TABLE_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace fragscope::cli {

// Event counts seen at the previous refresh, by pid: (events, seconds since start).
using TopRates = std::map<uint64_t, std::pair<uint64_t, double>>;

// The table for `doc` at `now` seconds, `pid_filter` > 0 keeping one process. Rates are events
// per second since the previous call with the same `rates`, which it updates ("-" before there
// was one). The site column names a process's top site by its first frame outside fragscope
// (function where the collector symbolized it, else module+offset). Figures that are
// not measured now are never shown as if they were: unknown bytes read "unknown", and a process
// whose sub-allocator blocks are known at syncs only (PyTorch's snapshot diffs) and not fresh
// has its block columns starred, with a note under the table.
std::string TopTable(const nlohmann::json& doc, long pid_filter, TopRates* rates, double now);

// `text` with every line cut to `columns` display columns, a cut line ending in "…", so that a
// terminal does not wrap the table's rows (the site column is as long as a function's name).
// `columns` <= 0: unchanged.
std::string FitToWidth(const std::string& text, int columns);

}  // namespace fragscope::cli

#endif  // FRAGSCOPE_VIEWER_CLI_TOP_TABLE_H_
