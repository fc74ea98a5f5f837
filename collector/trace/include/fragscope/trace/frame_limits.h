// Limits on what one frame may hold, checked on the wire before libprotobuf builds the message.
//
// kMaxFrameBytes bounds the bytes of a frame, but not the memory its parse takes: libprotobuf
// makes one object per repeated entry, so 2 bytes of input (an empty Snapshot entry) cost about
// 100 bytes of memory, and a crafted 48 MiB frame took a reader to 2.5 GB. CheckFrameLimits
// counts the entries of a frame's repeated fields (and its unknown fields, which libprotobuf
// also keeps one by one) with a cheap pass over the bytes and refuses the frame before any
// object is made. The numbers and why they are safe for real traces: proto/README.md.
#ifndef FRAGSCOPE_TRACE_FRAME_LIMITS_H_
#define FRAGSCOPE_TRACE_FRAME_LIMITS_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace fragscope {

struct FrameLimits {
  // Entries of all repeated fields in one frame (Snapshot entries, stacks, return addresses,
  // modules, argv, source frames), plus unknown fields. ~110 bytes of memory each once parsed.
  uint64_t max_entries_per_frame = uint64_t{1} << 22;
  // Return addresses of one Stack (the agent records at most 64).
  uint64_t max_stack_pcs = uint64_t{1} << 16;
  // Frames of one SymbolizedStack (imported PyTorch stacks: Python + C++ frames) or PcSymbols
  // (a stored return address and the functions inlined at it).
  uint64_t max_source_frames = uint64_t{1} << 16;
  // Modules of one frame (the agent knows at most 8192 in all). The model keeps ~250 bytes
  // per module, more than the ~110 bytes of a parsed entry.
  uint64_t max_modules_per_frame = uint64_t{1} << 16;
  // Bytes of one string or bytes value (paths, argv elements, function names, labels).
  uint64_t max_value_bytes = uint64_t{1} << 20;
};

// Empty when the serialized Frame in [data, data + size) is within `limits`; otherwise what is
// over which limit, naming the field, e.g. "Snapshot.allocations holds 25165824 entries, over
// the limit of 4194304 repeated entries per frame". Bytes that are not valid wire format are
// not this check's business: it returns empty for them (unless a limit was crossed before) and
// the parser reports them.
// With `entries`, the frame is always scanned (the check alone skips frames too small to cross
// a limit) and *entries is set to its repeated entries and unknown fields, what libprotobuf
// makes an object each for: the cost of parsing it (DecodeBudget::FrameCost).
std::string FrameLimitViolation(const unsigned char* data, std::size_t size,
                                const FrameLimits& limits = FrameLimits{},
                                uint64_t* entries = nullptr);

// Stops libprotobuf from printing its own "[libprotobuf ERROR ...]" lines (e.g. about invalid
// UTF-8 in a string field) on bad input: the readers say what is wrong in their own words, with
// the file and offset. Idempotent; FrameReader calls it.
void SilenceProtobufLogging();

}  // namespace fragscope

#endif  // FRAGSCOPE_TRACE_FRAME_LIMITS_H_
