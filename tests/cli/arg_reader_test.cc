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
  EXPECT_NE(unknown.error().find("unknown option --bogus"), std::string::npos) << unknown.error();

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

TEST(ArgReader, AnUnknownOptionSuggestsTheNearestAndPointsAtHelp) {
  std::string fmt, out;
  ArgReader r("report", {"--fromat", "json"});
  r.Option("format", "f", &fmt);
  r.Option("output", "o", &out);
  EXPECT_FALSE(r.Parse());
  EXPECT_EQ(r.error(),
            "fragscope report: unknown option --fromat; did you mean --format? (fragscope "
            "report --help)");
  ArgReader far("report", {"--bogus"});
  far.Option("format", "f", &fmt);
  EXPECT_FALSE(far.Parse());
  EXPECT_EQ(far.error(), "fragscope report: unknown option --bogus (fragscope report --help)");
}

TEST(ArgReader, TheCommandStartsAtTheFirstPositionalWhenOneFollows) {
  std::string out;
  bool quiet = false;
  ArgReader r("run", {"-o", "t.fst", "--quiet", "prog", "--quiet", "-o", "x"});
  r.Option("output", "o", &out);
  r.Flag("quiet", &quiet);
  r.CommandFollows();
  ASSERT_TRUE(r.Parse()) << r.error();
  EXPECT_EQ(out, "t.fst");
  EXPECT_TRUE(r.positionals().empty());
  // Options after CMD are CMD's.
  EXPECT_EQ(r.after_dashdash(), (std::vector<std::string>{"prog", "--quiet", "-o", "x"}));
  ArgReader dashdash("run", {"--", "-weird", "a"});
  dashdash.CommandFollows();
  ASSERT_TRUE(dashdash.Parse());
  EXPECT_EQ(dashdash.after_dashdash(), (std::vector<std::string>{"-weird", "a"}));
}

TEST(ArgReader, ParseBytesTakesDecimalsAndRefusesHexAndSpaces) {
  EXPECT_EQ(ArgReader::ParseBytes("1.5G"), uint64_t{3} << 29);
  EXPECT_EQ(ArgReader::ParseBytes("512MiB"), uint64_t{512} << 20);
  EXPECT_EQ(ArgReader::ParseBytes("0.5K"), 512u);
  EXPECT_EQ(ArgReader::ParseBytes("18446744073709551615"), ~uint64_t{0});
  for (const char* bad : {"0x1p3", "0x10", " 5", "5 ", "1e3", "inf", "nan", ".", "1.5.G", "+5",
                          "16777216T", "1.5Q"}) {
    EXPECT_FALSE(ArgReader::ParseBytes(bad)) << bad;
  }
}

TEST(ArgReader, ParseFractionTakesPercentagesAndRefusesHexAndSpaces) {
  EXPECT_DOUBLE_EQ(*ArgReader::ParseFraction("30%"), 0.30);
  EXPECT_DOUBLE_EQ(*ArgReader::ParseFraction("0.3"), 0.3);
  EXPECT_DOUBLE_EQ(*ArgReader::ParseFraction("100%"), 1.0);
  EXPECT_DOUBLE_EQ(*ArgReader::ParseFraction("1"), 1.0);
  EXPECT_DOUBLE_EQ(*ArgReader::ParseFraction("150%", 0.0, 100.0), 1.5);
  for (const char* bad : {"0x1p-3", " 0.3", "0.3 ", "30 %", "101%", "1.5", "-0.1", "3e-1", "nan",
                          "inf", "", "%", "30%%"}) {
    EXPECT_FALSE(ArgReader::ParseFraction(bad)) << bad;
  }
}

}  // namespace
}  // namespace fragscope::cli
