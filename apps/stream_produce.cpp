// `mixprec stream produce --synthetic --output FILE.h5`: synthetic detector frames with their
// ground truth, for the peak finders and (next) the network.
#include <chrono>
#include <cstdio>
#include <string>

#include "cli_args.h"
#include "commands.h"
#include "mixprec/core/parallel.h"
#include "mixprec/stream/hdf5_frames.h"
#include "mixprec/stream/synthetic_frames.h"
#include "progress.h"

namespace mixprec::app {

int run_stream_produce(Args args) {
  std::string output, detector = "single";
  int64_t frames = 100, seed = 0, deflate = 0;
  bool synthetic = false;
  ArgParser p("stream produce",
              "Write detector frames into an HDF5 file (/entry_1/data_1/data, uint16), with the\n"
              "bad-pixel mask, the panel geometry and the true Bragg peaks of every frame\n"
              "(/entry_1/ground_truth). The same seed gives the same file on any machine.");
  p.flag("--synthetic", &synthetic, "generate the frames (the only source for now)");
  p.option("--output", &output, "HDF5 file to write (appears complete, or not at all)");
  p.option("--frames", &frames, "frames to write");
  p.option("--detector", &detector, "single | quad | epix10k2m | jungfrau4m");
  p.option("--seed", &seed, "generator seed");
  p.option("--deflate", &deflate, "gzip level of the frames (0: uncompressed)");
  p.epilog(
      "Exit status: 0 written, 1 the file could not be written, 2 usage mistake.\n"
      "Reading frames from a file or a socket (--input, --connect) comes with the pipeline.");
  if (!p.parse(args)) return 0;
  if (!synthetic)
    throw UsageError{"stream produce: --synthetic is required (the only frame source so far)"};
  if (output.empty()) throw UsageError{"stream produce: --output FILE.h5 is required"};
  if (frames < 1 || frames > 10'000'000)
    throw UsageError{"stream produce: --frames must be in [1, 10000000]"};
  if (seed < 0) throw UsageError{"stream produce: --seed must be >= 0"};
  if (deflate < 0 || deflate > 9) throw UsageError{"stream produce: --deflate must be in [0, 9]"};
  const stream::DetectorGeometry geometry =
      parse_usage("stream produce", [&] { return stream::detector_geometry(detector); });

  const stream::SyntheticDetector det(geometry, {}, static_cast<uint64_t>(seed));
  stream::Hdf5FrameWriter writer(output, geometry, det.bad_pixel_mask(),
                                 {.deflate = static_cast<int>(deflate)});
  writer.set_attribute("generator", "mixprec stream produce --synthetic");
  writer.set_attribute("detector", geometry.name);
  writer.set_attribute("seed", std::to_string(seed));

  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  double generating = 0;
  int64_t peaks = 0;
  stream::SyntheticFrame frame;
  ProgressBar bar("stream produce", frames);
  for (int64_t i = 0; i < frames; ++i) {
    const auto t0 = clock::now();
    det.generate(i, frame);
    generating += std::chrono::duration<double>(clock::now() - t0).count();
    writer.append(frame.adu, frame.peaks);
    peaks += static_cast<int64_t>(frame.peaks.size());
    bar.update(i + 1, std::to_string(peaks) + " peaks");
  }
  writer.close();
  const double seconds = std::chrono::duration<double>(clock::now() - start).count();
  bar.finish(std::to_string(peaks) + " peaks");
  std::printf(
      "stream produce: wrote %lld frames of %s (%lld x %lld x %lld u16) with %lld true peaks to %s "
      "in %.2f s: %.1f frames/s written, %.1f frames/s generated (%d threads)\n",
      static_cast<long long>(frames), geometry.name.c_str(), static_cast<long long>(geometry.panels),
      static_cast<long long>(geometry.rows), static_cast<long long>(geometry.cols),
      static_cast<long long>(peaks), output.c_str(), seconds, static_cast<double>(frames) / seconds,
      static_cast<double>(frames) / generating, num_threads());
  return 0;
}

}  // namespace mixprec::app
