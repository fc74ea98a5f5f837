// The names of the files fragscope-collector writes for each stream (trace, reports,
// post-mortems), such that two streams never share one: two processes with the same executable
// and pid (separate pid namespaces, where both are pid 1, or a pid reused later) each get their
// own files, and nothing a stream wrote earlier is replaced.
//
// Thread-safe: every method takes the registry's lock (streams run on threads of their own).
#ifndef FRAGSCOPE_COLLECTOR_TOOLS_STREAM_FILE_NAMES_H_
#define FRAGSCOPE_COLLECTOR_TOOLS_STREAM_FILE_NAMES_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace fragscope {

class StreamFileNames {
 public:
  // `dir`: where the files go.
  explicit StreamFileNames(std::string dir);

  // The name of stream `stream` (any stable identity, e.g. its session's address) whose plain
  // name is `base`, chosen at the stream's first call and kept after: `base` when no stream
  // holds it and no file `base.fst` or `base.report.txt` exists in the folder, else
  // `base.t<start_s>` (the process's start, seconds since the epoch), then `base.t<start_s>-2`,
  // `-3`... With `reserve_trace`, the chosen name's `.fst` is created empty (O_EXCL), so the
  // name holds on disk against other collectors writing into the same folder.
  std::string NameFor(const void* stream, const std::string& base, uint64_t start_s,
                      bool reserve_trace);
  // The name `stream` was given, or "" before NameFor.
  std::string Find(const void* stream) const;
  // Renames a stream (its rank became known after its Hello), once the caller has moved the
  // stream's trace to `name` (or keeps none): true, unless another stream holds `name` or a
  // report of that name exists; then false and the old name stays.
  bool Rename(const void* stream, const std::string& name);
  // The stream ended and its files are written: its name stays taken on disk, not in memory.
  void Forget(const void* stream);

 private:
  bool TakenLocked(const std::string& name) const;

  const std::string dir_;
  mutable std::mutex mu_;
  std::map<const void*, std::string> names_;
  std::set<std::string> held_;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_COLLECTOR_TOOLS_STREAM_FILE_NAMES_H_
