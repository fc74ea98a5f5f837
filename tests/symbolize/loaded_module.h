// A module this test process has loaded, read as the agent reads it (dl_iterate_phdr): path,
// load bias, span of its mappings and GNU build-id, for tests that symbolize its addresses.
#ifndef FRAGSCOPE_TESTS_SYMBOLIZE_LOADED_MODULE_H_
#define FRAGSCOPE_TESTS_SYMBOLIZE_LOADED_MODULE_H_

#include <link.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

namespace fragscope {

struct LoadedModule {
  std::string path;
  uint64_t bias = 0;
  uint64_t size = 0;
  std::string build_id;
};

// The same facts the agent records, read the same way (dl_iterate_phdr).
inline LoadedModule FindLoaded(const char* name_part) {
  LoadedModule found;
  std::pair<const char*, LoadedModule*> query(name_part, &found);
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* f = static_cast<std::pair<const char*, LoadedModule*>*>(data);
        if (info->dlpi_name == nullptr || std::strstr(info->dlpi_name, f->first) == nullptr) {
          return 0;
        }
        LoadedModule& out = *f->second;
        out.path = info->dlpi_name;
        out.bias = info->dlpi_addr;
        uint64_t hi = 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_LOAD) hi = std::max<uint64_t>(hi, ph.p_vaddr + ph.p_memsz);
          if (ph.p_type == PT_NOTE) {
            const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
            const char* end = p + ph.p_memsz;
            while (p + sizeof(ElfW(Nhdr)) <= end) {
              auto* n = reinterpret_cast<const ElfW(Nhdr)*>(p);
              const char* desc = p + sizeof(*n) + ((n->n_namesz + 3) & ~3u);
              if (n->n_type == NT_GNU_BUILD_ID) out.build_id.assign(desc, n->n_descsz);
              p = desc + ((n->n_descsz + 3) & ~3u);
            }
          }
        }
        out.size = hi;
        return 1;
      },
      &query);
  return found;
}

}  // namespace fragscope

#endif  // FRAGSCOPE_TESTS_SYMBOLIZE_LOADED_MODULE_H_
