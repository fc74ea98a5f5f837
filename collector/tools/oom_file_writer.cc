#include "oom_file_writer.h"

#include <algorithm>
#include <sstream>

#include "absl/strings/str_format.h"
#include "fragscope/report/oom_file.h"
#include "fragscope/symbolize/dwarf_symbolizer.h"

namespace fragscope {
namespace {

const FailedAllocation* FailureAt(const ModelSummary& s, uint64_t seq) {
  auto it =
      std::lower_bound(s.failed_allocations.begin(), s.failed_allocations.end(), seq,
                       [](const FailedAllocation& f, uint64_t value) { return f.seq < value; });
  return it != s.failed_allocations.end() && it->seq == seq ? &*it : nullptr;
}

const OomPostMortem* PostMortemAt(const ModelSummary& s, uint64_t seq) {
  for (const OomPostMortem& o : s.ooms) {
    if (o.failure.seq == seq) return &o;
  }
  return nullptr;
}

}  // namespace

OomFileWriter::OomFileWriter(Options options, WriteFile write, Say say)
    : options_(std::move(options)), write_(std::move(write)), say_(std::move(say)) {}

void OomFileWriter::OnFailure(const StreamSession* stream, const std::string& name,
                              const ModelSummary& summary, uint64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  Stream& s = streams_[stream];
  if (s.name.empty()) s.name = name;
  // Failures are in seq order: look only past the last one seen.
  auto from = std::upper_bound(
      summary.failed_allocations.begin(), summary.failed_allocations.end(), s.seen_up_to,
      [](uint64_t value, const FailedAllocation& f) { return value < f.seq; });
  for (auto it = from; it != summary.failed_allocations.end(); ++it) {
    const FailedAllocation& f = *it;
    s.seen_up_to = std::max(s.seen_up_to, f.seq);
    if (!f.is_oom) continue;
    if (f.from_sub_allocator) {
      if (f.CountsAsOom()) Decide(s, summary, f.seq, "the allocator raised it to the program");
    } else {
      s.pending.push_back({f.seq, now_ms + options_.recovery_window_ms});
    }
  }
}

void OomFileWriter::Tick(uint64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [stream, s] : streams_) {
    const bool due = std::any_of(s.pending.begin(), s.pending.end(),
                                 [&](const Pending& p) { return p.deadline_ms <= now_ms; });
    if (!due) continue;
    const ModelSummary summary = stream->Summarize();
    const std::string because =
        absl::StrFormat("the program had not allocated that size within %.1f s of the failure",
                        static_cast<double>(options_.recovery_window_ms) / 1000.0);
    std::vector<Pending> later;
    for (const Pending& p : s.pending) {
      if (p.deadline_ms > now_ms) {
        later.push_back(p);
        continue;
      }
      // Recovered, or explained by a sub-allocator's own OOM: no file of its own.
      const FailedAllocation* f = FailureAt(summary, p.seq);
      if (f != nullptr && f->CountsAsOom()) Decide(s, summary, p.seq, because);
    }
    s.pending = std::move(later);
  }
}

void OomFileWriter::OnStreamEnd(const StreamSession* stream, const std::string& name,
                                const ModelSummary& final_summary) {
  std::lock_guard<std::mutex> lock(mu_);
  Stream& s = streams_[stream];
  if (s.name.empty()) s.name = name;
  for (const FailedAllocation& f : final_summary.failed_allocations) {
    if (f.CountsAsOom() && s.decided.count(f.seq) == 0) {
      Decide(s, final_summary, f.seq, "the stream ended without a success of that size");
    }
  }
  // Complete every file: how many times its failure came, and whether the program recovered.
  for (auto& [key, g] : s.groups) {
    if (g.base.empty()) continue;
    const FailedAllocation* first = FailureAt(final_summary, g.first_seq);
    const uint64_t recovered = first != nullptr && first->recovered ? first->recovered_by_seq : 0;
    if (recovered != 0 && g.recovered_by_seq == 0) {
      say_(
          absl::StrFormat("%s: the program recovered from the OOM at seq %d (seq %d): %s.txt says "
                          "so",
                          s.name, g.first_seq, recovered, g.base));
    }
    g.recovered_by_seq = recovered;
    Write(s, g, /*stream_ended=*/true);
  }
  streams_.erase(stream);
}

void OomFileWriter::Decide(Stream& s, const ModelSummary& summary, uint64_t seq,
                           const std::string& because) {
  if (!s.decided.insert(seq).second) return;
  const FailedAllocation* f = FailureAt(summary, seq);
  if (f == nullptr) return;
  const OomPostMortem* o = PostMortemAt(summary, seq);
  // Past the model's limit of post-mortems an OOM has none: it joins a group of its request
  // if there is one (a retry loop), else only the final report lists it.
  GroupKey key{f->device, f->requested_bytes, o != nullptr ? OomClassName(o->oom_class) : ""};
  auto it = s.groups.find(key);
  if (it == s.groups.end() && o == nullptr) {
    for (auto g = s.groups.begin(); g != s.groups.end(); ++g) {
      if (std::get<0>(g->first) == f->device && std::get<1>(g->first) == f->requested_bytes) {
        it = g;
        break;
      }
    }
    if (it == s.groups.end()) return;
  }
  if (it != s.groups.end()) {
    ++it->second.count;
    it->second.last_seq = seq;
    return;
  }
  Group g;
  g.first_seq = g.last_seq = seq;
  g.count = 1;
  g.because = because;
  const std::size_t with_files = static_cast<std::size_t>(std::count_if(
      s.groups.begin(), s.groups.end(), [](const auto& e) { return !e.second.base.empty(); }));
  if (with_files < options_.max_files_per_stream) {
    g.base = absl::StrFormat("%s/%s.oom-%d", options_.dir, s.name, seq);
    g.at_failure = std::make_shared<const ModelSummary>(summary);
    Write(s, g, /*stream_ended=*/false);
    say_(absl::StrFormat("%s: %s -> %s.txt", s.name, o->headline, g.base));
  } else if (!s.over_limit_said) {
    s.over_limit_said = true;
    say_(absl::StrFormat("%s: more than %d different OOMs: the later ones are in its report only",
                         s.name, options_.max_files_per_stream));
  }
  s.groups.emplace(key, std::move(g));
}

void OomFileWriter::Write(const Stream& s, const Group& g, bool stream_ended) {
  if (g.at_failure == nullptr) return;
  const ModelSummary& summary = *g.at_failure;
  const OomPostMortem* o = PostMortemAt(summary, g.first_seq);
  if (o == nullptr) return;
  OomFileNote note;
  note.written_because = g.because;
  note.repeats = g.count;
  note.first_seq = g.first_seq;
  note.last_seq = g.last_seq;
  note.recovered_by_seq = g.recovered_by_seq;
  note.stream_ended = stream_ended;
  DwarfSymbolizer symbolizer(summary);
  std::ostringstream text, json;
  RenderOomText(summary, *o, note, symbolizer, text);
  RenderOomJson(summary, *o, note, symbolizer, json);
  if (!write_(g.base + ".txt", text.str()) || !write_(g.base + ".json", json.str())) {
    say_(absl::StrFormat("%s: the post-mortem of seq %d was not written (see above)", s.name,
                         g.first_seq));
  }
}

}  // namespace fragscope
