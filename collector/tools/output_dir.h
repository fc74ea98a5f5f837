// The daemon's output folder (--dir), made again when it is removed while the daemon runs (a
// cleanup cron, `rm -rf traces/`): otherwise every later trace, post-mortem and report is lost,
// each failing with a line of its own that does not say why.
//
// Thread-safe.
#ifndef FRAGSCOPE_COLLECTOR_TOOLS_OUTPUT_DIR_H_
#define FRAGSCOPE_COLLECTOR_TOOLS_OUTPUT_DIR_H_

#include <sys/types.h>

#include <functional>
#include <mutex>
#include <string>

namespace fragscope {

class OutputDir {
 public:
  // `mode`: the one the folder was created with at start. `say` writes one line on stderr;
  // `made_again_note` ends the line that says the folder was made again (what goes there now,
  // what was lost).
  OutputDir(std::string path, mode_t mode, std::string made_again_note,
            std::function<void(const std::string& line)> say);

  // Makes sure the folder exists; costs a stat when it does. When it is gone: creates it again
  // (and any parents gone with it) and says so, once per removal; when that fails, says so once
  // until the folder exists again. True when this call created it, so that a write that just
  // failed there is worth trying again.
  bool Ensure();

  const std::string& path() const { return path_; }

 private:
  const std::string path_;
  const mode_t mode_;
  const std::string made_again_note_;
  const std::function<void(const std::string&)> say_;
  std::mutex mu_;
  bool said_cannot_ = false;  // guarded by mu_
};

}  // namespace fragscope

#endif  // FRAGSCOPE_COLLECTOR_TOOLS_OUTPUT_DIR_H_
