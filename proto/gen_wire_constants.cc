// Writes fragscope/wire_constants.h: every field number and enum value of fragscope.proto as
// plain C++ constants, for code that speaks the wire format without libprotobuf (the agent's
// encoder, which runs inside arbitrary programs) and for the collector's hand-written decoder.
//
// It walks the compiled descriptor of the generated code it links, not the .proto text: the
// numbers are exactly those libprotobuf reads, and the build reruns it whenever the .proto
// changes (it links the library compiled from it).
//
// Output, in namespace fragscope::wire:
// - one struct per message (nested messages nested), with a `static constexpr uint32_t` per
//   field: `snake_case` becomes `kCamelCase` (AllocEvent::kInCapture = 14, Frame::kAlloc = 5);
// - one X-macro per enum, FRAGSCOPE_WIRE_<Message>_<Enum>(X), expanding to X(name, number) for
//   each value in declaration order, so each user picks the enum's storage type. The name drops
//   the enum's own prefix when every value has it (MEMORY_KIND_ of MemoryKind, OP_ of Op), then
//   is kCamelCase (MEMORY_KIND_IPC_IMPORT -> kIpcImport), or k_ and the rest as written when a
//   value of the enum is not all capitals (API_cuMemAlloc_v2 -> k_cuMemAlloc_v2).
// Fails (exit 1, nothing written) when two names would collide.
//
// Usage: fragscope_gen_wire_constants OUT.h
#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "fragscope.pb.h"

namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;

std::string Camel(const std::string& snake) {
  std::string out;
  bool upper = true;
  for (char c : snake) {
    if (c == '_') {
      upper = true;
      continue;
    }
    const unsigned char u = static_cast<unsigned char>(c);
    out += static_cast<char>(upper ? std::toupper(u) : std::tolower(u));
    upper = false;
  }
  return out;
}

std::string UpperSnake(const std::string& camel) {
  std::string out;
  for (size_t i = 0; i < camel.size(); ++i) {
    const unsigned char u = static_cast<unsigned char>(camel[i]);
    if (i > 0 && std::isupper(u) && !std::isupper(static_cast<unsigned char>(camel[i - 1]))) {
      out += '_';
    }
    out += static_cast<char>(std::toupper(u));
  }
  return out;
}

// "Frame", "MapEvent_Op": the descriptor's name path inside the package, joined by '_'.
std::string MacroPath(const std::string& full_name, const std::string& package) {
  std::string path = full_name.substr(package.size() + 1);
  for (char& c : path) {
    if (c == '.') c = '_';
  }
  return path;
}

bool Fail(const std::string& why) {
  std::fprintf(stderr, "fragscope_gen_wire_constants: %s\n", why.c_str());
  return false;
}

bool WriteEnum(const EnumDescriptor* e, const std::string& package, std::ostream& out) {
  const std::string prefix = UpperSnake(e->name()) + "_";
  bool strip = true;
  bool all_capitals = true;
  for (int i = 0; i < e->value_count(); ++i) {
    const std::string& name = e->value(i)->name();
    if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) strip = false;
    for (char c : name) {
      if (std::islower(static_cast<unsigned char>(c))) all_capitals = false;
    }
  }
  const std::string macro = "FRAGSCOPE_WIRE_" + MacroPath(e->full_name(), package);
  out << "// " << e->full_name() << "\n#define " << macro << "(X)";
  std::set<std::string> names;
  for (int i = 0; i < e->value_count(); ++i) {
    std::string rest = e->value(i)->name();
    if (strip) rest = rest.substr(prefix.size());
    const std::string name = all_capitals ? "k" + Camel(rest) : "k_" + rest;
    if (!names.insert(name).second) {
      return Fail(e->full_name() + ": two values are named " + name);
    }
    out << " \\\n  X(" << name << ", " << e->value(i)->number() << ")";
  }
  out << "\n\n";
  return true;
}

// The enums declared in `d` and in the messages nested in it.
bool WriteMessageEnums(const Descriptor* d, const std::string& package, std::ostream& out) {
  for (int i = 0; i < d->enum_type_count(); ++i) {
    if (!WriteEnum(d->enum_type(i), package, out)) return false;
  }
  for (int i = 0; i < d->nested_type_count(); ++i) {
    if (!WriteMessageEnums(d->nested_type(i), package, out)) return false;
  }
  return true;
}

const char* Label(const FieldDescriptor* f) {
  if (f->is_repeated()) return "repeated ";
  if (f->has_optional_keyword()) return "optional ";
  return "";
}

bool WriteMessage(const Descriptor* d, const std::string& package, const std::string& indent,
                  std::ostream& out) {
  out << indent << "// " << d->full_name() << "\n" << indent << "struct " << d->name() << " {\n";
  std::set<std::string> names;
  for (int i = 0; i < d->nested_type_count(); ++i) {
    if (!WriteMessage(d->nested_type(i), package, indent + "  ", out)) return false;
    names.insert(d->nested_type(i)->name());
  }
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const std::string name = "k" + Camel(f->name());
    if (!names.insert(name).second) {
      return Fail(d->full_name() + ": two fields are named " + name);
    }
    std::string type = f->type_name();
    if (f->message_type() != nullptr) type = f->message_type()->full_name();
    if (f->enum_type() != nullptr) type = f->enum_type()->full_name();
    out << indent << "  static constexpr uint32_t " << name << " = " << f->number() << ";  // "
        << Label(f) << type << " " << f->name() << "\n";
  }
  out << indent << "};\n";
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fragscope_gen_wire_constants OUT.h\n");
    return 2;
  }
  const google::protobuf::FileDescriptor* file = fragscope::v1::Frame::descriptor()->file();
  const std::string& package = file->package();
  std::ostringstream out;
  out << "// Generated at build time by proto/gen_wire_constants.cc from " << file->name()
      << ": do not edit.\n"
      << "// The field numbers and enum values of package " << package
      << " as its compiled descriptor has them,\n"
      << "// as plain constants and macros with no protobuf include (the agent uses them).\n"
      << "// FRAGSCOPE_WIRE_<Message>_<Enum>(X) expands to X(name, number) for each value;\n"
      << "// fragscope::wire::<Message> has one constant per field.\n"
      << "#ifndef FRAGSCOPE_WIRE_CONSTANTS_H_\n#define FRAGSCOPE_WIRE_CONSTANTS_H_\n\n"
      << "#include <cstdint>\n\n";
  // Enum X-macros first (all, nested ones too): the preprocessor has no namespaces.
  for (int i = 0; i < file->enum_type_count(); ++i) {
    if (!WriteEnum(file->enum_type(i), package, out)) return 1;
  }
  for (int i = 0; i < file->message_type_count(); ++i) {
    if (!WriteMessageEnums(file->message_type(i), package, out)) return 1;
  }
  out << "namespace fragscope::wire {\n\n";
  for (int i = 0; i < file->message_type_count(); ++i) {
    if (!WriteMessage(file->message_type(i), package, "", out)) return 1;
    out << "\n";
  }
  out << "}  // namespace fragscope::wire\n\n#endif  // FRAGSCOPE_WIRE_CONSTANTS_H_\n";

  // Through a temporary file: a build stopped half-way must not leave half a header behind.
  const std::string path = argv[1];
  const std::string temporary = path + ".tmp";
  {
    std::ofstream file_out(temporary, std::ios::trunc);
    file_out << out.str();
    if (!file_out.flush()) {
      std::fprintf(stderr, "fragscope_gen_wire_constants: cannot write %s\n", temporary.c_str());
      return 1;
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::fprintf(stderr, "fragscope_gen_wire_constants: cannot write %s\n", path.c_str());
    return 1;
  }
  return 0;
}
