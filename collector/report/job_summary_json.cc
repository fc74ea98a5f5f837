// RenderJobJson: the document for several processes (collector/REPORT.md, "Several processes").
#include "fragscope/report/job_summary.h"
#include "fragscope/report/json_writer.h"
#include "fragscope/report/report_json.h"

namespace fragscope {
namespace {

// Which process an entry is about: its index into processes[], pid and rank.
void WriteProcess(JsonWriter& w, const JobSummary& job, std::size_t member) {
  w.Field("process", static_cast<uint64_t>(member));
  w.Field("pid", static_cast<uint64_t>(job.members[member].pid));
  w.FieldOrNull("rank", job.members[member].rank);
}

void WriteOom(JsonWriter& w, const JobSummary& job, const JobOom& o) {
  w.BeginObject();
  WriteProcess(w, job, o.member);
  w.Field("device", o.device);
  w.Field("seq", o.seq);
  w.FieldOrNull("time_ns", o.time_ns != 0 ? std::optional<uint64_t>(o.time_ns) : std::nullopt);
  w.Field("requested_bytes", o.requested_bytes);
  w.FieldOrNull("wall_time_ns", o.wall_time_ns);
  if (o.oom_class) {
    w.Field("class", OomClassName(*o.oom_class));
  } else {
    w.FieldNull("class");
  }
  w.Field("headline", o.headline);
  w.EndObject();
}

}  // namespace

void RenderJobJson(const JobSummary& job, const std::vector<std::string>& member_reports,
                   std::ostream& out) {
  JsonWriter w(out, /*pretty=*/true);
  w.BeginObject();
  w.Field("schema_version", kJsonReportSchemaVersion);
  w.Key("job");
  w.BeginObject();
  w.Field("processes", static_cast<uint64_t>(job.members.size()));
  w.Field("distinct_processes", static_cast<uint64_t>(job.process_count));
  w.Field("oom_count", job.oom_count);
  w.Field("processes_with_oom", static_cast<uint64_t>(job.processes_with_oom));
  w.Key("rows");
  w.BeginArray();
  for (const JobRow& r : job.rows) {
    w.BeginObject();
    WriteProcess(w, job, r.member);
    if (r.device >= 0) {
      w.Field("device", r.device);
    } else {
      w.FieldNull("device");
    }
    w.Field("peak_reserved_bytes", r.peak_reserved_bytes);
    if (r.max_fragmentation.known()) {
      w.FieldDouble("max_fragmentation", *r.max_fragmentation.value);
    } else {
      w.FieldNull("max_fragmentation");
    }
    w.Field("oom_count", r.oom_count);
    w.Key("first_oom");
    if (r.first_oom) {
      WriteOom(w, job, *r.first_oom);
    } else {
      w.Null();
    }
    w.EndObject();
  }
  w.EndArray();
  w.Key("first_ooms");
  w.BeginArray();
  for (const HostFirstOom& h : job.first_ooms) {
    w.BeginObject();
    w.Field("host", h.host);
    w.Key("oom");
    WriteOom(w, job, h.oom);
    w.Field("time_order_known", h.time_order_known);
    w.Field("processes_with_oom", static_cast<uint64_t>(h.processes_with_oom));
    w.Field("later_ooms_elsewhere", h.later_ooms_elsewhere);
    w.Field("last_other_after_ns", h.last_other_after_ns);
    w.EndObject();
  }
  w.EndArray();
  w.Field("hosts_ordered_by_wall_clock", job.hosts_ordered_by_wall_clock);
  w.Field("host_lead_ns", job.host_lead_ns);
  w.Key("shared_devices");
  w.BeginArray();
  for (const SharedDevice& g : job.shared_devices) {
    w.BeginObject();
    w.Field("host", g.host);
    w.Field("uuid", GpuUuidName(g.uuid_hex));
    w.Key("users");
    w.BeginArray();
    for (const SharedDevice::User& u : g.users) {
      w.BeginObject();
      WriteProcess(w, job, u.member);
      w.Field("device", u.device);
      w.Field("peak_reserved_bytes", u.peak_reserved_bytes);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  w.Key("processes");
  w.BeginArray();
  for (std::size_t i = 0; i < job.members.size(); ++i) {
    const JobMemberInfo& m = job.members[i];
    w.BeginObject();
    if (m.trace.empty()) {
      w.FieldNull("trace");
    } else {
      w.Field("trace", m.trace);
    }
    if (m.damage.empty()) {
      w.FieldNull("damage");
    } else {
      w.Field("damage", m.damage);
    }
    w.FieldOrNull("resumes", m.resumes);
    w.FieldOrNull("resumed_in", m.resumed_in);
    w.Field("exec_image", static_cast<uint64_t>(m.exec_image));
    w.Field("ended_by_exec", m.ended_by_exec);
    w.FieldOrNull("execed_from", m.execed_from);
    w.Key("report");
    if (i < member_reports.size()) {
      w.RawValue(member_reports[i]);
    } else {
      w.Null();
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  out << "\n";
}

}  // namespace fragscope
