#include "fragscope/model/stack_index.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "absl/strings/escaping.h"

namespace fragscope {

StackIndex::StackIndex(std::vector<std::string> caching_allocator_modules)
    : caching_allocator_modules_(std::move(caching_allocator_modules)) {}

void StackIndex::AddModules(const v1::ModuleMap& map) {
  for (const v1::Module& m : map.modules()) {
    ModuleInfo info;
    info.path = m.path();
    info.build_id_hex = absl::BytesToHexString(m.build_id());
    info.load_address = m.load_address();
    info.size = m.size();
    module_by_load_address_[info.load_address] = modules_.size();
    modules_.push_back(std::move(info));
  }
  ++generation_;
}

void StackIndex::AddStacks(const v1::StackTable& table) {
  for (const v1::Stack& s : table.stacks()) {
    if (s.id() == 0) continue;
    StackInfo& info = stacks_[s.id()];
    info.pcs.assign(s.pcs().begin(), s.pcs().end());
    info.end = StackEndFromWire(s.end());
    through_caching_allocator_.erase(s.id());
  }
  ++generation_;
}

void StackIndex::AddSymbolizedStack(const v1::SymbolizedStack& stack) {
  if (stack.id() == 0) return;
  StackInfo& info = stacks_[stack.id()];
  info.source_frames.clear();
  for (const v1::SourceFrame& f : stack.frames()) {
    info.source_frames.push_back({f.function(), f.file(), f.line()});
  }
  info.end = StackEndFromWire(stack.end());
  through_caching_allocator_.erase(stack.id());
  ++generation_;
}

void StackIndex::AddSymbolTable(const v1::SymbolTable& table) {
  auto symbols = stored_symbols_ ? std::make_shared<StoredSymbols>(*stored_symbols_)
                                 : std::make_shared<StoredSymbols>();
  for (const v1::ModuleSymbols& m : table.modules()) {
    auto at = module_by_load_address_.find(m.load_address());
    if (at == module_by_load_address_.end()) continue;
    const ModuleInfo& module = modules_[at->second];
    if (module.build_id_hex != absl::BytesToHexString(m.build_id())) continue;
    for (const v1::PcSymbols& pc : m.pcs()) {
      // A pc outside the module would name another module's code with this one's symbols.
      if (pc.pc() < module.load_address ||
          (module.size != 0 && pc.pc() - module.load_address >= module.size)) {
        continue;
      }
      std::vector<SourceFrameInfo>& frames = (*symbols)[pc.pc()];
      frames.clear();
      for (const v1::SourceFrame& f : pc.frames()) {
        frames.push_back({f.function(), f.file(), f.line()});
      }
    }
  }
  stored_symbols_ = std::move(symbols);
}

std::vector<uint64_t> StackIndex::AllPcs() const {
  std::vector<uint64_t> pcs;
  for (const auto& [id, stack] : stacks_) pcs.insert(pcs.end(), stack.pcs.begin(), stack.pcs.end());
  std::sort(pcs.begin(), pcs.end());
  pcs.erase(std::unique(pcs.begin(), pcs.end()), pcs.end());
  return pcs;
}

const StackInfo* StackIndex::Find(uint64_t id) const {
  auto it = stacks_.find(id);
  return it == stacks_.end() ? nullptr : &it->second;
}

StackInfo StackIndex::Reported(const StackInfo& stack) const {
  StackInfo out = stack;
  std::size_t keep = out.pcs.size();
  while (keep > 0 && ModuleOf(out.pcs[keep - 1]) == nullptr) --keep;
  if (keep > 0) out.pcs.resize(keep);  // keep == 0: no frame in a known module, nothing to judge
  return out;
}

std::vector<SiteEntry> StackIndex::MergeSites(std::vector<SiteEntry> entries) const {
  std::vector<SiteEntry> out;
  out.reserve(entries.size());
  absl::flat_hash_map<std::vector<uint64_t>, std::size_t> by_frames;  // -> index in out
  for (const SiteEntry& e : entries) {
    const StackInfo* stack = e.stack_id == 0 ? nullptr : Find(e.stack_id);
    if (stack == nullptr) {
      out.push_back(e);
      continue;
    }
    const StackEnd end = e.end ? MergeStackEnds(*e.end, stack->end) : stack->end;
    if (stack->pcs.empty()) {
      out.push_back(e);
      out.back().end = end;
      continue;
    }
    auto [it, inserted] = by_frames.try_emplace(Reported(*stack).pcs, out.size());
    if (inserted) {
      out.push_back(e);
      out.back().end = end;
      continue;
    }
    SiteEntry& merged = out[it->second];
    merged.end = MergeStackEnds(merged.end.value_or(end), end);
    merged.stack_id = std::min(merged.stack_id, e.stack_id);
    merged.live_bytes += e.live_bytes;
    merged.count += e.count;
  }
  return out;
}

const ModuleInfo* StackIndex::ModuleOf(uint64_t pc) const {
  auto it = module_by_load_address_.upper_bound(pc);
  if (it == module_by_load_address_.begin()) return nullptr;
  const ModuleInfo& m = modules_[std::prev(it)->second];
  return pc - m.load_address < m.size ? &m : nullptr;
}

bool StackIndex::IsCachingAllocatorModule(const std::string& path) const {
  // File name only: a directory such as /home/rmm/ must not make every module "rmm".
  const std::size_t slash = path.rfind('/');
  const std::string_view name = slash == std::string::npos
                                    ? std::string_view(path)
                                    : std::string_view(path).substr(slash + 1);
  for (const std::string& needle : caching_allocator_modules_) {
    if (name.find(needle) != std::string_view::npos) return true;
  }
  return false;
}

bool StackIndex::IsCudaRuntimeOrDriver(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  const std::string_view name = slash == std::string::npos
                                    ? std::string_view(path)
                                    : std::string_view(path).substr(slash + 1);
  return name.starts_with("libcudart.so") || name.starts_with("libcuda.so");
}

std::optional<bool> StackIndex::PassesThroughCachingAllocator(uint64_t id) {
  if (id == 0) return false;
  // Answers depend on the module list; drop them all when modules were added since.
  if (classified_modules_ != modules_.size()) {
    through_caching_allocator_.clear();
    classified_modules_ = modules_.size();
  }
  // An answer is only kept for a stack that arrived, and stacks are never forgotten: one
  // lookup for every segment after the first of its site (each cudaMalloc asks).
  auto cached = through_caching_allocator_.find(id);
  if (cached != through_caching_allocator_.end()) return cached->second;
  const StackInfo* stack = Find(id);
  if (stack == nullptr) return std::nullopt;
  // The memory belongs to the code that asked for it: the innermost frame in a known module,
  // past the CUDA runtime and driver, which only pass a request on. A caching allocator's own
  // cudaMalloc has that frame in the allocator; a library called from inside one (cuBLAS
  // making its handle's workspace from libtorch_cuda) has it in the library, and the memory is
  // the library's own (exact).
  bool result = false;
  for (uint64_t pc : stack->pcs) {
    const ModuleInfo* m = ModuleOf(pc);
    if (m == nullptr || IsCudaRuntimeOrDriver(m->path)) continue;
    result = IsCachingAllocatorModule(m->path);
    break;
  }
  // Converted streams name frames by file: a PyTorch allocator frame there counts the same.
  for (const SourceFrameInfo& f : stack->source_frames) {
    if (result) break;
    if (IsCachingAllocatorModule(f.file)) result = true;
  }
  through_caching_allocator_[id] = result;
  return result;
}

}  // namespace fragscope
