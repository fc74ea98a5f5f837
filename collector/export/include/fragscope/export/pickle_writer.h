// A small writer of Python pickles made of builtin values only (None, bool, int, float, str,
// list, dict, 2-tuples), for exporting PyTorch memory snapshots.
//
// Protocol 2, and only the opcodes every reader of PyTorch snapshots understands: PROTO,
// NONE, NEWTRUE/NEWFALSE, BININT1/BININT2/BININT/LONG1, BINFLOAT, BINUNICODE, EMPTY_LIST,
// EMPTY_DICT, TUPLE2, MARK, APPENDS, SETITEMS, STOP. No memo, no GLOBAL/REDUCE: a
// reader that refuses every global (PyTorch's MemoryViz.js, fragscope's PickleReader,
// `pickle.Unpickler` with find_class refusing) reads the whole file. Why protocol 2: PyTorch's
// JavaScript viewer does not read the protocol 5 opcodes, and protocol 3 only adds bytes objects,
// which a snapshot does not need.
//
// Usage: values are written in order; a container is opened, filled (dict: key, value, key,
// value ...) and closed.
//
//   PickleWriter w;
//   w.BeginDict(); w.String("segments"); w.BeginList(); ... w.EndList(); w.EndDict();
//   std::string bytes = w.Finish();
//
// Not thread-safe. Misuse (closing what is not open, an odd number of dict items, Finish with
// containers open or not exactly one top-level value) is a programming error: it aborts with a
// message rather than write a pickle no reader accepts.
#ifndef FRAGSCOPE_EXPORT_PICKLE_WRITER_H_
#define FRAGSCOPE_EXPORT_PICKLE_WRITER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fragscope::exporter {

class PickleWriter {
 public:
  static constexpr int kProtocol = 2;

  PickleWriter();

  void None();
  void Bool(bool v);
  void Int(int64_t v);
  void Uint(uint64_t v);  // values above INT64_MAX (high device addresses) stay exact
  void Float(double v);
  void String(std::string_view utf8);  // written as str (BINUNICODE); must be valid UTF-8

  void BeginList();
  void EndList();
  void BeginDict();
  void EndDict();
  // A 2-tuple of the next two values: BeginPair(); Int(a); Int(b); EndPair();
  void BeginPair();
  void EndPair();

  // Appends STOP and returns the pickle. The writer is empty afterwards.
  std::string Finish();

 private:
  enum class Open { kList, kDict, kPair };
  struct Frame {
    Open kind;
    uint64_t items = 0;  // values written inside
  };
  void Value();  // accounts for one value written at the current level
  void Op(char opcode) { out_.push_back(opcode); }
  void Le(uint64_t v, int bytes);
  [[noreturn]] void Fail(const char* what) const;

  std::string out_;
  std::vector<Frame> open_;
  uint64_t top_level_values_ = 0;
};

}  // namespace fragscope::exporter

#endif  // FRAGSCOPE_EXPORT_PICKLE_WRITER_H_
