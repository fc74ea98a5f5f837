// Source-level stacks (annotate.h fragscope_source_stack): one id per distinct stack, above the
// pc table's ids, bounded text, shipped once per stream as a SymbolizedStack libprotobuf reads.
#include "recording/source_stack_table.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "fragscope.pb.h"
#include "shipping/frame_encoder.h"

namespace fragscope::agent {
namespace {

// The SymbolizedStack frame the drain would write for `id` (empty if already sent).
std::string Send(SourceStackTable& table, uint64_t id) {
  std::vector<uint8_t> buffer(1 << 20);
  WireWriter w(buffer.data(), buffer.size());
  table.SendIfUnsent(id, [&](uint64_t stack_id, const uint8_t* frames, size_t size) {
    return EncodeSymbolizedStack(w, stack_id, frames, size);
  });
  return std::string(reinterpret_cast<const char*>(buffer.data()), w.size());
}

v1::SymbolizedStack Parse(const std::string& framed) {
  // A varint length, then the Frame.
  size_t skip = 0;
  while (skip < framed.size() && (static_cast<uint8_t>(framed[skip]) & 0x80) != 0) ++skip;
  ++skip;
  v1::Frame frame;
  EXPECT_TRUE(frame.ParseFromString(framed.substr(skip)));
  EXPECT_TRUE(frame.has_symbolized_stack());
  return frame.symbolized_stack();
}

TEST(SourceStackTableTest, EqualStacksShareAnIdAboveEveryPcStackId) {
  SourceStackTable table;
  const SourceFrameText a[] = {{"forward", "model.py", 42}, {"<module>", "train.py", 7}};
  const SourceFrameText b[] = {{"forward", "model.py", 43}, {"<module>", "train.py", 7}};
  const uint64_t id_a = table.Intern(a, 2);
  EXPECT_TRUE(SourceStackTable::IsSourceId(id_a));
  EXPECT_GT(id_a, uint64_t{1} << 32);  // the pc table's ids are slot + 1, below 2^32
  EXPECT_EQ(table.Intern(a, 2), id_a);
  const uint64_t id_b = table.Intern(b, 2);
  EXPECT_NE(id_b, id_a);
  EXPECT_EQ(table.Intern(a, 1), table.Intern(a, 1));
  EXPECT_NE(table.Intern(a, 1), id_a);  // a prefix is another stack
  EXPECT_EQ(table.Intern(a, 0), 0u);
  EXPECT_EQ(table.Intern(nullptr, 3), 0u);
  EXPECT_EQ(table.count(), 3u);
  EXPECT_EQ(table.refused(), 0u);
}

TEST(SourceStackTableTest, ShippedOncePerStreamWithItsFrames) {
  SourceStackTable table;
  const SourceFrameText frames[] = {{"step", "train.py", 12}, {nullptr, nullptr, 0}};
  const uint64_t id = table.Intern(frames, 2);
  const v1::SymbolizedStack s = Parse(Send(table, id));
  EXPECT_EQ(s.id(), id);
  ASSERT_EQ(s.frames_size(), 2);
  EXPECT_EQ(s.frames(0).function(), "step");
  EXPECT_EQ(s.frames(0).file(), "train.py");
  EXPECT_EQ(s.frames(0).line(), 12u);
  EXPECT_EQ(s.frames(1).function(), "");
  EXPECT_EQ(Send(table, id), "");  // sent already
  table.ResetSent();               // a new stream
  EXPECT_EQ(Parse(Send(table, id)).id(), id);
  // Not one of its ids: nothing written.
  EXPECT_FALSE(table.SendIfUnsent(id + 1, [](uint64_t, const uint8_t*, size_t) { return true; }));
}

TEST(SourceStackTableTest, TextAndDepthAreBounded) {
  SourceStackTable table;
  const std::string long_name(5000, 'f');
  std::vector<SourceFrameText> deep(500, SourceFrameText{long_name.c_str(), "x.py", 1});
  const uint64_t id = table.Intern(deep.data(), deep.size());
  ASSERT_NE(id, 0u);
  const v1::SymbolizedStack s = Parse(Send(table, id));
  ASSERT_EQ(s.frames_size(), static_cast<int>(SourceStackTable::kMaxFrames));
  EXPECT_EQ(s.frames(0).function().size(), SourceStackTable::kMaxTextBytes);
}

TEST(SourceStackTableTest, ConcurrentInternsAgree) {
  SourceStackTable table;
  std::vector<std::vector<uint64_t>> ids(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint32_t line = 1; line <= 200; ++line) {
        const SourceFrameText f[] = {{"f", "a.py", line}};
        ids[t].push_back(table.Intern(f, 1));
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 1; t < 4; ++t) EXPECT_EQ(ids[t], ids[0]);
  EXPECT_EQ(table.count(), 200u);
}

}  // namespace
}  // namespace fragscope::agent
