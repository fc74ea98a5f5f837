// StreamSession against a stream that pauses, as a live agent's does: what was applied is
// visible to query threads while the session waits for more.
#include "fragscope/server/stream_session.h"

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "fragscope.pb.h"
#include "fragscope/trace/frame_reader.h"
#include "fragscope/trace/trace_format.h"
#include "gtest/gtest.h"

namespace fragscope {
namespace {

std::string Framed(const v1::Frame& f) {
  std::string out;
  AppendFramed(f.SerializeAsString(), &out);
  return out;
}

v1::Frame Alloc(uint64_t seq, uint64_t address) {
  v1::Frame f;
  v1::AllocEvent* a = f.mutable_alloc();
  a->set_seq(seq);
  a->set_api(v1::API_cudaMalloc);
  a->set_address(address);
  a->set_size(1 << 20);
  a->set_device(0);
  a->set_kind(v1::MEMORY_KIND_DEVICE);
  return f;
}

// Runs `session` on the read end of a pipe in another thread; the test writes the stream.
class PipeStream {
 public:
  explicit PipeStream(StreamSession* session) {
    EXPECT_EQ(pipe(fds_), 0);
    unsigned char header[kTraceHeaderBytes];
    EncodeTraceHeader(kFormatMajor, kFormatMinor, header);
    Put(std::string(reinterpret_cast<const char*>(header), sizeof(header)));
    outcome_ = std::async(std::launch::async, [this, session] {
      auto reader = FrameReader::FromFd(fds_[0], "pipe");
      EXPECT_TRUE(reader.ok()) << reader.status();
      return reader.ok() ? session->Run(*reader) : StreamOutcome{};
    });
  }
  void Put(const std::string& bytes) {
    ASSERT_EQ(write(fds_[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }
  StreamOutcome Finish() {
    close(fds_[1]);
    return outcome_.get();
  }

 private:
  int fds_[2] = {-1, -1};
  std::future<StreamOutcome> outcome_;
};

// Polls `done` for up to 10 s (the session thread applies what arrived on its own time).
template <typename Done>
bool Eventually(Done&& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(StreamSession, QueriesSeeEveryAppliedFrameWhileTheStreamIsIdle) {
  StreamSession session(ModelOptions{}, nullptr);
  PipeStream stream(&session);
  v1::Frame hello;
  hello.mutable_hello()->set_pid(77);
  v1::Frame device;
  device.mutable_device()->set_ordinal(0);
  device.mutable_device()->set_total_bytes(uint64_t{1} << 34);
  // More frames than one holding of the session's lock covers, then a pause: the session
  // must apply them all and let queries in while it waits, not hold the lock over the read.
  std::string burst = Framed(hello) + Framed(device);
  const int kAllocs = 300;
  for (int i = 0; i < kAllocs; ++i)
    burst += Framed(Alloc(i + 1, 0x7f0000000000 + (static_cast<uint64_t>(i) << 24)));
  stream.Put(burst);
  // The queries run apart, so that a session holding its lock over the read fails the test
  // after 10 s instead of hanging it (closing the pipe then lets the session go).
  auto queries = std::async(std::launch::async, [&] {
    EXPECT_TRUE(Eventually([&] { return session.frames_applied() == 2 + kAllocs; }))
        << "applied " << session.frames_applied();
    // The session now waits on the pipe; each query must come back at once.
    for (int i = 0; i < 3; ++i) {
      const ModelSummary s = session.Summarize();
      ASSERT_EQ(s.devices.size(), 1u);
      EXPECT_EQ(s.devices[0].reserved_bytes, uint64_t{kAllocs} << 20);
      ASSERT_TRUE(session.hello().has_value());
      EXPECT_EQ(session.hello()->pid(), 77u);
    }
  });
  if (queries.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "queries blocked while the stream was idle";
    stream.Finish();
    return;
  }
  queries.get();
  stream.Put(Framed(Alloc(kAllocs + 1, 0x7e0000000000)));
  ASSERT_TRUE(Eventually([&] { return session.frames_applied() == 3 + kAllocs; }));
  const StreamOutcome outcome = stream.Finish();
  EXPECT_EQ(outcome.result, FrameReader::Result::kEnd) << outcome.error;
  EXPECT_EQ(outcome.frames, 3u + kAllocs);
  EXPECT_EQ(session.Summarize().devices[0].reserved_bytes, uint64_t{kAllocs + 1} << 20);
}

// The daemon's copy of a stream reaches the disk whenever the stream pauses, not only per MiB or
// at the end: a collector killed hard (SIGKILL, the OOM killer) left a copy of a slow stream
// with no Hello and none of its events, so the morning report could not even name the process.
TEST(StreamSession, TheTraceCopyIsOnDiskWhileTheStreamIsIdle) {
  char dir_template[] = "/tmp/fragscope-session-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string path = std::string(dir_template) + "/copy.fst";
  StreamSession session(ModelOptions{}, [&](const v1::Frame&) { return path; });
  PipeStream stream(&session);
  v1::Frame hello;
  hello.mutable_hello()->set_pid(78);
  stream.Put(Framed(hello) + Framed(Alloc(1, 0x7f0000000000)));
  ASSERT_TRUE(Eventually([&] { return session.frames_applied() == 2; }));
  // The session now waits on the pipe, with the copy written: it reads back whole.
  auto copy = [&] {
    std::vector<v1::Frame> frames;
    auto reader = FrameReader::OpenFile(path);
    if (!reader.ok()) return frames;
    v1::Frame f;
    while (reader->Next(&f) == FrameReader::Result::kFrame) frames.push_back(f);
    return frames;
  };
  const bool on_disk = Eventually([&] { return copy().size() == 2; });
  EXPECT_TRUE(on_disk) << copy().size() << " frames";
  if (on_disk) {
    EXPECT_EQ(copy()[0].hello().pid(), 78u);
  }
  stream.Put(Framed(Alloc(2, 0x7e0000000000)));
  const StreamOutcome outcome = stream.Finish();
  EXPECT_TRUE(outcome.trace_error.empty()) << outcome.trace_error;
  EXPECT_EQ(copy().size(), 3u);
  std::remove(path.c_str());
  rmdir(dir_template);
}

// Event frames reach the model as decoded (ArenaFrameReader), and only the copy and the
// orderer's held events build frames of them: a stream that starts with an event (the copy's
// path is chosen from it), events out of order (held, then released as frames) and in order
// (applied as decoded) must give the copy every frame, byte for byte in arrival order, and the
// model every event.
TEST(StreamSession, DecodedEventsAreCopiedAndAppliedLikeFrames) {
  char dir_template[] = "/tmp/fragscope-session-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string path = std::string(dir_template) + "/copy.fst";
  bool first_was_alloc = false;
  StreamSession session(ModelOptions{}, [&](const v1::Frame& first) {
    first_was_alloc = first.has_alloc() && first.alloc().seq() == 2;
    return path;
  });
  PipeStream stream(&session);
  std::vector<v1::Frame> sent;
  for (uint64_t seq : {2, 1, 3, 5, 4, 6, 7}) {  // 2 and 5 wait for their predecessors
    sent.push_back(Alloc(seq, 0x7f0000000000 + (seq << 24)));
  }
  v1::Frame free_one;
  free_one.mutable_free()->set_seq(8);
  free_one.mutable_free()->set_api(v1::API_cudaFree);
  free_one.mutable_free()->set_address(0x7f0000000000 + (uint64_t{3} << 24));
  sent.push_back(free_one);
  std::string bytes;
  for (const v1::Frame& f : sent) bytes += Framed(f);
  stream.Put(bytes);
  const StreamOutcome outcome = stream.Finish();
  EXPECT_EQ(outcome.result, FrameReader::Result::kEnd) << outcome.error;
  EXPECT_TRUE(outcome.trace_error.empty()) << outcome.trace_error;
  EXPECT_TRUE(first_was_alloc);
  EXPECT_EQ(outcome.frames, sent.size());
  EXPECT_EQ(session.frames_applied(), sent.size());
  const ModelSummary s = session.Summarize();
  ASSERT_EQ(s.devices.size(), 1u);
  EXPECT_EQ(s.devices[0].reserved_bytes, uint64_t{6} << 20);  // 7 allocations, one freed
  EXPECT_EQ(s.unmatched_events, 0u);
  auto reader = FrameReader::OpenFile(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  v1::Frame f;
  std::size_t i = 0;
  while (reader->Next(&f) == FrameReader::Result::kFrame) {
    ASSERT_LT(i, sent.size());
    EXPECT_EQ(f.SerializeAsString(), sent[i].SerializeAsString()) << "frame " << i;
    ++i;
  }
  EXPECT_EQ(i, sent.size());
  std::remove(path.c_str());
  rmdir(dir_template);
}

// The daemon's trace copy re-writes each frame it read: a stack's end (format 1.11) must survive
// it, and the session's model must keep it for the daemon's reports.
TEST(StreamSession, TheTraceCopyAndTheModelKeepHowEachStackEnded) {
  char dir_template[] = "/tmp/fragscope-session-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string path = std::string(dir_template) + "/copy.fst";
  StreamSession session(ModelOptions{}, [&](const v1::Frame&) { return path; });
  PipeStream stream(&session);
  v1::Frame hello;
  hello.mutable_hello()->set_pid(79);
  hello.mutable_hello()->set_stack_depth(2);
  v1::Frame stacks;
  for (v1::StackEnd end :
       {v1::STACK_END_OUTERMOST, v1::STACK_END_DEPTH_LIMIT, v1::STACK_END_NO_UNWIND_INFO,
        v1::STACK_END_UNREADABLE, v1::STACK_END_UNSUPPORTED}) {
    v1::Stack* s = stacks.mutable_stacks()->add_stacks();
    s->set_id(static_cast<uint64_t>(end));
    s->add_pcs(0x401000 + end);
    s->set_end(end);
  }
  std::string bytes = Framed(hello) + Framed(stacks);
  for (uint64_t id = 1; id <= 5; ++id) {  // a summary keeps the stacks its sites name
    v1::Frame alloc = Alloc(id, 0x7f0000000000 + (id << 24));
    alloc.mutable_alloc()->set_stack_id(id);
    bytes += Framed(alloc);
  }
  stream.Put(bytes);
  const StreamOutcome outcome = stream.Finish();
  EXPECT_TRUE(outcome.trace_error.empty()) << outcome.trace_error;
  const ModelSummary s = session.Summarize();
  EXPECT_EQ(s.stack_depth, 2u);
  ASSERT_EQ(s.stacks.size(), 5u);
  EXPECT_EQ(s.stacks.at(v1::STACK_END_OUTERMOST).end, StackEnd::kOutermost);
  EXPECT_EQ(s.stacks.at(v1::STACK_END_DEPTH_LIMIT).end, StackEnd::kDepthLimit);
  EXPECT_EQ(s.stacks.at(v1::STACK_END_NO_UNWIND_INFO).end, StackEnd::kNoUnwindInfo);
  EXPECT_EQ(s.stacks.at(v1::STACK_END_UNREADABLE).end, StackEnd::kUnreadable);
  EXPECT_EQ(s.stacks.at(v1::STACK_END_UNSUPPORTED).end, StackEnd::kUnsupported);
  auto reader = FrameReader::OpenFile(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  v1::Frame f;
  int stack_frames = 0;
  while (reader->Next(&f) == FrameReader::Result::kFrame) {
    if (!f.has_stacks()) continue;
    ++stack_frames;
    EXPECT_EQ(f.SerializeAsString(), stacks.SerializeAsString());
  }
  EXPECT_EQ(stack_frames, 1);
  std::remove(path.c_str());
  rmdir(dir_template);
}

}  // namespace
}  // namespace fragscope
