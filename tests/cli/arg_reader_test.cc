#include "arg_reader.h"

#include "gtest/gtest.h"

namespace fragscope::cli {
namespace {

TEST(ArgReader, ParsesOptionsFlagsPositionalsAndDashDash) {
  std::string out, fmt;
  bool quiet = false;
  ArgReader r("run", {"-o", "t.fst", "--format=json", "--quiet", "pos", "--", "prog", "-o", "x"});
  r.Option("output", "o", &out);
  r.Option("format", "", &fmt);
  r.Flag("quiet", &quiet);
  ASSERT_TRUE(r.Parse()) << r.error();
  EXPECT_EQ(out, "t.fst");
  EXPECT_EQ(fmt, "json");
  EXPECT_TRUE(quiet);
  EXPECT_EQ(r.positionals(), std::vector<std::string>{"pos"});
  // Everything after `--` belongs to the program, options included.
  EXPECT_EQ(r.after_dashdash(), (std::vector<std::string>{"prog", "-o", "x"}));
}

TEST(ArgReader, ErrorsNameTheArgument) {
  std::string out;
  ArgReader unknown("report", {"--bogus"});
  unknown.Option("output", "o", &out);
  EXPECT_FALSE(unknown.Parse());
  EXPECT_NE(unknown.error().find("'--bogus'"), std::string::npos) << unknown.error();

  ArgReader missing("report", {"-o"});
  missing.Option("output", "o", &out);
  EXPECT_FALSE(missing.Parse());
  EXPECT_NE(missing.error().find("needs a value"), std::string::npos) << missing.error();

  bool flag = false;
  ArgReader flag_value("gate", {"--allow-opaque=yes"});
  flag_value.Flag("allow-opaque", &flag);
  EXPECT_FALSE(flag_value.Parse());
}

TEST(ArgReader, ParseBytesAcceptsBinarySuffixesOnly) {
  EXPECT_EQ(ArgReader::ParseBytes("123"), 123u);
  EXPECT_EQ(ArgReader::ParseBytes("64M"), uint64_t{64} << 20);
  EXPECT_EQ(ArgReader::ParseBytes("64MiB"), uint64_t{64} << 20);
  EXPECT_EQ(ArgReader::ParseBytes("2G"), uint64_t{2} << 30);
  EXPECT_EQ(ArgReader::ParseBytes("1k"), 1024u);
  EXPECT_FALSE(ArgReader::ParseBytes(""));
  EXPECT_FALSE(ArgReader::ParseBytes("-1"));
  EXPECT_FALSE(ArgReader::ParseBytes("12Q"));
  EXPECT_FALSE(ArgReader::ParseBytes("G"));
  EXPECT_FALSE(ArgReader::ParseBytes("99999999999999999999"));
  EXPECT_FALSE(ArgReader::ParseBytes("17179869184G"));  // overflows 64 bits
}

}  // namespace
}  // namespace fragscope::cli
