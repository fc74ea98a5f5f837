// The agent's protobuf wire writer against libprotobuf's parser, and the agent's copies of the
// proto enums against the proto descriptor.
#include "shipping/wire_encoder.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <google/protobuf/io/coded_stream.h>

#include "fragscope.pb.h"
#include "recording/api.h"

namespace fragscope::agent {
namespace {

TEST(WireWriterTest, VarintSizesMatchTheWireFormat) {
  EXPECT_EQ(VarintSize(0), 1u);
  EXPECT_EQ(VarintSize(127), 1u);
  EXPECT_EQ(VarintSize(128), 2u);
  EXPECT_EQ(VarintSize(16383), 2u);
  EXPECT_EQ(VarintSize(16384), 3u);
  EXPECT_EQ(VarintSize(std::numeric_limits<uint64_t>::max()), 10u);
}

TEST(WireWriterTest, ScalarsRoundTripThroughLibprotobuf) {
  uint8_t buf[256];
  WireWriter w(buf, sizeof(buf));
  // AllocEvent: uint64, uint32, enum, negative int32, bool.
  w.Uint64(1, 0xfedcba9876543210ull);
  w.Uint32(3, 4000000000u);
  w.Enum(4, static_cast<uint32_t>(Api::k_cuMemAlloc_v2));
  w.Int32(5, -3);
  w.Int32(9, -1);
  w.Bool(14, true);
  ASSERT_TRUE(w.ok());
  v1::AllocEvent e;
  ASSERT_TRUE(e.ParseFromArray(buf, static_cast<int>(w.size())));
  EXPECT_EQ(e.seq(), 0xfedcba9876543210ull);
  EXPECT_EQ(e.tid(), 4000000000u);
  EXPECT_EQ(e.api(), v1::API_cuMemAlloc_v2);
  EXPECT_EQ(e.result(), -3);
  EXPECT_EQ(e.device(), -1);
  EXPECT_TRUE(e.in_capture());
}

TEST(WireWriterTest, DefaultValuesAreOmitted) {
  uint8_t buf[64];
  WireWriter w(buf, sizeof(buf));
  w.Uint64(1, 0);
  w.Int32(2, 0);
  w.Bool(3, false);
  w.Bytes(4, "", 0);
  EXPECT_EQ(w.size(), 0u);
}

TEST(WireWriterTest, NestedMessagesOfEveryLengthClassRoundTrip) {
  // Lengths around the 1-, 2- and 3-byte varint boundaries exercise the length compaction.
  for (size_t label_size : {0u, 1u, 120u, 125u, 126u, 127u, 128u, 200u, 16380u, 16400u}) {
    std::string label(label_size, 'x');
    for (size_t i = 0; i < label_size; ++i) label[i] = static_cast<char>('a' + i % 26);
    std::vector<uint8_t> buf(label_size + 64);
    WireWriter w(buf.data(), buf.size());
    size_t frame = w.BeginMessage(11);  // Frame.mark
    w.Uint64(1, 7);
    w.Bytes(4, label.data(), label.size());
    w.EndMessage(frame);
    ASSERT_TRUE(w.ok()) << label_size;
    v1::Frame f;
    ASSERT_TRUE(f.ParseFromArray(buf.data(), static_cast<int>(w.size()))) << label_size;
    ASSERT_TRUE(f.has_mark());
    EXPECT_EQ(f.mark().seq(), 7u);
    EXPECT_EQ(f.mark().label(), label);
    // The writer's output is byte-identical to libprotobuf's.
    EXPECT_EQ(std::string(reinterpret_cast<char*>(buf.data()), w.size()), f.SerializeAsString())
        << label_size;
  }
}

TEST(WireWriterTest, NestedLengthsThatOutgrowTheirReservedByteRoundTrip) {
  // The stream's framing: a length prefix around a Frame around a Mark, where the inner body,
  // the outer one or both cross 128 bytes (one length byte reserved for each).
  for (size_t label_size : {100u, 118u, 122u, 123u, 124u, 125u, 126u, 127u, 300u}) {
    std::string label(label_size, 'q');
    std::vector<uint8_t> buf(label_size + 64);
    WireWriter w(buf.data(), buf.size());
    size_t prefix = w.BeginLengthPrefixed();
    size_t body = w.BeginMessage(11);  // Frame.mark
    w.Uint64(1, 300);
    w.Bytes(4, label.data(), label.size());
    w.EndMessage(body);
    w.EndMessage(prefix);
    ASSERT_TRUE(w.ok()) << label_size;
    google::protobuf::io::CodedInputStream in(buf.data(), static_cast<int>(w.size()));
    uint32_t length = 0;
    ASSERT_TRUE(in.ReadVarint32(&length)) << label_size;
    EXPECT_EQ(length + static_cast<uint32_t>(in.CurrentPosition()), w.size()) << label_size;
    v1::Frame f;
    ASSERT_TRUE(f.ParseFromArray(buf.data() + in.CurrentPosition(), static_cast<int>(length)))
        << label_size;
    EXPECT_EQ(f.mark().seq(), 300u);
    EXPECT_EQ(f.mark().label(), label);
  }
}

TEST(WireWriterTest, ALengthThatCannotGrowIsAnOverflowNotAnOverrun) {
  // 200 bytes of body fill the buffer exactly; its 2-byte length needs one byte more.
  std::vector<uint8_t> buf(2 + 200 + 3, 0xee);
  WireWriter w(buf.data(), 2 + 200);
  size_t m = w.BeginMessage(11);
  w.RawBytes(std::string(200, 'z').data(), 200);
  ASSERT_TRUE(w.ok());
  w.EndMessage(m);
  EXPECT_FALSE(w.ok());
  for (size_t i = 202; i < buf.size(); ++i) EXPECT_EQ(buf[i], 0xee) << i;  // nothing past the end
}

TEST(WireWriterTest, PackedRepeatedMatchesLibprotobuf) {
  uint64_t pcs[] = {0x401000, 0x7fffabcd1234, 1, 0};
  uint8_t buf[128];
  WireWriter w(buf, sizeof(buf));
  w.Uint64(1, 99);
  w.PackedUint64(2, pcs, 4);
  ASSERT_TRUE(w.ok());
  v1::Stack s;
  ASSERT_TRUE(s.ParseFromArray(buf, static_cast<int>(w.size())));
  ASSERT_EQ(s.pcs_size(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(s.pcs(i), pcs[i]);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(buf), w.size()), s.SerializeAsString());
}

TEST(WireWriterTest, OverflowIsReportedAndTruncateRecovers) {
  uint8_t buf[8];
  WireWriter w(buf, sizeof(buf));
  w.Uint64(1, 1);
  size_t mark = w.size();
  w.Bytes(2, "0123456789", 10);
  EXPECT_FALSE(w.ok());
  w.Truncate(mark);
  EXPECT_TRUE(w.ok());
  EXPECT_EQ(w.size(), mark);
  w.Uint64(3, 5);
  EXPECT_TRUE(w.ok());
}

// The agent's enums come from fragscope/wire_constants.h, generated from the proto's descriptor;
// these check the generator's naming (k_ and the name after API_, kCamelCase of the rest) on the
// enums the agent writes.
TEST(ProtoEnumsTest, ApiNumbersMatchTheProto) {
  int checked = 0;
#define CHECK_API(name, number)                                           \
  {                                                                       \
    const std::string proto_name = "API_" + std::string(#name).substr(2); \
    v1::Api parsed = v1::API_UNKNOWN;                                     \
    ASSERT_TRUE(v1::Api_Parse(proto_name, &parsed)) << #name;             \
    EXPECT_EQ(static_cast<int>(parsed), number) << #name;                 \
    EXPECT_EQ(static_cast<int>(Api::name), number) << #name;              \
    ++checked;                                                            \
  }
  FRAGSCOPE_WIRE_Api(CHECK_API)
#undef CHECK_API
      EXPECT_EQ(checked, v1::Api_descriptor()->value_count());
}

TEST(ProtoEnumsTest, OtherEnumsMatchTheProto) {
  EXPECT_EQ(static_cast<int>(MemoryKind::kDevice), v1::MEMORY_KIND_DEVICE);
  EXPECT_EQ(static_cast<int>(MemoryKind::kPitched), v1::MEMORY_KIND_PITCHED);
  EXPECT_EQ(static_cast<int>(MemoryKind::kManaged), v1::MEMORY_KIND_MANAGED);
  EXPECT_EQ(static_cast<int>(MemoryKind::kPool), v1::MEMORY_KIND_POOL);
  EXPECT_EQ(static_cast<int>(MemoryKind::kGraph), v1::MEMORY_KIND_GRAPH);
  EXPECT_EQ(static_cast<int>(MemoryKind::kIpcImport), v1::MEMORY_KIND_IPC_IMPORT);
  EXPECT_EQ(static_cast<int>(MapOp::kReserve), v1::MapEvent::OP_RESERVE);
  EXPECT_EQ(static_cast<int>(MapOp::kFreeRange), v1::MapEvent::OP_FREE_RANGE);
  EXPECT_EQ(static_cast<int>(MapOp::kMap), v1::MapEvent::OP_MAP);
  EXPECT_EQ(static_cast<int>(MapOp::kUnmap), v1::MapEvent::OP_UNMAP);
  EXPECT_EQ(static_cast<int>(HandleOp::kCreate), v1::HandleEvent::OP_CREATE);
  EXPECT_EQ(static_cast<int>(HandleOp::kRelease), v1::HandleEvent::OP_RELEASE);
  EXPECT_EQ(static_cast<int>(HandleOp::kRetain), v1::HandleEvent::OP_RETAIN);
  EXPECT_EQ(static_cast<int>(HandleOp::kExport), v1::HandleEvent::OP_EXPORT);
  EXPECT_EQ(static_cast<int>(HandleOp::kImport), v1::HandleEvent::OP_IMPORT);
  EXPECT_EQ(static_cast<int>(BlockOp::kAlloc), v1::BlockEvent::OP_ALLOC);
  EXPECT_EQ(static_cast<int>(BlockOp::kFree), v1::BlockEvent::OP_FREE);
  EXPECT_EQ(static_cast<int>(BlockOp::kFreePending), v1::BlockEvent::OP_FREE_PENDING);
  EXPECT_EQ(static_cast<int>(DropReason::kRingFull), v1::Drops::REASON_RING_FULL);
  EXPECT_EQ(static_cast<int>(DropReason::kDisconnected), v1::Drops::REASON_DISCONNECTED);
  EXPECT_EQ(static_cast<int>(DropReason::kWriteFailed), v1::Drops::REASON_WRITE_FAILED);
  EXPECT_EQ(static_cast<int>(SnapshotReason::kStreamStart), v1::Snapshot::REASON_STREAM_START);
  EXPECT_EQ(static_cast<int>(SnapshotReason::kResync), v1::Snapshot::REASON_RESYNC);
  EXPECT_EQ(static_cast<int>(SnapshotReason::kPeriodic), v1::Snapshot::REASON_PERIODIC);
}

}  // namespace
}  // namespace fragscope::agent
