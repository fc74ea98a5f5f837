// Debug information fetched by build-id from the debuginfod servers in DEBUGINFOD_URLS, through
// elfutils' client library (libdebuginfod.so.1) where it is installed: opened with dlopen at
// first use, so fragscope neither needs it nor asks anything of a machine without it. Files land
// in the client's cache (DEBUGINFOD_CACHE_PATH, else ~/.cache/debuginfod_client).
//
// Thread safety: none; one fetcher per symbolizer.
#ifndef FRAGSCOPE_SYMBOLIZE_DEBUGINFOD_FETCHER_H_
#define FRAGSCOPE_SYMBOLIZE_DEBUGINFOD_FETCHER_H_

#include <optional>
#include <string>

namespace fragscope {

class DebuginfodFetcher {
 public:
  DebuginfodFetcher() = default;
  ~DebuginfodFetcher();
  DebuginfodFetcher(const DebuginfodFetcher&) = delete;
  DebuginfodFetcher& operator=(const DebuginfodFetcher&) = delete;

  // The path of a local file with the debug information of the ELF whose GNU build-id is
  // `build_id` (raw bytes), or nullopt: DEBUGINFOD_URLS unset or empty, the library missing,
  // or no server has it. Each build-id is asked once.
  std::optional<std::string> FindDebugInfo(const std::string& build_id);

 private:
  bool Load();

  bool tried_load_ = false;
  void* library_ = nullptr;
  void* client_ = nullptr;
  int (*find_debuginfo_)(void*, const unsigned char*, int, char**) = nullptr;
  void (*end_)(void*) = nullptr;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_SYMBOLIZE_DEBUGINFOD_FETCHER_H_
