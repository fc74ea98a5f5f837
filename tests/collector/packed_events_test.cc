// Packed event runs (Frame.packed, format 2.0): what the agent's PackedEventRun writes, the
// collector's FrameReader must read back as exactly the events the agent would have sent as
// frames of their own; malformed runs stop the stream with a message and keep what came before.
#include <google/protobuf/util/message_differencer.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "fragscope.pb.h"
#include "fragscope/trace/frame_reader.h"
#include "fragscope/trace/trace_format.h"
#include "gtest/gtest.h"
#include "shipping/frame_encoder.h"
#include "shipping/packed_event_run.h"

namespace fragscope {
namespace {

using agent::Api;
using agent::EventRecord;
using agent::PackedEventRun;
using agent::RecordType;
using agent::WireWriter;

class TempTrace {
 public:
  TempTrace() {
    char tmpl[] = "/tmp/fragscope-packed-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  ~TempTrace() { std::system(("rm -rf " + dir_).c_str()); }
  // A trace of the stream header and `frames` (already framed).
  std::string Write(const uint8_t* frames, size_t size) {
    uint8_t header[agent::kStreamHeaderSize];
    agent::EncodeStreamHeader(header);
    const std::string path = dir_ + "/t" + std::to_string(files_++) + ".fst";
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header), sizeof(header));
    out.write(reinterpret_cast<const char*>(frames), static_cast<std::streamsize>(size));
    return path;
  }

 private:
  std::string dir_;
  int files_ = 0;
};

std::vector<v1::Frame> ReadAll(const std::string& path, FrameReader::Result* last,
                               std::string* error) {
  std::vector<v1::Frame> frames;
  absl::StatusOr<FrameReader> reader = FrameReader::OpenFile(path);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return frames;
  v1::Frame f;
  while ((*last = reader->Next(&f)) == FrameReader::Result::kFrame) frames.push_back(f);
  *error = reader->error();
  return frames;
}

// Records of every kind the drain writes, with the values that test an encoding: seq that
// jumps or goes back (records of several threads), time that goes back, negative results and
// devices, values at the top of their types, and the repeats that make runs small.
std::vector<EventRecord> RandomRecords(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](std::initializer_list<uint64_t> values) {
    return *(values.begin() + rng() % values.size());
  };
  std::vector<EventRecord> out;
  uint64_t seq = 100, time = 1'000'000;
  uint64_t last_address = 0x7f0000000000;
  for (size_t i = 0; i < n; ++i) {
    EventRecord r;
    std::memset(&r, 0, sizeof(r));
    const int kind = static_cast<int>(rng() % 20);
    r.type = kind < 6    ? RecordType::kAlloc
             : kind < 12 ? RecordType::kFree
             : kind < 15 ? RecordType::kBlock
             : kind < 17 ? RecordType::kMap
             : kind < 18 ? RecordType::kHandle
             : kind < 19 ? RecordType::kFailed
                         : RecordType::kMark;
    seq += rng() % 8 == 0 ? static_cast<uint64_t>(static_cast<int64_t>(rng() % 7) - 3) : 1;
    time +=
        rng() % 16 == 0 ? static_cast<uint64_t>(-static_cast<int64_t>(rng() % 500)) : rng() % 3000;
    r.seq = seq;
    r.time_ns = time;
    r.tid = static_cast<uint32_t>(pick({1234, 1234, 1234, 99, UINT32_MAX}));
    r.stack_id = pick({0, 0, 7, 300, 0xffffffffffffffffull});
    r.result = static_cast<int32_t>(pick({0, 0, 0, 2, static_cast<uint64_t>(-1), 0x7fffffff}));
    r.device = static_cast<int32_t>(pick({0, 0, 1, static_cast<uint64_t>(-1), 7}));
    r.api = static_cast<Api>(pick({1, 2, 3, 21, 23, 44, 90, 91}));
    r.op = static_cast<uint8_t>(rng() % 6);
    r.kind = static_cast<agent::MemoryKind>(rng() % 7);
    r.flags = static_cast<uint8_t>(rng() % 4 == 0 ? agent::kFlagInCapture : 0);
    r.address = rng() % 3 == 0 ? last_address : 0x7f0000000000 + (rng() % 4096) * 0x100000;
    if (rng() % 50 == 0) r.address = ~uint64_t{0};
    last_address = r.address;
    r.size = pick({0, 512, 4096, 2 << 20, 1ull << 40, ~uint64_t{0}});
    r.stream = pick({0, 0, 0x55, 0xdeadbeef0000});
    r.pool = pick({0, 0, 0xabc000});
    r.aux0 = pick({0, 0, 4096});
    r.aux1 = r.type == RecordType::kAlloc ? pick({0, 0, 0, 0, 2}) : pick({0, 1, 0xffffffff});
    r.aux2 = pick({0, 3});
    if (r.type == RecordType::kMark) {
      std::memcpy(r.label, "step", 4);
      r.label_size = 4;
    }
    out.push_back(r);
  }
  return out;
}

// The drain's way: packable records into the open run, anything else closes it and goes alone.
// `close_every`: also close the run now and then (a flush), so runs start over mid-stream.
size_t EncodePacked(const std::vector<EventRecord>& records, WireWriter& w, int close_every,
                    size_t* packed) {
  PackedEventRun run;
  *packed = 0;
  size_t runs = 0;
  std::mt19937 rng(5);
  for (const EventRecord& r : records) {
    if (agent::PackedBody(r) != 0) {
      if (agent::AddPacked(run, w, r)) {
        ++*packed;
      } else {
        run.Close(w);
        ++runs;
        EXPECT_TRUE(agent::AddPacked(run, w, r));
        ++*packed;
      }
      if (close_every > 0 && static_cast<int>(rng() % close_every) == 0) {
        run.Close(w);
        ++runs;
      }
      continue;
    }
    run.Close(w);
    EXPECT_TRUE(agent::EncodeRecord(w, r));
  }
  run.Close(w);
  return runs;
}

TEST(PackedEvents, ReadBackExactlyAsTheEventsSentAlone) {
  const std::vector<EventRecord> records = RandomRecords(40000, 1);
  std::vector<uint8_t> alone_buf(16 << 20), packed_buf(16 << 20);
  WireWriter alone(alone_buf.data(), alone_buf.size());
  for (const EventRecord& r : records) ASSERT_TRUE(agent::EncodeRecord(alone, r));
  TempTrace dir;
  const std::string alone_path = dir.Write(alone.data(), alone.size());
  FrameReader::Result last;
  std::string error;
  const std::vector<v1::Frame> expected = ReadAll(alone_path, &last, &error);
  ASSERT_EQ(last, FrameReader::Result::kEnd) << error;
  ASSERT_EQ(expected.size(), records.size());
  for (int close_every : {0, 40}) {
    SCOPED_TRACE(close_every);
    WireWriter packed(packed_buf.data(), packed_buf.size());
    size_t in_runs = 0;
    EncodePacked(records, packed, close_every, &in_runs);
    // Most records are packable; the failed allocations, marks and put-backs are not.
    EXPECT_GT(in_runs, records.size() * 3 / 4);
    EXPECT_LT(in_runs, records.size());
    const std::string packed_path = dir.Write(packed.data(), packed.size());
    const std::vector<v1::Frame> got = ReadAll(packed_path, &last, &error);
    ASSERT_EQ(last, FrameReader::Result::kEnd) << error;
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(google::protobuf::util::MessageDifferencer::Equals(got[i], expected[i]))
          << "event " << i << "\ngot " << got[i].ShortDebugString() << "\nwant "
          << expected[i].ShortDebugString();
    }
    // The agent counts the events a cut write delivered: those of whole runs only.
    EXPECT_EQ(agent::CountWholeEventFrames(packed.data(), packed.size()),
              agent::CountWholeEventFrames(alone.data(), alone.size()));
    EXPECT_LT(agent::CountWholeEventFrames(packed.data(), packed.size() - 1),
              agent::CountWholeEventFrames(alone.data(), alone.size()));
  }
  // And the same events through the path the collector replays by (decoded, no frame built).
  WireWriter packed(packed_buf.data(), packed_buf.size());
  size_t in_runs = 0;
  EncodePacked(records, packed, 0, &in_runs);
  absl::StatusOr<FrameReader> reader =
      FrameReader::OpenFile(dir.Write(packed.data(), packed.size()));
  ASSERT_TRUE(reader.ok());
  v1::Frame other;
  HotEvent event;
  const v1::Frame* frame = nullptr;
  size_t i = 0;
  while (reader->Next(&other, &event, &frame) == FrameReader::Result::kFrame) {
    ASSERT_LT(i, expected.size());
    v1::Frame built;
    if (frame == nullptr) StoreHotEvent(event, &built);
    ASSERT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
        frame == nullptr ? built : *frame, expected[i]))
        << "event " << i;
    ++i;
  }
  EXPECT_EQ(i, expected.size());
}

// The point of the encoding: a thread's cudaMalloc/cudaFree pairs, as the agent records them,
// take a fraction of the bytes of frames of their own.
TEST(PackedEvents, PairsTakeAFractionOfTheirSizeAlone) {
  std::vector<EventRecord> records;
  for (int i = 0; i < 10000; ++i) {
    EventRecord r;
    std::memset(&r, 0, sizeof(r));
    r.type = i % 2 == 0 ? RecordType::kAlloc : RecordType::kFree;
    r.api = i % 2 == 0 ? Api::k_cudaMalloc : Api::k_cudaFree;
    r.seq = 1000 + i;
    r.time_ns = 5'000'000'000 + i * 137;
    r.tid = 4242;
    r.stack_id = i % 2 == 0 ? 17 : 18;
    r.address = 0x7f3a00000000 + (i / 2 % 64) * 0x200000;
    r.size = 4096;
    r.kind = agent::MemoryKind::kDevice;
    records.push_back(r);
  }
  std::vector<uint8_t> a(4 << 20), b(4 << 20);
  WireWriter alone(a.data(), a.size()), packed(b.data(), b.size());
  for (const EventRecord& r : records) ASSERT_TRUE(agent::EncodeRecord(alone, r));
  size_t in_runs = 0;
  EncodePacked(records, packed, 0, &in_runs);
  EXPECT_EQ(in_runs, records.size());
  const double alone_per_event = static_cast<double>(alone.size()) / records.size();
  const double packed_per_event = static_cast<double>(packed.size()) / records.size();
  EXPECT_GT(alone_per_event, 25.0);
  EXPECT_LT(packed_per_event, 8.0) << "alone " << alone_per_event;
}

// A packed frame built by hand: `events` and `count` as given.
std::string PackedFrame(const std::string& events, uint64_t count) {
  auto varint = [](uint64_t v) {
    std::string s;
    while (v >= 0x80) {
      s.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    s.push_back(static_cast<char>(v));
    return s;
  };
  std::string body = "\x0a" + varint(events.size()) + events + "\x10" + varint(count);
  std::string frame = std::string("\x92\x01", 2) + varint(body.size()) + body;
  return varint(frame.size()) + frame;
}

TEST(PackedEvents, MalformedRunsStopTheStreamWithAReasonAndKeepWhatCameBefore) {
  // One good event: an AllocEvent (5) at seq 1 (next after 0), time +10, tid 9, address 0x40,
  // fields api (bit 0) = 1 and size (field 8: bit 4) = 64.
  const std::string good = std::string("\x15\x14\x09\x40\x11\x02\x40", 7);
  struct Case {
    const char* name;
    std::string events;
    uint64_t count;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"no such message", good + std::string("\x19\x00", 2), 2, "message 9"},
      // A FreeEvent (6) naming field 14, which FreeEvent does not have.
      {"a field the message lacks", good + std::string("\x76\x00\x80\x08\x01", 5), 2,
       "field mask 0x400"},
      {"more events than bytes", good + std::string("\xf5\x00", 2), 3, "end before its count"},
      // A FreeEvent whose result (field 5) is 2^34 - 1.
      {"an int32 out of range", good + std::string("\x76\x00\x02\xfe\xff\xff\xff\x7f", 8), 2,
       "not an int32"},
      {"bytes after the last event", good + std::string("\xf5\x00\x00", 3), 2, "after the run"},
      {"a varint past the end", good + std::string("\x16\xff", 2), 2, "malformed"},
      {"a count with no events", "", 4, "says 4 events in 0 bytes"},
  };
  TempTrace dir;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string bytes =
        PackedFrame(good, 1) + PackedFrame(c.events, c.count) + PackedFrame(good, 1);
    const std::string path =
        dir.Write(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    FrameReader::Result last;
    std::string error;
    const std::vector<v1::Frame> frames = ReadAll(path, &last, &error);
    EXPECT_EQ(last, FrameReader::Result::kError);
    EXPECT_NE(error.find(path), std::string::npos) << error;
    EXPECT_NE(error.find(c.says), std::string::npos) << error;
    // The first run, and the good events of the bad one, were read; nothing after it.
    ASSERT_GE(frames.size(), 1u);
    EXPECT_LE(frames.size(), 3u);
    ASSERT_TRUE(frames[0].has_alloc());
    EXPECT_EQ(frames[0].alloc().seq(), 1u);
    EXPECT_EQ(frames[0].alloc().time_ns(), 10u);
    EXPECT_EQ(frames[0].alloc().tid(), 9u);
    EXPECT_EQ(frames[0].alloc().address(), 0x40u);
    EXPECT_EQ(frames[0].alloc().api(), v1::API_cudaMalloc);
    EXPECT_EQ(frames[0].alloc().size(), 64u);
  }
}

}  // namespace
}  // namespace fragscope
