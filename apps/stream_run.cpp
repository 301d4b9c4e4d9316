// `mixprec stream run (--input FILE.h5 | --zmq ENDPOINT) --output peaks.cxi`: the streaming
// pipeline: a reader thread (an HDF5 file, or frames pulled from a ZeroMQ socket), a bounded
// queue, a dynamic batcher and finder, the CXI writer (pipeline/peak_pipeline.h), with a live
// progress line and a JSON summary.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>

#include "cli_args.h"
#include "commands.h"
#include "mixprec/core/allocator.h"
#include "mixprec/core/parallel.h"
#include "mixprec/models/peaknet_train.h"
#include "mixprec/io/json.h"
#include "mixprec/pipeline/peak_pipeline.h"
#include "mixprec/pipeline/zmq_frames.h"
#include "mixprec/stream/classic_finder.h"
#include "mixprec/stream/cxi_writer.h"
#include "mixprec/stream/hdf5_frames.h"
#include "mixprec/stream/peak_matching.h"
#include "progress.h"
#include "run_guard.h"
#include "stream_common.h"

namespace mixprec::app {
namespace {

using clock = std::chrono::steady_clock;

// What the ZeroMQ reader saw besides frames; written by the reader thread, read by the progress
// line and the summary.
struct ZmqTally {
  std::atomic<int64_t> malformed{0}, wrong_shape{0}, ends{0}, announced{0};
  std::atomic<bool> idle_timeout{false};
  // When the first frame arrived: a worker starts before its producer, so its rate counts from
  // there (the run's own seconds include the wait).
  std::atomic<clock::rep> first_frame{0};
  std::mutex mutex;
  pipeline::LatencyHistogram transport_ms;  // send stamp -> received, under `mutex`
};

// The first few bad messages are printed as they come (then only counted), so a flood of
// garbage cannot drown the log while the first reasons stay visible.
constexpr int64_t kReportedBadMessages = 5;

void report_bad_message(int64_t count, const std::string& reason) {
  if (count <= kReportedBadMessages)
    std::fprintf(stderr, "stream run: discarded message %lld: %s%s\n", static_cast<long long>(count),
                 reason.c_str(), count == kReportedBadMessages ? " (further ones only counted)" : "");
}

}  // namespace

int run_stream_run(Args args) {
  FrameFileOptions files;
  std::string zmq_endpoint, geometry_file, detector_name, endpoint_file;
  std::string finder_name = "classic", overload = "block", model_path, precision_name = "bf16";
  int64_t max_batch = 8, queue_frames = 32, repeat = 1, hwm = 8, producers = 1;
  double max_delay_ms = 5, rate = 0, idle_timeout = 0;
  bool zmq_bind = false;
  stream::ClassicFinderOptions classic;
  stream::MaskPeakOptions net_peaks;  // min_pixels: the model's peak rule
  double threshold = 0;    // 0: the model file's
  int64_t min_pixels = 0;  // 0: the model file's
  double small_peak_snr = -1;  // -1: the model file's
  ArgParser p("stream run",
              "Find the Bragg peaks of a stream of detector frames, read from an HDF5 file or\n"
              "pulled from a ZeroMQ socket, as a beamline pipeline does: a reader thread, a bounded\n"
              "queue, a dynamic batcher and finder, a writer. Peaks go to a CXI peak list\n"
              "(CrystFEL: peak_list = /entry_1/result_1, peak_list_type = cxi); one JSON summary\n"
              "line goes to stdout.");
  add_frame_file_options(p, files);
  p.option("--zmq", &zmq_endpoint,
           "pull frames from this ZeroMQ endpoint instead (tcp://HOST:PORT, ipc://PATH; "
           "wire format in docs/STREAM.md)");
  p.flag("--zmq-bind", &zmq_bind, "bind the --zmq endpoint (default: connect to a producer that binds)");
  p.option("--endpoint-file", &endpoint_file,
           "with --zmq-bind: write the bound endpoint here (tcp://127.0.0.1:* picks a free port)");
  p.option("--geometry", &geometry_file,
           "with --zmq: a frame file (FILE.h5) giving the detector's geometry, bad-pixel mask and, "
           "for synthetic frames, the ground truth by frame index");
  p.option("--detector", &detector_name,
           "with --zmq and no --geometry: single | quad | epix10k2m | jungfrau4m (no mask, no scoring)");
  p.option("--hwm", &hwm, "with --zmq: frames ZeroMQ queues on this side (its high-water mark)",
           {1, 100000});
  p.option("--producers", &producers, "with --zmq: end-of-stream messages that end the run",
           {.min = 1});
  p.option("--idle-timeout", &idle_timeout,
           "with --zmq: end the run after this many seconds without a message (0: wait forever; "
           "a producer that died never sends its end)",
           {.min = 0});
  p.option("--finder", &finder_name, "classic (peakfinder8-style) | net (PeakNet, needs --model)");
  p.option("--model", &model_path, "with --finder net: a PeakNet file (mixprec stream train's model.safetensors)");
  p.option("--precision", &precision_name,
           "with --finder net: bf16 (frames and weights in bf16 from the source) | fp32 | fp16 | "
           "autocast-bf16 (f32 frames and weights, products in bf16)");
  p.option("--min-pixels", &min_pixels,
           "with --finder net: smallest peak kept, pixels (0: the model file's peak rule)",
           {.min = 0});
  p.option("--small-peak-snr", &small_peak_snr,
           "with --finder net: a peak smaller than the minimum is kept at this SNR (0: never; "
           "-1: the model file's peak rule)",
           {.min = -1});
  p.option("--threshold", &threshold,
           "with --finder net: a pixel is a peak above this peak probability (0: the model "
           "file's peak rule, calibrated by stream train; 0.5 is the argmax)",
           {.min = 0, .max = 0.999});
  p.option("--batch", &max_batch, "largest batch of frames handed to the finder", {1, 4096});
  p.option("--max-delay-ms", &max_delay_ms, "longest wait for a batch to fill, milliseconds",
           {0, 60000});
  p.option("--queue", &queue_frames, "frames each queue holds (bounds memory)", {1, 65536});
  p.option("--overload", &overload,
           "block: a full queue makes the reader wait (backpressure, up to the producer); drop: "
           "the frame is dropped and counted");
  p.option("--rate", &rate,
           "with --input: frames per second the reader delivers, as a detector would (0: as fast "
           "as possible)",
           {.min = 0});
  p.option("--repeat", &repeat,
           "with --input: read the file this many times (a long run from a short file)",
           {.min = 1});
  p.epilog(
      "The CXI file has one row per processed frame, in order, and its input frame number (with "
      "--zmq, the index the producer sent) in /entry_1/result_1/frameIndex; with --overload drop, "
      "dropped frames have no row (the summary counts them). Malformed messages are discarded, "
      "counted and the first few reported; they never stop the run.\n"
      "Exit status: 0 written, 1 unreadable input or failed write, 2 usage mistake, 128 + N "
      "stopped by signal N (what was processed is written).");
  if (!p.parse(args)) return 0;
  const std::string &input = files.input, &output = files.output;
  const int64_t max_frames = files.max_frames;
  const ScoringOptions& scoring = files.scoring;
  const bool from_zmq = !zmq_endpoint.empty();
  if (input.empty() == !from_zmq || output.empty())
    throw UsageError{"stream run: one of --input FILE.h5 or --zmq ENDPOINT, and --output FILE.cxi, are required"};
  if (from_zmq && geometry_file.empty() == detector_name.empty())
    throw UsageError{"stream run: --zmq needs one of --geometry FILE.h5 or --detector NAME (the frames' layout)"};
  if (!from_zmq && (zmq_bind || !geometry_file.empty() || !detector_name.empty() || idle_timeout != 0 ||
                    !endpoint_file.empty()))
    throw UsageError{"stream run: --zmq-bind, --endpoint-file, --geometry, --detector and --idle-timeout go with --zmq"};
  if (from_zmq && (repeat != 1 || rate != 0))
    throw UsageError{"stream run: --repeat and --rate go with --input (a socket's pace is its producer's)"};
  if (!endpoint_file.empty() && !zmq_bind)
    throw UsageError{"stream run: --endpoint-file goes with --zmq-bind"};
  if (finder_name != "classic" && finder_name != "net")
    throw UsageError{"stream run: --finder must be 'classic' or 'net', got '" + finder_name + "'"};
  const bool use_net = finder_name == "net";
  if (use_net == model_path.empty())
    throw UsageError{"stream run: --finder net needs --model FILE, and --model goes with --finder net"};
  const models::NetPrecision net_precision =
      parse_usage("stream run", [&] { return models::parse_net_precision(precision_name); });
  check_frame_file_options("stream run", files);
  const pipeline::OverloadPolicy policy =
      parse_usage("stream run", [&] { return pipeline::parse_overload_policy(overload); });
  std::optional<stream::DetectorGeometry> named_detector;
  if (!detector_name.empty())
    named_detector = parse_usage("stream run", [&] { return stream::detector_geometry(detector_name); });

  // Everything about the input is checked (the file read, the socket bound or connected)
  // before the output's temporary file exists.
  std::optional<stream::Hdf5FrameReader> reader;
  DetectorSetup setup;
  if (!input.empty() || !geometry_file.empty()) {
    reader.emplace(from_zmq ? geometry_file : input);
    setup = detector_setup(*reader);
  } else {
    setup.geometry = *named_detector;
  }
  const stream::DetectorGeometry& geometry = setup.geometry;
  const std::optional<TruthLists>& truth = setup.truth;
  const stream::ClassicPeakFinder finder(geometry, setup.bad_pixels, classic);
  // The network (loaded and checked before the output exists), in the precision asked for:
  // frames are converted once, from their wire type, into its input dtype.
  std::unique_ptr<models::PeakNet> net;
  std::optional<models::PeakNetFinder> net_finder;
  if (use_net) {
    net = models::load_peaknet(model_path);
    const models::PeakNetConfig& c = net->config();
    net->set_peak_rule(threshold > 0 ? threshold : c.threshold,
                       min_pixels > 0 ? min_pixels : c.min_pixels,
                       small_peak_snr >= 0 ? small_peak_snr : c.small_peak_snr);
    net_finder.emplace(*net, net_precision, geometry, setup.bad_pixels, net_peaks);
  }
  const DType frame_dtype = use_net ? net_finder->input_dtype() : DType::F32;
  const Shape frame_shape = {geometry.panels, geometry.rows, geometry.cols};
  const int64_t frame_elements = geometry.panels * geometry.rows * geometry.cols;

  std::unique_ptr<pipeline::ZmqFrameReceiver> receiver;
  int64_t total = 0;  // frames to read; 0 = until the stream ends
  if (from_zmq) {
    receiver = std::make_unique<pipeline::ZmqFrameReceiver>(
        zmq_endpoint, pipeline::ZmqOptions{.bind = zmq_bind, .high_water_mark = static_cast<int>(hwm)});
    if (!endpoint_file.empty()) write_endpoint_file(endpoint_file, receiver->endpoint());
    total = max_frames;
    std::fprintf(stderr,
                 "stream run: pulling frames from %s (%s, %s: %lld x %lld x %lld), hwm %lld, finder "
                 "%s, batch <= %lld, delay <= %g ms, queue %lld, overload %s\n",
                 receiver->endpoint().c_str(), zmq_bind ? "bound" : "connected",
                 geometry.name.c_str(), static_cast<long long>(geometry.panels),
                 static_cast<long long>(geometry.rows), static_cast<long long>(geometry.cols),
                 static_cast<long long>(hwm), finder_name.c_str(), static_cast<long long>(max_batch),
                 max_delay_ms, static_cast<long long>(queue_frames), overload.c_str());
  } else {
    total = reader->frames() * repeat;
    if (max_frames > 0) total = std::min(total, max_frames);
    std::fprintf(stderr,
                 "stream run: %s (%lld frames of %lld x %lld x %lld %s) x %lld, finder %s, batch <= "
                 "%lld, delay <= %g ms, queue %lld, overload %s%s\n",
                 reader->file_path().c_str(), static_cast<long long>(reader->frames()),
                 static_cast<long long>(reader->panels()), static_cast<long long>(reader->rows()),
                 static_cast<long long>(reader->cols()),
                 std::string(stream::sample_type_name(reader->sample_type())).c_str(),
                 static_cast<long long>(repeat), finder_name.c_str(),
                 static_cast<long long>(max_batch), max_delay_ms, static_cast<long long>(queue_frames),
                 overload.c_str(), rate > 0 ? (", " + io::json_number(rate) + " frames/s in").c_str() : "");
  }
  stream::CxiWriter writer(output, {geometry.panels, geometry.rows, geometry.cols});

  const auto start = clock::now();
  int64_t next = 0;
  // The reader thread, from a file: frame i of the stream is frame i % N of the file, converted
  // once into the finder's dtype (f32 for the classic finder), delivered at --rate if given.
  auto file_source = [&]() -> std::optional<pipeline::DetectorFrame> {
    if (next >= total || StopOnSignal::requested()) return std::nullopt;
    if (rate > 0) std::this_thread::sleep_until(
        start + std::chrono::duration_cast<clock::duration>(
                    std::chrono::duration<double>(static_cast<double>(next) / rate)));
    pipeline::DetectorFrame frame{.id = next, .data = Tensor::empty(frame_shape, frame_dtype)};
    reader->read(next % reader->frames(), frame.data.data_ptr(), frame_dtype);
    ++next;
    return frame;
  };
  // From a socket: each frame converted once from its wire type, straight out of the message
  // buffer into the finder's dtype. Bad messages and frames of another shape are counted and
  // skipped; the stream ends at --producers end messages, --max-frames, the idle timeout or a
  // signal.
  ZmqTally tally;
  auto last_message = clock::now();
  auto zmq_source = [&]() -> std::optional<pipeline::DetectorFrame> {
    using Event = pipeline::ZmqFrameReceiver::Event;
    while (!StopOnSignal::requested() && (total == 0 || next < total)) {
      const Event event = receiver->receive(std::chrono::milliseconds(100));
      const auto now = clock::now();
      if (event == Event::Timeout) {
        if (idle_timeout > 0 && std::chrono::duration<double>(now - last_message).count() > idle_timeout) {
          tally.idle_timeout.store(true);
          std::fprintf(stderr, "stream run: no message for %g s, ending the run\n", idle_timeout);
          return std::nullopt;
        }
        continue;
      }
      last_message = now;
      if (event == Event::Malformed) {
        report_bad_message(tally.malformed.fetch_add(1) + 1 + tally.wrong_shape.load(), receiver->error());
        continue;
      }
      const pipeline::FrameHeader& h = receiver->header();
      if (event == Event::End) {
        tally.announced.fetch_add(h.index);
        if (tally.ends.fetch_add(1) + 1 >= producers) return std::nullopt;
        continue;
      }
      if (h.panels != geometry.panels || h.rows != geometry.rows || h.cols != geometry.cols) {
        report_bad_message(tally.malformed.load() + tally.wrong_shape.fetch_add(1) + 1,
                           "frame " + std::to_string(h.index) + " has shape [" + std::to_string(h.panels) +
                               ", " + std::to_string(h.rows) + ", " + std::to_string(h.cols) +
                               "], the detector " + geometry.name + " is [" + std::to_string(geometry.panels) +
                               ", " + std::to_string(geometry.rows) + ", " + std::to_string(geometry.cols) + "]");
        continue;
      }
      if (h.sent_ns > 0) {
        std::lock_guard lock(tally.mutex);
        tally.transport_ms.add(static_cast<double>(pipeline::wall_clock_ns() - h.sent_ns) / 1e6);
      }
      if (tally.first_frame.load() == 0) tally.first_frame.store(now.time_since_epoch().count());
      pipeline::DetectorFrame frame{.id = h.index, .data = Tensor::empty(frame_shape, frame_dtype)};
      stream::convert_samples(receiver->data().data(), h.sample_type, frame.data.data_ptr(),
                              frame_dtype, static_cast<std::size_t>(frame_elements));
      ++next;
      return frame;
    }
    return std::nullopt;
  };
  auto find = [&](const std::vector<pipeline::DetectorFrame>& batch) {
    if (use_net) return net_finder->find(pipeline::stack_frames(batch));
    std::vector<std::vector<stream::Peak>> peaks;
    for (const pipeline::DetectorFrame& f : batch) peaks.push_back(finder.find(f.data.data<float>()));
    return peaks;
  };
  stream::MatchCounts score;
  int64_t peaks_found = 0, unscored = 0;
  auto sink = [&](const pipeline::DetectorFrame& frame, const std::vector<stream::Peak>& peaks) {
    writer.append(peaks, frame.id);
    peaks_found += static_cast<int64_t>(peaks.size());
    if (!truth) return;
    // A file's frames repeat (--repeat): frame id mod N. A socket's frame index is the truth's
    // index itself, and a frame beyond the truth is counted as unscored rather than matched
    // against another frame's peaks.
    const int64_t n = static_cast<int64_t>(truth->size());
    const int64_t t = from_zmq ? frame.id : frame.id % n;
    if (t >= n) {
      ++unscored;
      return;
    }
    score += stream::match_peaks(peaks, (*truth)[static_cast<std::size_t>(t)], scoring.match_radius,
                                 scoring.min_truth_snr);
  };

  const StopOnSignal stop;
  pipeline::PeakPipeline pipe(from_zmq ? pipeline::PeakPipeline::Source(zmq_source)
                                       : pipeline::PeakPipeline::Source(file_source),
                              find, sink,
                              {.max_batch = max_batch,
                               .max_delay = std::chrono::microseconds(
                                   std::llround(max_delay_ms * 1000)),
                               .queue_frames = queue_frames,
                               .overload = policy});
  // The progress line, from its own thread: frames/s, queue depth, drops and bad messages.
  std::atomic<bool> done{false};
  ProgressBar bar("stream run", total);
  std::thread progress([&] {
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      const pipeline::PipelineCounters c = pipe.counters();
      std::string metrics = "queue " + std::to_string(c.queued) + " | dropped " + std::to_string(c.dropped);
      if (from_zmq)
        metrics += " | bad messages " + std::to_string(tally.malformed.load() + tally.wrong_shape.load());
      bar.update(c.processed + c.dropped, metrics);
    }
  });
  pipeline::PipelineSummary summary;
  clock::time_point end;
  try {
    summary = pipe.run();
    end = clock::now();
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
  if (StopOnSignal::requested() || total == 0) {
    bar.update(c.processed + c.dropped);
    bar.stop(done_metrics + (StopOnSignal::requested() ? " | stopped" : ""));  // at the frames it reached
  } else {
    bar.finish(done_metrics);
  }

  using io::json_number;
  // Memory: the engine's tensors at their peak (weights, frames in the queues, activations; the
  // caching allocator's count) and the process's peak resident set (everything, libraries too).
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::string memory =
      "\"net_precision\": " + std::string(use_net ? "\"" + precision_name + "\"" : "null") +
      ", \"frame_dtype\": \"" + std::string(dtype_name(frame_dtype)) +
      "\", \"model\": " + (use_net ? io::json_quote(model_path) : std::string("null")) +
      ", \"threshold\": " + (use_net ? json_number(net->config().threshold) : std::string("null")) +
      ", \"min_pixels\": " +
      (use_net ? std::to_string(net->config().min_pixels) : std::string("null")) +
      ", \"small_peak_snr\": " +
      (use_net ? json_number(net->config().small_peak_snr) : std::string("null")) +
      ", \"peak_tensor_mib\": " +
      json_number(
          static_cast<double>(CachingAllocator::global().stats().peak_allocated_bytes) / 1048576.0,
          5) +
      ", \"peak_rss_mib\": " + json_number(static_cast<double>(usage.ru_maxrss) / 1024.0, 5);
  std::string source = "\"source\": \"hdf5\"";
  if (from_zmq) {
    std::lock_guard lock(tally.mutex);
    source = "\"source\": \"zmq\", \"malformed_messages\": " + std::to_string(tally.malformed.load()) +
             ", \"wrong_shape_frames\": " + std::to_string(tally.wrong_shape.load()) +
             ", \"end_messages\": " + std::to_string(tally.ends.load()) +
             ", \"frames_announced\": " + std::to_string(tally.announced.load()) +
             ", \"idle_timeout\": " + (tally.idle_timeout.load() ? "true" : "false") +
             ", \"unscored_frames\": " + std::to_string(unscored) +
             ", \"transport_ms\": {\"p50\": " + json_number(tally.transport_ms.percentile(50), 4) +
             ", \"p99\": " + json_number(tally.transport_ms.percentile(99), 4) + "}";
    const clock::rep first = tally.first_frame.load();
    const double streaming =
        first == 0 ? 0 : std::chrono::duration<double>(end.time_since_epoch() - clock::duration(first)).count();
    source += ", \"streaming_seconds\": " + json_number(streaming, 4) +
              ", \"streaming_frames_per_second\": " +
              json_number(streaming > 0 ? static_cast<double>(c.processed) / streaming : 0.0, 4);
  }
  const double fps = summary.seconds > 0 ? static_cast<double>(c.processed) / summary.seconds : 0;
  std::printf(
      "{\"input\": %s, \"output\": %s, \"finder\": \"%s\", \"received\": %lld, \"processed\": "
      "%lld, \"dropped\": %lld, \"in_flight\": %lld, \"batches\": %lld, \"mean_batch\": %s, "
      "\"max_batch\": %lld, \"max_delay_ms\": %s, \"queue\": %lld, \"overload\": \"%s\", %s, "
      "\"peaks\": %lld, \"truncated_frames\": %lld, %s, \"seconds\": %s, \"frames_per_second\": "
      "%s, \"megapixels_per_second\": %s, \"latency_ms\": {\"p50\": %s, \"p99\": %s, \"max\": %s}, "
      "\"threads\": %d, \"stopped\": %s, %s}\n",
      io::json_quote(from_zmq ? receiver->endpoint() : input).c_str(), io::json_quote(output).c_str(),
      finder_name.c_str(), static_cast<long long>(c.received), static_cast<long long>(c.processed),
      static_cast<long long>(c.dropped), static_cast<long long>(c.in_flight()),
      static_cast<long long>(c.batches), json_number(summary.mean_batch, 4).c_str(),
      static_cast<long long>(max_batch), json_number(max_delay_ms).c_str(),
      static_cast<long long>(queue_frames), overload.c_str(), source.c_str(),
      static_cast<long long>(peaks_found), static_cast<long long>(writer.truncated_frames()),
      scoring_json(truth.has_value(), score, scoring).c_str(), json_number(summary.seconds, 4).c_str(),
      json_number(fps, 4).c_str(), json_number(fps * static_cast<double>(frame_elements) / 1e6, 4).c_str(),
      json_number(summary.latency_ms.percentile(50), 4).c_str(),
      json_number(summary.latency_ms.percentile(99), 4).c_str(),
      json_number(summary.latency_ms.max(), 4).c_str(), num_threads(),
      StopOnSignal::requested() ? "true" : "false", memory.c_str());
  return StopOnSignal::requested() ? StopOnSignal::exit_status() : 0;
}

}  // namespace mixprec::app
