// OOM analysis: which failed allocations were recovered, which deserve a post-mortem, and what
// class of OOM each one is (the classes and their rules: collector/REPORT.md).
#ifndef FRAGSCOPE_MODEL_OOM_ANALYZER_H_
#define FRAGSCOPE_MODEL_OOM_ANALYZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "fragscope/model/model_options.h"
#include "fragscope/model/model_summary.h"

namespace fragscope {

struct OomVerdict {
  OomClass oom_class = OomClass::kUnknown;
  std::string explanation;  // the numbers that decide the class, in words
  std::vector<std::string> advice;
};

// Decides the class of an OOM from the figures at the failure. Pure; thread-safe.
OomVerdict ClassifyOom(const OomFigures& figures, const FailedAllocation& failure,
                       const ModelOptions& options);

// CUDA_ERROR_OUT_OF_MEMORY and cudaErrorMemoryAllocation share this value.
inline constexpr int kCudaOutOfMemory = 2;

// Tracks failures as the stream is applied. The model hands it each failure together with the
// state at that moment (already reduced to figures, sites and recent events), and each later
// successful allocation, so recovery is decided without keeping the stream. Memory: one record
// per failure plus the post-mortems of failures not (yet) recovered, at most max_postmortems.
// Not thread-safe; owned by the ProcessModel.
class OomAnalyzer {
 public:
  explicit OomAnalyzer(const ModelOptions& options);

  // `postmortem` carries figures, sites, peak and recent events; the analyzer fills the rest
  // (failure, class, headline, explanation, advice) when the failure is an OOM.
  void OnFailure(const FailedAllocation& failure, OomPostMortem postmortem);
  // A successful allocation of `bytes` on `device` at `seq` (alloc, VMM create, block alloc).
  void OnSuccess(int device, uint64_t bytes, uint64_t seq);

  // Fills failed_allocations, ooms and ooms_without_postmortem. Failures still waiting count
  // as not recovered (the stream ends here).
  void Collect(ModelSummary* out) const;

  // Stack ids referenced by failures and kept post-mortems (for the summary's stack table).
  std::vector<uint64_t> ReferencedStacks() const;

 private:
  const ModelOptions* options_;
  std::vector<FailedAllocation> failures_;
  // Indexes into failures_ still waiting for a retry.
  std::vector<std::size_t> waiting_;
  // Post-mortems by index into failures_ (dropped again when the failure is recovered or
  // superseded).
  std::vector<std::pair<std::size_t, OomPostMortem>> postmortems_;
  uint64_t postmortems_refused_ = 0;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_OOM_ANALYZER_H_
