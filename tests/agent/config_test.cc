// Environment parsing and output path expansion.
#include "config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

namespace fragscope::agent {
namespace {

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kNames) unsetenv(name);
  }
  void TearDown() override { SetUp(); }
  static constexpr const char* kNames[] = {"FRAGSCOPE_OUTPUT",
                                           "FRAGSCOPE_SOCKET",
                                           "FRAGSCOPE_STACK_DEPTH",
                                           "FRAGSCOPE_RING_MB",
                                           "FRAGSCOPE_FOLLOW_FORK",
                                           "FRAGSCOPE_DORMANT",
                                           "FRAGSCOPE_SNAPSHOT_EVERY",
                                           "FRAGSCOPE_MEMINFO_MS",
                                           "FRAGSCOPE_LIVE_SLOTS",
                                           "FRAGSCOPE_FREE_STACKS",
                                           "RANK",
                                           "WORLD_SIZE",
                                           "OMPI_COMM_WORLD_RANK",
                                           "OMPI_COMM_WORLD_SIZE",
                                           "PMI_RANK",
                                           "PMI_SIZE",
                                           "SLURM_PROCID",
                                           "SLURM_NTASKS"};
};

TEST_F(ConfigTest, RankComesFromTheLauncher) {
  Config c;
  LoadConfig(&c);
  EXPECT_EQ(c.rank, -1) << "no launcher: no rank";
  EXPECT_EQ(c.world_size, -1);
  // srun around torchrun: torchrun's RANK is the process's rank in the job.
  setenv("SLURM_PROCID", "1", 1);
  setenv("SLURM_NTASKS", "2", 1);
  LoadConfig(&c);
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.world_size, 2);
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "16", 1);
  LoadConfig(&c);
  EXPECT_EQ(c.rank, 0);
  EXPECT_EQ(c.world_size, 16);
  // Not a rank: passed over silently (the launcher's variable, not ours).
  setenv("RANK", "zero", 1);
  LoadConfig(&c);
  EXPECT_EQ(c.rank, 1);
  unsetenv("SLURM_PROCID");
  setenv("OMPI_COMM_WORLD_RANK", "-3", 1);
  LoadConfig(&c);
  EXPECT_EQ(c.rank, -1);
  EXPECT_EQ(c.world_size, -1) << "a size without a rank says nothing";
  setenv("PMI_RANK", "5", 1);
  LoadConfig(&c);
  EXPECT_EQ(c.rank, 5);
}

TEST_F(ConfigTest, DefaultsWithoutEnvironment) {
  Config c;
  LoadConfig(&c);
  EXPECT_FALSE(c.has_output());
  EXPECT_EQ(c.stack_depth, 32);
  EXPECT_TRUE(c.release_stacks);
  EXPECT_EQ(c.ring_bytes, size_t{8} << 20);
  EXPECT_FALSE(c.follow_fork);
  EXPECT_FALSE(c.dormant);
  EXPECT_EQ(c.live_slots, size_t{1} << 18);
  // A scan of the default table per 4 * 2^18 events, not per 100000 (config.h).
  EXPECT_EQ(c.snapshot_every, 4u << 18);
}

TEST_F(ConfigTest, SnapshotCadenceFollowsTheTableUnlessSet) {
  setenv("FRAGSCOPE_LIVE_SLOTS", "4096", 1);
  Config small;
  LoadConfig(&small);
  EXPECT_EQ(small.snapshot_every, 100000u);  // the floor for small tables
  setenv("FRAGSCOPE_LIVE_SLOTS", "1048576", 1);
  Config big;
  LoadConfig(&big);
  EXPECT_EQ(big.snapshot_every, 4u << 20);
  setenv("FRAGSCOPE_SNAPSHOT_EVERY", "0", 1);  // an explicit value wins, "never" included
  Config never;
  LoadConfig(&never);
  EXPECT_EQ(never.snapshot_every, 0u);
}

TEST_F(ConfigTest, ReadsEveryVariable) {
  setenv("FRAGSCOPE_OUTPUT", "/tmp/x.fst", 1);
  setenv("FRAGSCOPE_STACK_DEPTH", "0", 1);
  setenv("FRAGSCOPE_RING_MB", "2", 1);
  setenv("FRAGSCOPE_FOLLOW_FORK", "1", 1);
  setenv("FRAGSCOPE_SNAPSHOT_EVERY", "10", 1);
  setenv("FRAGSCOPE_MEMINFO_MS", "0", 1);
  setenv("FRAGSCOPE_FREE_STACKS", "0", 1);
  Config c;
  LoadConfig(&c);
  EXPECT_TRUE(c.has_output());
  EXPECT_EQ(std::string(c.output_path), "/tmp/x.fst");
  EXPECT_EQ(c.stack_depth, 0);
  EXPECT_EQ(c.ring_bytes, size_t{2} << 20);
  EXPECT_TRUE(c.follow_fork);
  EXPECT_EQ(c.snapshot_every, 10u);
  EXPECT_EQ(c.meminfo_interval_ns, 0u);
  EXPECT_FALSE(c.release_stacks);
}

TEST_F(ConfigTest, InvalidValuesKeepDefaults) {
  setenv("FRAGSCOPE_STACK_DEPTH", "lots", 1);
  setenv("FRAGSCOPE_RING_MB", "-4", 1);
  setenv("FRAGSCOPE_FOLLOW_FORK", "maybe", 1);
  setenv("FRAGSCOPE_FREE_STACKS", "2", 1);
  Config c;
  LoadConfig(&c);
  EXPECT_TRUE(c.release_stacks);
  EXPECT_EQ(c.stack_depth, 32);
  EXPECT_EQ(c.ring_bytes, size_t{8} << 20);
  EXPECT_FALSE(c.follow_fork);
}

// Switches take the usual words; FRAGSCOPE_DORMANT=true meant off before, leaving no control
// socket and so no attach. A word that is neither on nor off is off and said.
TEST_F(ConfigTest, SwitchesTakeTheUsualWords) {
  for (const char* on : {"1", "true", "TRUE", "yes", "Yes", "on", "ON"}) {
    setenv("FRAGSCOPE_DORMANT", on, 1);
    setenv("FRAGSCOPE_FOLLOW_FORK", on, 1);
    Config c;
    ::testing::internal::CaptureStderr();
    LoadConfig(&c);
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "") << on;
    EXPECT_TRUE(c.dormant) << on;
    EXPECT_TRUE(c.follow_fork) << on;
  }
  for (const char* off : {"", "0", "false", "no", "Off"}) {
    setenv("FRAGSCOPE_DORMANT", off, 1);
    Config c;
    ::testing::internal::CaptureStderr();
    LoadConfig(&c);
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "") << off;
    EXPECT_FALSE(c.dormant) << off;
  }
  setenv("FRAGSCOPE_DORMANT", "sleepy", 1);
  Config c;
  ::testing::internal::CaptureStderr();
  LoadConfig(&c);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "fragscope: ignoring FRAGSCOPE_DORMANT=sleepy (not a valid value)\n");
  EXPECT_FALSE(c.dormant);
}

TEST_F(ConfigTest, ExpandPathReplacesPid) {
  char out[64];
  ASSERT_TRUE(ExpandPath("/tmp/t.%p.fst", 1234, out, sizeof(out)));
  EXPECT_EQ(std::string(out), "/tmp/t.1234.fst");
  ASSERT_TRUE(ExpandPath("plain", 1, out, sizeof(out)));
  EXPECT_EQ(std::string(out), "plain");
  EXPECT_FALSE(ExpandPath("%p%p%p", 123456, out, 8));
}

}  // namespace
}  // namespace fragscope::agent
