// Every file fragscope creates (traces, reports, exports, JUnit XML, post-mortems) is created
// here, with an explicit mode: std::ofstream and fopen create 0666 less the umask, which under
// umask 0 is a world-writable file whose report or trace anyone could alter.
#ifndef FRAGSCOPE_TRACE_OUTPUT_FILE_H_
#define FRAGSCOPE_TRACE_OUTPUT_FILE_H_

#include <sys/types.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fragscope {

// Readable by others (reports are shared), writable only by the owner.
inline constexpr mode_t kOutputFileMode = 0644;

// Creates or truncates `path` for writing (O_CLOEXEC) and returns the descriptor. The file's
// mode is never wider than `mode`, whatever the umask: a new file gets `mode` less the umask,
// and an existing file of ours with more bits (say 0666 from an older fragscope) is narrowed.
// Errors name the path and the reason.
absl::StatusOr<int> CreateOutputFile(const std::string& path, mode_t mode = kOutputFileMode);

// CreateOutputFile, then writes all of `bytes` and closes. Errors name the path and the
// reason; a regular file that could not be written whole is removed (never left cut or empty).
absl::Status WriteOutputFile(const std::string& path, std::string_view bytes,
                             mode_t mode = kOutputFileMode);

// Whether CreateOutputFile(path) would succeed, for commands that write a file only at the end
// of a long run (`run -o/--report`, `attach --report`) and so must refuse a bad path before it.
// Leaves the file system as it found it: an existing file is opened for writing without being
// truncated, a new one is created and removed again. Errors read as CreateOutputFile's.
absl::Status CheckOutputFileWritable(const std::string& path);

}  // namespace fragscope

#endif  // FRAGSCOPE_TRACE_OUTPUT_FILE_H_
