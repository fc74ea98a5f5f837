// The job summary over several processes: which OOM came first (per host, by time), the rows per
// process and device, and the text and JSON that carry them.
#include "fragscope/report/job_summary.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "fragscope/report/report_json.h"

namespace fragscope {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kMs = 1000000;

DeviceSummary Device(int ordinal, uint64_t peak_reserved) {
  DeviceSummary d;
  d.ordinal = ordinal;
  d.peak_reserved_bytes = peak_reserved;
  return d;
}

// One process with a sub-allocator OOM of `class` on `device` at `time_ns` (0: no time).
ModelSummary Rank(uint32_t pid, const std::string& host, int device, uint64_t time_ns,
                  std::optional<OomClass> oom_class) {
  ModelSummary s;
  s.pid = pid;
  s.host = host;
  s.exe = "/usr/bin/python3.11";
  s.stream_ended = true;
  for (int d = 0; d <= device; ++d) s.devices.push_back(Device(d, d == device ? 900 * kMiB : 0));
  if (oom_class) {
    FailedAllocation f;
    f.seq = 40 + pid % 7;
    f.time_ns = time_ns;
    f.device = device;
    f.requested_bytes = 300 * kMiB;
    f.is_oom = true;
    f.from_sub_allocator = true;
    f.has_postmortem = true;
    s.failed_allocations.push_back(f);
    s.devices.back().oom_count = 1;
    OomPostMortem pm;
    pm.failure = f;
    pm.oom_class = *oom_class;
    pm.headline = "OOM on device " + std::to_string(device) +
                  ": requested 300.00 MiB — class: " + OomClassName(*oom_class);
    s.ooms.push_back(pm);
  }
  return s;
}

std::vector<JobMember> Members(const std::vector<ModelSummary>& summaries) {
  std::vector<JobMember> members;
  for (const ModelSummary& s : summaries) {
    members.push_back({"rank-" + std::to_string(s.pid) + ".fst", &s, ""});
  }
  return members;
}

TEST(JobSummary, TheFirstOomIsTheEarliestInTimeNotTheFirstListed) {
  // Rank 3 fails first (t = 5 ms); ranks 1 and 2 fail 2 and 7 ms after it; rank 0 has none.
  std::vector<ModelSummary> ranks = {
      Rank(100, "node1", 0, 0, std::nullopt),
      Rank(101, "node1", 1, 7 * kMs, OomClass::kCapacity),
      Rank(102, "node1", 2, 12 * kMs, OomClass::kCapacity),
      Rank(103, "node1", 3, 5 * kMs, OomClass::kFragmentation),
  };
  ranks[0].devices.clear();  // a process of the job that never touched a GPU
  JobSummary job = BuildJobSummary(Members(ranks));
  EXPECT_EQ(job.members.size(), 4u);
  EXPECT_EQ(job.oom_count, 3u);
  EXPECT_EQ(job.processes_with_oom, 3u);
  ASSERT_EQ(job.first_ooms.size(), 1u);
  const HostFirstOom& first = job.first_ooms[0];
  EXPECT_EQ(first.host, "node1");
  EXPECT_EQ(first.oom.member, 3u);
  EXPECT_EQ(first.oom.device, 3);
  ASSERT_TRUE(first.oom.oom_class.has_value());
  EXPECT_EQ(*first.oom.oom_class, OomClass::kFragmentation);
  EXPECT_TRUE(first.time_order_known);
  EXPECT_EQ(first.processes_with_oom, 3u);
  EXPECT_EQ(first.later_ooms_elsewhere, 2u);
  EXPECT_EQ(first.last_other_after_ns, 7 * kMs);

  // One row per used device: rank 0 used none, so it keeps one row of its own.
  ASSERT_EQ(job.rows.size(), 4u);
  EXPECT_EQ(job.rows[0].member, 0u);
  EXPECT_EQ(job.rows[0].device, -1);
  EXPECT_FALSE(job.rows[0].first_oom.has_value());
  EXPECT_EQ(job.rows[3].device, 3);
  EXPECT_EQ(job.rows[3].peak_reserved_bytes, 900 * kMiB);
  EXPECT_EQ(job.rows[3].oom_count, 1u);

  std::ostringstream text;
  RenderJobSummaryText(job, text);
  EXPECT_NE(text.str().find("4 processes, 3 OOMs in 3 of them"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("First OOM: pid 103 (python3.11), device 3"), std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("class: fragmentation"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("2 OOMs in 2 other processes came within 7.0 ms after it"),
            std::string::npos)
      << text.str();
  // Each later OOM says how long after the first it came.
  EXPECT_NE(text.str().find("capacity 300.00 MiB, seq 43, +2.0 ms"), std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("rank-103.fst"), std::string::npos) << text.str();
}

TEST(JobSummary, HostsAreOrderedApartBecauseTheirClocksDoNotCompare) {
  // node2's OOM has the smaller time, but its clock is another machine's.
  std::vector<ModelSummary> ranks = {
      Rank(200, "node1", 0, 900 * kMs, OomClass::kCapacity),
      Rank(201, "node2", 0, 1 * kMs, OomClass::kExternal),
      Rank(202, "node2", 0, 3 * kMs, OomClass::kCapacity),
  };
  JobSummary job = BuildJobSummary(Members(ranks));
  ASSERT_EQ(job.first_ooms.size(), 2u);
  EXPECT_EQ(job.first_ooms[0].host, "node1");
  EXPECT_EQ(job.first_ooms[0].oom.member, 0u);
  EXPECT_EQ(job.first_ooms[0].later_ooms_elsewhere, 0u);
  EXPECT_EQ(job.first_ooms[1].host, "node2");
  EXPECT_EQ(job.first_ooms[1].oom.member, 1u);
  EXPECT_EQ(job.first_ooms[1].last_other_after_ns, 2 * kMs);
  std::ostringstream text;
  RenderJobSummaryText(job, text);
  EXPECT_NE(text.str().find("OOMs on 2 hosts"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("First OOM on node2: pid 201"), std::string::npos) << text.str();
}

TEST(JobSummary, WallClocksOrderHostsOnlyWhenFarEnoughApart) {
  // Monotonic clocks of two machines: node2's OOM reads 1 ms, node1's 900 ms, which says
  // nothing. Their wall clocks (start offsets from Hello) put node1's 2 s before node2's.
  constexpr int64_t kNode1Offset = 1'800'000'000'000'000'000;
  std::vector<ModelSummary> ranks = {
      Rank(700, "node1", 0, 900 * kMs, OomClass::kFragmentation),
      Rank(701, "node2", 0, 1 * kMs, OomClass::kCapacity),
  };
  ranks[0].realtime_minus_monotonic_ns = kNode1Offset;
  ranks[1].realtime_minus_monotonic_ns =
      kNode1Offset + 2'000 * static_cast<int64_t>(kMs) + 899 * static_cast<int64_t>(kMs);
  JobSummary job = BuildJobSummary(Members(ranks));
  ASSERT_EQ(job.first_ooms.size(), 2u);
  EXPECT_TRUE(job.hosts_ordered_by_wall_clock);
  EXPECT_EQ(job.first_ooms[0].host, "node1");
  EXPECT_EQ(job.host_lead_ns, 2'000 * kMs);
  ASSERT_TRUE(job.first_ooms[0].oom.wall_time_ns.has_value());
  EXPECT_EQ(*job.first_ooms[0].oom.wall_time_ns, static_cast<uint64_t>(kNode1Offset) + 900 * kMs);
  std::ostringstream text;
  RenderJobSummaryText(job, text);
  EXPECT_NE(text.str().find("by their wall clocks the first was on node1, 2.00 s before"),
            std::string::npos)
      << text.str();
  // 2027-01-15 08:00:00.900 UTC: 1'800'000'000 s after the epoch is 2027-01-15 08:00:00.
  EXPECT_NE(text.str().find("at 2027-01-15 08:00:00.900 UTC"), std::string::npos) << text.str();

  // 50 ms apart: within what clock skew between machines can be, so no host is called first.
  ranks[1].realtime_minus_monotonic_ns = kNode1Offset + 949 * static_cast<int64_t>(kMs);
  JobSummary close = BuildJobSummary(Members(ranks));
  EXPECT_FALSE(close.hosts_ordered_by_wall_clock);
  EXPECT_EQ(close.first_ooms[0].host, "node1");  // listing order
  std::ostringstream close_text;
  RenderJobSummaryText(close, close_text);
  EXPECT_NE(close_text.str().find("the first is given per host"), std::string::npos)
      << close_text.str();
}

TEST(JobSummary, RanksNameTheProcesses) {
  std::vector<ModelSummary> ranks = {
      Rank(800, "node1", 0, 6 * kMs, OomClass::kCapacity),
      Rank(801, "node1", 1, 2 * kMs, OomClass::kFragmentation),
  };
  ranks[0].rank = 1;
  ranks[1].rank = 0;
  JobSummary job = BuildJobSummary(Members(ranks));
  EXPECT_TRUE(job.any_rank);
  std::ostringstream text;
  RenderJobSummaryText(job, text);
  EXPECT_NE(text.str().find("   rank pid"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("      1 800 "), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("First OOM: rank 0 (pid 801, python3.11), device 1"), std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("read rank 0's report first"), std::string::npos) << text.str();
  std::ostringstream json_out;
  RenderJobJson(job, {}, json_out);
  nlohmann::json j = nlohmann::json::parse(json_out.str());
  EXPECT_EQ(j["job"]["first_ooms"][0]["oom"]["rank"], 0);
  EXPECT_EQ(j["job"]["rows"][0]["rank"], 1);
  // Without ranks the column is not there at all.
  ranks[0].rank.reset();
  ranks[1].rank.reset();
  std::ostringstream plain;
  RenderJobSummaryText(BuildJobSummary(Members(ranks)), plain);
  EXPECT_EQ(plain.str().find("rank pid"), std::string::npos) << plain.str();
  EXPECT_NE(plain.str().find("First OOM: pid 801 (python3.11)"), std::string::npos) << plain.str();
}

TEST(JobSummary, OomsWithoutATimeMakeTheOrderUncertainAndSaySo) {
  std::vector<ModelSummary> ranks = {
      Rank(300, "node1", 0, 0, OomClass::kCapacity),
      Rank(301, "node1", 0, 8 * kMs, OomClass::kFragmentation),
  };
  JobSummary job = BuildJobSummary(Members(ranks));
  ASSERT_EQ(job.first_ooms.size(), 1u);
  EXPECT_FALSE(job.first_ooms[0].time_order_known);
  EXPECT_EQ(job.first_ooms[0].oom.member, 1u);  // the timed one
  std::ostringstream text;
  RenderJobSummaryText(job, text);
  EXPECT_NE(text.str().find("not certain"), std::string::npos) << text.str();
}

TEST(JobSummary, RecoveredDriverFailuresAreNotOoms) {
  ModelSummary s = Rank(400, "node1", 0, 0, std::nullopt);
  FailedAllocation retried;
  retried.seq = 9;
  retried.time_ns = 4 * kMs;
  retried.device = 0;
  retried.requested_bytes = 64 * kMiB;
  retried.is_oom = true;
  retried.recovered = true;  // PyTorch freed its cache and the retry succeeded
  s.failed_allocations.push_back(retried);
  std::vector<ModelSummary> ranks = {s};
  JobSummary job = BuildJobSummary(Members(ranks));
  EXPECT_EQ(job.oom_count, 0u);
  EXPECT_TRUE(job.first_ooms.empty());
  std::ostringstream text;
  RenderJobSummaryText(job, text);
  EXPECT_NE(text.str().find("No OOM in any process."), std::string::npos) << text.str();
}

TEST(JobSummary, DamageAndUnendedStreamsAreSpelledOut) {
  std::vector<ModelSummary> ranks = {Rank(500, "node1", 0, 2 * kMs, OomClass::kCapacity),
                                     Rank(501, "node1", 0, 0, std::nullopt)};
  ranks[1].stream_ended = false;
  std::vector<JobMember> members = Members(ranks);
  members[1].damage = "rank-501.fst: truncated at byte 4096";
  JobSummary job = BuildJobSummary(members);
  std::ostringstream text;
  RenderJobSummaryText(job, text);
  EXPECT_NE(text.str().find("pid 501: damaged input"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("truncated at byte 4096"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("pid 501: its stream did not end"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("no end"), std::string::npos) << text.str();
}

TEST(JobSummary, JsonHoldsTheJobAndEveryProcessReport) {
  std::vector<ModelSummary> ranks = {
      Rank(600, "node1", 0, 9 * kMs, OomClass::kCapacity),
      Rank(601, "node1", 1, 4 * kMs, OomClass::kUnusableCache),
  };
  std::vector<JobMember> members = Members(ranks);
  members[0].trace = "";  // a stream whose trace was not kept
  JobSummary job = BuildJobSummary(members);
  std::vector<std::string> reports;
  for (const ModelSummary& s : ranks) {
    std::ostringstream one;
    RenderJson(s, one);
    reports.push_back(one.str());
  }
  std::ostringstream out;
  RenderJobJson(job, reports, out);
  nlohmann::json j = nlohmann::json::parse(out.str(), nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << out.str();
  EXPECT_EQ(j["schema_version"], kJsonReportSchemaVersion);
  EXPECT_EQ(j["job"]["processes"], 2);
  EXPECT_EQ(j["job"]["oom_count"], 2);
  ASSERT_EQ(j["job"]["first_ooms"].size(), 1u);
  EXPECT_EQ(j["job"]["first_ooms"][0]["oom"]["pid"], 601);
  EXPECT_EQ(j["job"]["first_ooms"][0]["oom"]["class"], "unusable_cache");
  EXPECT_EQ(j["job"]["first_ooms"][0]["last_other_after_ns"], 5 * kMs);
  ASSERT_EQ(j["job"]["rows"].size(), 2u);  // the device each used; rank 601's device 0 was idle
  EXPECT_EQ(j["job"]["rows"][1]["device"], 1);
  ASSERT_EQ(j["processes"].size(), 2u);
  EXPECT_TRUE(j["processes"][0]["trace"].is_null());
  EXPECT_EQ(j["processes"][1]["trace"], "rank-601.fst");
  // The nested reports are the processes' own, whole.
  EXPECT_EQ(j["processes"][0]["report"]["process"]["pid"], 600);
  EXPECT_EQ(j["processes"][1]["report"]["process"]["pid"], 601);
  EXPECT_EQ(j["processes"][1]["report"]["ooms"][0]["class"], "unusable_cache");
}

// A collector restart cuts a process's stream and the agent resumes it in a new one (the
// daemon's `<name>.resumed-1.fst`): one process of two streams, not two processes, and the first
// stream's missing End is no crash.
TEST(JobSummary, AResumedStreamIsTheSameProcess) {
  std::vector<ModelSummary> streams = {
      Rank(700, "node1", 0, 0, std::nullopt),               // rank 0, before the restart
      Rank(701, "node1", 0, 0, std::nullopt),               // rank 1, one stream
      Rank(700, "node1", 0, 9 * kMs, OomClass::kCapacity),  // rank 0, after the restart
      Rank(700, "node2", 0, 0, std::nullopt),               // same pid on another host
  };
  streams[0].stream_ended = false;
  streams[0].last_seq = 5000;
  streams[2].resumed = 1;
  streams[2].history_complete = false;
  streams[2].history_from_seq = 5200;  // after the drops of the restart
  streams[3].resumed = 1;              // resumes nothing given here
  streams[3].history_from_seq = 10;
  std::vector<JobMember> members = Members(streams);
  members[2].trace = "rank-700.resumed-1.fst";
  JobSummary job = BuildJobSummary(members);
  ASSERT_EQ(job.members.size(), 4u);
  EXPECT_EQ(job.process_count, 3u);
  EXPECT_EQ(job.members[2].resumes, 0u);
  EXPECT_EQ(job.members[0].resumed_in, 2u);
  EXPECT_EQ(job.members[2].process, 0u);
  EXPECT_FALSE(job.members[3].resumes.has_value());  // another host's process
  EXPECT_FALSE(job.members[1].resumed_in.has_value());
  EXPECT_EQ(job.processes_with_oom, 1u);

  std::ostringstream text;
  RenderJobSummaryText(job, text);
  const std::string t = text.str();
  EXPECT_NE(t.find("job: 3 processes (4 streams: 1 resumed after a collector restart), 1 OOM in 1"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("its stream was cut by a collector restart and goes on in "
                   "rank-700.resumed-1.fst"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("resumes rank-700.fst after a collector restart"), std::string::npos) << t;
  // Only the stream that resumed nothing it was given is said not to have ended.
  EXPECT_EQ(t.find("pid 700 (python3.11): its stream did not end"), std::string::npos) << t;

  std::ostringstream json;
  RenderJobJson(job, {}, json);
  nlohmann::json j = nlohmann::json::parse(json.str(), nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << json.str();
  EXPECT_EQ(j["job"]["processes"], 4);
  EXPECT_EQ(j["job"]["distinct_processes"], 3);
  EXPECT_EQ(j["processes"][2]["resumes"], 0);
  EXPECT_EQ(j["processes"][0]["resumed_in"], 2);
  EXPECT_TRUE(j["processes"][1]["resumes"].is_null());

  // A stream that began before the other one ended is not its continuation (pid reuse).
  streams[2].history_from_seq = 4000;
  JobSummary reused = BuildJobSummary(Members(streams));
  EXPECT_EQ(reused.process_count, 4u);
  EXPECT_FALSE(reused.members[2].resumes.has_value());
}

// Ranks on one GPU (same host and UUID): the usual mp.spawn slip of never calling
// torch.cuda.set_device(local_rank). Said once per GPU, with each process's peak there, and again
// at a first OOM on it; a resumed stream is not a second process, other GPUs and devices without
// a UUID are not shared.
TEST(JobSummary, RanksOnOneGpuAreSaidToShareIt) {
  const std::string gpu0(32, 'a'), gpu1(32, 'b');
  std::vector<ModelSummary> ranks = {
      Rank(800, "node1", 0, 0, std::nullopt),               // rank 0
      Rank(801, "node1", 0, 7 * kMs, OomClass::kExternal),  // rank 1, same GPU
      Rank(800, "node1", 0, 0, std::nullopt),               // rank 0 again, resumed
      Rank(802, "node1", 0, 0, std::nullopt),               // rank 2: a GPU of its own
      Rank(803, "node1", 0, 0, std::nullopt),               // rank 3: UUID not read
      Rank(804, "node2", 0, 0, std::nullopt),               // rank 4: gpu0's UUID, another host
  };
  for (uint32_t r = 0; r < ranks.size(); ++r) ranks[r].rank = r == 2 ? 0 : (r > 2 ? r - 1 : r);
  ranks[0].devices[0].uuid_hex = ranks[1].devices[0].uuid_hex = gpu0;
  ranks[2].devices[0].uuid_hex = gpu0;
  ranks[2].devices[0].peak_reserved_bytes = 950 * kMiB;  // its larger peak after the restart
  ranks[2].resumed = 1;
  ranks[0].stream_ended = false;
  ranks[0].last_seq = 10;
  ranks[2].history_from_seq = 20;
  ranks[3].devices[0].uuid_hex = gpu1;
  ranks[5].devices[0].uuid_hex = gpu0;
  JobSummary job = BuildJobSummary(Members(ranks));
  ASSERT_EQ(job.members[2].process, 0u);
  ASSERT_EQ(job.shared_devices.size(), 1u);
  const SharedDevice& g = job.shared_devices[0];
  EXPECT_EQ(g.host, "node1");
  EXPECT_EQ(g.uuid_hex, gpu0);
  ASSERT_EQ(g.users.size(), 2u);
  EXPECT_EQ(g.users[0].member, 0u);
  EXPECT_EQ(g.users[0].peak_reserved_bytes, 950 * kMiB);
  EXPECT_EQ(g.users[1].member, 1u);
  EXPECT_EQ(g.users[1].device, 0);

  std::ostringstream text;
  RenderJobSummaryText(job, text);
  const std::string t = text.str();
  EXPECT_NE(t.find("GPU-aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa on node1 was used by 2 processes: "
                   "rank 0 (device 0, peak reserved 950.00 MiB), rank 1 (device 0, peak "
                   "reserved 900.00 MiB)"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("torch.cuda.set_device(local_rank)"), std::string::npos) << t;
  EXPECT_NE(t.find("Device 0 is GPU-aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa, which other processes "
                   "of this job used too: rank 0 (device 0, peak reserved 950.00 MiB)."),
            std::string::npos)
      << t;
  EXPECT_EQ(t.find("GPU-bbbbbbbb"), std::string::npos) << t;

  std::ostringstream json;
  RenderJobJson(job, {}, json);
  const nlohmann::json j = nlohmann::json::parse(json.str());
  ASSERT_EQ(j["job"]["shared_devices"].size(), 1u);
  EXPECT_EQ(j["job"]["shared_devices"][0]["uuid"], "GPU-aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa");
  EXPECT_EQ(j["job"]["shared_devices"][0]["users"][1]["rank"], 1);
  EXPECT_EQ(j["job"]["shared_devices"][0]["users"][0]["peak_reserved_bytes"], 950 * kMiB);

  // Each rank on its own GPU: nothing said.
  ranks[1].devices[0].uuid_hex = gpu1;
  ranks[3].devices[0].uuid_hex.clear();
  job = BuildJobSummary(Members(ranks));
  EXPECT_TRUE(job.shared_devices.empty());
  std::ostringstream apart;
  RenderJobSummaryText(job, apart);
  EXPECT_EQ(apart.str().find(" was used by "), std::string::npos) << apart.str();
}

}  // namespace
}  // namespace fragscope
