// Fuzz target: a trace file end to end:
// bytes -> FrameReader -> ProcessModel::Apply -> Summarize -> RenderJson / RenderText.
//
// Frames that survive the reader are well-formed protobuf but otherwise arbitrary: the model
// must survive them (process_model.h: "Never fails"), and the reports must stay valid. The
// bytes are read twice: into frames (FrameReader::Next), and as `fragscope report` reads them,
// event frames left as decoded and applied through their views (ArenaFrameReader); both models
// must give the same JSON report, byte for byte.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fragscope.pb.h"
#include "fragscope/model/process_model.h"
#include "fragscope/trace/arena_frame_reader.h"
#include "fragscope/trace/frame_reader.h"
#include "fuzz_util.h"
#include "report_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<fragscope::FrameReader> reader =
      fragscope::FrameReader::FromFd(fragscope::fuzz::MemFdWith(data, size), "fuzz.fsc");
  if (!reader.ok()) return 0;
  // Small limits, so that thinning the timeline and dropping post-mortems past the limit are
  // reached with the few frames a fuzz input holds.
  fragscope::ModelOptions options;
  options.timeline_max_points = 8;
  options.max_postmortems = 3;
  options.recent_events = 4;
  options.top_sites = 3;
  options.fragmentation_floor_bytes = 4096;
  fragscope::ProcessModel model(options);
  fragscope::v1::Frame frame;
  while (reader->Next(&frame) == fragscope::FrameReader::Result::kFrame) model.Apply(frame);
  // A truncated or malformed tail still gets a report of what came before (tests/RELIABILITY.md).
  const std::string framed = fragscope::fuzz::SummarizeAndRender(model);

  absl::StatusOr<fragscope::FrameReader> again =
      fragscope::FrameReader::FromFd(fragscope::fuzz::MemFdWith(data, size), "fuzz.fsc");
  FUZZ_CHECK(again.ok(), "the same bytes opened once and not twice");
  fragscope::ProcessModel decoded(options);
  fragscope::ArenaFrameReader frames(*again);
  const fragscope::v1::Frame* next = nullptr;
  const fragscope::HotEvent* event = nullptr;
  while (frames.Next(&next, &event) == fragscope::FrameReader::Result::kFrame) {
    if (event != nullptr) {
      decoded.Apply(*event);
    } else {
      decoded.Apply(*next);
    }
  }
  const std::string from_events = fragscope::fuzz::SummarizeAndRender(decoded);
  FUZZ_CHECK(from_events == framed, "decoded events gave another report (%zu vs %zu bytes)",
             from_events.size(), framed.size());
  return 0;
}
