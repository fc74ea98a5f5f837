// The SymbolTable frames a trace file carries (proto/fragscope.proto): the function, file and
// line of a stream's return addresses, read on the machine where it ran, so that the trace keeps
// its names where its binaries are not (another machine, a rebuild, a deleted build folder).
#ifndef FRAGSCOPE_SYMBOLIZE_SYMBOL_TABLE_BUILDER_H_
#define FRAGSCOPE_SYMBOLIZE_SYMBOL_TABLE_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "fragscope.pb.h"
#include "fragscope/model/model_summary.h"

namespace fragscope {

class ProcessModel;

struct SymbolTableStats {
  uint64_t pcs_symbolized = 0;    // pcs whose module file (with the recorded build-id) was read
  uint64_t pcs_without_file = 0;  // pcs of modules missing here or rebuilt: not in the table
};

// Resolves `pcs` (a stream's return addresses) with `modules` (its module map) from the files
// on this machine, and from `debug_dirs` as ModuleSymbolizer does. Only modules whose file has
// the recorded build-id are resolved; a pc of any other module is left out, never guessed. The
// table is split into frames of at most a few MiB each (far below the 64 MiB frame limit). No
// frame when no pc could be resolved. `skip`: pcs already stored (left out as well).
std::vector<v1::Frame> BuildSymbolTableFrames(const std::vector<ModuleInfo>& modules,
                                              const std::vector<uint64_t>& pcs,
                                              const std::vector<std::string>& debug_dirs = {},
                                              const StoredSymbols* skip = nullptr,
                                              SymbolTableStats* stats = nullptr);

// The same for a stream's model as it ended: what `fragscope run` and fragscope-collector append
// to the trace they write (StreamSession::TraceEpilogue).
std::vector<v1::Frame> SymbolTableFramesFor(const ProcessModel& model);

}  // namespace fragscope

#endif  // FRAGSCOPE_SYMBOLIZE_SYMBOL_TABLE_BUILDER_H_
