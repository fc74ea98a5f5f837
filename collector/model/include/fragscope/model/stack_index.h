// Interned stacks and loaded modules of one stream, and the question the model asks of them:
// does this allocation come from inside a caching allocator?
#ifndef FRAGSCOPE_MODEL_STACK_INDEX_H_
#define FRAGSCOPE_MODEL_STACK_INDEX_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "fragscope.pb.h"
#include "fragscope/model/model_summary.h"

namespace fragscope {

// Memory: O(distinct stacks x depth + modules). Not thread-safe; owned by the ProcessModel.
class StackIndex {
 public:
  // `caching_allocator_modules`: file-name substrings of modules that carve segments.
  explicit StackIndex(std::vector<std::string> caching_allocator_modules);

  void AddModules(const v1::ModuleMap& map);
  void AddStacks(const v1::StackTable& table);
  void AddSymbolizedStack(const v1::SymbolizedStack& stack);
  // Stored symbols (SymbolTable frames) of modules already in the map with the same load
  // address and build-id; those of any other module are ignored, never applied to it.
  void AddSymbolTable(const v1::SymbolTable& table);

  // True if the allocation of stack `id` was made by a caching allocator: its innermost frame in
  // a known module, past the CUDA runtime and driver, lies in a caching-allocator module (a
  // library that allocates for itself while called from inside one, such as cuBLAS from
  // libtorch_cuda, is not the allocator). Converted stacks: any source frame in such a module.
  // nullopt while the stack (id != 0) has not arrived. Stack 0 (no stack recorded) is false.
  std::optional<bool> PassesThroughCachingAllocator(uint64_t id);

  const StackInfo* Find(uint64_t id) const;
  // `stack` as reports show it: without the frames at its outer end that lie in no known
  // module, when some frame of it does lie in one. A frame-pointer walk that leaves code built
  // without frame pointers (PyTorch's libc10_cuda, below the adapter's annotations) reads one
  // more "return address" that is data, often the block's own address: every block then looked
  // like an allocation site of its own. Converted (symbolized) stacks are left as they are.
  StackInfo Reported(const StackInfo& stack) const;
  // `entries` with the sites whose reported stacks are equal merged into one: bytes and counts
  // summed, under the smallest stack id among them, cut if any of their stacks is (each
  // entry's `end` set, MergeStackEnds). Stack 0 and stacks not here stay apart.
  // O(entries x depth); for summaries and post-mortems, not the per-event path.
  std::vector<SiteEntry> MergeSites(std::vector<SiteEntry> entries) const;
  const std::vector<ModuleInfo>& modules() const { return modules_; }
  // Null when no symbol table arrived.
  const std::shared_ptr<const StoredSymbols>& stored_symbols() const { return stored_symbols_; }
  // Every distinct return address of the stacks, ascending.
  std::vector<uint64_t> AllPcs() const;
  // Bumped whenever stacks or modules arrive, so callers can retry pending classifications.
  uint64_t generation() const { return generation_; }

 private:
  bool IsCachingAllocatorModule(const std::string& path) const;
  static bool IsCudaRuntimeOrDriver(const std::string& path);  // libcudart.so*, libcuda.so*
  const ModuleInfo* ModuleOf(uint64_t pc) const;

  std::vector<std::string> caching_allocator_modules_;
  std::vector<ModuleInfo> modules_;
  absl::btree_map<uint64_t, std::size_t> module_by_load_address_;  // -> index in modules_
  absl::flat_hash_map<uint64_t, StackInfo> stacks_;
  // Replaced, not changed, when a table arrives: summaries taken before keep theirs.
  std::shared_ptr<const StoredSymbols> stored_symbols_;
  // Cached answers, valid while the module list still has `classified_modules_` entries.
  absl::flat_hash_map<uint64_t, bool> through_caching_allocator_;
  uint64_t classified_modules_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_STACK_INDEX_H_
