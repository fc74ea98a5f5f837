#include "fragscope/trace/frame_limits.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/wire_format.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "fragscope.pb.h"

namespace fragscope {

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormat;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// libprotobuf's parser gives up below this nesting (io::CodedInputStream's default recursion
// limit is 100); the scan goes at least as deep, so it never stops short of what the parser
// would still build.
constexpr int kMaxScanDepth = 128;

struct MessageInfo;

// What the scan needs to know of one field, looked up by number without a hash lookup.
struct FieldInfo {
  const FieldDescriptor* field = nullptr;
  const MessageInfo* message = nullptr;  // for message fields
  WireFormatLite::WireType wire_type = WireFormatLite::WIRETYPE_VARINT;
  bool repeated = false;
  bool packable = false;
  int fixed_width = 0;  // 4 or 8 for fixed-size scalars, 0 for varints
  // A limit on this field's entries in one message (Stack.pcs), or in the whole frame
  // (ModuleMap.modules), beyond the frame-wide limit on all entries.
  uint64_t FrameLimits::*instance_limit = nullptr;
  uint64_t FrameLimits::*frame_limit = nullptr;
  std::size_t counter = 0;  // index into Scan::counts_
};

using Limit = uint64_t FrameLimits::*;

struct MessageInfo {
  const Descriptor* descriptor = nullptr;
  std::vector<FieldInfo> by_number;  // index = field number; .field null for unknown numbers
  std::size_t unknown_counter = 0;   // counts this message's unknown fields
  // The limits besides the frame-wide entry count that this message's subtree can cross.
  std::vector<Limit> reachable_limits;
};

// The schema reachable from Frame, built once: message types and their fields.
class Schema {
 public:
  Schema() {
    root_ = Get(v1::Frame::descriptor());
    for (const auto& m : messages_) m->reachable_limits = ReachableLimits(*m);
  }
  const MessageInfo* root() const { return root_; }
  std::size_t counters() const { return names_.size(); }
  const std::string& name(std::size_t counter) const { return names_[counter]; }
  const std::vector<const FieldInfo*>& frame_limited() const { return frame_limited_; }

 private:
  const MessageInfo* Get(const Descriptor* d) {
    for (const auto& m : messages_) {
      if (m->descriptor == d) return m.get();
    }
    messages_.push_back(std::make_unique<MessageInfo>());
    MessageInfo* info = messages_.back().get();
    info->descriptor = d;
    info->unknown_counter = names_.size();
    names_.push_back(absl::StrFormat("unknown fields of %s", d->name()));
    int max_number = 0;
    for (int i = 0; i < d->field_count(); ++i)
      max_number = std::max(max_number, d->field(i)->number());
    info->by_number.resize(static_cast<std::size_t>(max_number) + 1);
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* f = d->field(i);
      FieldInfo& fi = info->by_number[static_cast<std::size_t>(f->number())];
      fi.field = f;
      fi.wire_type = WireFormat::WireTypeForFieldType(f->type());
      fi.repeated = f->is_repeated();
      fi.packable = f->is_packable();
      if (fi.wire_type == WireFormatLite::WIRETYPE_FIXED32) fi.fixed_width = 4;
      if (fi.wire_type == WireFormatLite::WIRETYPE_FIXED64) fi.fixed_width = 8;
      if (f->full_name() == "fragscope.v1.Stack.pcs") {
        fi.instance_limit = &FrameLimits::max_stack_pcs;
      } else if (f->full_name() == "fragscope.v1.SymbolizedStack.frames" ||
                 f->full_name() == "fragscope.v1.PcSymbols.frames") {
        fi.instance_limit = &FrameLimits::max_source_frames;
      } else if (f->full_name() == "fragscope.v1.ModuleMap.modules") {
        fi.frame_limit = &FrameLimits::max_modules_per_frame;
        frame_limited_.push_back(&fi);
      }
      fi.counter = names_.size();
      names_.push_back(absl::StrFormat("%s.%s", d->name(), f->name()));
    }
    // Sub-message types last: a type already in messages_ (met before, or this one) is reused.
    for (FieldInfo& fi : info->by_number) {
      if (fi.field != nullptr && fi.field->type() == FieldDescriptor::TYPE_MESSAGE) {
        fi.message = Get(fi.field->message_type());
      }
    }
    return info;
  }

  // The limits of `info`'s fields and, through message fields, of every type below it.
  static std::vector<Limit> ReachableLimits(const MessageInfo& info) {
    std::vector<Limit> limits;
    auto add = [&limits](Limit l) {
      if (l != nullptr && std::find(limits.begin(), limits.end(), l) == limits.end()) {
        limits.push_back(l);
      }
    };
    std::vector<const MessageInfo*> pending{&info}, seen;
    while (!pending.empty()) {
      const MessageInfo* m = pending.back();
      pending.pop_back();
      if (std::find(seen.begin(), seen.end(), m) != seen.end()) continue;  // types may recurse
      seen.push_back(m);
      for (const FieldInfo& f : m->by_number) {
        if (f.field == nullptr) continue;
        const FieldDescriptor::Type type = f.field->type();
        if (type == FieldDescriptor::TYPE_STRING || type == FieldDescriptor::TYPE_BYTES) {
          add(&FrameLimits::max_value_bytes);
        }
        add(f.instance_limit);
        add(f.frame_limit);
        if (f.message != nullptr) pending.push_back(f.message);
      }
    }
    return limits;
  }

  std::vector<std::unique_ptr<MessageInfo>> messages_;
  std::vector<std::string> names_;
  std::vector<const FieldInfo*> frame_limited_;
  const MessageInfo* root_ = nullptr;
};

const Schema& TheSchema() {
  static const Schema* schema = new Schema();  // never destroyed: used until exit
  return *schema;
}

class Scan {
 public:
  Scan(const unsigned char* data, std::size_t size, const FrameLimits& limits)
      : data_(data),
        size_(size),
        limits_(limits),
        schema_(TheSchema()),
        counts_(schema_.counters(), 0) {}

  uint64_t entries() const { return total_; }

  std::string Run() {
    CodedInputStream in(data_, static_cast<int>(size_));
    in.PushLimit(static_cast<int>(size_));  // so BytesUntilLimit() means the frame's end
    Message(in, *schema_.root(), 0);  // false (bytes not wire format) is the parser's to report
    if (!violation_.empty()) return violation_;
    for (const FieldInfo* f : schema_.frame_limited()) {
      if (counts_[f->counter] > limits_.*(f->frame_limit)) {
        return absl::StrFormat("%s holds %d entries, over the limit of %d per frame",
                               schema_.name(f->counter), counts_[f->counter],
                               limits_.*(f->frame_limit));
      }
    }
    if (total_ > limits_.max_entries_per_frame) {
      const std::size_t top = static_cast<std::size_t>(
          std::max_element(counts_.begin(), counts_.end()) - counts_.begin());
      return absl::StrFormat(
          "%s holds %d entries (%d repeated entries in the frame), over the limit of %d "
          "repeated entries per frame",
          schema_.name(top), counts_[top], total_, limits_.max_entries_per_frame);
    }
    return "";
  }

 private:
  void Count(std::size_t counter, uint64_t n) {
    counts_[counter] += n;
    total_ += n;
  }

  // Walks one message's fields up to the current limit. False when the bytes are not wire
  // format or a per-field limit was crossed (violation_ says which).
  bool Message(CodedInputStream& in, const MessageInfo& info, int depth) {
    if (depth > kMaxScanDepth) return false;
    uint64_t instance = 0;  // entries of this message's per-instance-limited field
    const FieldInfo* limited = nullptr;
    const bool ok = Fields(in, info, depth, &instance, &limited);
    if (limited != nullptr) {
      const uint64_t limit = limits_.*(limited->instance_limit);
      if (instance > limit) {
        violation_ = absl::StrFormat("%s holds %d entries in one %s, over the limit of %d",
                                     schema_.name(limited->counter), instance,
                                     info.descriptor->name(), limit);
        return false;
      }
    }
    return ok;
  }

  bool Fields(CodedInputStream& in, const MessageInfo& info, int depth, uint64_t* instance,
              const FieldInfo** limited) {
    for (;;) {
      const uint32_t tag = in.ReadTag();
      if (tag == 0) return in.ConsumedEntireMessage();
      const uint32_t number = WireFormatLite::GetTagFieldNumber(tag);
      const WireFormatLite::WireType wt = WireFormatLite::GetTagWireType(tag);
      if (wt == WireFormatLite::WIRETYPE_END_GROUP) return false;  // none open at this level
      const FieldInfo* f = number < info.by_number.size() ? &info.by_number[number] : nullptr;
      if (f != nullptr && f->field == nullptr) f = nullptr;
      const bool packed =
          f != nullptr && f->packable && wt == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
      if (f == nullptr || (wt != f->wire_type && !packed)) {
        // libprotobuf keeps each unknown field (or known one with the wrong wire type) as an
        // object of its own: counted like a repeated entry.
        Count(info.unknown_counter, 1);
        if (!Unknown(in, tag, info, depth)) return false;
        continue;
      }
      uint64_t entries = 0;
      if (wt != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
        if (!WireFormatLite::SkipField(&in, tag)) return false;
        entries = f->repeated ? 1 : 0;
      } else {
        uint32_t length = 0;
        if (!in.ReadVarint32(&length) || static_cast<int64_t>(length) > in.BytesUntilLimit()) {
          return false;
        }
        if (packed) {
          entries = PackedCount(in.CurrentPosition(), length, f->fixed_width);
          if (!in.Skip(static_cast<int>(length))) return false;
        } else if (f->message != nullptr) {
          entries = f->repeated ? 1 : 0;
          const CodedInputStream::Limit outer = in.PushLimit(static_cast<int>(length));
          if (!Message(in, *f->message, depth + 1)) return false;
          in.PopLimit(outer);
        } else {  // string or bytes
          if (length > limits_.max_value_bytes) {
            violation_ = absl::StrFormat("%s is a value of %d bytes, over the limit of %d bytes",
                                         schema_.name(f->counter), length, limits_.max_value_bytes);
            return false;
          }
          entries = f->repeated ? 1 : 0;
          if (!in.Skip(static_cast<int>(length))) return false;
        }
      }
      Count(f->counter, entries);
      if (f->instance_limit != nullptr) {
        *limited = f;
        *instance += entries;
      }
    }
  }

  // Skips one unknown field, counting the fields inside it if it is a group.
  bool Unknown(CodedInputStream& in, uint32_t tag, const MessageInfo& info, int depth) {
    if (WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_START_GROUP) {
      return WireFormatLite::SkipField(&in, tag);
    }
    // A group keeps its inner fields as objects too: count them, however deep.
    if (depth > kMaxScanDepth) return false;
    const uint32_t end = WireFormatLite::MakeTag(WireFormatLite::GetTagFieldNumber(tag),
                                                 WireFormatLite::WIRETYPE_END_GROUP);
    for (;;) {
      const uint32_t inner = in.ReadTag();
      if (inner == 0) return false;
      if (inner == end) return true;
      if (WireFormatLite::GetTagWireType(inner) == WireFormatLite::WIRETYPE_END_GROUP) return false;
      Count(info.unknown_counter, 1);
      if (!Unknown(in, inner, info, depth + 1)) return false;
    }
  }

  // Elements of a packed field of `length` bytes starting `offset` bytes into the frame.
  uint64_t PackedCount(int offset, uint32_t length, int fixed_width) const {
    if (fixed_width != 0) return length / static_cast<uint32_t>(fixed_width);
    const unsigned char* p = data_ + offset;
    uint64_t n = 0;
    for (uint32_t i = 0; i < length; ++i) n += (p[i] & 0x80) == 0;  // last byte of each varint
    return n;
  }

  const unsigned char* data_;
  std::size_t size_;
  const FrameLimits& limits_;
  const Schema& schema_;
  std::vector<uint64_t> counts_;  // per field (frame-wide), by FieldInfo::counter
  uint64_t total_ = 0;
  std::string violation_;
};

// The smallest limit a frame whose one field is of type `body` can cross.
uint64_t SmallestLimit(const FrameLimits& limits, const MessageInfo& body) {
  uint64_t smallest = limits.max_entries_per_frame;  // unknown fields count anywhere
  for (Limit l : body.reachable_limits) smallest = std::min(smallest, limits.*l);
  return smallest;
}

// The message type of the frame's body when the frame is exactly one length-delimited field of
// a known message type (what writers produce), else nullptr.
const MessageInfo* SoleBody(const unsigned char* data, std::size_t size) {
  CodedInputStream in(data, static_cast<int>(size));
  const uint32_t tag = in.ReadTag();
  uint32_t length = 0;
  if (WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED ||
      !in.ReadVarint32(&length) ||
      static_cast<std::size_t>(in.CurrentPosition()) + length != size) {
    return nullptr;
  }
  const MessageInfo& root = *TheSchema().root();
  const uint32_t number = WireFormatLite::GetTagFieldNumber(tag);
  if (number >= root.by_number.size() || root.by_number[number].field == nullptr) return nullptr;
  return root.by_number[number].message;
}

}  // namespace

std::string FrameLimitViolation(const unsigned char* data, std::size_t size,
                                const FrameLimits& limits, uint64_t* entries) {
  if (entries != nullptr) {
    Scan scan(data, size, limits);
    std::string violation = scan.Run();
    *entries = scan.entries();
    return violation;
  }
  // A frame of n bytes holds at most n entries (each takes at least one byte) and no value
  // longer than n: a frame smaller than every limit (every event frame) needs no scan, and
  // neither does a frame smaller than every limit its body's type can cross (a Snapshot of
  // a few hundred thousand entries: it holds no strings, stacks or modules).
  const uint64_t smallest =
      std::min({limits.max_entries_per_frame, limits.max_stack_pcs, limits.max_source_frames,
                limits.max_modules_per_frame, limits.max_value_bytes});
  if (size <= smallest) return "";
  const MessageInfo* body = SoleBody(data, size);
  if (body != nullptr && size <= SmallestLimit(limits, *body)) return "";
  return Scan(data, size, limits).Run();
}

void SilenceProtobufLogging() {
  static const bool once = [] {
    // Everything below FATAL is a complaint about input, which the readers report themselves.
    google::protobuf::SetLogHandler([](google::protobuf::LogLevel level, const char* file, int line,
                                       const std::string& message) {
      if (level >= google::protobuf::LOGLEVEL_FATAL) {
        std::fprintf(stderr, "[libprotobuf FATAL %s:%d] %s\n", file, line, message.c_str());
      }
    });
    return true;
  }();
  (void)once;
}

}  // namespace fragscope
