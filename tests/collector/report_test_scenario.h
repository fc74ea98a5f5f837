// The model state the report tests render: a fragmentation OOM on device 0 (16 GiB).
//   Two 1 GiB segments, each with a 512 MiB block at its start (stacks 21 and 22, through
//   libtorch_python.so), so 1 GiB is cached in two 512 MiB pieces; a sub-allocator OOM for
//   768 MiB with 256 MiB free on the device.
// Hand-computed: cached 1 GiB, largest free 512 MiB, fragmentation 1 - 512/1024 = 0.5,
// stranded 512 MiB, reserved 2 GiB, allocated 1 GiB, untracked 16 - 0.25 - 2 = 13.75 GiB.
#ifndef FRAGSCOPE_TESTS_COLLECTOR_REPORT_TEST_SCENARIO_H_
#define FRAGSCOPE_TESTS_COLLECTOR_REPORT_TEST_SCENARIO_H_

#include "fragscope/model/process_model.h"
#include "model_test_frames.h"

namespace fragscope::testing {

inline constexpr uint64_t kScenarioModuleBase = 0x7a0000000000;

inline ModelSummary FragmentationOomSummary() {
  ProcessModel model;
  FrameFeed feed(&model);
  feed.Hello(false);
  feed.Device(0, 16 * kGiB);
  feed.Module("/opt/torch/lib/libtorch_python.so", kScenarioModuleBase, 0x100000);
  feed.Stack(21, {kScenarioModuleBase + 0x10, kScenarioModuleBase + 0x20});
  feed.Stack(22, {kScenarioModuleBase + 0x30});
  feed.Stack(30, {kScenarioModuleBase + 0x40});
  const uint64_t base = 0x7f0000000000;
  feed.Malloc(base, kGiB);
  feed.Malloc(base + 4 * kGiB, kGiB);
  feed.BlockAlloc(base, 512 * kMiB, 21);
  feed.BlockAlloc(base + 4 * kGiB, 512 * kMiB, 22);
  feed.MemInfo(0, 256 * kMiB, 16 * kGiB);
  v1::Frame failed;
  v1::FailedAlloc* f = failed.mutable_failed();
  f->set_seq(feed.next_seq());
  f->set_api(v1::API_fragscope_alloc_failed);
  f->set_result(2);
  f->set_size(768 * kMiB);
  f->set_device(0);
  f->set_stack_id(30);
  f->set_from_sub_allocator(true);
  f->set_has_mem_info(true);
  f->set_device_free_bytes(256 * kMiB);
  f->set_device_total_bytes(16 * kGiB);
  model.Apply(failed);
  return model.Summarize();
}

}  // namespace fragscope::testing

#endif  // FRAGSCOPE_TESTS_COLLECTOR_REPORT_TEST_SCENARIO_H_
