// Reader limits (frame_limits.h): a frame over a count limit is refused before libprotobuf builds
// it, with a message naming the field, the count and the limit; real frames far bigger than
// anything the agent writes pass; FrameReader keeps the frames before a refused one. And
// output files (output_file.h) never come out wider than 0644, whatever the umask.
#include "fragscope/trace/frame_limits.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "fragscope.pb.h"
#include "fragscope/trace/frame_reader.h"
#include "fragscope/trace/frame_writer.h"
#include "fragscope/trace/output_file.h"
#include "fragscope/trace/trace_format.h"
#include "gtest/gtest.h"

namespace fragscope {
namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/fragscope-limits-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf " + path_).c_str()); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string Varint(uint64_t v) {
  std::string s;
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
  return s;
}

std::string Field(int number, const std::string& body) {
  return Varint((static_cast<uint64_t>(number) << 3) | 2) + Varint(body.size()) + body;
}

std::string Check(const std::string& bytes, const FrameLimits& limits = FrameLimits{}) {
  return FrameLimitViolation(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                             limits);
}

// Small limits keep the inputs small; the check is the same code whatever the numbers.
FrameLimits Small() {
  FrameLimits l;
  l.max_entries_per_frame = 1000;
  l.max_stack_pcs = 100;
  l.max_source_frames = 100;
  l.max_modules_per_frame = 100;
  l.max_value_bytes = 500;
  return l;
}

v1::Frame RealisticSnapshot(int entries) {
  v1::Frame f;
  v1::Snapshot* s = f.mutable_snapshot();
  s->set_seq(99);
  for (int i = 0; i < entries; ++i) {
    v1::LiveAllocation* a = s->add_allocations();
    a->set_address(0x7f0000000000ull + (static_cast<uint64_t>(i) << 21));
    a->set_size(uint64_t{1} << 20);
    a->set_stack_id(i % 1000 + 1);
    a->set_api(v1::API_cudaMalloc);
    a->set_kind(v1::MEMORY_KIND_DEVICE);
  }
  return f;
}

TEST(FrameLimits, DefaultsAreFarAboveWhatTheAgentWrites) {
  const FrameLimits d;
  EXPECT_EQ(d.max_entries_per_frame, 4194304u);
  EXPECT_EQ(d.max_stack_pcs, 65536u);
  EXPECT_EQ(d.max_source_frames, 65536u);
  EXPECT_EQ(d.max_modules_per_frame, 65536u);
  EXPECT_EQ(d.max_value_bytes, 1048576u);
  // 300 k live allocations (the agent's default live table holds 256 Ki) in one frame.
  const std::string real = RealisticSnapshot(300000).SerializeAsString();
  EXPECT_GT(real.size(), 4u << 20);
  EXPECT_EQ(Check(real), "");
}

TEST(FrameLimits, EntriesOfAFrameAreCountedAcrossFieldsAndNamed) {
  std::string snapshot;
  for (int i = 0; i < 800; ++i) snapshot += Field(4, "");  // allocations
  for (int i = 0; i < 300; ++i) snapshot += Field(8, "");  // blocks
  const std::string over = Check(Field(13, snapshot), Small());
  EXPECT_NE(over.find("Snapshot.allocations holds 800 entries"), std::string::npos) << over;
  EXPECT_NE(over.find("1100 repeated entries in the frame"), std::string::npos) << over;
  EXPECT_NE(over.find("limit of 1000"), std::string::npos) << over;
  std::string under;
  for (int i = 0; i < 1000; ++i) under += Field(4, "");
  EXPECT_EQ(Check(Field(13, under), Small()), "");
}

TEST(FrameLimits, SnapshotsMergedByRepetitionAreCountedTogether) {
  // Frame{snapshot{600 entries}, snapshot{600 entries}}: libprotobuf merges them into one.
  std::string half;
  for (int i = 0; i < 600; ++i) half += Field(4, "");
  EXPECT_NE(Check(Field(13, half) + Field(13, half), Small()), "");
}

// A frame that is one Snapshot can only cross the entry limit (a snapshot holds no strings,
// stacks or modules), so one smaller than that limit is not scanned; a frame with another body
// field beside the snapshot still is, whatever that field holds.
TEST(FrameLimits, ASnapshotAloneIsCheckedOnlyForWhatASnapshotCanHold) {
  std::string entries;
  for (int i = 0; i < 400; ++i) entries += Field(4, "\x08\x01");  // allocations{address: 1}
  const std::string snapshot = Field(13, entries);
  ASSERT_GT(snapshot.size(), 500u) << "larger than the smallest limit, the value-bytes one";
  EXPECT_EQ(Check(snapshot, Small()), "");
  std::string pcs(101, '\x05');
  const std::string stacks = Field(4, Field(1, "\x08\x01" + Field(2, pcs)));
  const std::string over = Check(snapshot + stacks, Small());
  EXPECT_NE(over.find("Stack.pcs holds 101 entries in one Stack"), std::string::npos) << over;
  // Past the entry limit the snapshot is counted as before.
  std::string many;
  for (int i = 0; i < 1001; ++i) many += Field(8, "");
  EXPECT_NE(Check(Field(13, many), Small()).find("Snapshot.blocks holds 1001 entries"),
            std::string::npos);
}

TEST(FrameLimits, PackedReturnAddressesOfOneStack) {
  std::string pcs(101, '\x05');  // 101 one-byte varints
  const std::string stack = "\x08\x01" + Field(2, pcs);
  const std::string over = Check(Field(4, Field(1, stack)), Small());
  EXPECT_NE(over.find("Stack.pcs holds 101 entries in one Stack, over the limit of 100"),
            std::string::npos)
      << over;
  // Two stacks of 100 each are fine: the limit is per stack.
  const std::string ok = "\x08\x01" + Field(2, std::string(100, '\x05'));
  EXPECT_EQ(Check(Field(4, Field(1, ok) + Field(1, ok)), Small()), "");
  // Multi-byte varints count once each.
  std::string wide;
  for (int i = 0; i < 100; ++i) wide += Varint(0x7f0000001234ull);
  EXPECT_EQ(Check(Field(4, Field(1, "\x08\x01" + Field(2, wide))), Small()), "");
}

TEST(FrameLimits, SourceFramesOfOneSymbolizedStack) {
  std::string frames;
  for (int i = 0; i < 101; ++i) frames += Field(2, Field(1, "f") + Field(2, "x.py"));
  const std::string over = Check(Field(16, "\x08\x01" + frames), Small());
  EXPECT_NE(over.find("SymbolizedStack.frames holds 101 entries"), std::string::npos) << over;
}

TEST(FrameLimits, ModulesOfAFrameEvenWhenSplitOverRepeatedModuleMaps) {
  std::string half;
  for (int i = 0; i < 60; ++i) half += Field(1, Field(1, "/lib/x.so"));
  const std::string over = Check(Field(3, half) + Field(3, half), Small());
  EXPECT_NE(over.find("ModuleMap.modules holds 120 entries, over the limit of 100 per frame"),
            std::string::npos)
      << over;
  EXPECT_EQ(Check(Field(3, half), Small()), "");
}

TEST(FrameLimits, LongValues) {
  const std::string hello = Field(6, std::string(501, 'a'));  // Hello.exe
  const std::string over = Check(Field(1, hello), Small());
  EXPECT_NE(over.find("Hello.exe is a value of 501 bytes, over the limit of 500 bytes"),
            std::string::npos)
      << over;
  EXPECT_EQ(Check(Field(1, Field(6, std::string(500, 'a'))), Small()), "");
}

TEST(FrameLimits, UnknownFieldsAndGroupsCountLikeEntries) {
  // libprotobuf keeps each unknown field as an object: field 99 (varint) 1001 times.
  std::string unknown;
  for (int i = 0; i < 1001; ++i) unknown += Varint((99u << 3) | 0) + "\x01";
  std::string over = Check(Field(13, unknown), Small());
  EXPECT_NE(over.find("unknown fields of Snapshot holds 1001 entries"), std::string::npos) << over;
  // The same inside one unknown group (field 98, start/end group).
  std::string group = Varint((98u << 3) | 3);
  for (int i = 0; i < 1001; ++i) group += Varint((5u << 3) | 0) + "\x01";
  group += Varint((98u << 3) | 4);
  over = Check(group, Small());
  EXPECT_NE(over.find("unknown fields of Frame"), std::string::npos) << over;
  // A known field with the wrong wire type is unknown to the parser too.
  std::string wrong;
  for (int i = 0; i < 1001; ++i) wrong += Varint((1u << 3) | 0) + "\x01";  // Frame.hello as varint
  EXPECT_NE(Check(wrong, Small()), "");
}

TEST(FrameLimits, GarbageIsLeftToTheParser) {
  EXPECT_EQ(Check(std::string(2000, '\xff'), Small()), "");
  EXPECT_EQ(Check(Field(13, std::string(2000, '\x00')), Small()), "");
}

std::string Header() {
  unsigned char h[kTraceHeaderBytes];
  EncodeTraceHeader(kFormatMajor, kFormatMinor, h);
  return std::string(reinterpret_cast<char*>(h), sizeof(h));
}

TEST(FrameLimits, ReaderRefusesTheFrameNamesItAndKeepsWhatCameBefore) {
  TempDir dir;
  v1::Frame hello;
  hello.mutable_hello()->set_pid(7);
  const std::string good = hello.SerializeAsString();
  std::string bomb;  // 4 Mi + 1 empty LiveBlock entries: 8 MiB of frame
  const uint64_t n = (uint64_t{1} << 22) + 1;
  bomb.reserve(n * 2 + 16);
  for (uint64_t i = 0; i < n; ++i) bomb.append("\x42\x00", 2);
  const std::string frame = Field(13, bomb);
  const std::string bytes = Header() + Varint(good.size()) + good + Varint(frame.size()) + frame;
  const std::string path = dir.File("bomb.fst");
  {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  auto reader = FrameReader::OpenFile(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  v1::Frame f;
  ASSERT_EQ(reader->Next(&f), FrameReader::Result::kFrame);
  EXPECT_EQ(f.hello().pid(), 7u);
  ASSERT_EQ(reader->Next(&f), FrameReader::Result::kError);
  const std::string& e = reader->error();
  const std::string offset = std::to_string(kTraceHeaderBytes + 1 + good.size());
  EXPECT_NE(e.find(path + ": frame at byte " + offset + " refused"), std::string::npos) << e;
  EXPECT_NE(e.find("Snapshot.blocks holds 4194305 entries"), std::string::npos) << e;
  EXPECT_NE(e.find("limit of 4194304"), std::string::npos) << e;
  EXPECT_NE(e.find("read 1 whole frames"), std::string::npos) << e;
  EXPECT_EQ(reader->frames_read(), 1u);
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(OutputFile, NeverWiderThan0644WhateverTheUmask) {
  TempDir dir;
  const mode_t saved = umask(0);
  EXPECT_TRUE(WriteOutputFile(dir.File("a.txt"), "hello").ok());
  auto writer = FrameWriter::CreateFile(dir.File("t.fst"));
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(writer->Close().ok());
  // A file left 0666 by an older fragscope is narrowed when written again.
  { std::ofstream old(dir.File("old.txt")); }
  ASSERT_EQ(chmod(dir.File("old.txt").c_str(), 0666), 0);
  EXPECT_TRUE(WriteOutputFile(dir.File("old.txt"), "new").ok());
  umask(077);
  EXPECT_TRUE(WriteOutputFile(dir.File("private.txt"), "x").ok());
  umask(saved);
  EXPECT_EQ(ModeOf(dir.File("a.txt")), 0644u);
  EXPECT_EQ(ModeOf(dir.File("t.fst")), 0644u);
  EXPECT_EQ(ModeOf(dir.File("old.txt")), 0644u);
  EXPECT_EQ(ModeOf(dir.File("private.txt")), 0600u);  // a stricter umask is kept
  std::ifstream in(dir.File("old.txt"));
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "new");
}

TEST(OutputFile, ErrorsNameThePath) {
  absl::Status s = WriteOutputFile("/nonexistent-dir/x.txt", "x");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("/nonexistent-dir/x.txt: cannot create"),
            std::string::npos)
      << s;
  absl::Status full = WriteOutputFile("/dev/full", std::string(100, 'x'));
  EXPECT_FALSE(full.ok());
  EXPECT_NE(std::string(full.message()).find("/dev/full: write failed"), std::string::npos) << full;
}

TEST(OutputFile, CheckLeavesTheFileSystemAsItFoundIt) {
  TempDir dir;
  // A new file: possible, and not left behind.
  EXPECT_TRUE(CheckOutputFileWritable(dir.File("new.txt")).ok());
  EXPECT_NE(access(dir.File("new.txt").c_str(), F_OK), 0);
  // An existing file: possible, and not truncated.
  ASSERT_TRUE(WriteOutputFile(dir.File("kept.txt"), "kept").ok());
  EXPECT_TRUE(CheckOutputFileWritable(dir.File("kept.txt")).ok());
  std::ifstream in(dir.File("kept.txt"));
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "kept");
  // A FIFO nobody reads yet does not hang the check.
  ASSERT_EQ(mkfifo(dir.File("fifo").c_str(), 0600), 0);
  EXPECT_TRUE(CheckOutputFileWritable(dir.File("fifo")).ok());
  // A missing directory, a directory: the error names the path.
  absl::Status missing = CheckOutputFileWritable(dir.File("no-dir/x.txt"));
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.message()).find(dir.File("no-dir/x.txt") + ": cannot create"),
            std::string::npos)
      << missing;
  EXPECT_FALSE(CheckOutputFileWritable(dir.path()).ok());
}

}  // namespace
}  // namespace fragscope
