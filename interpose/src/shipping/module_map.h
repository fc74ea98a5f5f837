// The module map the collector needs to symbolize stacks: for every loaded ELF object its path,
// GNU build-id, load address and size, read with dl_iterate_phdr on the drain thread. Only
// modules not yet sent on this stream are encoded; dlopen/dlclose are noticed through the
// loader's add/remove counters.
//
// Thread safety: none (drain thread). No allocation.
#ifndef FRAGSCOPE_INTERPOSE_MODULE_MAP_H_
#define FRAGSCOPE_INTERPOSE_MODULE_MAP_H_

#include <cstddef>
#include <cstdint>

#include "shipping/wire_encoder.h"

namespace fragscope::agent {

class ModuleTracker {
 public:
  static constexpr size_t kMaxModules = 8192;

  // Path reported for the main program (dl_iterate_phdr names it "").
  void SetMainProgramPath(const char* path) { main_path_ = path; }

  // True if modules were loaded or unloaded since the last Encode (cheap).
  bool Changed() const;
  // Appends one ModuleMap frame with the modules not sent yet (nothing if none). Returns false
  // if the writer ran out of room (nothing appended; retry with more room).
  bool EncodeNew(WireWriter& w);
  // Starts over: every module is unsent (a new stream).
  void Reset();

 private:
  struct Sent {
    uint64_t load_address;
    uint64_t name_hash;
  };
  const char* main_path_ = "";
  Sent sent_[kMaxModules] = {};
  size_t sent_count_ = 0;
  unsigned long long seen_adds_ = ~0ull;
  unsigned long long seen_subs_ = ~0ull;
};

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_MODULE_MAP_H_
