// What a job of several processes (the ranks of a multi-GPU run, a launcher's children, the
// traces a fragscope-collector wrote) looks like as a whole: one row per process and device, and
// which OOM came first. When one rank of a data-parallel job runs out of memory, the others
// usually fail a moment later waiting for it (a collective that never completes, a launcher
// that kills them), so the rank whose OOM came first is the one to read.
//
// Plain values built from the processes' ModelSummary; nothing refers back into them. Units:
// bytes, nanoseconds (CLOCK_MONOTONIC of each process's host: times compare only within one
// host, so the first OOM is decided per host, and across hosts by wall clock when their first
// OOMs lie far enough apart for clock skew not to matter).
#ifndef FRAGSCOPE_REPORT_JOB_SUMMARY_H_
#define FRAGSCOPE_REPORT_JOB_SUMMARY_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "fragscope/model/model_summary.h"

namespace fragscope {

// One process of the job as the caller read it.
struct JobMember {
  std::string trace;  // where it came from: a trace path; empty for a stream not kept
  const ModelSummary* summary = nullptr;  // not owned; must outlive BuildJobSummary only
  // Set when the input was damaged and `summary` covers only part of it (a truncated trace).
  std::string damage;
};

// An OOM of one member: the failure that counts as one (FailedAllocation::CountsAsOom).
struct JobOom {
  std::size_t member = 0;  // index into JobSummary::members
  int device = -1;
  uint64_t seq = 0;
  uint64_t time_ns = 0;
  uint64_t requested_bytes = 0;
  std::optional<uint64_t> wall_time_ns;  // ns since the Unix epoch (ModelSummary::WallTimeNs)
  std::optional<OomClass> oom_class;     // unset: no post-mortem was kept for it
  std::string headline;                  // the post-mortem's, or built from the failure
};

struct JobRow {
  std::size_t member = 0;
  int device = -1;  // -1: the process touched no device (or its events named none)
  uint64_t peak_reserved_bytes = 0;
  Measured<double> max_fragmentation;
  uint64_t oom_count = 0;
  std::optional<JobOom> first_oom;  // of this process on this device
};

struct JobMemberInfo {
  std::string trace;
  uint32_t pid = 0;
  std::optional<uint32_t> rank;  // in the distributed job (ModelSummary::rank)
  std::string host;
  std::string exe;
  std::optional<int> exit_status;
  bool stream_ended = false;
  bool history_complete = true;
  std::string damage;
  uint64_t oom_count = 0;  // over all devices
  // A collector restart cuts an agent's stream; the agent resumes it in a new one (Hello.resumed
  // k, the daemon's `<name>.resumed-<k>.fst`). Streams of one process (same host, pid and exe,
  // the later one beginning after the earlier one's last seq) are linked: `resumes` names the
  // stream this one continues, `resumed_in` the one that continues it (indices into
  // JobSummary::members), and `process` the process's first stream, which all of them share.
  std::optional<std::size_t> resumes;
  std::optional<std::size_t> resumed_in;
  // An exec in place starts a new image of the same process (same host and pid) in a stream of
  // its own (Hello.exec_image k; the stream before ended with End.exec). `execed_from` names the
  // stream of the image before it (image k - 1), which shares its `process`: images of one
  // process never run at once, so they neither compete for a GPU nor count twice.
  uint32_t exec_image = 0;
  bool ended_by_exec = false;
  std::optional<std::size_t> execed_from;
  std::size_t process = 0;
};

// The first OOM on one host, and how many OOMs of other processes of that host came after it.
struct HostFirstOom {
  std::string host;
  JobOom oom;
  uint64_t later_ooms_elsewhere = 0;   // OOMs of the host's other processes (not its own streams)
  uint64_t last_other_after_ns = 0;    // how long after it the last of those came
  std::size_t processes_with_oom = 0;  // on this host
  // False when some OOM of the host has no time (0): `oom` is then the first of those with one
  // (or the first listed), and the order is not known for certain.
  bool time_order_known = true;
};

// One physical GPU (same host, same UUID) that several processes of the job used. A
// data-parallel job usually gives each rank a GPU of its own; ranks that share one compete for
// its memory, and each counts the others' as outside its own segments (an OOM there reads
// "external"). The usual cause is a program that never called torch.cuda.set_device(local_rank),
// so that every rank used device 0; MPS and deliberate co-location are the legitimate ones.
struct SharedDevice {
  std::string host;
  std::string uuid_hex;
  struct User {
    std::size_t member = 0;            // the process's first stream that used the GPU
    int device = -1;                   // the ordinal it had in that process
    uint64_t peak_reserved_bytes = 0;  // that process's, on the GPU (the largest of its streams)
  };
  std::vector<User> users;  // two or more distinct processes, in members' order
};

struct JobSummary {
  std::vector<JobMemberInfo> members;  // in the caller's order
  std::size_t process_count = 0;       // distinct processes: members less resumed streams
  bool any_rank = false;               // some member knows its rank: tables show the column
  std::vector<JobRow> rows;            // members in order, each member's devices by ordinal
  uint64_t oom_count = 0;
  std::size_t processes_with_oom = 0;  // distinct processes
  // One per host that had an OOM: by wall-clock time of their first OOMs when
  // hosts_ordered_by_wall_clock, else the host of the earliest-listed member first.
  std::vector<HostFirstOom> first_ooms;
  // Several hosts had OOMs, each first OOM has a wall-clock time, and the earliest came at
  // least kWallClockMarginNs before the next host's: closer than that, clocks of different
  // machines (NTP) do not say which was first.
  bool hosts_ordered_by_wall_clock = false;
  uint64_t host_lead_ns = 0;  // how long before the next host's first OOM the first came
  std::vector<SharedDevice> shared_devices;  // GPUs several processes used, by first use
};

inline constexpr uint64_t kWallClockMarginNs = 100'000'000;  // 100 ms

JobSummary BuildJobSummary(const std::vector<JobMember>& members);

// A GPU as nvidia-smi names it, "GPU-8f0c29a1-...", from DeviceSummary::uuid_hex (32 hex
// digits); any other text comes back as it is. Every report shows UUIDs in this form.
std::string GpuUuidName(const std::string& uuid_hex);

// The 32 lowercase hex digits of a UUID given in either form: nvidia-smi's (what reports write)
// or bare hex (what reports wrote before they used nvidia-smi's form); "" for anything else.
// For comparing UUIDs read from reports, which may come from older builds.
std::string GpuUuidHex(const std::string& either);

// The job table and the first OOM, as text (what `fragscope run` prints after the processes'
// reports when it traced more than one, and `fragscope report` for several traces).
void RenderJobSummaryText(const JobSummary& job, std::ostream& out);

// Writes the job summary as the JSON object documented in collector/REPORT.md ("Several
// processes"), with `processes[i].report` the member's own report (rendered by the caller,
// one JSON object each, in members' order).
void RenderJobJson(const JobSummary& job, const std::vector<std::string>& member_reports,
                   std::ostream& out);

}  // namespace fragscope

#endif  // FRAGSCOPE_REPORT_JOB_SUMMARY_H_
