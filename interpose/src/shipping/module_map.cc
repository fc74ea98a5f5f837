#include "shipping/module_map.h"

#include <elf.h>
#include <link.h>

#include <cstring>

#include "fragscope/wire_constants.h"
#include "shipping/frame_encoder.h"

namespace fragscope::agent {
namespace {

uint64_t HashName(const char* s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s != '\0'; ++s) {
    h ^= static_cast<unsigned char>(*s);
    h *= 0x100000001b3ull;
  }
  return h;
}

// Finds NT_GNU_BUILD_ID in the module's PT_NOTE segments (mapped, so readable).
size_t FindBuildId(const dl_phdr_info* info, const uint8_t** id) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const uint8_t* p = reinterpret_cast<const uint8_t*>(info->dlpi_addr + ph.p_vaddr);
    const uint8_t* end = p + ph.p_memsz;
    size_t align = ph.p_align == 8 ? 8 : 4;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const uint8_t* name = p + sizeof(ElfW(Nhdr));
      const uint8_t* desc = name + ((note->n_namesz + align - 1) & ~(align - 1));
      const uint8_t* next = desc + ((note->n_descsz + align - 1) & ~(align - 1));
      if (next > end || next <= p) break;
      if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
        *id = desc;
        return note->n_descsz;
      }
      p = next;
    }
  }
  return 0;
}

struct CounterProbe {
  unsigned long long adds = 0;
  unsigned long long subs = 0;
};

int ReadCounters(dl_phdr_info* info, size_t size, void* data) {
  auto* probe = static_cast<CounterProbe*>(data);
  if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
    probe->adds = info->dlpi_adds;
    probe->subs = info->dlpi_subs;
  }
  return 1;  // the counters are the same in every entry: one is enough
}

}  // namespace

bool ModuleTracker::Changed() const {
  CounterProbe probe;
  dl_iterate_phdr(ReadCounters, &probe);
  return probe.adds != seen_adds_ || probe.subs != seen_subs_;
}

void ModuleTracker::Reset() {
  sent_count_ = 0;
  seen_adds_ = ~0ull;
  seen_subs_ = ~0ull;
}

bool ModuleTracker::EncodeNew(WireWriter& w) {
  struct Pass {
    ModuleTracker* self = nullptr;
    WireWriter* w = nullptr;
    size_t index = 0;  // dl_iterate_phdr lists the main program first
    size_t added = 0;
    unsigned long long adds = 0;
    unsigned long long subs = 0;
    Sent pending[256] = {};  // recorded as sent only if the frame fits
    size_t pending_count = 0;
  };
  size_t mark = w.size();
  FrameScope frame(w, 3 /* Frame.module_map */);
  Pass pass{};
  pass.self = this;
  pass.w = &w;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t size, void* data) -> int {
        auto* pass = static_cast<Pass*>(data);
        ModuleTracker* self = pass->self;
        if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
          pass->adds = info->dlpi_adds;
          pass->subs = info->dlpi_subs;
        }
        const char* name = info->dlpi_name != nullptr ? info->dlpi_name : "";
        const bool main_program = pass->index++ == 0;
        if (name[0] == '\0' && !main_program) return 0;  // nameless and not the program
        uintptr_t begin = ~uintptr_t{0};
        uintptr_t end = 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          uintptr_t b = info->dlpi_addr + (ph.p_vaddr & ~(ph.p_align > 0 ? ph.p_align - 1 : 0));
          if (b < begin) begin = b;
          if (info->dlpi_addr + ph.p_vaddr + ph.p_memsz > end)
            end = info->dlpi_addr + ph.p_vaddr + ph.p_memsz;
        }
        if (end <= begin) return 0;
        const char* path = main_program ? self->main_path_ : name;
        Sent key{begin, HashName(path)};
        for (size_t i = 0; i < self->sent_count_; ++i) {
          if (self->sent_[i].load_address == key.load_address &&
              self->sent_[i].name_hash == key.name_hash) {
            return 0;
          }
        }
        if (self->sent_count_ + pass->pending_count >= kMaxModules ||
            pass->pending_count >= sizeof(pass->pending) / sizeof(pass->pending[0])) {
          return 0;  // the rest goes in the next frame
        }
        const uint8_t* build_id = nullptr;
        size_t build_id_size = FindBuildId(info, &build_id);
        WireWriter& w = *pass->w;
        using M = wire::Module;
        size_t module = w.BeginMessage(wire::ModuleMap::kModules);
        w.String(M::kPath, path);
        w.Bytes(M::kBuildId, build_id, build_id_size);
        w.Uint64(M::kLoadAddress, begin);
        w.Uint64(M::kSize, end - begin);
        w.EndMessage(module);
        pass->pending[pass->pending_count++] = key;
        ++pass->added;
        return 0;
      },
      &pass);
  if (pass.added == 0) {
    w.Truncate(mark);
    seen_adds_ = pass.adds;
    seen_subs_ = pass.subs;
    return true;
  }
  if (!frame.Close()) return false;
  for (size_t i = 0; i < pass.pending_count; ++i) sent_[sent_count_++] = pass.pending[i];
  // More than one frame's worth: leave the counters stale so Changed() asks again.
  if (pass.pending_count < sizeof(pass.pending) / sizeof(pass.pending[0])) {
    seen_adds_ = pass.adds;
    seen_subs_ = pass.subs;
  }
  return true;
}

}  // namespace fragscope::agent
