// Flight recorder (FRAGSCOPE_FLIGHT_MB=N with FRAGSCOPE_OUTPUT=path): the trace file is cut in
// segments of about N/2 MiB; when the current one (always `path`) is full it is renamed
// `path.prev` (replacing the older one) and a new `path` starts with a complete stream head and
// a snapshot of the live table, so `path` alone always reads as a valid trace of the recent
// past, and the two files together hold at most about N MiB. The rotation itself is in
// drain.cc; see interpose/README.md "Flight recorder".
//
// Thread safety: FlightSegmentBytes from any thread (the value is read once, at load time or on
// first use, and never changes).
#ifndef FRAGSCOPE_INTERPOSE_FLIGHT_RECORDER_H_
#define FRAGSCOPE_INTERPOSE_FLIGHT_RECORDER_H_

#include <cstdint>

namespace fragscope::agent {

// Bytes after which the current segment is rotated: FRAGSCOPE_FLIGHT_MB MiB / 2; 0 when the
// flight recorder is off (unset, 0 or malformed).
uint64_t FlightSegmentBytes();

// Parses a FRAGSCOPE_FLIGHT_MB value: a decimal count of MiB, 1..1048576. 0 when invalid.
uint64_t ParseFlightMb(const char* text);

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_FLIGHT_RECORDER_H_
