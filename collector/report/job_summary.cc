#include "fragscope/report/job_summary.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_format.h"
#include "fragscope/model/format_bytes.h"

namespace fragscope {
namespace {

// Whether a device row is worth a line: a device the process used, or one its failures name.
bool DeviceUsed(const DeviceSummary& d) {
  return d.peak_reserved_bytes > 0 || d.reserved_bytes > 0 || d.oom_count > 0 ||
         d.peak_allocated_bytes > 0;
}

std::vector<JobOom> OomsOf(const ModelSummary& s, std::size_t member) {
  std::vector<JobOom> ooms;
  for (const FailedAllocation& f : s.failed_allocations) {
    if (!f.CountsAsOom()) continue;
    JobOom o;
    o.member = member;
    o.device = f.device;
    o.seq = f.seq;
    o.time_ns = f.time_ns;
    o.requested_bytes = f.requested_bytes;
    o.wall_time_ns = s.WallTimeNs(f.time_ns);
    auto pm = std::find_if(s.ooms.begin(), s.ooms.end(),
                           [&](const OomPostMortem& p) { return p.failure.seq == f.seq; });
    if (pm != s.ooms.end()) {
      o.oom_class = pm->oom_class;
      o.headline = pm->headline;
    } else {
      o.headline = absl::StrFormat("OOM on device %d: requested %s (no post-mortem kept)", f.device,
                                   FormatBytes(f.requested_bytes));
    }
    ooms.push_back(std::move(o));
  }
  return ooms;  // in seq order, as failed_allocations are
}

// Earlier in time; OOMs without a time (0: not recorded) after every timed one; ties by member
// order, then seq, so the answer does not depend on how the caller sorted anything else.
bool EarlierOom(const JobOom& a, const JobOom& b) {
  const bool at = a.time_ns != 0, bt = b.time_ns != 0;
  if (at != bt) return at;
  if (a.time_ns != b.time_ns) return a.time_ns < b.time_ns;
  if (a.member != b.member) return a.member < b.member;
  return a.seq < b.seq;
}

// Links each resumed stream to the stream of the same process it continues: same host, pid and
// exe, fewer resumes, ending (last seq) at or before the resumed stream's first; of several, the
// most recent. Then every stream's process is its chain's first stream.
void LinkResumedStreams(const std::vector<JobMember>& members, JobSummary& job) {
  for (std::size_t j = 0; j < members.size(); ++j) {
    const ModelSummary& later = *members[j].summary;
    if (later.resumed == 0) continue;
    std::optional<std::size_t> best;
    for (std::size_t i = 0; i < members.size(); ++i) {
      const ModelSummary& earlier = *members[i].summary;
      if (i == j || job.members[i].resumed_in || earlier.pid != later.pid ||
          earlier.host != later.host || earlier.exe != later.exe ||
          earlier.resumed >= later.resumed) {
        continue;
      }
      if (later.history_from_seq && earlier.last_seq > *later.history_from_seq) continue;
      if (!best || earlier.resumed > members[*best].summary->resumed) best = i;
    }
    if (!best) continue;
    job.members[j].resumes = *best;
    job.members[*best].resumed_in = j;
  }
  // An image after an exec continues the stream of the image before it that ended with the
  // exec; of several (a failed exec resumed a stream), the one with the most resumes.
  for (std::size_t j = 0; j < members.size(); ++j) {
    const ModelSummary& later = *members[j].summary;
    if (later.exec_image == 0) continue;
    std::optional<std::size_t> best;
    for (std::size_t i = 0; i < members.size(); ++i) {
      const ModelSummary& earlier = *members[i].summary;
      if (i == j || earlier.pid != later.pid || earlier.host != later.host ||
          earlier.exec_image + 1 != later.exec_image || !earlier.ended_by_exec) {
        continue;
      }
      if (!best || earlier.resumed > members[*best].summary->resumed) best = i;
    }
    job.members[j].execed_from = best;
  }
  for (std::size_t i = 0; i < job.members.size(); ++i) {
    std::size_t first = i;
    // Bounded by the member count: each link goes to a stream with fewer resumes or an
    // earlier image.
    for (;;) {
      if (job.members[first].resumes) {
        first = *job.members[first].resumes;
      } else if (job.members[first].execed_from) {
        first = *job.members[first].execed_from;
      } else {
        break;
      }
    }
    job.members[i].process = first;
    if (first == i) ++job.process_count;
  }
}

// GPUs (by host and UUID) that more than one distinct process of the job used. Devices without
// a UUID (not read) cannot be told apart across processes and are left out.
std::vector<SharedDevice> FindSharedDevices(const std::vector<JobMember>& members,
                                            const JobSummary& job) {
  std::vector<SharedDevice> gpus;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const ModelSummary& s = *members[i].summary;
    for (const DeviceSummary& d : s.devices) {
      if (d.uuid_hex.empty() || !DeviceUsed(d)) continue;
      auto gpu = std::find_if(gpus.begin(), gpus.end(), [&](const SharedDevice& g) {
        return g.host == s.host && g.uuid_hex == d.uuid_hex;
      });
      if (gpu == gpus.end()) {
        gpus.push_back({s.host, d.uuid_hex, {}});
        gpu = gpus.end() - 1;
      }
      const std::size_t process = job.members[i].process;
      auto user = std::find_if(gpu->users.begin(), gpu->users.end(), [&](const auto& u) {
        return job.members[u.member].process == process;
      });
      if (user == gpu->users.end()) {
        gpu->users.push_back({i, d.ordinal, d.peak_reserved_bytes});
      } else {
        user->peak_reserved_bytes = std::max(user->peak_reserved_bytes, d.peak_reserved_bytes);
      }
    }
  }
  gpus.erase(std::remove_if(gpus.begin(), gpus.end(),
                            [](const SharedDevice& g) { return g.users.size() < 2; }),
             gpus.end());
  return gpus;
}

}  // namespace

JobSummary BuildJobSummary(const std::vector<JobMember>& members) {
  JobSummary job;
  std::vector<JobOom> all;
  std::vector<bool> process_had_oom(members.size(), false);
  job.members.resize(members.size());  // linked first: every row needs its process
  LinkResumedStreams(members, job);
  for (std::size_t i = 0; i < members.size(); ++i) {
    const ModelSummary& s = *members[i].summary;
    JobMemberInfo& info = job.members[i];
    info.trace = members[i].trace;
    info.pid = s.pid;
    info.rank = s.rank;
    job.any_rank = job.any_rank || s.rank.has_value();
    info.host = s.host;
    info.exe = s.exe;
    info.exit_status = s.exit_status;
    info.exec_image = s.exec_image;
    info.ended_by_exec = s.ended_by_exec;
    info.stream_ended = s.stream_ended;
    info.history_complete = s.history_complete && !s.partial_history_from().has_value();
    info.damage = members[i].damage;

    std::vector<JobOom> ooms = OomsOf(s, i);
    info.oom_count = ooms.size();
    if (!ooms.empty() && !process_had_oom[info.process]) {
      process_had_oom[info.process] = true;
      ++job.processes_with_oom;
    }
    job.oom_count += ooms.size();

    const std::size_t first_row = job.rows.size();
    for (const DeviceSummary& d : s.devices) {
      const bool has_oom = std::any_of(ooms.begin(), ooms.end(),
                                       [&](const JobOom& o) { return o.device == d.ordinal; });
      if (!DeviceUsed(d) && !has_oom) continue;
      JobRow row;
      row.member = i;
      row.device = d.ordinal;
      row.peak_reserved_bytes = d.peak_reserved_bytes;
      row.max_fragmentation = d.max_fragmentation;
      job.rows.push_back(std::move(row));
    }
    // OOMs of a device the summary has no entry for (the agent could not tell the device).
    for (const JobOom& o : ooms) {
      const bool listed = std::any_of(job.rows.begin() + first_row, job.rows.end(),
                                      [&](const JobRow& r) { return r.device == o.device; });
      if (listed) continue;
      JobRow row;
      row.member = i;
      row.device = o.device;
      row.max_fragmentation = Measured<double>::Unknown("no events on this device");
      job.rows.push_back(std::move(row));
    }
    if (job.rows.size() == first_row) {  // still one line: the process is part of the job
      JobRow row;
      row.member = i;
      row.max_fragmentation = Measured<double>::Unknown("no device memory");
      job.rows.push_back(std::move(row));
    }
    for (auto r = job.rows.begin() + first_row; r != job.rows.end(); ++r) {
      for (const JobOom& o : ooms) {
        if (o.device != r->device) continue;
        ++r->oom_count;
        if (!r->first_oom || EarlierOom(o, *r->first_oom)) r->first_oom = o;
      }
    }
    all.insert(all.end(), ooms.begin(), ooms.end());
  }

  // The first OOM per host, hosts in the order their first member with an OOM was listed.
  std::vector<std::string> hosts;
  std::map<std::string, std::vector<const JobOom*>> by_host;
  for (const JobOom& o : all) {
    const std::string& host = job.members[o.member].host;
    if (by_host.find(host) == by_host.end()) hosts.push_back(host);
    by_host[host].push_back(&o);
  }
  for (const std::string& host : hosts) {
    const std::vector<const JobOom*>& ooms = by_host[host];
    const JobOom* first =
        *std::min_element(ooms.begin(), ooms.end(),
                          [](const JobOom* a, const JobOom* b) { return EarlierOom(*a, *b); });
    HostFirstOom h;
    h.host = host;
    h.oom = *first;
    h.time_order_known = true;
    std::vector<std::size_t> processes;
    for (const JobOom* o : ooms) {
      if (o->time_ns == 0) h.time_order_known = false;
      const std::size_t process = job.members[o->member].process;
      if (std::find(processes.begin(), processes.end(), process) == processes.end()) {
        processes.push_back(process);
      }
      if (process == job.members[first->member].process) continue;
      ++h.later_ooms_elsewhere;
      if (o->time_ns != 0 && first->time_ns != 0 && o->time_ns > first->time_ns) {
        h.last_other_after_ns = std::max(h.last_other_after_ns, o->time_ns - first->time_ns);
      }
    }
    h.processes_with_oom = processes.size();
    job.first_ooms.push_back(std::move(h));
  }
  job.shared_devices = FindSharedDevices(members, job);
  // Across hosts only wall clocks compare, and only to within their skew.
  if (job.first_ooms.size() > 1 &&
      std::all_of(job.first_ooms.begin(), job.first_ooms.end(),
                  [](const HostFirstOom& h) { return h.oom.wall_time_ns.has_value(); })) {
    std::vector<HostFirstOom> by_wall = job.first_ooms;
    std::stable_sort(by_wall.begin(), by_wall.end(),
                     [](const HostFirstOom& a, const HostFirstOom& b) {
                       return *a.oom.wall_time_ns < *b.oom.wall_time_ns;
                     });
    const uint64_t lead = *by_wall[1].oom.wall_time_ns - *by_wall[0].oom.wall_time_ns;
    if (lead >= kWallClockMarginNs) {
      job.first_ooms = std::move(by_wall);
      job.hosts_ordered_by_wall_clock = true;
      job.host_lead_ns = lead;
    }
  }
  return job;
}

}  // namespace fragscope
