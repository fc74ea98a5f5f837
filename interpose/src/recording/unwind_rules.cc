#include "recording/unwind_rules.h"

#include <atomic>
#include <cstring>

namespace fragscope::agent {
namespace {

constinit std::atomic<FindObjectFn> g_find_object{nullptr};

#if defined(__x86_64__)

// glibc's struct dl_find_object (dlfcn.h since 2.35), with room for members later glibc adds.
struct FoundObject {
  unsigned long long flags;
  void* map_start;
  void* map_end;
  void* link_map;
  void* eh_frame;  // the PT_GNU_EH_FRAME segment: .eh_frame_hdr
  unsigned long long reserved[23];
};

// DWARF register numbers of x86-64 (System V psABI, figure 3.36).
constexpr uint64_t kRegFp = 6;   // rbp
constexpr uint64_t kRegSp = 7;   // rsp
constexpr uint64_t kRegRa = 16;  // the return address column

// Reads inside [pos, end) of one object's mapping; any read past `end` fails the cursor.
class Cursor {
 public:
  Cursor(uintptr_t pos, uintptr_t end) : pos_(pos), end_(end) {}
  bool ok() const { return ok_; }
  uintptr_t pos() const { return pos_; }
  uintptr_t end() const { return end_; }
  void Seek(uintptr_t pos) { ok_ = ok_ && pos <= end_ ? (pos_ = pos, true) : false; }

  template <typename T>
  T Read() {
    T v{};
    if (!ok_ || end_ - pos_ < sizeof(T) || pos_ > end_) {
      ok_ = false;
      return v;
    }
    memcpy(&v, reinterpret_cast<const void*>(pos_), sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  uint64_t Uleb() {
    uint64_t v = 0;
    for (int shift = 0; ok_; shift += 7) {
      const uint8_t b = Read<uint8_t>();
      if (shift < 64) v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) break;
    }
    return v;
  }
  int64_t Sleb() {
    uint64_t v = 0;
    int shift = 0;
    uint8_t b = 0;
    do {
      b = Read<uint8_t>();
      if (shift < 64) v |= static_cast<uint64_t>(b & 0x7f) << shift;
      shift += 7;
    } while (ok_ && (b & 0x80) != 0);
    if (shift < 64 && (b & 0x40) != 0) v |= ~uint64_t{0} << shift;
    return static_cast<int64_t>(v);
  }
  void Skip(uint64_t n) {
    if (!ok_ || n > end_ - pos_) {
      ok_ = false;
      return;
    }
    pos_ += n;
  }
  // A pointer in DWARF EH encoding `enc` (LSB DW_EH_PE_*): format in the low nibble, how it is
  // applied in the high one. `datarel_base` is .eh_frame_hdr's address (only its table uses it).
  uint64_t Encoded(uint8_t enc, uintptr_t datarel_base = 0) {
    if (enc == 0xff) return 0;  // DW_EH_PE_omit
    const uintptr_t at = pos_;
    uint64_t v = 0;
    switch (enc & 0x0f) {
      case 0x00:
        v = Read<uint64_t>();
        break;  // absptr
      case 0x01:
        v = Uleb();
        break;  // uleb128
      case 0x02:
        v = Read<uint16_t>();
        break;  // udata2
      case 0x03:
        v = Read<uint32_t>();
        break;  // udata4
      case 0x04:
        v = Read<uint64_t>();
        break;  // udata8
      case 0x09:
        v = static_cast<uint64_t>(Sleb());
        break;  // sleb128
      case 0x0a:
        v = static_cast<uint64_t>(Read<int16_t>());
        break;  // sdata2
      case 0x0b:
        v = static_cast<uint64_t>(Read<int32_t>());
        break;  // sdata4
      case 0x0c:
        v = static_cast<uint64_t>(Read<int64_t>());
        break;  // sdata8
      default:
        ok_ = false;
        return 0;
    }
    switch (enc & 0x70) {
      case 0x00:
        break;  // absolute
      case 0x10:
        v += at;
        break;  // pcrel
      case 0x30:
        v += datarel_base;
        break;  // datarel
      default:
        ok_ = false;
        return 0;  // textrel, funcrel, aligned: not in .eh_frame
    }
    // DW_EH_PE_indirect (0x80) would mean "the pointer is stored at v": only the personality
    // routine uses it, and it is skipped, never followed.
    return v;
  }

 private:
  uintptr_t pos_;
  uintptr_t end_;
  bool ok_ = true;
};

// What the CFA program says at one location, for the registers a walk needs.
struct RowState {
  enum class Saved : uint8_t { kSame, kAtOffset, kUndefined, kOther };
  uint64_t cfa_reg = kRegSp;
  int64_t cfa_offset = 8;
  bool cfa_is_expression = false;
  Saved fp = Saved::kSame;
  int64_t fp_offset = 0;
  Saved ra = Saved::kAtOffset;
  int64_t ra_offset = -8;
};

struct Cie {
  uint64_t code_align = 1;
  int64_t data_align = -8;
  uint64_t ra_reg = kRegRa;
  uint8_t fde_encoding = 0;  // absptr
  bool has_augmentation_data = false;
  bool signal_frame = false;
  uintptr_t instructions = 0;
  uintptr_t instructions_end = 0;
};

// Reads an entry's length; false for the zero terminator or a length past `c.end()`. Sets
// *body to where the entry's contents start and *end to its end.
bool ReadEntryLength(Cursor& c, uintptr_t* body, uintptr_t* end) {
  uint64_t length = c.Read<uint32_t>();
  if (length == 0xffffffffu) length = c.Read<uint64_t>();
  if (!c.ok() || length == 0 || length > c.end() - c.pos()) return false;
  *body = c.pos();
  *end = c.pos() + length;
  return true;
}

bool ParseCie(uintptr_t at, uintptr_t limit, Cie* cie) {
  Cursor c(at, limit);
  uintptr_t body = 0, end = 0;
  if (!ReadEntryLength(c, &body, &end)) return false;
  Cursor e(body, end);
  if (e.Read<uint32_t>() != 0) return false;  // a CIE's id is 0 in .eh_frame
  const uint8_t version = e.Read<uint8_t>();
  if (version != 1 && version != 3) return false;
  char augmentation[16];
  size_t n = 0;
  for (char ch = e.Read<char>(); e.ok() && ch != '\0'; ch = e.Read<char>()) {
    if (n + 1 >= sizeof(augmentation)) return false;
    augmentation[n++] = ch;
  }
  augmentation[n] = '\0';
  if (!e.ok() || strstr(augmentation, "eh") != nullptr) return false;  // pre-1998 GCC layout
  cie->code_align = e.Uleb();
  cie->data_align = e.Sleb();
  cie->ra_reg = version == 1 ? e.Read<uint8_t>() : e.Uleb();
  if (augmentation[0] == 'z') {
    cie->has_augmentation_data = true;
    const uint64_t length = e.Uleb();
    const uintptr_t data_end = e.pos() + length;
    for (size_t i = 1; i < n && e.ok(); ++i) {
      switch (augmentation[i]) {
        case 'R':
          cie->fde_encoding = e.Read<uint8_t>();
          break;
        case 'P':
          e.Encoded(e.Read<uint8_t>());
          break;  // personality routine
        case 'L':
          e.Read<uint8_t>();
          break;  // LSDA encoding
        case 'S':
          cie->signal_frame = true;
          break;
        default:
          i = n;
          break;  // unknown: the length says where the data ends
      }
    }
    e.Seek(data_end);
  } else if (n != 0) {
    return false;  // data we cannot skip without knowing its length
  }
  if (!e.ok()) return false;
  cie->instructions = e.pos();
  cie->instructions_end = end;
  return true;
}

// factored * data_align, wrapping instead of overflowing on a corrupt table (the rule is then
// refused by its bounds, never undefined behaviour).
inline int64_t Scaled(uint64_t factored, int64_t data_align) {
  return static_cast<int64_t>(factored * static_cast<uint64_t>(data_align));
}

// Runs CFA instructions [from, to) until the location passes `target`. Returns false on an
// instruction it does not know (the rule is then unknown, never guessed).
bool RunCfaProgram(uintptr_t from, uintptr_t to, const Cie& cie, uintptr_t location,
                   uintptr_t target, const RowState& initial, RowState* row) {
  constexpr int kMaxRemembered = 8;
  RowState remembered[kMaxRemembered];
  int depth = 0;
  Cursor c(from, to);
  auto set_saved = [&](uint64_t reg, RowState::Saved how, int64_t offset) {
    if (reg == kRegFp) {
      row->fp = how;
      row->fp_offset = offset;
    } else if (reg == cie.ra_reg) {
      row->ra = how;
      row->ra_offset = offset;
    }
  };
  auto restore = [&](uint64_t reg) {
    if (reg == kRegFp) {
      row->fp = initial.fp;
      row->fp_offset = initial.fp_offset;
    } else if (reg == cie.ra_reg) {
      row->ra = initial.ra;
      row->ra_offset = initial.ra_offset;
    }
  };
  auto advance = [&](uint64_t delta) {
    location += delta * cie.code_align;
    return location <= target;
  };
  while (c.ok() && c.pos() < to) {
    const uint8_t op = c.Read<uint8_t>();
    const uint8_t low = op & 0x3f;
    switch (op >> 6) {
      case 1:  // DW_CFA_advance_loc
        if (!advance(low)) return true;
        continue;
      case 2:  // DW_CFA_offset
        set_saved(low, RowState::Saved::kAtOffset, Scaled(c.Uleb(), cie.data_align));
        continue;
      case 3:  // DW_CFA_restore
        restore(low);
        continue;
      default:
        break;
    }
    switch (op) {
      case 0x00:
        break;    // nop
      case 0x01:  // set_loc
        location = c.Encoded(cie.fde_encoding);
        if (location > target) return true;
        break;
      case 0x02:
        if (!advance(c.Read<uint8_t>())) return true;
        break;
      case 0x03:
        if (!advance(c.Read<uint16_t>())) return true;
        break;
      case 0x04:
        if (!advance(c.Read<uint32_t>())) return true;
        break;
      case 0x05: {  // offset_extended
        const uint64_t reg = c.Uleb();
        set_saved(reg, RowState::Saved::kAtOffset, Scaled(c.Uleb(), cie.data_align));
        break;
      }
      case 0x06:
        restore(c.Uleb());
        break;  // restore_extended
      case 0x07:
        set_saved(c.Uleb(), RowState::Saved::kUndefined, 0);
        break;
      case 0x08:
        set_saved(c.Uleb(), RowState::Saved::kSame, 0);
        break;
      case 0x09: {  // register: saved in another register
        const uint64_t reg = c.Uleb();
        c.Uleb();
        set_saved(reg, RowState::Saved::kOther, 0);
        break;
      }
      case 0x0a:  // remember_state
        if (depth == kMaxRemembered) return false;
        remembered[depth++] = *row;
        break;
      case 0x0b:  // restore_state
        if (depth == 0) return false;
        {
          // The CFA is part of the remembered row, as DWARF 5 section 6.4.2.4 says.
          *row = remembered[--depth];
        }
        break;
      case 0x0c:  // def_cfa
        row->cfa_reg = c.Uleb();
        row->cfa_offset = static_cast<int64_t>(c.Uleb());
        row->cfa_is_expression = false;
        break;
      case 0x0d:
        row->cfa_reg = c.Uleb();
        row->cfa_is_expression = false;
        break;
      case 0x0e:
        row->cfa_offset = static_cast<int64_t>(c.Uleb());
        break;
      case 0x0f:  // def_cfa_expression
        row->cfa_is_expression = true;
        c.Skip(c.Uleb());
        break;
      case 0x10:    // expression
      case 0x16: {  // val_expression
        const uint64_t reg = c.Uleb();
        c.Skip(c.Uleb());
        set_saved(reg, RowState::Saved::kOther, 0);
        break;
      }
      case 0x11: {  // offset_extended_sf
        const uint64_t reg = c.Uleb();
        set_saved(reg, RowState::Saved::kAtOffset,
                  Scaled(static_cast<uint64_t>(c.Sleb()), cie.data_align));
        break;
      }
      case 0x12:  // def_cfa_sf
        row->cfa_reg = c.Uleb();
        row->cfa_offset = Scaled(static_cast<uint64_t>(c.Sleb()), cie.data_align);
        row->cfa_is_expression = false;
        break;
      case 0x13:
        row->cfa_offset = Scaled(static_cast<uint64_t>(c.Sleb()), cie.data_align);
        break;      // def_cfa_offset_sf
      case 0x14:    // val_offset
      case 0x15: {  // val_offset_sf
        const uint64_t reg = c.Uleb();
        if (op == 0x14)
          c.Uleb();
        else
          c.Sleb();
        set_saved(reg, RowState::Saved::kOther, 0);
        break;
      }
      case 0x2e:
        c.Uleb();
        break;      // GNU_args_size
      case 0x2f: {  // GNU_negative_offset_extended
        const uint64_t reg = c.Uleb();
        set_saved(reg, RowState::Saved::kAtOffset, Scaled(0 - c.Uleb(), cie.data_align));
        break;
      }
      default:
        return false;
    }
  }
  return c.ok();
}

UnwindRule RuleOf(const RowState& row) {
  UnwindRule rule;
  if (row.ra == RowState::Saved::kUndefined) {
    rule.kind = UnwindRule::Kind::kOutermost;
    return rule;
  }
  rule.kind = UnwindRule::Kind::kUnsupported;
  if (row.cfa_is_expression || (row.cfa_reg != kRegSp && row.cfa_reg != kRegFp)) return rule;
  if (row.ra != RowState::Saved::kAtOffset || row.ra_offset != -8) return rule;
  if (row.fp == RowState::Saved::kOther) return rule;
  if (row.cfa_offset < 16 || row.cfa_offset > INT32_MAX) return rule;
  rule.cfa_offset = static_cast<int32_t>(row.cfa_offset);
  if (row.fp == RowState::Saved::kAtOffset) {
    if (row.fp_offset >= 0 || row.fp_offset < -row.cfa_offset) return rule;
    rule.fp_offset = static_cast<int32_t>(row.fp_offset);
  }
  rule.kind = row.cfa_reg == kRegSp ? UnwindRule::Kind::kSpBased : UnwindRule::Kind::kFpBased;
  return rule;
}

// Finds the FDE covering `pc` in the object's .eh_frame_hdr search table.
UnwindRule RuleFromObject(const FoundObject& object, uintptr_t pc) {
  UnwindRule none;
  const uintptr_t hdr = reinterpret_cast<uintptr_t>(object.eh_frame);
  const uintptr_t limit = reinterpret_cast<uintptr_t>(object.map_end);
  if (hdr == 0 || hdr < reinterpret_cast<uintptr_t>(object.map_start) || hdr >= limit) {
    return none;
  }
  Cursor c(hdr, limit);
  const uint8_t version = c.Read<uint8_t>();
  const uint8_t frame_ptr_enc = c.Read<uint8_t>();
  const uint8_t count_enc = c.Read<uint8_t>();
  const uint8_t table_enc = c.Read<uint8_t>();
  c.Encoded(frame_ptr_enc, hdr);
  const uint64_t count = c.Encoded(count_enc, hdr);
  // Every linker writes the table as datarel sdata4 pairs; without it a search is a linear
  // scan of .eh_frame, too slow to do here.
  if (!c.ok() || version != 1 || table_enc != 0x3b || count == 0 || count > (limit - c.pos()) / 8) {
    return none;
  }
  const uintptr_t table = c.pos();
  auto initial = [&](uint64_t i) {
    int32_t v;
    memcpy(&v, reinterpret_cast<const void*>(table + i * 8), 4);
    return hdr + static_cast<int64_t>(v);
  };
  // The last entry whose initial location is at or below pc.
  uint64_t lo = 0, hi = count;
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (initial(mid) <= pc)
      lo = mid;
    else
      hi = mid;
  }
  if (initial(lo) > pc) return none;
  int32_t fde_rel;
  memcpy(&fde_rel, reinterpret_cast<const void*>(table + lo * 8 + 4), 4);
  const uintptr_t fde = hdr + static_cast<int64_t>(fde_rel);

  Cursor f(fde, limit);
  uintptr_t body = 0, end = 0;
  if (!ReadEntryLength(f, &body, &end)) return none;
  Cursor e(body, end);
  const uint32_t cie_delta = e.Read<uint32_t>();
  if (!e.ok() || cie_delta == 0 || cie_delta > body) return none;
  Cie cie;
  if (!ParseCie(body - cie_delta, limit, &cie)) return none;
  const uint64_t begin = e.Encoded(cie.fde_encoding);
  const uint64_t range = e.Encoded(cie.fde_encoding & 0x0f);
  if (!e.ok() || pc < begin || pc - begin >= range) return none;  // a gap between functions
  if (cie.has_augmentation_data) e.Skip(e.Uleb());
  if (!e.ok()) return none;
  UnwindRule unsupported;
  unsupported.kind = UnwindRule::Kind::kUnsupported;
  if (cie.signal_frame) return unsupported;  // a sigreturn trampoline: registers in a ucontext
  RowState row;
  if (!RunCfaProgram(cie.instructions, cie.instructions_end, cie, begin, pc, row, &row)) {
    return unsupported;
  }
  const RowState initial_row = row;
  if (!RunCfaProgram(e.pos(), end, cie, begin, pc, initial_row, &row)) return unsupported;
  return RuleOf(row);
}

bool Pack(uintptr_t key, const UnwindRule& rule, uint64_t* entry) {
  const uint64_t high = key >> internal::kRuleCacheBits;
  if (high == 0 || (high & ~internal::kRuleKeyMask) != 0) return false;
  if (rule.cfa_offset < 0 || (rule.cfa_offset & 7) != 0 ||
      rule.cfa_offset / 8 >= (1 << internal::kRuleCfaBits)) {
    return false;
  }
  if ((rule.fp_offset & 7) != 0 || -rule.fp_offset / 8 > 31) return false;
  const uint64_t bits = internal::PackRuleBits(rule.kind, rule.cfa_offset, rule.fp_offset);
  *entry = high | bits << internal::kRuleKeyBits;
  return true;
}

#endif  // __x86_64__

}  // namespace

void SetFindObject(FindObjectFn fn) { g_find_object.store(fn, std::memory_order_release); }

bool CfiUnwindAvailable() {
#if defined(__x86_64__)
  return g_find_object.load(std::memory_order_acquire) != nullptr;
#else
  return false;
#endif
}

UnwindRule ComputeUnwindRule(uintptr_t pc) {
  UnwindRule rule;
#if defined(__x86_64__)
  const FindObjectFn find = g_find_object.load(std::memory_order_acquire);
  if (find == nullptr) return rule;
  FoundObject object;
  memset(&object, 0, sizeof(object));
  if (find(reinterpret_cast<void*>(pc), &object) != 0) return rule;
  rule = RuleFromObject(object, pc);
#else
  (void)pc;
  rule.kind = UnwindRule::Kind::kUnsupported;
#endif
  return rule;
}

namespace internal {

constinit std::atomic<uint64_t> g_rule_cache[1 << kRuleCacheBits] = {};

UnwindRule FindReturnRuleSlow(uintptr_t return_address) {
  const UnwindRule rule = ComputeUnwindRule(return_address - 1);
#if defined(__x86_64__)
  uint64_t packed = 0;
  // Not kNoInfo: the finder may be set after a first walk, and a pc with no object stays slow
  // rather than being remembered wrongly.
  if (rule.kind != UnwindRule::Kind::kNoInfo && Pack(return_address, rule, &packed)) {
    g_rule_cache[RuleCacheIndex(return_address)].store(packed, std::memory_order_relaxed);
  }
#endif
  return rule;
}

}  // namespace internal

}  // namespace fragscope::agent
