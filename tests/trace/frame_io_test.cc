// Trace framing: round trips, and every kind of damaged input gives a clear result, never a
// crash or lost frames.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fragscope.pb.h"
#include "fragscope/trace/frame_reader.h"
#include "fragscope/trace/frame_writer.h"
#include "fragscope/trace/trace_format.h"
#include "gtest/gtest.h"

namespace fragscope {
namespace {

using Result = FrameReader::Result;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/fragscope-trace-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf " + path_).c_str()); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::vector<v1::Frame> SampleFrames(int n) {
  std::vector<v1::Frame> frames;
  v1::Frame hello;
  hello.mutable_hello()->set_pid(1234);
  hello.mutable_hello()->set_exe("/bin/train");
  frames.push_back(hello);
  for (int i = 0; i < n; ++i) {
    v1::Frame f;
    auto* a = f.mutable_alloc();
    a->set_seq(i + 1);
    a->set_api(v1::API_cudaMalloc);
    a->set_address(0x7f0000000000ull + (static_cast<uint64_t>(i) << 21));
    a->set_size(uint64_t{1} << (i % 30));
    a->set_device(i % 3);
    frames.push_back(f);
  }
  return frames;
}

// Plain unless asked: most tests here look at the bytes of the format itself.
void WriteFrames(const std::string& path, const std::vector<v1::Frame>& frames,
                 TraceCompression compression = TraceCompression::kNone, size_t flush_every = 0) {
  auto writer = FrameWriter::CreateFile(path, compression);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (size_t i = 0; i < frames.size(); ++i) {
    ASSERT_TRUE(writer->Write(frames[i]).ok());
    if (flush_every > 0 && (i + 1) % flush_every == 0) {
      ASSERT_TRUE(writer->Flush().ok());
    }
  }
  ASSERT_TRUE(writer->Close().ok());
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Reads all frames; returns the final result.
Result ReadFrames(const std::string& path, std::vector<v1::Frame>* out, std::string* error) {
  auto reader = FrameReader::OpenFile(path);
  if (!reader.ok()) {
    *error = std::string(reader.status().message());
    return Result::kError;
  }
  v1::Frame f;
  Result r;
  while ((r = reader->Next(&f)) == Result::kFrame) out->push_back(f);
  *error = reader->error();
  return r;
}

TEST(FrameIo, RoundTripKeepsEveryFrameInOrder) {
  TempDir dir;
  auto frames = SampleFrames(5000);  // several read buffers' worth
  WriteFrames(dir.File("t.fst"), frames);
  std::vector<v1::Frame> got;
  std::string error;
  ASSERT_EQ(ReadFrames(dir.File("t.fst"), &got, &error), Result::kEnd) << error;
  ASSERT_EQ(got.size(), frames.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    ASSERT_EQ(got[i].SerializeAsString(), frames[i].SerializeAsString()) << "frame " << i;
  }
}

TEST(FrameIo, ACompressedTraceReadsAsThePlainOneAndIsSmaller) {
  TempDir dir;
  auto frames = SampleFrames(5000);
  WriteFrames(dir.File("plain.fst"), frames);
  WriteFrames(dir.File("z.fst"), frames, TraceCompression::kZstd, 700);
  const std::string z = ReadAll(dir.File("z.fst"));
  EXPECT_EQ(z.substr(0, 4), std::string("\x28\xb5\x2f\xfd", 4)) << "a zstd file";
  EXPECT_LT(z.size() * 2, ReadAll(dir.File("plain.fst")).size());
  std::vector<v1::Frame> got;
  std::string error;
  ASSERT_EQ(ReadFrames(dir.File("z.fst"), &got, &error), Result::kEnd) << error;
  ASSERT_EQ(got.size(), frames.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    ASSERT_EQ(got[i].SerializeAsString(), frames[i].SerializeAsString()) << "frame " << i;
  }
  auto reader = FrameReader::OpenFile(dir.File("z.fst"));
  ASSERT_TRUE(reader.ok());
  EXPECT_TRUE(reader->compressed());
  EXPECT_EQ(reader->major(), kFormatMajor);
}

// Each flush ends a zstd frame. A file cut at a flush reads like a plain trace that stopped
// between frames (kEnd, everything up to the flush); cut anywhere else, the reader says it was
// truncated and still returns every frame of the zstd frames before the cut.
TEST(FrameIo, ACompressedTraceCutAnywhereKeepsWhatWasFlushedBeforeTheCut) {
  TempDir dir;
  auto frames = SampleFrames(60);
  // Flush sizes: the file's length after each flush, and how many frames it then held.
  std::vector<std::pair<size_t, size_t>> flushes;
  {
    auto writer = FrameWriter::CreateFile(dir.File("z.fst"), TraceCompression::kZstd);
    ASSERT_TRUE(writer.ok());
    flushes.push_back({writer->bytes_written(), 0});
    for (size_t i = 0; i < frames.size(); ++i) {
      ASSERT_TRUE(writer->Write(frames[i]).ok());
      if ((i + 1) % 10 == 0) {
        ASSERT_TRUE(writer->Flush().ok());
        flushes.push_back({writer->bytes_written(), i + 1});
      }
    }
    ASSERT_TRUE(writer->Flush().ok());
    if (writer->bytes_written() != flushes.back().first) {
      flushes.push_back({writer->bytes_written(), frames.size()});
    }
    ASSERT_TRUE(writer->Close().ok());
  }
  const std::string bytes = ReadAll(dir.File("z.fst"));
  ASSERT_EQ(bytes.size(), flushes.back().first);
  for (size_t cut = flushes[0].first; cut <= bytes.size(); ++cut) {
    WriteBytes(dir.File("cut.fst"), bytes.substr(0, cut));
    size_t whole = 0;
    bool at_flush = false;
    for (const auto& [end, held] : flushes) {
      if (end <= cut) whole = held;
      at_flush = at_flush || end == cut;
    }
    std::vector<v1::Frame> got;
    std::string error;
    const Result r = ReadFrames(dir.File("cut.fst"), &got, &error);
    if (at_flush) {
      EXPECT_EQ(r, Result::kEnd) << "cut " << cut << ": " << error;
      EXPECT_EQ(got.size(), whole) << "cut " << cut;
    } else {
      EXPECT_EQ(r, Result::kTruncated) << "cut " << cut << ": " << error;
      EXPECT_NE(error.find("truncated"), std::string::npos) << error;
      EXPECT_GE(got.size(), whole) << "cut " << cut;
    }
    ASSERT_LE(got.size(), frames.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].SerializeAsString(), frames[i].SerializeAsString()) << "cut " << cut;
    }
  }
}

TEST(FrameIo, CorruptCompressedDataIsAnErrorThatNamesTheFile) {
  TempDir dir;
  auto frames = SampleFrames(2000);
  WriteFrames(dir.File("z.fst"), frames, TraceCompression::kZstd, 500);
  std::string bytes = ReadAll(dir.File("z.fst"));
  std::mt19937 rng(7);
  int errors = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::string damaged = bytes;
    const size_t at = 4 + rng() % (bytes.size() - 4);
    damaged[at] = static_cast<char>(damaged[at] ^ (1u << (rng() % 8)));
    WriteBytes(dir.File("flip.fst"), damaged);
    std::vector<v1::Frame> got;
    std::string error;
    const Result r = ReadFrames(dir.File("flip.fst"), &got, &error);
    // A flip may land where zstd does not look (a block it skips), or change what a frame
    // says; it never crashes, and what comes back before a refusal is a prefix of the frames.
    if (r != Result::kEnd) {
      ++errors;
      EXPECT_NE(error.find(dir.File("flip.fst")), std::string::npos) << error;
    }
    ASSERT_LE(got.size(), frames.size());
  }
  EXPECT_GT(errors, 100);
}

TEST(FrameIo, HeaderCarriesMagicAndVersion) {
  TempDir dir;
  WriteFrames(dir.File("t.fst"), {});
  std::string bytes = ReadAll(dir.File("t.fst"));
  ASSERT_EQ(bytes.size(), kTraceHeaderBytes);
  EXPECT_EQ(bytes.substr(0, 8), std::string(kTraceMagic, 8));
  EXPECT_EQ(static_cast<unsigned char>(bytes[8]), kFormatMajor);
  auto reader = FrameReader::OpenFile(dir.File("t.fst"));
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(reader->major(), kFormatMajor);
  v1::Frame f;
  EXPECT_EQ(reader->Next(&f), Result::kEnd);
}

TEST(FrameIo, EveryTruncationKeepsTheWholeFramesBeforeIt) {
  TempDir dir;
  auto frames = SampleFrames(3);
  WriteFrames(dir.File("t.fst"), frames);
  std::string bytes = ReadAll(dir.File("t.fst"));
  // Frame boundaries, to know how many whole frames each cut leaves.
  std::vector<size_t> ends;
  size_t pos = kTraceHeaderBytes;
  for (const auto& f : frames) {
    size_t len = f.ByteSizeLong();
    pos += 1 + len;  // every sample frame is < 128 bytes: one-byte varint
    ends.push_back(pos);
  }
  ASSERT_EQ(pos, bytes.size());
  for (size_t cut = kTraceHeaderBytes + 1; cut < bytes.size(); ++cut) {
    WriteBytes(dir.File("cut.fst"), bytes.substr(0, cut));
    std::vector<v1::Frame> got;
    std::string error;
    Result r = ReadFrames(dir.File("cut.fst"), &got, &error);
    size_t whole = 0;
    while (whole < ends.size() && ends[whole] <= cut) ++whole;
    bool on_boundary = whole > 0 && ends[whole - 1] == cut;
    EXPECT_EQ(r, on_boundary ? Result::kEnd : Result::kTruncated) << "cut at " << cut;
    EXPECT_EQ(got.size(), whole) << "cut at " << cut;
    if (!on_boundary) {
      EXPECT_NE(error.find("truncated"), std::string::npos) << error;
    }
  }
}

TEST(FrameIo, RejectsNonTraceAndShortFiles) {
  TempDir dir;
  WriteBytes(dir.File("short"), "FRAG");
  std::vector<v1::Frame> got;
  std::string error;
  EXPECT_EQ(ReadFrames(dir.File("short"), &got, &error), Result::kError);
  EXPECT_NE(error.find("not a fragscope trace"), std::string::npos) << error;
  EXPECT_NE(error.find(dir.File("short")), std::string::npos) << "names the file: " << error;

  WriteBytes(dir.File("pickle"), std::string("\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00\x00"
                                             "\x00\x00\x00\x00\x00",
                                             17));
  got.clear();
  EXPECT_EQ(ReadFrames(dir.File("pickle"), &got, &error), Result::kError);
  EXPECT_NE(error.find("bad magic"), std::string::npos) << error;

  EXPECT_EQ(ReadFrames(dir.File("missing"), &got, &error), Result::kError);
  EXPECT_NE(error.find("cannot open"), std::string::npos) << error;
}

// Format 1.x (every event a frame of its own, no packed runs) is what traces written before
// 2.0 hold: read as before, plain or compressed afterwards with zstd.
TEST(FrameIo, ReadsVersion1Traces) {
  TempDir dir;
  auto frames = SampleFrames(300);
  std::string bytes;
  unsigned char header[kTraceHeaderBytes];
  EncodeTraceHeader(1, 11, header);
  bytes.append(reinterpret_cast<char*>(header), sizeof(header));
  for (const v1::Frame& f : frames) AppendFramed(f.SerializeAsString(), &bytes);
  WriteBytes(dir.File("v1.fst"), bytes);
  std::vector<v1::Frame> got;
  std::string error;
  ASSERT_EQ(ReadFrames(dir.File("v1.fst"), &got, &error), Result::kEnd) << error;
  ASSERT_EQ(got.size(), frames.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_EQ(got[i].SerializeAsString(), frames[i].SerializeAsString()) << "frame " << i;
  }
  auto reader = FrameReader::OpenFile(dir.File("v1.fst"));
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(reader->major(), 1u);
  EXPECT_EQ(reader->minor(), 11u);
}

TEST(FrameIo, RejectsNewerMajorVersionButAcceptsNewerMinor) {
  TempDir dir;
  unsigned char header[kTraceHeaderBytes];
  EncodeTraceHeader(kFormatMajor + 1, 0, header);
  WriteBytes(dir.File("new"), std::string(reinterpret_cast<char*>(header), sizeof(header)));
  std::vector<v1::Frame> got;
  std::string error;
  EXPECT_EQ(ReadFrames(dir.File("new"), &got, &error), Result::kError);
  EXPECT_NE(error.find("upgrade"), std::string::npos) << error;

  EncodeTraceHeader(kFormatMajor, kFormatMinor + 7, header);
  WriteBytes(dir.File("minor"), std::string(reinterpret_cast<char*>(header), sizeof(header)));
  EXPECT_EQ(ReadFrames(dir.File("minor"), &got, &error), Result::kEnd) << error;
}

TEST(FrameIo, OversizedLengthIsAnErrorNotAnAllocation) {
  TempDir dir;
  unsigned char header[kTraceHeaderBytes];
  EncodeTraceHeader(kFormatMajor, kFormatMinor, header);
  std::string bytes(reinterpret_cast<char*>(header), sizeof(header));
  bytes += std::string("\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 9);  // ~2^63
  WriteBytes(dir.File("huge"), bytes);
  std::vector<v1::Frame> got;
  std::string error;
  EXPECT_EQ(ReadFrames(dir.File("huge"), &got, &error), Result::kError);
  EXPECT_NE(error.find("exceeds"), std::string::npos) << error;

  bytes.resize(kTraceHeaderBytes);
  bytes += std::string(11, '\xff');  // varint longer than 10 bytes
  WriteBytes(dir.File("longvarint"), bytes);
  EXPECT_EQ(ReadFrames(dir.File("longvarint"), &got, &error), Result::kError);
  EXPECT_NE(error.find("varint"), std::string::npos) << error;
}

TEST(FrameIo, BitFlipsNeverCrashAndNeverLoseEarlierFrames) {
  TempDir dir;
  auto frames = SampleFrames(50);
  WriteFrames(dir.File("t.fst"), frames);
  const std::string bytes = ReadAll(dir.File("t.fst"));
  std::mt19937 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    std::string damaged = bytes;
    size_t at = kTraceHeaderBytes + rng() % (bytes.size() - kTraceHeaderBytes);
    damaged[at] = static_cast<char>(damaged[at] ^ (1u << (rng() % 8)));
    WriteBytes(dir.File("flip.fst"), damaged);
    std::vector<v1::Frame> got;
    std::string error;
    Result r = ReadFrames(dir.File("flip.fst"), &got, &error);
    EXPECT_NE(r, Result::kFrame);
    // Frames wholly before the flipped byte must come back unchanged.
    size_t pos = kTraceHeaderBytes;
    size_t intact = 0;
    while (intact < frames.size() && pos + 1 + frames[intact].ByteSizeLong() <= at) {
      pos += 1 + frames[intact].ByteSizeLong();
      ++intact;
    }
    ASSERT_GE(got.size(), intact) << "flip at " << at;
    for (size_t i = 0; i < intact; ++i) {
      EXPECT_EQ(got[i].SerializeAsString(), frames[i].SerializeAsString());
    }
  }
}

TEST(FrameIo, ReadsFromAPipeLikeASocket) {
  auto frames = SampleFrames(200);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    unsigned char header[kTraceHeaderBytes];
    EncodeTraceHeader(kFormatMajor, kFormatMinor, header);
    if (write(fds[1], header, sizeof(header)) != sizeof(header)) _exit(1);
    for (const auto& f : frames) {
      std::string framed;
      AppendFramed(f.SerializeAsString(), &framed);
      // Byte-at-a-time writes exercise partial reads.
      for (char c : framed) {
        if (write(fds[1], &c, 1) != 1) _exit(1);
      }
    }
    _exit(0);
  }
  close(fds[1]);
  auto reader = FrameReader::FromFd(fds[0], "pipe");
  ASSERT_TRUE(reader.ok()) << reader.status();
  v1::Frame f;
  size_t n = 0;
  Result r;
  while ((r = reader->Next(&f)) == Result::kFrame) {
    ASSERT_LT(n, frames.size());
    EXPECT_EQ(f.SerializeAsString(), frames[n].SerializeAsString());
    ++n;
  }
  EXPECT_EQ(r, Result::kEnd) << reader->error();
  EXPECT_EQ(n, frames.size());
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_EQ(status, 0);
}

// What a session relies on to drop its lock before a read that may wait: NextFrameBuffered is
// true only when the next frame is whole in the buffer, including a length of several bytes.
TEST(FrameIo, NextFrameBufferedSaysWhetherNextWouldRead) {
  auto framed = [](const v1::Frame& f) {
    std::string out;
    AppendFramed(f.SerializeAsString(), &out);
    return out;
  };
  auto frames = SampleFrames(3);
  v1::Frame big;  // a frame whose length takes two bytes
  big.mutable_hello()->set_exe(std::string(300, 'x'));
  const std::string a = framed(frames[1]);
  const std::string b = framed(big);
  const std::string c = framed(frames[2]);
  const std::string d = framed(frames[3]);
  ASSERT_GT(b.size(), 300u);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  auto put = [&](const std::string& bytes) {
    ASSERT_EQ(write(fds[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  };
  unsigned char header[kTraceHeaderBytes];
  EncodeTraceHeader(kFormatMajor, kFormatMinor, header);
  put(std::string(reinterpret_cast<const char*>(header), sizeof(header)));
  put(a);
  put(b.substr(0, 1));  // half of the length of b
  auto reader = FrameReader::FromFd(fds[0], "pipe");
  ASSERT_TRUE(reader.ok()) << reader.status();
  v1::Frame f;
  ASSERT_EQ(reader->Next(&f), Result::kFrame);
  EXPECT_EQ(f.SerializeAsString(), frames[1].SerializeAsString());
  EXPECT_FALSE(reader->NextFrameBuffered()) << "only one byte of the next length";
  put(b.substr(1, 100));
  EXPECT_FALSE(reader->NextFrameBuffered()) << "not read yet: the buffer is what counts";
  put(b.substr(101));
  ASSERT_EQ(reader->Next(&f), Result::kFrame);
  EXPECT_EQ(f.SerializeAsString(), big.SerializeAsString());
  EXPECT_FALSE(reader->NextFrameBuffered()) << "nothing left in the buffer";
  put(c + d);
  ASSERT_EQ(reader->Next(&f), Result::kFrame);
  EXPECT_EQ(f.SerializeAsString(), frames[2].SerializeAsString());
  EXPECT_TRUE(reader->NextFrameBuffered()) << "d came in the same read as c";
  close(fds[1]);
  ASSERT_EQ(reader->Next(&f), Result::kFrame);
  EXPECT_EQ(f.SerializeAsString(), frames[3].SerializeAsString());
  EXPECT_FALSE(reader->NextFrameBuffered());
  EXPECT_EQ(reader->Next(&f), Result::kEnd) << reader->error();
}

}  // namespace
}  // namespace fragscope
