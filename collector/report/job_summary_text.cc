// RenderJobSummaryText: the job table and the first OOM per host.
#include <algorithm>
#include <cctype>
#include <cstdint>

#include "absl/strings/str_format.h"
#include "fragscope/model/format_bytes.h"
#include "fragscope/report/job_summary.h"

namespace fragscope {
namespace {

// "412 us", "3.2 ms", "1.50 s": how long after the first OOM another came.
std::string FormatDelay(uint64_t ns) {
  if (ns < 1000000) return absl::StrFormat("%d us", ns / 1000);
  if (ns < 1000000000) return absl::StrFormat("%.1f ms", ns / 1e6);
  return absl::StrFormat("%.2f s", ns / 1e9);
}

std::string Basename(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// How a process is named: "rank 3" in a distributed job, else "pid 8416".
std::string Name(const JobMemberInfo& m) {
  return m.rank ? absl::StrFormat("rank %d", *m.rank) : absl::StrFormat("pid %d", m.pid);
}

// "rank 3 (pid 8416, python3.11)" or "pid 8416 (python3.11)".
std::string Who(const JobMemberInfo& m) {
  const std::string exe = Basename(m.exe);
  return m.rank ? absl::StrFormat("rank %d (pid %d, %s)", *m.rank, m.pid, exe)
                : absl::StrFormat("pid %d (%s)", m.pid, exe);
}

std::string Shorten(std::string s, std::size_t width) {
  if (s.size() > width) s = s.substr(0, width - 3) + "...";
  return s;
}

// How the process's stream ended: its exit status when the agent learned it, "ended" when it
// closed its stream without one, "no end" when it never closed it (crashed, killed, running).
std::string EndText(const JobMemberInfo& m) {
  if (m.exit_status) return absl::StrFormat("exit %d", *m.exit_status);
  if (m.stream_ended) return m.ended_by_exec ? "exec" : "ended";
  return m.resumed_in ? "resumed" : "no end";  // cut by a collector restart, continued
}

// How a stream is named in notes: its trace, else the process.
std::string TraceOrName(const JobMemberInfo& m) { return m.trace.empty() ? Name(m) : m.trace; }

// "rank 0 (device 0, peak reserved 200.00 MiB)" for each user of `gpu` but `except` (a member's
// process; SIZE_MAX: none), joined with ", ".
std::string GpuUsers(const SharedDevice& gpu, const JobSummary& job, std::size_t except) {
  std::string text;
  for (const SharedDevice::User& u : gpu.users) {
    if (job.members[u.member].process == except) continue;
    if (!text.empty()) text += ", ";
    absl::StrAppendFormat(&text, "%s (device %d, peak reserved %s)", Name(job.members[u.member]),
                          u.device, FormatBytes(u.peak_reserved_bytes));
  }
  return text;
}

// The shared GPU that `member` used as `device`, if any.
const SharedDevice* SharedGpuOf(const JobSummary& job, std::size_t member, int device) {
  for (const SharedDevice& g : job.shared_devices) {
    for (const SharedDevice::User& u : g.users) {
      if (job.members[u.member].process == job.members[member].process && u.device == device) {
        return &g;
      }
    }
  }
  return nullptr;
}

std::string FirstOomCell(const JobRow& row, const JobSummary& job) {
  if (!row.first_oom) return "-";
  const JobOom& o = *row.first_oom;
  std::string s = absl::StrFormat("%s %s, seq %d",
                                  o.oom_class ? OomClassName(*o.oom_class) : "(no post-mortem)",
                                  FormatBytes(o.requested_bytes), o.seq);
  const std::string& host = job.members[o.member].host;
  for (const HostFirstOom& h : job.first_ooms) {
    if (h.host != host || o.time_ns == 0 || h.oom.time_ns == 0) continue;
    if (h.oom.member == o.member && h.oom.seq == o.seq) {
      s += job.first_ooms.size() > 1 || job.processes_with_oom > 1 ? ", first" : "";
    } else if (o.time_ns >= h.oom.time_ns) {
      s += ", +" + FormatDelay(o.time_ns - h.oom.time_ns);
    }
  }
  return s;
}

}  // namespace

std::string GpuUuidName(const std::string& uuid_hex) {
  if (uuid_hex.size() != 32) return uuid_hex;
  return absl::StrFormat("GPU-%s-%s-%s-%s-%s", uuid_hex.substr(0, 8), uuid_hex.substr(8, 4),
                         uuid_hex.substr(12, 4), uuid_hex.substr(16, 4), uuid_hex.substr(20));
}

std::string GpuUuidHex(const std::string& either) {
  std::string digits;
  if (either.size() == 40 && either.compare(0, 4, "GPU-") == 0) {
    // The dashes must be where nvidia-smi puts them: 8-4-4-4-12.
    for (std::size_t i = 4; i < either.size(); ++i) {
      const bool dash_here = i == 12 || i == 17 || i == 22 || i == 27;
      if ((either[i] == '-') != dash_here) return "";
      if (!dash_here) digits.push_back(either[i]);
    }
  } else if (either.size() == 32) {
    digits = either;
  } else {
    return "";
  }
  for (char& c : digits) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return "";
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return digits;
}

void RenderJobSummaryText(const JobSummary& job, std::ostream& out) {
  const std::size_t streams = job.members.size();
  std::size_t resumed = 0, after_failed_exec = 0, images = 0;
  for (const JobMemberInfo& m : job.members) {
    if (m.resumes) ++(job.members[*m.resumes].ended_by_exec ? after_failed_exec : resumed);
    if (m.execed_from) ++images;
  }
  std::string why;
  if (resumed > 0) why = absl::StrFormat("%d resumed after a collector restart", resumed);
  if (after_failed_exec > 0) {
    why += absl::StrFormat("%s%d resumed after an exec that failed", why.empty() ? "" : ", ",
                           after_failed_exec);
  }
  if (images > 0) {
    why += absl::StrFormat("%s%d image%s after an exec", why.empty() ? "" : ", ", images,
                           images == 1 ? "" : "s");
  }
  out << absl::StrFormat("==== job: %d process%s%s, %d OOM%s in %d of them ====\n",
                         job.process_count, job.process_count == 1 ? "" : "es",
                         streams > job.process_count
                             ? absl::StrFormat(" (%d streams: %s)", streams, why)
                             : std::string(),
                         job.oom_count, job.oom_count == 1 ? "" : "s", job.processes_with_oom);
  std::size_t host_width = 4, exe_width = 3;
  for (const JobMemberInfo& m : job.members) {
    host_width = std::max(host_width, std::min<std::size_t>(m.host.size(), 16));
    exe_width = std::max(exe_width, std::min<std::size_t>(Basename(m.exe).size(), 24));
  }
  // The rank column only for a distributed job's processes: it is how their users name them.
  const std::string rank_head = job.any_rank ? absl::StrFormat("%5s ", "rank") : "";
  out << absl::StrFormat("  %s%-8s %-*s %-*s %4s %14s %9s %7s %5s  %s\n", rank_head, "pid",
                         host_width, "host", exe_width, "exe", "dev", "peak reserved", "max frag",
                         "stream", "OOMs", "first OOM on the device (class, request, seq, when)");
  for (const JobRow& row : job.rows) {
    const JobMemberInfo& m = job.members[row.member];
    const std::string rank_cell = !job.any_rank ? ""
                                  : m.rank      ? absl::StrFormat("%5d ", *m.rank)
                                                : absl::StrFormat("%5s ", "-");
    out << absl::StrFormat(
        "  %s%-8d %-*s %-*s %4s %14s %9s %7s %5d  %s\n", rank_cell, m.pid, host_width,
        Shorten(m.host, host_width), exe_width, Shorten(Basename(m.exe), exe_width),
        row.device < 0 ? std::string("-") : absl::StrFormat("%d", row.device),
        FormatBytes(row.peak_reserved_bytes),
        row.max_fragmentation.known() ? FormatPercent(*row.max_fragmentation.value) : "n/a",
        EndText(m), row.oom_count, FirstOomCell(row, job));
  }
  // What the table cannot say in a cell.
  for (const JobMemberInfo& m : job.members) {
    if (!m.damage.empty()) {
      out << absl::StrFormat("  %s: damaged input, figures up to the damage only: %s\n", Name(m),
                             m.damage);
    }
    if (m.resumes && job.members[*m.resumes].ended_by_exec) {
      out << absl::StrFormat(
          "  %s: resumes %s after an exec that failed (the program went on in the same image)\n",
          Name(m), TraceOrName(job.members[*m.resumes]));
    } else if (m.resumes) {
      out << absl::StrFormat(
          "  %s: resumes %s after a collector restart (the events in between are counted as "
          "dropped, and the live state is exact again from the resumed stream's snapshot)\n",
          Name(m), TraceOrName(job.members[*m.resumes]));
    } else if (m.execed_from) {
      out << absl::StrFormat(
          "  %s: image %d of the process, which exec'ed into it from %s (the memory of the "
          "image before ended with it)\n",
          Name(m), m.exec_image, TraceOrName(job.members[*m.execed_from]));
    } else if (!m.history_complete) {
      out << absl::StrFormat(
          "  %s: the trace begins mid-run (attach, flight recorder, late connect): its peak "
          "and OOMs before that are not in it\n",
          Name(m));
    }
    if (!m.stream_ended && m.resumed_in) {
      out << absl::StrFormat("  %s: its stream was cut by a collector restart and goes on in %s\n",
                             Name(m), TraceOrName(job.members[*m.resumed_in]));
    } else if (!m.stream_ended) {
      out << absl::StrFormat(
          "  %s: its stream did not end (the process crashed, was killed or is still "
          "running): figures up to its last event\n",
          Name(m));
    }
  }
  for (const SharedDevice& g : job.shared_devices) {
    out << absl::StrFormat(
        "  %s on %s was used by %d processes: %s. They compete for its memory, and each counts "
        "the others' as outside its own segments (untracked: an OOM there reads \"external\"). "
        "Ranks of a data-parallel job usually get a GPU each: unless sharing was meant (MPS), "
        "call torch.cuda.set_device(local_rank) (or give each rank its own "
        "CUDA_VISIBLE_DEVICES) before the first CUDA call.\n",
        GpuUuidName(g.uuid_hex), g.host, g.users.size(), GpuUsers(g, job, SIZE_MAX));
  }
  std::string traces;
  for (const JobMemberInfo& m : job.members) {
    if (!m.trace.empty()) absl::StrAppendFormat(&traces, "\n    %-14s %s", Name(m), m.trace);
  }
  if (!traces.empty()) out << "  traces:" << traces << "\n";

  if (job.oom_count == 0) {
    out << "No OOM in any process.\n";
    return;
  }
  if (job.hosts_ordered_by_wall_clock) {
    out << absl::StrFormat(
        "OOMs on %d hosts: by their wall clocks the first was on %s, %s before the next host's "
        "first (clocks of different machines agree to milliseconds, far less than that).\n",
        job.first_ooms.size(), job.first_ooms[0].host, FormatDelay(job.host_lead_ns));
  } else if (job.first_ooms.size() > 1) {
    out << absl::StrFormat(
        "OOMs on %d hosts: their first OOMs lie too close together (under %s) or lack a "
        "wall-clock time, and clocks of different machines do not order them, so the first is "
        "given per host.\n",
        job.first_ooms.size(), FormatDelay(kWallClockMarginNs));
  }
  for (const HostFirstOom& h : job.first_ooms) {
    const JobMemberInfo& m = job.members[h.oom.member];
    out << absl::StrFormat("First OOM%s: %s, device %d, seq %d%s\n",
                           job.first_ooms.size() > 1 ? " on " + h.host : "", Who(m), h.oom.device,
                           h.oom.seq,
                           h.oom.wall_time_ns ? ", at " + FormatWallTime(*h.oom.wall_time_ns) : "");
    out << "  " << h.oom.headline << "\n";
    if (const SharedDevice* g = SharedGpuOf(job, h.oom.member, h.oom.device)) {
      out << absl::StrFormat(
          "  Device %d is %s, which other processes of this job used too: %s. The memory "
          "outside this process's segments may have been theirs, up to their peaks.\n",
          h.oom.device, GpuUuidName(g->uuid_hex), GpuUsers(*g, job, m.process));
    }
    if (!h.time_order_known) {
      out << "  Some OOMs of this host carry no time, so which came first is not certain.\n";
    }
    if (h.processes_with_oom > 1) {
      out << absl::StrFormat(
          "  %d OOM%s in %d other process%s came %s; read %s's report first: when one rank "
          "fails, the others often fail next, waiting for it.\n",
          h.later_ooms_elsewhere, h.later_ooms_elsewhere == 1 ? "" : "s", h.processes_with_oom - 1,
          h.processes_with_oom == 2 ? "" : "es",
          !h.time_order_known         ? std::string("too")
          : h.last_other_after_ns > 0 ? "within " + FormatDelay(h.last_other_after_ns) + " after it"
                                      : std::string("at the same time"),
          Name(m));
    }
  }
}

}  // namespace fragscope
