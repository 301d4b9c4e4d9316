// Throughput of the procedural video dataset (data::MovingShapes) and of the image writers:
// frames per second for single frames, training batches (prev + current, bf16 channels_last),
// clips, PNG encoding and GIF encoding, at 1 thread and at every thread. The dataset's
// contract is ~1000 frames/s per core at 64x64; this prints how far above that it is.
// Not a test: nothing here passes or fails (DESIGN.md section 7).
#include <unistd.h>

#include <cstdio>
#include <string>

#include "bench_util.h"
#include "mixprec/core/parallel.h"
#include "mixprec/data/moving_shapes.h"
#include "mixprec/io/image.h"

namespace mixprec::bench {
namespace {

constexpr const char* kUsage =
    "Usage: bench_data [--quick] [--json]\n"
    "Frames per second of data::MovingShapes (frame, batch, clip) at 64x64 and 128x128 with up\n"
    "to 4 shapes, and of write_png / GifWriter at 64x64, at 1 thread and all threads.";

int run(int argc, char** argv) {
  const Options o = parse_options(argc, argv, kUsage);
  const double min_s = o.quick ? 0.2 : 1.0;
  const int all_threads = num_threads();
  std::vector<Row> rows;
  auto add = [&](const std::string& what, int64_t size, int threads, int64_t frames_per_call,
                 const Timing& t) {
    rows.push_back(
        Row()
            .text("op", what)
            .num("size", static_cast<double>(size), 0)
            .num("threads", threads, 0)
            .num("frames_per_s", static_cast<double>(frames_per_call) / t.median_s, 0)
            .num("us_per_frame", 1e6 * t.median_s / static_cast<double>(frames_per_call), 1));
  };

  for (int64_t size : {int64_t{64}, int64_t{128}}) {
    const data::MovingShapes ds({.height = size, .width = size, .min_shapes = 1, .max_shapes = 4},
                                1);
    int64_t t = 0;
    set_num_threads(1);
    add("frame", size, 1, 1,
        time_it(
            [&] {
              (void)ds.frame(t % 1000, t);
              ++t;
            },
            10, 200, min_s));
    std::vector<int> thread_counts = {1};
    if (all_threads > 1) thread_counts.push_back(all_threads);
    for (int threads : thread_counts) {
      set_num_threads(threads);
      Generator gen(3);
      add("batch 32 (2 frames each, bf16)", size, threads, 64,
          time_it([&] { (void)ds.batch(32, gen, DType::BF16); }, 2, 20, min_s));
      add("clip 64", size, threads, 64, time_it([&] { (void)ds.clip(5, 100, 64); }, 2, 20, min_s));
    }
    set_num_threads(all_threads);
  }

  // Writers, at 64x64: where the video command spends its time besides the model.
  const data::MovingShapes ds({}, 1);
  const Tensor clip = ds.clip(0, 0, 100);
  char dir_template[] = "/tmp/mixprec_bench_data_XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) return 1;
  const std::string dir = dir_template;
  int64_t i = 0;
  add("write_png (atomic, fsync)", 64, 1, 1,
      time_it([&] { io::write_png(dir + "/f.png", clip[i++ % 100]); }, 3, 50, min_s));
  add("GifWriter 100 frames", 64, 1, 100,
      time_it(
          [&] {
            io::GifWriter gif(dir + "/v.gif", 64, 64, 25);
            for (int64_t f = 0; f < 100; ++f) gif.add_frame(clip[f]);
            gif.close();
          },
          1, 5, min_s));
  std::remove((dir + "/f.png").c_str());
  std::remove((dir + "/v.gif").c_str());
  ::rmdir(dir.c_str());

  print_table(rows, o);
  if (o.json) print_json("bench_data", rows);
  return 0;
}

}  // namespace
}  // namespace mixprec::bench

int main(int argc, char** argv) { return mixprec::bench::run(argc, argv); }
