// fragscope-dump TRACE: prints a trace as text, one line per event.
//
//   fragscope-dump <path> format=1.0              header line
//   # hello pid=... exe=...                        non-event frames start with '#'
//   cudaMalloc ptr=0x7f.. size=1024 dev=0 stream=0x0 result=0 stack=3 seq=1 tid=42 ...
//   events=N drops=M                              final line
//
// Exit: 0 ok, 2 usage, 3 unreadable, malformed or truncated input (whole frames before the
// damage are still printed, so nothing readable is lost).
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fragscope.pb.h"
#include "fragscope/model/model_summary.h"
#include "fragscope/trace/frame_reader.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

constexpr int kExitUsage = 2;
constexpr int kExitBadInput = 3;

// The CUDA spelling, or the number of an API this build does not know.
std::string ApiLabel(int api) {
  std::string name = fragscope::ApiName(api);
  return name.empty() ? absl::StrCat("api", api) : name;
}

// Short keys people grep for; the rest keep their proto names.
std::string_view KeyFor(std::string_view field) {
  if (field == "address") return "ptr";
  if (field == "device") return "dev";
  if (field == "stack_id") return "stack";
  return field;
}

bool IsHexField(std::string_view field) {
  return field == "address" || field == "stream" || field == "pool" || field == "handle" ||
         field == "offset" || field == "allocator";
}

bool IsCoreField(std::string_view field) {
  return field == "address" || field == "size" || field == "device" || field == "stream" ||
         field == "result" || field == "stack_id";
}

// One event message -> "api key=value ...". Fields print in proto order: the core ones always,
// the others only when set, so lines stay short but never hide a zero that matters.
std::string FormatEvent(const Message& event, std::string_view prefix_op) {
  const auto* desc = event.GetDescriptor();
  const Reflection* refl = event.GetReflection();
  std::string line;
  if (const FieldDescriptor* api = desc->FindFieldByName("api")) {
    line = ApiLabel(refl->GetEnumValue(event, api));
  }
  if (!prefix_op.empty()) absl::StrAppend(&line, " op=", std::string(prefix_op));
  // Core fields first, in the order people read them; then the rest in proto order.
  static constexpr const char* kCoreOrder[] = {"address", "size",   "device",
                                               "stream",  "result", "stack_id"};
  std::vector<const FieldDescriptor*> order;
  for (const char* name : kCoreOrder) {
    if (const FieldDescriptor* f = desc->FindFieldByName(name)) order.push_back(f);
  }
  for (int i = 0; i < desc->field_count(); ++i) {
    if (!IsCoreField(desc->field(i)->name())) order.push_back(desc->field(i));
  }
  for (const FieldDescriptor* f : order) {
    std::string_view name = f->name();
    if (name == "api" || name == "op" || f->is_repeated()) continue;
    bool set = refl->HasField(event, f);
    if (!set && !IsCoreField(name)) continue;
    std::string value;
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_UINT64: {
        uint64_t v = refl->GetUInt64(event, f);
        value = IsHexField(name) ? absl::StrFormat("0x%x", v) : absl::StrCat(v);
        break;
      }
      case FieldDescriptor::CPPTYPE_INT64:
        value = absl::StrCat(refl->GetInt64(event, f));
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        value = absl::StrCat(refl->GetUInt32(event, f));
        break;
      case FieldDescriptor::CPPTYPE_INT32:
        value = absl::StrCat(refl->GetInt32(event, f));
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        value = refl->GetBool(event, f) ? "true" : "false";
        break;
      case FieldDescriptor::CPPTYPE_ENUM: {
        std::string_view n = refl->GetEnum(event, f)->name();
        // MEMORY_KIND_POOL -> pool
        if (auto cut = n.rfind("KIND_"); cut != std::string_view::npos) n.remove_prefix(cut + 5);
        value = absl::AsciiStrToLower(std::string(n));
        break;
      }
      case FieldDescriptor::CPPTYPE_STRING:
        value = absl::StrFormat("\"%s\"", absl::CEscape(refl->GetString(event, f)));
        break;
      default:
        continue;
    }
    absl::StrAppend(&line, " ", std::string(KeyFor(name)), "=", value);
  }
  return line;
}

template <typename OpEnum>
std::string OpName(OpEnum op, const google::protobuf::EnumDescriptor* desc) {
  const auto* v = desc->FindValueByNumber(static_cast<int>(op));
  if (v == nullptr) return absl::StrCat(static_cast<int>(op));
  std::string_view n = v->name();
  if (n.substr(0, 3) == "OP_") n.remove_prefix(3);
  return absl::AsciiStrToLower(std::string(n));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("fragscope-dump %s\n", FRAGSCOPE_VERSION);
    return 0;
  }
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf(
        "usage: fragscope-dump TRACE   (- reads the trace from stdin)\n"
        "Prints every event of a fragscope trace as one line of text. --version: the build.\n");
    return 0;
  }
  if (argc != 2) {
    std::fprintf(stderr, "fragscope-dump: expected one TRACE (fragscope-dump --help)\n");
    return kExitUsage;
  }
  // `-`: the trace on stdin (a pipe); any other path may be a pipe too, read once, in order.
  const bool from_stdin = std::strcmp(argv[1], "-") == 0;
  auto reader = from_stdin ? fragscope::FrameReader::FromFd(dup(0), "stdin")
                           : fragscope::FrameReader::OpenFile(argv[1]);
  if (!reader.ok()) {
    std::fprintf(stderr, "fragscope-dump: %s\n", std::string(reader.status().message()).c_str());
    return kExitBadInput;
  }
  std::cout << "fragscope-dump " << argv[1] << " format=" << reader->major() << "."
            << reader->minor() << "\n";
  uint64_t events = 0;
  uint64_t drops = 0;
  fragscope::v1::Frame frame;
  fragscope::FrameReader::Result result;
  namespace v1 = fragscope::v1;
  while ((result = reader->Next(&frame)) == fragscope::FrameReader::Result::kFrame) {
    switch (frame.body_case()) {
      case v1::Frame::kHello: {
        const auto& h = frame.hello();
        std::cout << absl::StrFormat("# hello pid=%d exe=%s agent=%s backend=%s attached=%d\n",
                                     h.pid(), h.exe(), h.agent_version(),
                                     v1::Hello::Backend_Name(h.backend()), h.attached());
        break;
      }
      case v1::Frame::kDevice:
        std::cout << absl::StrFormat("# device ordinal=%d total=%d name=\"%s\"\n",
                                     frame.device().ordinal(), frame.device().total_bytes(),
                                     absl::CEscape(frame.device().name()));
        break;
      case v1::Frame::kModuleMap:
        std::cout << "# modules n=" << frame.module_map().modules_size() << "\n";
        break;
      case v1::Frame::kStacks:
        std::cout << "# stacks n=" << frame.stacks().stacks_size() << "\n";
        break;
      case v1::Frame::kAlloc:
        std::cout << FormatEvent(frame.alloc(), "") << "\n";
        ++events;
        break;
      case v1::Frame::kFree:
        std::cout << FormatEvent(frame.free(), "") << "\n";
        ++events;
        break;
      case v1::Frame::kMap:
        std::cout << FormatEvent(frame.map(),
                                 OpName(frame.map().op(), v1::MapEvent::Op_descriptor()))
                  << "\n";
        ++events;
        break;
      case v1::Frame::kHandle:
        std::cout << FormatEvent(frame.handle(),
                                 OpName(frame.handle().op(), v1::HandleEvent::Op_descriptor()))
                  << "\n";
        ++events;
        break;
      case v1::Frame::kFailed:
        std::cout << FormatEvent(frame.failed(), "failed") << "\n";
        ++events;
        break;
      case v1::Frame::kBlock:
        std::cout << FormatEvent(frame.block(),
                                 OpName(frame.block().op(), v1::BlockEvent::Op_descriptor()))
                  << "\n";
        ++events;
        break;
      case v1::Frame::kMark: {
        const v1::Mark& m = frame.mark();
        std::string rank;
        if (m.has_rank()) rank = absl::StrFormat(" rank=%d", m.rank());
        if (m.has_world_size()) absl::StrAppendFormat(&rank, " world_size=%d", m.world_size());
        std::cout << absl::StrFormat("fragscope_mark label=\"%s\" seq=%d tid=%d%s%s\n",
                                     absl::CEscape(m.label()), m.seq(), m.tid(),
                                     m.blocks_synced() ? " blocks_synced=1" : "", rank);
        ++events;
        break;
      }
      case v1::Frame::kSymbolizedStack: {
        // Stacks of converted streams (PyTorch snapshots): frames by name, not by pc.
        const auto& st = frame.symbolized_stack();
        std::string first;
        if (st.frames_size() > 0) {
          const auto& f = st.frames(0);
          first = absl::StrFormat(" first=\"%s (%s:%d)\"", absl::CEscape(f.function()),
                                  absl::CEscape(f.file()), f.line());
        }
        std::cout << absl::StrFormat("# symbolized stack id=%d frames=%d%s\n", st.id(),
                                     st.frames_size(), first);
        break;
      }
      case v1::Frame::kSymbolTable: {
        int pcs = 0;
        for (const auto& m : frame.symbol_table().modules()) pcs += m.pcs_size();
        std::cout << absl::StrFormat("# symbol table modules=%d pcs=%d\n",
                                     frame.symbol_table().modules_size(), pcs);
        break;
      }
      case v1::Frame::kMemInfo:
        std::cout << absl::StrFormat("# meminfo dev=%d free=%d total=%d pool=0x%x seq=%d\n",
                                     frame.mem_info().device(), frame.mem_info().free_bytes(),
                                     frame.mem_info().total_bytes(), frame.mem_info().pool(),
                                     frame.mem_info().seq());
        break;
      case v1::Frame::kDrops:
        drops = std::max(drops, frame.drops().total_dropped());
        std::cout << absl::StrFormat("# drops dropped=%d total=%d reason=%s\n",
                                     frame.drops().dropped_events(), frame.drops().total_dropped(),
                                     v1::Drops::Reason_Name(frame.drops().reason()));
        break;
      case v1::Frame::kSnapshot: {
        const auto& s = frame.snapshot();
        std::cout << absl::StrFormat(
            "# snapshot seq=%d reason=%s allocations=%d reservations=%d handles=%d mappings=%d "
            "blocks=%d complete_history=%d\n",
            s.seq(), v1::Snapshot::Reason_Name(s.reason()), s.allocations_size(),
            s.reservations_size(), s.handles_size(), s.mappings_size(), s.blocks_size(),
            s.complete_history());
        break;
      }
      case v1::Frame::kEnd:
        drops = std::max(drops, frame.end().total_dropped());
        std::cout << absl::StrFormat("# end seq=%d events_recorded=%d total_dropped=%d\n",
                                     frame.end().seq(), frame.end().events_recorded(),
                                     frame.end().total_dropped());
        break;
      default:
        std::cout << "# unknown frame (newer minor version?)\n";
        break;
    }
  }
  std::cout << "events=" << events << " drops=" << drops << "\n";
  std::cout.flush();
  if (result != fragscope::FrameReader::Result::kEnd) {
    std::fprintf(stderr, "fragscope-dump: %s\n", reader->error().c_str());
    return kExitBadInput;
  }
  return 0;
}
