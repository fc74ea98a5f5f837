// fragscope symbolize TRACE [-o OUT] [--debug-dir DIR]: appends the SymbolTable a trace written
// without a collector (FRAGSCOPE_OUTPUT) lacks, read from the binaries on this machine, so that
// its reports keep their function names elsewhere.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "arg_reader.h"
#include "commands.h"
#include "exit_codes.h"
#include "fragscope/server/stream_session.h"
#include "fragscope/symbolize/symbol_table_builder.h"
#include "fragscope/trace/frame_reader.h"
#include "fragscope/trace/frame_writer.h"
#include "fragscope/trace/trace_format.h"
#include "report_output.h"
#include "trace_loading.h"

namespace fragscope::cli {

namespace {
constexpr char kUsage[] =
    "usage: fragscope symbolize TRACE [-o OUT] [--debug-dir DIR[:DIR...]]\n"
    "  reads the function, file and line of TRACE's stacks from the binaries on this machine\n"
    "  (those with the build-id the trace recorded) and stores them in the trace, so that its\n"
    "  reports keep them on another machine or after a rebuild. Run it where the trace was\n"
    "  taken. Without -o, TRACE is replaced (written to a temporary file, then renamed).\n"
    "  --debug-dir   folders with debug files: DIR/.build-id/xx/yyyy.debug, DIR/NAME.debug\n";

// A temporary file beside `out_path` (its name in *tmp), for a write that ends in a rename.
absl::StatusOr<int> CreateTemporaryBeside(const std::string& out_path, std::string* tmp) {
  *tmp = out_path + ".tmp-XXXXXX";
  const int fd = ::mkstemp(tmp->data());
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: cannot create a temporary file beside it (%s); choose -o in a folder you can write",
        out_path, std::strerror(errno)));
  }
  return fd;
}

// Renames the finished temporary file `tmp` to `out_path` (removing it if that fails).
absl::Status RenameOver(const std::string& tmp, const std::string& out_path) {
  if (::rename(tmp.c_str(), out_path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: cannot rename %s to it: %s", out_path, tmp, std::strerror(err)));
  }
  return absl::OkStatus();
}

// Writes `header`, the bytes of `in_path` after its header up to `keep`, then `tail`, to
// `out_path` through a temporary file in the same folder and a rename: `out_path` is either what
// it was or whole.
absl::Status WriteTraceWithTail(const std::string& in_path,
                                const unsigned char (&header)[kTraceHeaderBytes], uint64_t keep,
                                const std::string& tail, const std::string& out_path) {
  std::string tmp;
  absl::StatusOr<int> created = CreateTemporaryBeside(out_path, &tmp);
  if (!created.ok()) return created.status();
  const int out = *created;
  auto fail = [&](const std::string& what) {
    ::close(out);
    ::unlink(tmp.c_str());
    return absl::DataLossError(
        absl::StrFormat("%s: %s: %s; %s is unchanged", tmp, what, std::strerror(errno), out_path));
  };
  if (::write(out, header, kTraceHeaderBytes) != static_cast<ssize_t>(kTraceHeaderBytes)) {
    return fail("writing");
  }
  int in = ::open(in_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return fail("cannot read " + in_path);
  if (::lseek(in, kTraceHeaderBytes, SEEK_SET) != static_cast<off_t>(kTraceHeaderBytes)) {
    ::close(in);
    return fail("reading " + in_path);
  }
  std::vector<char> chunk(1 << 20);
  uint64_t copied = kTraceHeaderBytes;
  while (copied < keep) {
    const std::size_t want = std::min<uint64_t>(chunk.size(), keep - copied);
    ssize_t n = ::read(in, chunk.data(), want);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(in);
      return fail("reading " + in_path);
    }
    if (::write(out, chunk.data(), n) != n) {
      ::close(in);
      return fail("writing");
    }
    copied += static_cast<uint64_t>(n);
  }
  ::close(in);
  if (!tail.empty() &&
      ::write(out, tail.data(), tail.size()) != static_cast<ssize_t>(tail.size())) {
    return fail("writing");
  }
  if (::fchmod(out, 0644) != 0 || ::fsync(out) != 0) return fail("writing");
  if (::close(out) != 0) {
    ::unlink(tmp.c_str());
    return absl::DataLossError(absl::StrFormat("%s: closing: %s", tmp, std::strerror(errno)));
  }
  return RenameOver(tmp, out_path);
}

// The same for a compressed trace, through its decompression: its frames up to `keep` (an
// offset of the decompressed trace), then `tail`, into a new compressed file.
absl::Status WriteCompressedTraceWithTail(const std::string& in_path, uint64_t keep,
                                          const std::string& tail, const std::string& out_path) {
  std::string tmp;
  absl::StatusOr<int> created = CreateTemporaryBeside(out_path, &tmp);
  if (!created.ok()) return created.status();
  ::close(*created);  // FrameWriter opens it again
  auto fail = [&](const absl::Status& s) {
    ::unlink(tmp.c_str());
    return absl::DataLossError(absl::StrFormat("%s; %s is unchanged", s.message(), out_path));
  };
  absl::StatusOr<FrameReader> in = FrameReader::OpenFile(in_path);
  if (!in.ok()) return fail(in.status());
  absl::StatusOr<FrameWriter> out = FrameWriter::CreateFile(tmp, TraceCompression::kZstd);
  if (!out.ok()) return fail(out.status());
  std::string frames;  // as they are in the trace
  in->set_copy(&frames);
  v1::Frame frame;
  while (in->good_offset() < keep && in->Next(&frame) == FrameReader::Result::kFrame) {
    if (frames.size() < (1 << 20)) continue;
    if (absl::Status s = out->WriteFramed(frames); !s.ok()) return fail(s);
    frames.clear();
  }
  if (in->good_offset() < keep) return fail(absl::DataLossError(in->error()));
  if (absl::Status s = out->WriteFramed(frames); !s.ok()) return fail(s);
  if (absl::Status s = out->WriteFramed(tail); !s.ok()) return fail(s);
  if (absl::Status s = out->Sync(); !s.ok()) return fail(s);
  if (absl::Status s = out->Close(); !s.ok()) return fail(s);
  return RenameOver(tmp, out_path);
}

}  // namespace

int SymbolizeCommand(const std::vector<std::string>& args) {
  std::string out_path, debug_dirs;
  ArgReader reader("symbolize", args);
  reader.Option("output", "o", &out_path);
  reader.Option("debug-dir", "", &debug_dirs);
  if (std::optional<int> exit = reader.ParseOrExit(kUsage)) return *exit;
  if (reader.positionals().size() != 1 || reader.saw_dashdash()) {
    std::fprintf(stderr, "fragscope symbolize: expected one TRACE (fragscope symbolize --help)\n");
    return kExitUsage;
  }
  const std::string& path = reader.positionals()[0];
  if (out_path == "-") {
    std::fprintf(stderr,
                 "fragscope symbolize: -o - : a trace is binary; give -o a file (fragscope "
                 "symbolize --help)\n");
    return kExitUsage;
  }
  if (!out_path.empty() && OutputIsAnInput("symbolize", {{"-o", &out_path}}, {path})) {
    return kExitUsage;
  }
  if (LooksLikePickle(path)) {
    std::fprintf(stderr,
                 "fragscope symbolize: %s is a PyTorch snapshot: its frames are text already; "
                 "`fragscope import` it, nothing to symbolize\n",
                 path.c_str());
    return kExitBadInput;
  }
  auto file = FrameReader::OpenFile(path);
  if (!file.ok()) {
    std::fprintf(stderr, "fragscope symbolize: %s\n", std::string(file.status().message()).c_str());
    return kExitBadInput;
  }
  StreamSession session(ModelOptions{}, nullptr);
  const StreamOutcome outcome = session.Run(*file);
  if (outcome.result == FrameReader::Result::kError && outcome.frames == 0) {
    std::fprintf(stderr, "fragscope symbolize: %s\n", outcome.error.c_str());
    return kExitBadInput;
  }
  const bool damaged = outcome.result != FrameReader::Result::kEnd;
  if (outcome.result == FrameReader::Result::kError && out_path.empty()) {
    // Bytes after a malformed frame would be dropped by rewriting the trace in place.
    std::fprintf(stderr,
                 "fragscope symbolize: %s\n  %s is left as it is; give -o OUT to write its "
                 "whole frames and their symbols to another file\n",
                 outcome.error.c_str(), path.c_str());
    return kExitBadInput;
  }
  std::vector<std::string> dirs;
  for (absl::string_view d : absl::StrSplit(debug_dirs, ':', absl::SkipEmpty())) {
    dirs.emplace_back(d);
  }
  const ModelSummary summary = session.model().Summarize();
  SymbolTableStats stats;
  const std::vector<v1::Frame> frames =
      BuildSymbolTableFrames(session.model().Modules(), session.model().StackPcs(), dirs,
                             summary.stored_symbols.get(), &stats);
  const std::string target = out_path.empty() ? path : out_path;
  if (frames.empty() && !damaged && out_path.empty()) {
    if (stats.pcs_without_file > 0) {
      std::fprintf(stderr,
                   "fragscope symbolize: %s: none of the %llu return addresses left to name lies "
                   "in a module that is on this machine with the build-id the trace recorded; run "
                   "it where the trace was taken, or give --debug-dir; %s is unchanged\n",
                   path.c_str(), static_cast<unsigned long long>(stats.pcs_without_file),
                   path.c_str());
      return kExitBadInput;
    }
    std::fprintf(stderr, "fragscope symbolize: %s already names every frame it can; unchanged\n",
                 path.c_str());
    return kExitOk;
  }
  std::string tail;
  for (const v1::Frame& f : frames) AppendFramed(f.SerializeAsString(), &tail);
  // The header says the newer minor the appended frames need (readers accept any minor).
  unsigned char header[kTraceHeaderBytes];
  EncodeTraceHeader(file->major(), std::max(file->minor(), kFormatMinor), header);
  const absl::Status written =
      file->compressed() ? WriteCompressedTraceWithTail(path, file->good_offset(), tail, target)
                         : WriteTraceWithTail(path, header, file->good_offset(), tail, target);
  if (!written.ok()) {
    std::fprintf(stderr, "fragscope symbolize: %s\n", std::string(written.message()).c_str());
    return kExitBadInput;
  }
  std::fprintf(stderr, "fragscope symbolize: wrote %s: %llu return addresses named", target.c_str(),
               static_cast<unsigned long long>(stats.pcs_symbolized));
  if (stats.pcs_without_file > 0) {
    std::fprintf(stderr,
                 ", %llu not (their modules are not here with the recorded build-id: reports "
                 "show them as module+offset)",
                 static_cast<unsigned long long>(stats.pcs_without_file));
  }
  std::fprintf(stderr, "\n");
  if (damaged) {
    std::fprintf(stderr,
                 "fragscope symbolize: warning: %s\n"
                 "  %s holds the trace up to its last whole frame, then the symbols\n",
                 outcome.error.c_str(), target.c_str());
    return kExitBadInput;
  }
  return kExitOk;
}

}  // namespace fragscope::cli
