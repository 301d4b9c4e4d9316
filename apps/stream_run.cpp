// `mixprec stream run --input FILE.h5 --output peaks.cxi`: the streaming pipeline on a file:
// a reader thread, a bounded queue, a dynamic batcher and finder, the CXI writer (pipeline/
// peak_pipeline.h), with a live progress line and a JSON summary.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cli_args.h"
#include "commands.h"
#include "mixprec/core/parallel.h"
#include "mixprec/io/json.h"
#include "mixprec/pipeline/peak_pipeline.h"
#include "mixprec/stream/classic_finder.h"
#include "mixprec/stream/cxi_writer.h"
#include "mixprec/stream/hdf5_frames.h"
#include "mixprec/stream/peak_matching.h"
#include "progress.h"
#include "run_guard.h"

namespace mixprec::app {

int run_stream_run(Args args) {
  std::string input, output, finder_name = "classic", overload = "block";
  int64_t max_batch = 8, queue_frames = 32, repeat = 1, max_frames = 0;
  double max_delay_ms = 5, rate = 0, match_radius = 1.5, min_truth_snr = 8;
  stream::ClassicFinderOptions classic;
  ArgParser p("stream run",
              "Find the Bragg peaks of a stream of detector frames read from an HDF5 file, as a\n"
              "beamline pipeline does: a reader thread, a bounded queue, a dynamic batcher and\n"
              "finder, a writer. Peaks go to a CXI peak list (CrystFEL: peak_list =\n"
              "/entry_1/result_1, peak_list_type = cxi); one JSON summary line goes to stdout.");
  p.option("--input", &input, "FILE.h5, or FILE.h5:/dataset (default /entry_1/data_1/data)");
  p.option("--output", &output, "CXI file to write (appears complete, or not at all)");
  p.option("--finder", &finder_name, "classic (peakfinder8-style; the network finder is next)");
  p.option("--batch", &max_batch, "largest batch of frames handed to the finder");
  p.option("--max-delay-ms", &max_delay_ms, "longest wait for a batch to fill, milliseconds");
  p.option("--queue", &queue_frames, "frames each queue holds (bounds memory)");
  p.option("--overload", &overload,
           "block: a full queue makes the reader wait (backpressure); drop: the frame is "
           "dropped and counted");
  p.option("--rate", &rate, "frames per second the reader delivers, as a detector would (0: as fast as possible)");
  p.option("--repeat", &repeat, "read the file this many times (a long run from a short file)");
  p.option("--max-frames", &max_frames, "stop after this many frames (0: all)");
  p.option("--match-radius", &match_radius, "scoring: a found peak matches a true one within this (px)");
  p.option("--min-truth-snr", &min_truth_snr, "scoring: weaker true peaks are neither required nor false");
  p.epilog(
      "The CXI file has one row per processed frame, in order, and its input frame number in "
      "/entry_1/result_1/frameIndex; with --overload drop, dropped frames have no row (the "
      "summary counts them).\n"
      "Exit status: 0 written, 1 unreadable input or failed write, 2 usage mistake, 128 + N "
      "stopped by signal N (what was processed is written).");
  if (!p.parse(args)) return 0;
  if (input.empty() || output.empty())
    throw UsageError{"stream run: --input FILE.h5 and --output FILE.cxi are required"};
  if (finder_name != "classic")
    throw UsageError{"stream run: --finder must be 'classic', got '" + finder_name +
                     "' (the network finder is not built yet)"};
  if (max_batch < 1 || max_batch > 4096 || queue_frames < 1 || queue_frames > 65536 ||
      repeat < 1 || max_frames < 0)
    throw UsageError{"stream run: --batch in [1, 4096], --queue in [1, 65536], --repeat >= 1, "
                     "--max-frames >= 0"};
  if (!(max_delay_ms >= 0 && max_delay_ms <= 60000) || !(rate >= 0 && std::isfinite(rate)))
    throw UsageError{"stream run: --max-delay-ms in [0, 60000], --rate >= 0"};
  if (!(match_radius > 0) || !(min_truth_snr >= 0))
    throw UsageError{"stream run: --match-radius must be > 0, --min-truth-snr >= 0"};
  const pipeline::OverloadPolicy policy =
      parse_usage("stream run", [&] { return pipeline::parse_overload_policy(overload); });

  // Everything about the input is checked before the output's temporary file exists.
  stream::Hdf5FrameReader reader(input);
  const std::optional<stream::DetectorGeometry> file_geometry = reader.geometry();
  const stream::DetectorGeometry geometry =
      file_geometry ? *file_geometry
                    : stream::panel_centred_geometry(reader.panels(), reader.rows(), reader.cols());
  const std::optional<std::vector<std::vector<stream::TruePeak>>> truth = reader.ground_truth();
  const stream::ClassicPeakFinder finder(geometry, reader.bad_pixel_mask(), classic);
  const int64_t file_frames = reader.frames();
  int64_t total = file_frames * repeat;
  if (max_frames > 0) total = std::min(total, max_frames);
  stream::CxiWriter writer(output, {reader.panels(), reader.rows(), reader.cols()});
  std::fprintf(stderr,
               "stream run: %s (%lld frames of %lld x %lld x %lld %s) x %lld, finder %s, batch <= "
               "%lld, delay <= %g ms, queue %lld, overload %s%s\n",
               reader.file_path().c_str(), static_cast<long long>(file_frames),
               static_cast<long long>(reader.panels()), static_cast<long long>(reader.rows()),
               static_cast<long long>(reader.cols()),
               std::string(stream::sample_type_name(reader.sample_type())).c_str(),
               static_cast<long long>(repeat), finder_name.c_str(),
               static_cast<long long>(max_batch), max_delay_ms, static_cast<long long>(queue_frames),
               overload.c_str(), rate > 0 ? (", " + io::json_number(rate) + " frames/s in").c_str() : "");

  using clock = std::chrono::steady_clock;
  const Shape frame_shape = {reader.panels(), reader.rows(), reader.cols()};
  const auto start = clock::now();
  int64_t next = 0;
  // The reader thread: frame i of the stream is frame i % N of the file, converted once into
  // the finder's dtype (f32 for the classic finder), delivered at --rate if given.
  auto source = [&]() -> std::optional<pipeline::DetectorFrame> {
    if (next >= total || StopOnSignal::requested()) return std::nullopt;
    if (rate > 0) std::this_thread::sleep_until(
        start + std::chrono::duration_cast<clock::duration>(
                    std::chrono::duration<double>(static_cast<double>(next) / rate)));
    pipeline::DetectorFrame frame{.id = next, .data = Tensor::empty(frame_shape, DType::F32)};
    reader.read(next % file_frames, frame.data.data<float>(), DType::F32);
    ++next;
    return frame;
  };
  auto find = [&](const std::vector<pipeline::DetectorFrame>& batch) {
    std::vector<std::vector<stream::Peak>> peaks;
    for (const pipeline::DetectorFrame& f : batch) peaks.push_back(finder.find(f.data.data<float>()));
    return peaks;
  };
  stream::MatchCounts score;
  int64_t peaks_found = 0;
  auto sink = [&](const pipeline::DetectorFrame& frame, const std::vector<stream::Peak>& peaks) {
    writer.append(peaks, frame.id);
    peaks_found += static_cast<int64_t>(peaks.size());
    if (truth)
      score += stream::match_peaks(peaks, (*truth)[static_cast<std::size_t>(frame.id % file_frames)],
                                   match_radius, min_truth_snr);
  };

  const StopOnSignal stop;
  pipeline::PeakPipeline pipe(source, find, sink,
                              {.max_batch = max_batch,
                               .max_delay = std::chrono::microseconds(
                                   std::llround(max_delay_ms * 1000)),
                               .queue_frames = queue_frames,
                               .overload = policy});
  // The progress line, from its own thread: frames/s, queue depth and drops as they happen.
  std::atomic<bool> done{false};
  ProgressBar bar("stream run", total);
  std::thread progress([&] {
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      const pipeline::PipelineCounters c = pipe.counters();
      bar.update(c.processed + c.dropped, "queue " + std::to_string(c.queued) + " | dropped " +
                                             std::to_string(c.dropped));
    }
  });
  pipeline::PipelineSummary summary;
  try {
    summary = pipe.run();
  } catch (...) {
    done.store(true);
    progress.join();
    throw;
  }
  done.store(true);
  progress.join();
  writer.close();
  const pipeline::PipelineCounters& c = summary.counters;
  const std::string done_metrics =
      std::to_string(c.processed) + " frames | " + std::to_string(peaks_found) + " peaks";
  if (StopOnSignal::requested()) {
    bar.update(c.processed + c.dropped);
    bar.stop(done_metrics + " | stopped");  // at the frames it reached, not the total
  } else {
    bar.finish(done_metrics);
  }

  using io::json_number;
  const double pixels = static_cast<double>(reader.frame_elements());
  std::string scoring = "\"ground_truth\": false, \"f1\": null";
  if (truth)
    scoring = "\"ground_truth\": true, \"f1\": " + json_number(score.f1(), 5) +
              ", \"precision\": " + json_number(score.precision(), 5) +
              ", \"recall\": " + json_number(score.recall(), 5);
  const double fps = summary.seconds > 0 ? static_cast<double>(c.processed) / summary.seconds : 0;
  std::printf(
      "{\"input\": %s, \"output\": %s, \"finder\": \"%s\", \"received\": %lld, \"processed\": "
      "%lld, \"dropped\": %lld, \"in_flight\": %lld, \"batches\": %lld, \"mean_batch\": %s, "
      "\"max_batch\": %lld, \"max_delay_ms\": %s, \"queue\": %lld, \"overload\": \"%s\", "
      "\"peaks\": %lld, \"truncated_frames\": %lld, %s, \"seconds\": %s, \"frames_per_second\": "
      "%s, \"megapixels_per_second\": %s, \"latency_ms\": {\"p50\": %s, \"p99\": %s, \"max\": %s}, "
      "\"threads\": %d, \"stopped\": %s}\n",
      io::json_quote(input).c_str(), io::json_quote(output).c_str(), finder_name.c_str(),
      static_cast<long long>(c.received), static_cast<long long>(c.processed),
      static_cast<long long>(c.dropped), static_cast<long long>(c.in_flight()),
      static_cast<long long>(c.batches), json_number(summary.mean_batch, 4).c_str(),
      static_cast<long long>(max_batch), json_number(max_delay_ms).c_str(),
      static_cast<long long>(queue_frames), overload.c_str(), static_cast<long long>(peaks_found),
      static_cast<long long>(writer.truncated_frames()), scoring.c_str(),
      json_number(summary.seconds, 4).c_str(), json_number(fps, 4).c_str(),
      json_number(fps * pixels / 1e6, 4).c_str(),
      json_number(summary.latency_ms.percentile(50), 4).c_str(),
      json_number(summary.latency_ms.percentile(99), 4).c_str(),
      json_number(summary.latency_ms.max(), 4).c_str(), num_threads(),
      StopOnSignal::requested() ? "true" : "false");
  return StopOnSignal::requested() ? StopOnSignal::exit_status() : 0;
}

}  // namespace mixprec::app
