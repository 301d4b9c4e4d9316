#pragma once
// The subcommands of the `mixprec` command line. Each takes the arguments after its name and
// returns the process exit code: 0 success, 1 failure of the work, 2 a usage mistake.
#include <span>
#include <string>
#include <string_view>

namespace mixprec::app {

using Args = std::span<const std::string_view>;

// A usage mistake: main prints "mixprec: <message>" and exits 2.
struct UsageError {
  std::string message;
};

struct Command {
  std::string_view name;
  std::string_view summary;  // may run over lines: each further line is indented under the first
  int (*run)(Args args);
};

// A command with subcommands (`mixprec video <train|generate|...>`): one table, one dispatcher.
// --help (or no subcommand) prints the usage, the intro and the table; an unknown name is a
// UsageError naming the choices.
struct CommandGroup {
  std::string_view name;     // "video"
  std::string_view metavar;  // "command" in "Usage: mixprec video <command> [options]"
  std::string_view intro;    // a paragraph under the usage line ("" for none)
  std::span<const Command> commands;
  std::string_view footer;  // the closing paragraph
};
int run_command_group(const CommandGroup& group, Args args);

int run_info(Args args);
int run_precision(Args args);  // plan
int run_inspect(Args args);
int run_convert(Args args);
int run_video(Args args);  // train | generate | drift | serve
int run_video_train(Args args);
int run_video_generate(Args args);
int run_video_drift(Args args);
int run_video_serve(Args args);
int run_bench(Args args);  // video | train | stream
int run_bench_video(Args args);
int run_bench_train(Args args);
int run_bench_generate(Args args);
int run_bench_stream(Args args);
int run_train(Args args);  // gpt
int run_train_gpt(Args args);
int run_stream(Args args);  // produce | peaks | run | train
int run_stream_produce(Args args);
int run_stream_peaks(Args args);
int run_stream_run(Args args);
int run_stream_train(Args args);
int run_stream_calibrate(Args args);

}  // namespace mixprec::app
