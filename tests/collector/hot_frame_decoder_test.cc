// The hand decoder of event frames against libprotobuf: on every frame it takes, it must build
// exactly the message libprotobuf builds; every frame it does not take (other types, unusual
// or malformed bytes) must be left to libprotobuf with the output untouched; and no input may
// make it read outside the frame or crash.
#include "fragscope/trace/hot_frame_decoder.h"

#include <google/protobuf/arena.h>
#include <google/protobuf/util/message_differencer.h>

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "fragscope.pb.h"
#include "fragscope/trace/arena_frame_reader.h"
#include "fragscope/trace/frame_reader.h"
#include "fragscope/trace/hot_event_view.h"
#include "fragscope/trace/trace_format.h"
#include "gtest/gtest.h"

namespace fragscope {
namespace {

using google::protobuf::util::MessageDifferencer;

// Values that stress the varint paths: small, one byte short of a new length, 32-bit edges,
// 64-bit edges, and negative numbers (10-byte varints for int32 fields).
uint64_t InterestingValue(std::mt19937_64& rng) {
  static const uint64_t kEdges[] = {0,
                                    1,
                                    127,
                                    128,
                                    16383,
                                    16384,
                                    (uint64_t{1} << 31) - 1,
                                    uint64_t{1} << 31,
                                    (uint64_t{1} << 32) - 1,
                                    uint64_t{1} << 32,
                                    uint64_t{0x7f00} << 32,
                                    ~uint64_t{0} >> 1,
                                    ~uint64_t{0}};
  switch (rng() % 4) {
    case 0:
      return kEdges[rng() % (sizeof(kEdges) / sizeof(kEdges[0]))];
    case 1:
      return rng() % 256;
    case 2:
      return rng() >> (rng() % 64);
    default:
      return rng();
  }
}

int32_t InterestingInt32(std::mt19937_64& rng) {
  switch (rng() % 4) {
    case 0:
      return -1;
    case 1:
      return static_cast<int32_t>(rng() % 8);
    default:
      return static_cast<int32_t>(static_cast<uint32_t>(InterestingValue(rng)));
  }
}

template <typename Event>
void FillCommon(Event* e, std::mt19937_64& rng) {
  e->set_seq(InterestingValue(rng));
  e->set_time_ns(InterestingValue(rng));
  e->set_tid(static_cast<uint32_t>(InterestingValue(rng)));
  e->set_api(static_cast<v1::Api>(InterestingInt32(rng)));
  e->set_result(InterestingInt32(rng));
  e->set_stack_id(InterestingValue(rng));
}

// A random hot event frame, every field set (zero sometimes, so omitted on the wire).
v1::Frame RandomHotFrame(std::mt19937_64& rng) {
  v1::Frame f;
  switch (rng() % 5) {
    case 0: {
      v1::AllocEvent* e = f.mutable_alloc();
      FillCommon(e, rng);
      e->set_address(InterestingValue(rng));
      e->set_size(InterestingValue(rng));
      e->set_device(InterestingInt32(rng));
      e->set_stream(InterestingValue(rng));
      e->set_pool(InterestingValue(rng));
      e->set_kind(static_cast<v1::MemoryKind>(InterestingInt32(rng)));
      e->set_pitch(InterestingValue(rng));
      e->set_in_capture(rng() % 2 == 0);
      break;
    }
    case 1: {
      v1::FreeEvent* e = f.mutable_free();
      FillCommon(e, rng);
      e->set_address(InterestingValue(rng));
      e->set_size(InterestingValue(rng));
      e->set_device(InterestingInt32(rng));
      e->set_stream(InterestingValue(rng));
      e->set_pool(InterestingValue(rng));
      break;
    }
    case 2: {
      v1::MapEvent* e = f.mutable_map();
      FillCommon(e, rng);
      e->set_op(static_cast<v1::MapEvent::Op>(InterestingInt32(rng)));
      e->set_address(InterestingValue(rng));
      e->set_size(InterestingValue(rng));
      e->set_offset(InterestingValue(rng));
      e->set_handle(InterestingValue(rng));
      e->set_device(InterestingInt32(rng));
      e->set_alignment(InterestingValue(rng));
      break;
    }
    case 3: {
      v1::HandleEvent* e = f.mutable_handle();
      FillCommon(e, rng);
      e->set_op(static_cast<v1::HandleEvent::Op>(InterestingInt32(rng)));
      e->set_handle(InterestingValue(rng));
      e->set_size(InterestingValue(rng));
      e->set_device(InterestingInt32(rng));
      e->set_handle_type(static_cast<uint32_t>(InterestingValue(rng)));
      e->set_address(InterestingValue(rng));
      break;
    }
    default: {
      v1::BlockEvent* e = f.mutable_block();
      FillCommon(e, rng);
      e->set_op(static_cast<v1::BlockEvent::Op>(InterestingInt32(rng)));
      e->set_address(InterestingValue(rng));
      e->set_size(InterestingValue(rng));
      e->set_device(InterestingInt32(rng));
      e->set_stream(InterestingValue(rng));
      e->set_pool(InterestingValue(rng));
      e->set_allocator(InterestingValue(rng));
      break;
    }
  }
  return f;
}

// What *out may hold before a decode: the decoder must give the same result from any of them.
std::vector<v1::Frame> PriorStates(std::mt19937_64& rng) {
  std::vector<v1::Frame> states(5);
  states[1] = RandomHotFrame(rng);  // some hot type, maybe the same as the next
  states[2].mutable_hello()->set_pid(7);
  states[3] = RandomHotFrame(rng);
  // Unknown fields at both levels, as a libprotobuf parse of an unusual frame leaves them.
  std::string with_unknown = states[3].SerializeAsString() + std::string("\xf8\x01\x05", 3);
  EXPECT_TRUE(states[3].ParseFromString(with_unknown));
  std::string inner = RandomHotFrame(rng).block().SerializeAsString() + std::string("\x78\x09", 2);
  EXPECT_TRUE(states[4].mutable_block()->ParseFromString(inner));
  return states;
}

// Decodes `bytes` both ways from every prior state and checks the contract. Returns whether
// the hand decoder took the frame.
bool CheckAgainstLibprotobuf(const std::string& bytes, std::mt19937_64& rng) {
  v1::Frame reference;
  const bool lib_ok = reference.ParseFromString(bytes);
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  bool took = false;
  for (const v1::Frame& prior : PriorStates(rng)) {
    v1::Frame out = prior;
    const bool hand_ok = DecodeHotFrame(data, bytes.size(), &out);
    if (hand_ok) {
      took = true;
      EXPECT_TRUE(lib_ok) << "hand decoder took bytes libprotobuf refuses";
      EXPECT_TRUE(MessageDifferencer::Equals(out, reference))
          << "hand: " << out.ShortDebugString()
          << "\nlibprotobuf: " << reference.ShortDebugString();
      EXPECT_TRUE(out.GetReflection()->GetUnknownFields(out).empty());
      EXPECT_EQ(out.SerializeAsString(), reference.SerializeAsString());
    } else {
      // Left for libprotobuf: the output is untouched.
      EXPECT_TRUE(MessageDifferencer::Equals(out, prior));
      EXPECT_EQ(out.SerializeAsString(), prior.SerializeAsString());
    }
  }
  return took;
}

TEST(HotFrameDecoder, SameMessagesAsLibprotobufOnRandomEvents) {
  std::mt19937_64 rng(1);
  int taken = 0;
  for (int i = 0; i < 20000; ++i) {
    const v1::Frame f = RandomHotFrame(rng);
    const std::string bytes = f.SerializeAsString();
    if (CheckAgainstLibprotobuf(bytes, rng)) ++taken;
  }
  // Every well-formed event frame as libprotobuf (or the agent) writes it is taken.
  EXPECT_EQ(taken, 20000);
}

TEST(HotFrameDecoder, DecodesIntoArenaFrames) {
  std::mt19937_64 rng(2);
  google::protobuf::Arena arena;
  v1::Frame* out = google::protobuf::Arena::CreateMessage<v1::Frame>(&arena);
  for (int i = 0; i < 2000; ++i) {
    const v1::Frame f = RandomHotFrame(rng);
    const std::string bytes = f.SerializeAsString();
    ASSERT_TRUE(
        DecodeHotFrame(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), out));
    EXPECT_TRUE(MessageDifferencer::Equals(*out, f));
  }
}

// Unusual but valid encodings libprotobuf accepts: the decoder either takes them with the same
// meaning or leaves them to libprotobuf.
TEST(HotFrameDecoder, UnusualEncodings) {
  std::mt19937_64 rng(3);
  auto frame = [](char tag, const std::string& body) {
    return std::string(1, tag) + std::string(1, static_cast<char>(body.size())) + body;
  };
  const char kBlock = (v1::Frame::kBlock << 3) | 2;
  const char kAlloc = (v1::Frame::kAlloc << 3) | 2;
  struct Case {
    std::string bytes;
    bool taken;
  };
  const std::vector<Case> cases = {
      // An empty event: all fields default.
      {frame(kBlock, ""), true},
      // A field given twice: the last value counts.
      {frame(kBlock, std::string("\x08\x05\x08\x07", 4)), true},
      // Fields out of order.
      {frame(kBlock, std::string("\x48\x09\x08\x01", 4)), true},
      // Non-minimal varints (padded with continuation bytes).
      {frame(kBlock, std::string("\x08\x85\x80\x80\x00", 5)), true},
      // tid (uint32) from a varint above 32 bits: the low 32 bits.
      {frame(kBlock, std::string("\x18\xff\xff\xff\xff\x7f", 6)), true},
      // device -1: a 10-byte varint.
      {frame(kBlock, std::string("\x50\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11)), true},
      // A bool given as 2.
      {frame(kAlloc, std::string("\x70\x02", 2)), true},
      // An enum value no Api names.
      {frame(kAlloc, std::string("\x20\xe7\x07", 3)), true},
      // A non-minimal frame length (2 bytes for 2).
      {std::string(1, kBlock) + std::string("\x82\x00\x08\x01", 4), true},
      // An unknown field number (kept by libprotobuf as an unknown field).
      {frame(kBlock, std::string("\x70\x01", 2)), false},
      // A known field with the wrong wire type (also an unknown field to libprotobuf).
      {frame(kBlock, std::string("\x09\x01\x02\x03\x04\x05\x06\x07\x08", 9)), false},
      // A multi-byte tag for field 1.
      {frame(kBlock, std::string("\x88\x00\x01", 3)), false},
      // Two body fields: libprotobuf keeps the last.
      {frame(kBlock, "") + frame(kAlloc, ""), false},
      // Bits beyond 64 in a 10th varint byte.
      {frame(kBlock, std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 11)), false},
      // Not an event frame.
      {std::string("\x0a\x02\x18\x07", 4), false},
  };
  for (const Case& c : cases) {
    v1::Frame reference;
    EXPECT_TRUE(reference.ParseFromString(c.bytes)) << "case bytes must be valid protobuf";
    EXPECT_EQ(CheckAgainstLibprotobuf(c.bytes, rng), c.taken);
  }
}

// Malformed frames are never taken, so the reader's libprotobuf path reports them as before.
TEST(HotFrameDecoder, RefusesMalformedFrames) {
  std::mt19937_64 rng(4);
  const char kBlock = (v1::Frame::kBlock << 3) | 2;
  const std::vector<std::string> malformed = {
      std::string(1, kBlock),                                   // no length
      std::string(1, kBlock) + "\x05",                          // length past the end
      std::string(1, kBlock) + std::string("\x02\x08", 2),      // body shorter than its length
      std::string(1, kBlock) + std::string("\x02\x08\xff", 3),  // varint runs past the end
      std::string(1, kBlock) + std::string("\x01\x00", 2),      // field number 0
      std::string(1, kBlock) + std::string("\x02\x0c\x00", 3),  // end-group tag
      std::string(1, kBlock) +
          std::string("\x0b\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 12),  // varint > 10 B
  };
  for (const std::string& bytes : malformed) {
    v1::Frame reference;
    EXPECT_FALSE(reference.ParseFromString(bytes));
    EXPECT_FALSE(CheckAgainstLibprotobuf(bytes, rng));
  }
}

// Random damage to valid frames (byte flips, truncation, insertion, junk): wherever the hand
// decoder takes the bytes, libprotobuf takes them with the same meaning. Run under ASan to see
// reads outside the frame (each frame is copied to a buffer of its own exact size).
TEST(HotFrameDecoder, FuzzedInputMatchesLibprotobuf) {
  std::mt19937_64 rng(5);
  int taken = 0;
  int refused = 0;
  for (int i = 0; i < 30000; ++i) {
    std::string bytes = RandomHotFrame(rng).SerializeAsString();
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < edits; ++k) {
      const std::size_t at = bytes.empty() ? 0 : rng() % bytes.size();
      switch (rng() % 5) {
        case 0:
          if (!bytes.empty()) bytes[at] = static_cast<char>(rng());
          break;
        case 1:
          if (!bytes.empty()) bytes[at] ^= static_cast<char>(1u << (rng() % 8));
          break;
        case 2:
          bytes.resize(at);
          break;
        case 3:
          bytes.insert(at, 1, static_cast<char>(rng()));
          break;
        default:
          bytes = std::string(rng() % 24, '\0');
          for (char& c : bytes) c = static_cast<char>(rng());
          if (!bytes.empty() && rng() % 2 == 0) bytes[0] = (v1::Frame::kBlock << 3) | 2;
          break;
      }
    }
    std::vector<unsigned char> exact(bytes.begin(), bytes.end());
    v1::Frame reference;
    const bool lib_ok = reference.ParseFromArray(exact.data(), static_cast<int>(exact.size()));
    v1::Frame out;
    out.mutable_hello()->set_pid(1);
    const v1::Frame before = out;
    if (DecodeHotFrame(exact.data(), exact.size(), &out)) {
      ++taken;
      ASSERT_TRUE(lib_ok);
      ASSERT_TRUE(MessageDifferencer::Equals(out, reference));
    } else {
      ++refused;
      ASSERT_TRUE(MessageDifferencer::Equals(out, before));
    }
    if (i % 16 == 0) CheckAgainstLibprotobuf(bytes, rng);
  }
  // Both paths were exercised.
  EXPECT_GT(taken, 1000);
  EXPECT_GT(refused, 1000);
}

// HotFrameSet keeps one frame per type and never clears it: a later event with fewer fields
// must still come out exactly as libprotobuf would parse it.
TEST(HotFrameDecoder, HotFrameSetFramesEqualFreshParses) {
  std::mt19937_64 rng(6);
  HotFrameSet set;
  for (int i = 0; i < 5000; ++i) {
    v1::Frame f = RandomHotFrame(rng);
    if (i % 2 == 0 && f.has_block()) f.mutable_block()->Clear();  // then almost every field 0
    const std::string bytes = f.SerializeAsString();
    HotEvent event;
    ASSERT_TRUE(
        ParseHotEvent(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), &event));
    const v1::Frame* out = set.Store(event);
    v1::Frame reference;
    ASSERT_TRUE(reference.ParseFromString(bytes));
    ASSERT_TRUE(MessageDifferencer::Equals(*out, reference));
    ASSERT_EQ(out->SerializeAsString(), bytes);
  }
}

// Every accessor of a view returns what the message built from the same event returns (the
// model reads events through either).
TEST(HotFrameDecoder, ViewsReadWhatTheBuiltMessageHolds) {
  std::mt19937_64 rng(8);
  int views = 0;
  for (int i = 0; i < 20000; ++i) {
    v1::Frame f = RandomHotFrame(rng);
    if (i % 3 == 0 && f.has_alloc()) f.mutable_alloc()->Clear();  // every field absent
    const std::string bytes = f.SerializeAsString();
    HotEvent event;
    ASSERT_TRUE(
        ParseHotEvent(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), &event));
    v1::Frame built;
    StoreHotEvent(event, &built);
    ASSERT_EQ(static_cast<int>(built.body_case()), static_cast<int>(event.body));
    auto expect_common = [&](const auto& view, const auto& message) {
      EXPECT_EQ(view.seq(), message.seq());
      EXPECT_EQ(view.time_ns(), message.time_ns());
      EXPECT_EQ(view.tid(), message.tid());
      EXPECT_EQ(view.api(), message.api());
      EXPECT_EQ(view.result(), message.result());
      EXPECT_EQ(view.stack_id(), message.stack_id());
      const HotCommonView common(event);
      EXPECT_EQ(common.seq(), message.seq());
    };
    // The fields all three views have (at other numbers in a block event).
    auto expect_shared = [&](const auto& view, const auto& message) {
      expect_common(view, message);
      EXPECT_EQ(view.address(), message.address());
      EXPECT_EQ(view.size(), message.size());
      EXPECT_EQ(view.device(), message.device());
      EXPECT_EQ(view.stream(), message.stream());
      EXPECT_EQ(view.pool(), message.pool());
    };
    switch (built.body_case()) {
      case v1::Frame::kAlloc: {
        const HotAllocView v(event);
        const v1::AllocEvent& m = built.alloc();
        expect_shared(v, m);
        EXPECT_EQ(v.kind(), m.kind());
        EXPECT_EQ(v.pitch(), m.pitch());
        EXPECT_EQ(v.in_capture(), m.in_capture());
        EXPECT_EQ(v.failed_release_result(), m.failed_release_result());
        ++views;
        break;
      }
      case v1::Frame::kFree: {
        const HotFreeView v(event);
        const v1::FreeEvent& m = built.free();
        expect_shared(v, m);
        ++views;
        break;
      }
      case v1::Frame::kBlock: {
        const HotBlockView v(event);
        const v1::BlockEvent& m = built.block();
        expect_shared(v, m);
        EXPECT_EQ(v.op(), m.op());
        EXPECT_EQ(v.allocator(), m.allocator());
        ++views;
        break;
      }
      default:
        break;  // map and handle events have no view: the model builds their frames
    }
    if (HasFailure()) break;
  }
  EXPECT_GT(views, 10000);
}

std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}

// A trace file of raw frames, read through each entry point of the reader: the frames, results,
// offsets and error messages must be the same, and every frame what libprotobuf makes of it.
class RawTrace {
 public:
  RawTrace() {
    char tmpl[] = "/tmp/fragscope-hot-decoder-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  ~RawTrace() { std::system(("rm -rf " + dir_).c_str()); }
  std::string Write(const std::vector<std::string>& frames, const std::string& tail) {
    std::string bytes(kTraceMagic, sizeof(kTraceMagic));
    const char version[8] = {static_cast<char>(kFormatMajor), 0, 0, 0,
                             static_cast<char>(kFormatMinor), 0, 0, 0};
    bytes.append(version, sizeof(version));
    for (const std::string& f : frames) bytes += Varint(f.size()) + f;
    bytes += tail;
    const std::string path = dir_ + "/t" + std::to_string(files_++) + ".fst";
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

 private:
  std::string dir_;
  int files_ = 0;
};

void ExpectSameThroughEveryReader(const std::string& path, const std::vector<std::string>& frames) {
  absl::StatusOr<FrameReader> heap_reader = FrameReader::OpenFile(path);
  absl::StatusOr<FrameReader> hot_reader = FrameReader::OpenFile(path);
  absl::StatusOr<FrameReader> arena_reader = FrameReader::OpenFile(path);
  absl::StatusOr<FrameReader> decoded_reader = FrameReader::OpenFile(path);
  ASSERT_TRUE(heap_reader.ok() && hot_reader.ok() && arena_reader.ok() && decoded_reader.ok());
  ArenaFrameReader arena(*arena_reader);
  ArenaFrameReader decoded(*decoded_reader);  // events left decoded
  HotFrameSet hot;
  v1::Frame heap_frame;
  v1::Frame other;
  for (std::size_t i = 0;; ++i) {
    const FrameReader::Result r1 = heap_reader->Next(&heap_frame);
    const v1::Frame* hot_frame = nullptr;
    const FrameReader::Result r2 = hot_reader->Next(&other, &hot, &hot_frame);
    const v1::Frame* arena_frame = nullptr;
    const FrameReader::Result r3 = arena.Next(&arena_frame);
    const v1::Frame* decoded_frame = nullptr;
    const HotEvent* decoded_event = nullptr;
    const FrameReader::Result r4 = decoded.Next(&decoded_frame, &decoded_event);
    ASSERT_EQ(r1, r2);
    ASSERT_EQ(r1, r3);
    ASSERT_EQ(r1, r4);
    EXPECT_EQ(heap_reader->error(), hot_reader->error());
    EXPECT_EQ(heap_reader->error(), arena_reader->error());
    EXPECT_EQ(heap_reader->error(), decoded_reader->error());
    EXPECT_EQ(heap_reader->good_offset(), hot_reader->good_offset());
    EXPECT_EQ(heap_reader->good_offset(), arena_reader->good_offset());
    EXPECT_EQ(heap_reader->good_offset(), decoded_reader->good_offset());
    if (r1 != FrameReader::Result::kFrame) {
      EXPECT_EQ(decoded_event, nullptr);
      break;
    }
    // Exactly one of the two, and an event exactly when the hand decoder takes the frame.
    ASSERT_NE(decoded_frame == nullptr, decoded_event == nullptr) << i;
    v1::Frame from_event;
    if (decoded_event != nullptr) StoreHotEvent(*decoded_event, &from_event);
    const v1::Frame& decoded_as_frame = decoded_event != nullptr ? from_event : *decoded_frame;
    ASSERT_LT(i, frames.size());
    v1::Frame reference;
    ASSERT_TRUE(reference.ParseFromString(frames[i]));
    ASSERT_TRUE(MessageDifferencer::Equals(heap_frame, reference)) << i;
    ASSERT_TRUE(MessageDifferencer::Equals(*hot_frame, reference)) << i;
    ASSERT_TRUE(MessageDifferencer::Equals(*arena_frame, reference)) << i;
    ASSERT_TRUE(MessageDifferencer::Equals(decoded_as_frame, reference)) << i;
    v1::Frame probe;
    EXPECT_EQ(decoded_event != nullptr,
              DecodeHotFrame(reinterpret_cast<const unsigned char*>(frames[i].data()),
                             frames[i].size(), &probe))
        << i;
  }
}

TEST(HotFrameDecoder, ReaderEntryPointsAgree) {
  std::mt19937_64 rng(7);
  std::vector<std::string> frames;
  for (int i = 0; i < 3000; ++i) {
    std::string bytes = RandomHotFrame(rng).SerializeAsString();
    switch (rng() % 6) {
      case 0:  // an unknown top-level field after the event: libprotobuf's path
        bytes += std::string("\xf8\x01\x03", 3);
        break;
      case 1: {  // not an event
        v1::Frame f;
        f.mutable_mem_info()->set_seq(rng());
        f.mutable_mem_info()->set_free_bytes(rng());
        bytes = f.SerializeAsString();
        break;
      }
      default:
        break;
    }
    frames.push_back(bytes);
  }
  RawTrace trace;
  ExpectSameThroughEveryReader(trace.Write(frames, ""), frames);
  // Ends that are not clean: inside a length, inside a frame, a malformed event frame, an
  // oversized length.
  const std::string block_tag(1, static_cast<char>((v1::Frame::kBlock << 3) | 2));
  for (const std::string& tail :
       {std::string("\x85", 1), std::string("\x20\x72\x05", 3),
        std::string("\x03", 1) + block_tag + std::string("\x01\x00", 2),
        std::string("\x04", 1) + block_tag + std::string("\x02\x08\xff", 3),
        std::string("\xff\xff\xff\xff\x0f", 5)}) {
    ExpectSameThroughEveryReader(trace.Write(frames, tail), frames);
  }
}

// Stack frames (Stack.end, format 1.11) are not one of the five hot shapes: the hand decoder
// must leave them to libprotobuf, unchanged, so that their end is read, and every reader entry
// point must give the stack with its end.
TEST(HotFrameDecoder, StackFramesKeepTheirEndThroughEveryReader) {
  std::vector<std::string> frames;
  for (v1::StackEnd end :
       {v1::STACK_END_OUTERMOST, v1::STACK_END_DEPTH_LIMIT, v1::STACK_END_NO_UNWIND_INFO,
        v1::STACK_END_UNREADABLE, v1::STACK_END_UNSUPPORTED}) {
    v1::Frame f;
    v1::Stack* s = f.mutable_stacks()->add_stacks();
    s->set_id(static_cast<uint64_t>(end) + 1);
    s->add_pcs(0x401000);
    s->set_end(end);
    const std::string bytes = f.SerializeAsString();
    const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
    HotEvent event;
    EXPECT_FALSE(ParseHotEvent(data, bytes.size(), &event));
    v1::Frame out;
    out.mutable_alloc()->set_seq(5);
    EXPECT_FALSE(DecodeHotFrame(data, bytes.size(), &out));
    EXPECT_EQ(out.alloc().seq(), 5u);  // unchanged
    v1::Frame parsed;
    ASSERT_TRUE(parsed.ParseFromString(bytes));
    EXPECT_EQ(parsed.stacks().stacks(0).end(), end);
    frames.push_back(bytes);
  }
  RawTrace trace;
  ExpectSameThroughEveryReader(trace.Write(frames, ""), frames);
}

}  // namespace
}  // namespace fragscope
