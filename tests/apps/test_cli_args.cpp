// The command line's option parser (apps/cli_args.h) and command groups (apps/commands.h) on
// their own: declared ranges, their messages and --help, and the group dispatcher.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_args.h"
#include "commands.h"

namespace mixprec::app {
namespace {

// The UsageError message of parsing `args` with a port in [0, 65535], a rate >= 0 and an
// lr without a range; "" when it parses.
std::string parse_error(std::vector<std::string_view> args) {
  int64_t port = 8080;
  double rate = 0, lr = 1e-3;
  ArgParser p("video serve", "A test command.");
  p.option("--port", &port, "port", {0, 65535});
  p.option("--rate", &rate, "rate", {.min = 0});
  p.option("--lr", &lr, "learning rate");
  try {
    p.parse(args);
  } catch (const UsageError& e) {
    return e.message;
  }
  return "";
}

TEST(ArgParserRange, BothEndsAreIncluded) {
  EXPECT_EQ(parse_error({"--port", "0"}), "");
  EXPECT_EQ(parse_error({"--port=65535"}), "");
  EXPECT_EQ(parse_error({"--rate", "0"}), "");
  EXPECT_EQ(parse_error({"--rate", "2.5"}), "");
}

TEST(ArgParserRange, OutsideIsAUsageErrorNamingTheRange) {
  EXPECT_EQ(parse_error({"--port", "70000"}),
            "video serve: --port must be in [0, 65535], got 70000 (see 'mixprec video serve "
            "--help')");
  EXPECT_NE(parse_error({"--port", "-1"}).find("--port must be in [0, 65535], got -1"),
            std::string::npos);
  EXPECT_NE(parse_error({"--rate", "-0.5"}).find("--rate must be >= 0, got -0.5"),
            std::string::npos);
}

TEST(ArgParserRange, NanAndInfinityFailADeclaredRangeOnly) {
  EXPECT_NE(parse_error({"--rate", "inf"}), "");
  EXPECT_NE(parse_error({"--rate", "nan"}), "");
  EXPECT_EQ(parse_error({"--lr", "nan"}), "");  // no range declared: read as before
}

TEST(ArgParserRange, NotANumberIsStillReportedAsSuch) {
  EXPECT_NE(parse_error({"--port", "abc"}).find("--port expects an integer, got 'abc'"),
            std::string::npos);
}

TEST(ArgParserRange, HelpShowsDefaultAndRange) {
  int64_t port = 8080;
  std::string name = "x";
  ArgParser p("c", "summary");
  p.option("--port", &port, "port", {0, 65535});
  p.option("--name", &name, "name");
  testing::internal::CaptureStdout();
  const std::vector<std::string_view> help{"--help"};
  EXPECT_FALSE(p.parse(help));
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("port (default 8080, in [0, 65535])"), std::string::npos) << out;
  EXPECT_NE(out.find("name (default x)"), std::string::npos) << out;
}

int run_one(Args args) { return 10 + static_cast<int>(args.size()); }
int run_two(Args) { return 20; }

constexpr Command kCommands[] = {{"one", "the first\nover two lines", run_one},
                                 {"two", "the second", run_two}};
const CommandGroup kGroup{"grp", "command", "Intro.", kCommands, "Footer."};

TEST(CommandGroup, DispatchesTheRestOfTheArguments) {
  const std::vector<std::string_view> args{"one", "--x", "1"};
  EXPECT_EQ(run_command_group(kGroup, args), 12);
}

TEST(CommandGroup, UnknownNameListsTheChoices) {
  const std::vector<std::string_view> args{"three"};
  try {
    run_command_group(kGroup, args);
    FAIL() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_EQ(e.message, "grp: unknown command 'three' (one|two)");
  }
}

TEST(CommandGroup, NoArgumentsPrintsTheTable) {
  testing::internal::CaptureStdout();
  EXPECT_EQ(run_command_group(kGroup, {}), 0);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("Usage: mixprec grp <command> [options]"), std::string::npos) << out;
  EXPECT_NE(out.find("  one        the first\n             over two lines\n"), std::string::npos)
      << out;
  EXPECT_NE(out.find("Footer."), std::string::npos) << out;
}

}  // namespace
}  // namespace mixprec::app
