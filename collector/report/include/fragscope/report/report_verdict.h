// The answer a report opens with: one line per OOM (repeats of the same failure grouped), each
// with its device, request, class and a one-sentence reason, and the worst fragmentation seen
// per device; or, for a run without an OOM, that it had none. Shared by the text report, the
// JSON report ("verdict") and the HTML page so the three say the same thing.
//
// Thread safety: plain functions of an immutable summary.
#ifndef FRAGSCOPE_REPORT_REPORT_VERDICT_H_
#define FRAGSCOPE_REPORT_REPORT_VERDICT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "fragscope/model/model_summary.h"

namespace fragscope {

struct VerdictOom {
  int device = -1;
  uint64_t requested_bytes = 0;
  std::string oom_class;  // OomClassName spelling; "unknown" where no post-mortem was kept
  std::string reason;     // one sentence with the numbers that decide the class
  uint64_t first_seq = 0;
  uint64_t last_seq = 0;
  uint64_t count = 0;      // failures grouped here (same device, request and class)
  uint64_t recovered = 0;  // of them, followed by a success of that size (REPORT.md "Recovered")
};

struct VerdictFragmentation {
  int device = -1;
  Measured<double> worst;  // the largest ratio over the run
  uint64_t peak_reserved_bytes = 0;
};

struct ReportVerdict {
  std::vector<VerdictOom> ooms;                     // by first seq
  std::vector<VerdictFragmentation> fragmentation;  // devices with memory, by ordinal
  // The run's ending in words: "exited with status 0", "stream cut before its end" ...
  std::string ending;
  // Figures may miss events: drops, a cut stream, an attach's window (the caveats say more).
  bool approximate = false;
};

ReportVerdict BuildVerdict(const ModelSummary& summary);

// One line for an OOM group: "OOM on device 0 at seq 223: 772.00 MiB, fragmentation: ...".
std::string FormatVerdictOom(const VerdictOom& oom);
// "worst fragmentation 96.0 % on device 0 (peak reserved 3.44 GiB)" or "... n/a (why)".
std::string FormatVerdictFragmentation(const VerdictFragmentation& f);
// The first line: "2 OOMs (2 not recovered)", "no OOM: exited with status 0", ...
std::string FormatVerdictHeadline(const ReportVerdict& v);

}  // namespace fragscope

#endif  // FRAGSCOPE_REPORT_REPORT_VERDICT_H_
