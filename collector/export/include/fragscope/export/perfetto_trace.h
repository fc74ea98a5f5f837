// `fragscope export --perfetto`: the Chrome trace-event JSON format
// ({"traceEvents": [...]}), which ui.perfetto.dev and chrome://tracing open.
//
// What is in it, all in the traced process (pid = Hello.pid, or 1 when the stream has none):
//   - metadata ("ph": "M"): process_name, and a thread_name per device ("GPU 0"; tid =
//     ordinal + 1, tid 0 for events whose device is unknown) that the instant events sit on;
//   - counter tracks ("ph": "C") per device from DeviceSummary::timeline, one track per figure:
//     "GPU <n> reserved", "GPU <n> allocated", "GPU <n> cached" (args {"bytes": N}) and
//     "GPU <n> fragmentation" (args {"ratio": 0..1}). Fragmentation is written only at points
//     where it is reportable (REPORT.md: floor and opaque segments), so between such points a
//     viewer keeps showing the last reportable value;
//   - instant events ("ph": "i", "s": "t") on the device's thread: every failed allocation
//     (cat "failed_alloc") and every OOM post-mortem (cat "oom", name = the headline), with the
//     figures in args; and the program's marks (cat "mark", "s": "p", name = the label) when
//     `marks` is given.
// Times: "ts" in microseconds since the trace's first recorded moment (a counter point of a
// frame that carries no time sits there too); otherData gives that moment as the process's
// CLOCK_MONOTONIC (start_monotonic_ns) and, when the stream gave its clocks, as wall-clock time
// (start_unix_ns, start_utc).
#ifndef FRAGSCOPE_EXPORT_PERFETTO_TRACE_H_
#define FRAGSCOPE_EXPORT_PERFETTO_TRACE_H_

#include <ostream>
#include <vector>

#include "fragscope/export/trace_replay.h"
#include "fragscope/model/model_summary.h"
#include "fragscope/report/symbolizer.h"

namespace fragscope::exporter {

// Writes one JSON object to `out`. Stateless apart from symbolizer caches.
void WritePerfettoTrace(const ModelSummary& summary, Symbolizer& symbolizer, std::ostream& out,
                        const std::vector<MarkEvent>* marks = nullptr);

// Several processes (a job's ranks) in one trace, so their memory lines up on one timeline: each
// process its own track group (named "rank R: exe (pid P)", ordered by rank, else as given; a
// pid seen twice is moved to another id). Times ("ts") are microseconds since the job's first
// recorded moment, the processes aligned by wall clock when every process's stream gave its
// clocks (Hello), which lines up processes of different hosts as well as their clocks agree;
// else by each process's CLOCK_MONOTONIC, which lines up processes of one host. otherData says
// which ("time_base"), the start as wall-clock time when known, and lists the processes with
// their report notes.
struct PerfettoProcess {
  const ModelSummary* summary = nullptr;          // not owned
  Symbolizer* symbolizer = nullptr;               // not owned; the process's own (its module map)
  const std::vector<MarkEvent>* marks = nullptr;  // not owned; may be null
};
void WritePerfettoJobTrace(const std::vector<PerfettoProcess>& processes, std::ostream& out);

}  // namespace fragscope::exporter

#endif  // FRAGSCOPE_EXPORT_PERFETTO_TRACE_H_
