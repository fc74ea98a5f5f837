// Test helper: replays a fragscope trace into the model as the collector does (frames put back
// in seq order) and prints each device's figures at every fragscope_mark, so a test can compare
// them with what the program itself saw at the same point (torch.cuda.memory_reserved() and
// memory_allocated() for the PyTorch adapter test).
//
// usage: fragscope_trace_marks TRACE
// output: one line per mark and device:
//   mark LABEL device N reserved R allocated A cached C opaque O blocks B exact E
// (LABEL has no spaces in the tests that use this.) Exit 0, or 1 with a message on stderr.
#include <cstdio>
#include <string>

#include "fragscope/model/model_summary.h"
#include "fragscope/model/process_model.h"
#include "fragscope/server/seq_orderer.h"
#include "fragscope/trace/frame_reader.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s TRACE\n", argv[0]);
    return 1;
  }
  auto reader = fragscope::FrameReader::OpenFile(argv[1]);
  if (!reader.ok()) {
    std::fprintf(stderr, "%s\n", std::string(reader.status().message()).c_str());
    return 1;
  }
  fragscope::ProcessModel model;
  fragscope::SeqOrderer orderer;
  auto sink = [&](const fragscope::v1::Frame& frame) {
    model.Apply(frame);
    // The user's marks; a snapshot diff's own (blocks_synced) comes just before each of them.
    if (!frame.has_mark() || frame.mark().blocks_synced()) return;
    const fragscope::ModelSummary summary = model.Summarize();
    for (const fragscope::DeviceSummary& d : summary.devices) {
      std::printf(
          "mark %s device %d reserved %llu allocated %llu cached %llu opaque %llu blocks %llu "
          "exact %llu\n",
          frame.mark().label().c_str(), d.ordinal,
          static_cast<unsigned long long>(d.reserved_bytes),
          static_cast<unsigned long long>(d.allocated_bytes),
          static_cast<unsigned long long>(d.cached_bytes),
          static_cast<unsigned long long>(d.opaque_bytes),
          static_cast<unsigned long long>(d.blocks),
          static_cast<unsigned long long>(d.exact_bytes));
    }
  };
  fragscope::v1::Frame frame;
  for (;;) {
    const fragscope::FrameReader::Result r = reader->Next(&frame);
    if (r == fragscope::FrameReader::Result::kFrame) {
      orderer.Push(frame, sink);
      continue;
    }
    orderer.Flush(sink);
    if (r == fragscope::FrameReader::Result::kError) {
      std::fprintf(stderr, "%s\n", reader->error().c_str());
      return 1;
    }
    return 0;
  }
}
