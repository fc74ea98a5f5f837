// Fuzz target: FrameReader over arbitrary bytes.
//
// The bytes are read twice: from an in-memory file (what `fragscope report trace.fsc` reads) and
// from a stream socket fed in small uneven chunks by another thread (what the collector reads
// from a live agent, where every read() may return a partial frame). Besides surviving, both
// must see exactly the same frames and end the same way, at the same offset with the same
// message: a file and a socket carry the same bytes (trace_format.h), so any difference is a bug
// in the buffering.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fragscope.pb.h"
#include "fragscope/trace/frame_reader.h"
#include "fragscope/trace/trace_format.h"
#include "fuzz_util.h"

namespace {

using fragscope::FrameReader;

struct Outcome {
  bool opened = false;
  std::string open_error;
  std::vector<std::string> frames;  // serialized, as parsed
  FrameReader::Result last = FrameReader::Result::kEnd;
  std::string error;
  uint64_t good_offset = 0;
  uint64_t frames_read = 0;
  uint64_t wire_frames = 0;  // frames returned that moved good_offset (a packed run counts once)
};

// Reads everything from `fd` (taking ownership) and checks the reader's own promises.
Outcome ReadAll(int fd, size_t input_size) {
  Outcome out;
  absl::StatusOr<FrameReader> opened = FrameReader::FromFd(fd, "fuzz");
  if (!opened.ok()) {
    out.open_error = std::string(opened.status().message());
    return out;
  }
  out.opened = true;
  // Moving is part of the API (StatusOr hands the reader out by move); read through a moved-to
  // reader so a member forgotten in the move shows up.
  FrameReader reader = std::move(*opened);
  FUZZ_CHECK(reader.major() >= 1 && reader.major() <= fragscope::kFormatMajor, "major %u",
             reader.major());
  FUZZ_CHECK(reader.good_offset() == fragscope::kTraceHeaderBytes, "good_offset %llu after header",
             static_cast<unsigned long long>(reader.good_offset()));
  fragscope::v1::Frame frame;
  for (;;) {
    const uint64_t before = reader.good_offset();
    FrameReader::Result r = reader.Next(&frame);
    if (r == FrameReader::Result::kFrame) {
      // The events of a packed run share their frame's offset; a compressed trace's offsets
      // are those of its decompressed bytes.
      FUZZ_CHECK(reader.good_offset() >= before &&
                     (reader.compressed() || reader.good_offset() <= input_size),
                 "good_offset %llu -> %llu, input %zu", static_cast<unsigned long long>(before),
                 static_cast<unsigned long long>(reader.good_offset()), input_size);
      if (reader.good_offset() > before) ++out.wire_frames;
      std::string bytes;
      frame.SerializeToString(&bytes);
      out.frames.push_back(std::move(bytes));
      continue;
    }
    FUZZ_CHECK(reader.good_offset() == before, "good_offset moved on a non-frame result");
    if (r == FrameReader::Result::kEnd) {
      FUZZ_CHECK(reader.compressed() || reader.good_offset() == input_size,
                 "clean end at %llu of %zu bytes",
                 static_cast<unsigned long long>(reader.good_offset()), input_size);
    } else {
      FUZZ_CHECK(!reader.error().empty(), "result %d without an error message",
                 static_cast<int>(r));
    }
    out.last = r;
    out.error = reader.error();
    break;
  }
  out.good_offset = reader.good_offset();
  out.frames_read = reader.frames_read();
  FUZZ_CHECK(out.frames_read == out.wire_frames, "frames_read %llu, frames taken %llu",
             static_cast<unsigned long long>(out.frames_read),
             static_cast<unsigned long long>(out.wire_frames));
  return out;
}

// Writes `data` into `fd` in chunks of 1..~4 KiB chosen from the input itself (deterministic
// per input), then closes it. Stops quietly when the reader has hung up.
void FeedInChunks(int fd, const uint8_t* data, size_t size) {
  uint32_t state = 2166136261u ^ static_cast<uint32_t>(size);
  for (size_t i = 0; i < size && i < 64; ++i) state = (state ^ data[i]) * 16777619u;
  size_t done = 0;
  while (done < size) {
    state = state * 1103515245u + 12345u;
    // Some tiny chunks (splitting varints and the header), mostly larger ones: each chunk costs
    // a context switch, and the reader sees partial frames either way.
    size_t chunk = (state >> 16) % 4 == 0 ? 1 + (state >> 8) % 17 : 1 + (state >> 8) % 1024;
    if (chunk > size - done) chunk = size - done;
    ssize_t n = send(fd, data + done, chunk, MSG_NOSIGNAL);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Outcome from_file = ReadAll(fragscope::fuzz::MemFdWith(data, size), size);

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    std::perror("socketpair");
    std::abort();
  }
  std::thread writer(FeedInChunks, sv[1], data, size);
  Outcome from_socket = ReadAll(sv[0], size);
  // The reader may stop early (malformed frame); it closed sv[0] when ReadAll returned, so a
  // writer still sending gets EPIPE instead of blocking on a full socket buffer.
  writer.join();

  FUZZ_CHECK(from_file.opened == from_socket.opened, "opened: file %d, socket %d", from_file.opened,
             from_socket.opened);
  FUZZ_CHECK(from_file.open_error == from_socket.open_error, "open error: file '%s', socket '%s'",
             from_file.open_error.c_str(), from_socket.open_error.c_str());
  FUZZ_CHECK(from_file.frames == from_socket.frames, "frames differ: file %zu, socket %zu",
             from_file.frames.size(), from_socket.frames.size());
  FUZZ_CHECK(from_file.last == from_socket.last, "last result: file %d, socket %d",
             static_cast<int>(from_file.last), static_cast<int>(from_socket.last));
  FUZZ_CHECK(from_file.error == from_socket.error, "error: file '%s', socket '%s'",
             from_file.error.c_str(), from_socket.error.c_str());
  FUZZ_CHECK(from_file.good_offset == from_socket.good_offset, "good_offset differs");
  return 0;
}
