// What the HDF5 frame reader's crash probe costs per file (stream/hdf5_frames.h, Hdf5Probe):
// opening a synthetic frame file and reading what the pipeline reads at setup (mask, geometry,
// ground truth), with no probe, with the default probe (a forked child does that work, reads
// the first and last frame and walks the chunk index) and with the AllFrames probe (the child
// also reads every frame); beside it, one pass reading every frame, the work the probe adds
// to. The default probe once more while this process holds 1 GiB of touched memory: fork
// copies the page tables, so its cost grows with the parent's size.
// Not a test: nothing here passes or fails (DESIGN.md section 7).
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "mixprec/stream/hdf5_frames.h"

namespace mixprec::bench {
namespace {

constexpr const char* kUsage =
    "Usage: bench_hdf5_probe [--quick] [--json]\n"
    "Milliseconds per file to open a synthetic frame file (single 352x384 and epix10k2m) and\n"
    "read its mask, geometry and ground truth with Hdf5Probe Off, Metadata and AllFrames, and\n"
    "to read every frame once.";

void write_frames(const std::string& path, const std::string& detector, int64_t frames) {
  const stream::SyntheticDetector det(stream::detector_geometry(detector), {}, 11);
  stream::Hdf5FrameWriter writer(path, det.geometry(), det.bad_pixel_mask());
  stream::SyntheticFrame f;
  for (int64_t i = 0; i < frames; ++i) {
    det.generate(i, f);
    writer.append(f.adu, f.peaks);
  }
  writer.close();
}

void open_and_set_up(const std::string& path, stream::Hdf5Probe probe) {
  stream::Hdf5FrameReader reader(path, {.probe = probe});
  (void)reader.bad_pixel_mask();
  (void)reader.geometry();
  (void)reader.ground_truth();
}

int run(int argc, char** argv) {
  const Options o = parse_options(argc, argv, kUsage);
  const double min_s = o.quick ? 0.3 : 2.0;
  char dir_template[] = "/tmp/mixprec_bench_hdf5_probe_XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) return 1;
  const std::string dir = dir_template;
  std::vector<Row> rows;
  struct Case {
    std::string detector;
    int64_t frames;
  };
  for (const Case& c : {Case{"single", 100}, Case{"epix10k2m", 20}}) {
    const std::string path = dir + "/" + c.detector + ".h5";
    write_frames(path, c.detector, c.frames);
    const double mb = static_cast<double>(std::filesystem::file_size(path)) / 1e6;
    using P = stream::Hdf5Probe;
    std::vector<std::function<void()>> fns = {
        [&] { open_and_set_up(path, P::Off); },
        [&] { open_and_set_up(path, P::Metadata); },
        [&] { open_and_set_up(path, P::AllFrames); },
        [&] {
          stream::Hdf5FrameReader reader(path, {.probe = P::Off});
          for (int64_t i = 0; i < reader.frames(); ++i) (void)reader.read_raw(i);
        },
    };
    const std::vector<Timing> t = time_interleaved(fns, 1, 5, min_s);
    const char* what[] = {"open + setup, probe Off", "open + setup, probe Metadata (default)",
                          "open + setup, probe AllFrames", "read every frame once (no probe)"};
    for (std::size_t i = 0; i < t.size(); ++i)
      rows.push_back(Row()
                         .text("file", c.detector + " x " + std::to_string(c.frames))
                         .num("MB", mb, 1)
                         .text("op", what[i])
                         .num("ms", 1e3 * t[i].median_s, 2)
                         .num("ms_min", 1e3 * t[i].min_s, 2)
                         .num("ms_max", 1e3 * t[i].max_s, 2));
    if (c.detector == "single") {
      std::vector<char> ballast(std::size_t{1} << 30);
      for (std::size_t i = 0; i < ballast.size(); i += 4096) ballast[i] = 1;
      const std::vector<std::function<void()>> big = {fns[0], fns[1]};
      const std::vector<Timing> tb = time_interleaved(big, 1, 5, min_s);
      for (std::size_t i = 0; i < tb.size(); ++i)
        rows.push_back(Row()
                           .text("file", c.detector + " x " + std::to_string(c.frames))
                           .num("MB", mb, 1)
                           .text("op", std::string(what[i]) + ", parent holds 1 GiB")
                           .num("ms", 1e3 * tb[i].median_s, 2)
                           .num("ms_min", 1e3 * tb[i].min_s, 2)
                           .num("ms_max", 1e3 * tb[i].max_s, 2));
    }
    std::filesystem::remove(path);
  }
  std::filesystem::remove_all(dir);
  print_table(rows, o);
  if (o.json) print_json("bench_hdf5_probe", rows);
  return 0;
}

}  // namespace
}  // namespace mixprec::bench

int main(int argc, char** argv) { return mixprec::bench::run(argc, argv); }
