// `mixprec stream peaks --input FILE.h5 --output peaks.cxi --finder classic`: Bragg peaks of
// every frame into a CXI peak list CrystFEL reads, scored against the ground truth when the
// file has one.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli_args.h"
#include "commands.h"
#include "mixprec/core/parallel.h"
#include "mixprec/io/json.h"
#include "mixprec/stream/classic_finder.h"
#include "mixprec/stream/cxi_writer.h"
#include "mixprec/stream/hdf5_frames.h"
#include "mixprec/stream/peak_matching.h"
#include "progress.h"
#include "stream_common.h"

namespace mixprec::app {

int run_stream_peaks(Args args) {
  FrameFileOptions files;
  std::string finder_name = "classic";
  stream::ClassicFinderOptions classic;
  int64_t min_pixels = classic.min_pixels, max_pixels = classic.max_pixels;
  ArgParser p("stream peaks",
              "Find the Bragg peaks of every frame of an HDF5 file and write them as a CXI peak\n"
              "list (CrystFEL: peak_list = /entry_1/result_1, peak_list_type = cxi). Frames with\n"
              "ground truth (from 'mixprec stream produce') are scored: F1 within --match-radius.\n"
              "Prints one JSON summary line on stdout.");
  add_frame_file_options(p, files);
  p.option("--finder", &finder_name, "classic (peakfinder8-style; the network finder is next)");
  p.option("--min-snr", &classic.min_pixel_snr, "candidate pixels: above mean + this * sigma of their radius");
  p.option("--min-peak-snr", &classic.min_peak_snr,
           "kept peaks: integrated SNR against the local background", {.min = 0});
  p.option("--adc-threshold", &classic.adc_threshold, "candidate pixels must also exceed this value");
  p.option("--min-pixels", &min_pixels, "smallest peak, pixels", {.min = 1});
  p.option("--max-pixels", &max_pixels, "largest peak, pixels");
  p.epilog("Exit status: 0 written, 1 unreadable input or failed write, 2 usage mistake.");
  if (!p.parse(args)) return 0;
  const std::string &input = files.input, &output = files.output;
  const ScoringOptions& scoring = files.scoring;
  if (input.empty() || output.empty())
    throw UsageError{"stream peaks: --input FILE.h5 and --output FILE.cxi are required"};
  if (finder_name != "classic")
    throw UsageError{"stream peaks: --finder must be 'classic', got '" + finder_name +
                     "' (the network finder is not built yet)"};
  if (!(classic.min_pixel_snr > 0) || !std::isfinite(classic.adc_threshold))
    throw UsageError{"stream peaks: --min-snr must be > 0, --adc-threshold finite"};
  if (max_pixels < min_pixels)
    throw UsageError{"stream peaks: expected --min-pixels <= --max-pixels"};
  check_frame_file_options("stream peaks", files);
  classic.min_pixels = min_pixels;
  classic.max_pixels = max_pixels;

  // Everything about the input is checked before the output's temporary file exists.
  stream::Hdf5FrameReader reader(input);
  const DetectorSetup setup = detector_setup(reader);
  const std::optional<TruthLists>& truth = setup.truth;
  const stream::ClassicPeakFinder finder(setup.geometry, setup.bad_pixels, classic);
  const int64_t frames =
      files.max_frames > 0 ? std::min(files.max_frames, reader.frames()) : reader.frames();
  stream::CxiWriter writer(output, {reader.panels(), reader.rows(), reader.cols()});
  std::fprintf(stderr, "stream peaks: %s (%s, %lld frames of %lld x %lld x %lld %s), geometry %s%s\n",
               reader.file_path().c_str(), reader.dataset_path().c_str(),
               static_cast<long long>(reader.frames()), static_cast<long long>(reader.panels()),
               static_cast<long long>(reader.rows()), static_cast<long long>(reader.cols()),
               std::string(stream::sample_type_name(reader.sample_type())).c_str(),
               setup.geometry.name.c_str(), truth ? ", with ground truth" : "");

  using clock = std::chrono::steady_clock;
  std::vector<float> frame(static_cast<std::size_t>(reader.frame_elements()));  // (P, H, W)
  stream::MatchCounts score;
  int64_t peaks = 0;
  double reading = 0, finding = 0;
  const auto start = clock::now();
  ProgressBar bar("stream peaks", frames);
  for (int64_t i = 0; i < frames; ++i) {
    const auto t0 = clock::now();
    reader.read(i, frame.data(), DType::F32);
    const auto t1 = clock::now();
    const std::vector<stream::Peak> found = finder.find(frame.data());
    finding += std::chrono::duration<double>(clock::now() - t1).count();
    reading += std::chrono::duration<double>(t1 - t0).count();
    writer.append(found);
    peaks += static_cast<int64_t>(found.size());
    if (truth)
      score += stream::match_peaks(found, (*truth)[static_cast<std::size_t>(i)], scoring.match_radius,
                                   scoring.min_truth_snr);
    bar.update(i + 1, std::to_string(peaks) + " peaks" +
                          (truth ? " | F1 " + io::json_number(score.f1(), 4) : std::string()));
  }
  writer.close();
  const double seconds = std::chrono::duration<double>(clock::now() - start).count();
  bar.finish(std::to_string(peaks) + " peaks");

  using io::json_number;
  const double pixels = static_cast<double>(reader.frame_elements());
  std::printf(
      "{\"input\": %s, \"output\": %s, \"finder\": \"classic\", \"frames\": %lld, \"peaks\": %lld, "
      "\"truncated_frames\": %lld, %s, \"seconds\": %s, \"frames_per_second\": %s, "
      "\"finder_frames_per_second\": %s, \"finder_megapixels_per_second\": %s, "
      "\"read_ms_per_frame\": %s, \"threads\": %d}\n",
      io::json_quote(input).c_str(), io::json_quote(output).c_str(), static_cast<long long>(frames),
      static_cast<long long>(peaks), static_cast<long long>(writer.truncated_frames()),
      scoring_json(truth.has_value(), score, scoring).c_str(),
      json_number(seconds, 4).c_str(), json_number(static_cast<double>(frames) / seconds, 4).c_str(),
      json_number(static_cast<double>(frames) / finding, 4).c_str(),
      json_number(static_cast<double>(frames) * pixels / finding / 1e6, 4).c_str(),
      json_number(frames > 0 ? 1000 * reading / static_cast<double>(frames) : 0.0, 4).c_str(), num_threads());
  return 0;
}

}  // namespace mixprec::app
