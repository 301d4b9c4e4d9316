// run_command_group: the dispatcher and --help of the commands that have subcommands.
#include <cctype>
#include <cstdio>
#include <string>

#include "commands.h"

namespace mixprec::app {
namespace {

void print_group_help(const CommandGroup& g) {
  std::printf("Usage: mixprec %.*s <%.*s> [options]\n\n", static_cast<int>(g.name.size()),
              g.name.data(), static_cast<int>(g.metavar.size()), g.metavar.data());
  if (!g.intro.empty()) std::printf("%.*s\n\n", static_cast<int>(g.intro.size()), g.intro.data());
  std::string title(g.metavar);
  title[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(title[0])));
  std::printf("%ss:\n", title.c_str());
  for (const Command& c : g.commands) {
    std::printf("  %-10.*s", static_cast<int>(c.name.size()), c.name.data());
    // A summary's further lines start under its first one.
    std::string_view rest = c.summary;
    for (bool first = true; !rest.empty(); first = false) {
      const std::size_t eol = rest.find('\n');
      const std::string_view line = rest.substr(0, eol);
      std::printf("%s%.*s\n", first ? " " : "             ", static_cast<int>(line.size()),
                  line.data());
      rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
    }
  }
  std::printf("\n%.*s\n", static_cast<int>(g.footer.size()), g.footer.data());
}

}  // namespace

int run_command_group(const CommandGroup& g, Args args) {
  const std::string_view sub = args.empty() ? "--help" : args[0];
  for (const Command& c : g.commands)
    if (c.name == sub) return c.run(args.subspan(1));
  if (sub == "--help" || sub == "-h") {
    print_group_help(g);
    return 0;
  }
  std::string choices;
  for (const Command& c : g.commands) choices += (choices.empty() ? "" : "|") + std::string(c.name);
  throw UsageError{std::string(g.name) + ": unknown " + std::string(g.metavar) + " '" +
                   std::string(sub) + "' (" + choices + ")"};
}

}  // namespace mixprec::app
