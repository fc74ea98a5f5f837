#include "trace_loading.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "fragscope/model/process_model.h"
#include "fragscope/server/stream_session.h"
#include "fragscope/torch/snapshot_importer.h"
#include "fragscope/trace/frame_reader.h"

namespace fragscope::cli {

bool LooksLikePickle(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char first = 0;
  // Every pickle of protocol 2 and later starts with the PROTO opcode.
  return in.get(first) && static_cast<unsigned char>(first) == 0x80;
}

namespace {

// A trace that can be read only once, in order (`-` for stdin, a pipe, a FIFO), copied into an
// anonymous memory file that can be read again: what kind of file it is is decided by its first
// byte, and a pickle is read whole. Returns the descriptor, or an error naming `name`.
absl::StatusOr<int> SpoolStream(int in, const std::string& name) {
  const int fd = memfd_create("fragscope-trace", MFD_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(absl::StrFormat("%s: cannot make a memory file to read it into: %s",
                                               name, std::strerror(errno)));
  }
  char buf[1 << 16];
  for (;;) {
    ssize_t n = read(in, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      close(fd);
      return absl::DataLossError(
          absl::StrFormat("%s: read failed: %s", name, std::strerror(error)));
    }
    if (n == 0) break;
    for (ssize_t done = 0; done < n;) {
      ssize_t w = write(fd, buf + done, static_cast<std::size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        const int error = errno;
        close(fd);
        return absl::ResourceExhaustedError(
            absl::StrFormat("%s: cannot hold it in memory: %s", name, std::strerror(error)));
      }
      done += w;
    }
  }
  return fd;
}

absl::StatusOr<LoadedTrace> LoadTraceFile(const std::string& path, const ModelOptions& options,
                                          const std::function<void(const ProcessModel&)>& inspect);

}  // namespace

absl::StatusOr<LoadedTrace> LoadTrace(const std::string& path, const ModelOptions& options,
                                      const std::function<void(const ProcessModel&)>& inspect) {
  struct stat st {};
  const bool is_stdin = path == "-";
  if (!is_stdin && (stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode))) {
    return LoadTraceFile(path, options, inspect);
  }
  const std::string name = is_stdin ? "stdin" : path;
  int in = is_stdin ? dup(0) : open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) {
    return absl::NotFoundError(absl::StrFormat("%s: cannot open: %s", name, std::strerror(errno)));
  }
  absl::StatusOr<int> spooled = SpoolStream(in, name);
  close(in);
  if (!spooled.ok()) return spooled.status();
  // Opened again by this name, the memory file reads from its start.
  const std::string spool_path = absl::StrFormat("/proc/self/fd/%d", *spooled);
  absl::StatusOr<LoadedTrace> loaded = LoadTraceFile(spool_path, options, inspect);
  close(*spooled);
  // Messages name what the user gave, not the memory file.
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        absl::StrReplaceAll(loaded.status().message(), {{spool_path, name}}));
  }
  loaded->damage = absl::StrReplaceAll(loaded->damage, {{spool_path, name}});
  return loaded;
}

namespace {

absl::StatusOr<LoadedTrace> LoadTraceFile(const std::string& path, const ModelOptions& options,
                                          const std::function<void(const ProcessModel&)>& inspect) {
  LoadedTrace loaded;
  if (LooksLikePickle(path)) {
    auto frames = torch::ImportTorchSnapshotFile(path, torch::ImportOptions{});
    if (!frames.ok()) return frames.status();
    ProcessModel model(options);
    for (const v1::Frame& f : *frames) model.Apply(f);
    if (inspect) inspect(model);
    loaded.summary = model.Summarize();
    return loaded;
  }
  auto reader = FrameReader::OpenFile(path);
  if (!reader.ok()) return reader.status();
  StreamSession session(options, nullptr);
  StreamOutcome outcome = session.Run(*reader);
  if (outcome.result == FrameReader::Result::kError && outcome.frames == 0) {
    return absl::DataLossError(outcome.error);
  }
  if (outcome.result != FrameReader::Result::kEnd) loaded.damage = outcome.error;
  if (inspect) inspect(session.model());
  loaded.summary = session.model().Summarize();
  return loaded;
}

}  // namespace

std::vector<std::string> LoadTraces(
    const std::vector<std::string>& paths, const ModelOptions& options,
    const std::function<void(const ProcessModel&)>& inspect,
    const std::function<void(const std::string& path, LoadedTrace loaded)>& take) {
  std::vector<std::string> problems;
  for (const std::string& path : paths) {
    absl::StatusOr<LoadedTrace> loaded = LoadTrace(path, options, inspect);
    if (!loaded.ok()) {
      problems.push_back(std::string(loaded.status().message()));
      continue;
    }
    if (!loaded->damage.empty()) problems.push_back(loaded->damage);  // names the file
    take(path, std::move(*loaded));
  }
  return problems;
}

}  // namespace fragscope::cli
