// `mixprec stream produce --synthetic (--output FILE.h5 | --connect|--bind ENDPOINT)`: synthetic
// detector frames with their ground truth, into an HDF5 file or pushed over ZeroMQ to the
// pipeline (`stream run --zmq`), as a detector's data system would send them.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli_args.h"
#include "commands.h"
#include "mixprec/core/parallel.h"
#include "mixprec/pipeline/zmq_frames.h"
#include "mixprec/stream/hdf5_frames.h"
#include "mixprec/stream/synthetic_frames.h"
#include "progress.h"
#include "run_guard.h"
#include "stream_common.h"

namespace mixprec::app {

int run_stream_produce(Args args) {
  std::string input, output, connect, bind, endpoint_file, detector = "single", sample_type;
  int64_t frames = 0, seed = 0, deflate = 0, hwm = 8, ends = 1;
  double rate = 0, linger = 10;
  bool synthetic = false;
  ArgParser p("stream produce",
              "Make synthetic detector frames and write them into an HDF5 file\n"
              "(/entry_1/data_1/data, uint16, with the bad-pixel mask, the panel geometry and the\n"
              "true Bragg peaks of every frame in /entry_1/ground_truth), or push them over a\n"
              "ZeroMQ socket (PUSH) to `mixprec stream run --zmq`. The same seed gives the same\n"
              "frames on any machine, so a file written with it holds the truth of what was sent.");
  p.flag("--synthetic", &synthetic, "generate the frames");
  p.option("--input", &input,
           "with a socket: send the frames of this file (FILE.h5 or FILE.h5:/dataset) in its own "
           "sample type, frame i of the stream being frame i mod N of the file");
  p.option("--output", &output, "HDF5 file to write (appears complete, or not at all)");
  p.option("--connect", &connect,
           "push the frames to these ZeroMQ endpoints (comma-separated: frames go round-robin, "
           "each to one consumer)");
  p.option("--bind", &bind, "push the frames from this bound endpoint (consumers connect to it)");
  p.option("--endpoint-file", &endpoint_file,
           "with --bind: write the bound endpoint here (tcp://127.0.0.1:* picks a free port)");
  p.option("--frames", &frames,
           "frames to make or send (0: 100 synthetic ones, or each frame of --input once)",
           {0, 10'000'000});
  p.option("--detector", &detector, "single | quad | epix10k2m | jungfrau4m");
  p.option("--seed", &seed, "generator seed", {.min = 0});
  p.option("--deflate", &deflate, "with --output: gzip level of the frames (0: uncompressed)",
           {0, 9});
  p.option("--rate", &rate,
           "with a socket: frames per second to send, as a detector would (0: as fast as possible)",
           {.min = 0});
  p.option("--sample-type", &sample_type,
           "with a socket: f32 converts the frames to f32 on the wire (default: as made, u16 ADU, "
           "or the file's own type)");
  p.option("--hwm", &hwm, "with a socket: frames ZeroMQ queues per consumer before sending waits",
           {1, 100000});
  p.option("--ends", &ends, "with a socket: end-of-stream messages to send (one per consumer)",
           {0, 1000});
  p.option("--linger", &linger,
           "with a socket: seconds to wait at the end for queued frames to leave", {0, 3600});
  p.epilog(
      "With a socket, sending waits while every consumer's queue is full (backpressure): frames "
      "are never dropped here; a consumer with --overload drop drops and counts them. The wire "
      "format is in docs/STREAM.md.\n"
      "Exit status: 0 written or sent, 1 the file could not be written or the socket failed, 2 "
      "usage mistake, 128 + N stopped by signal N.");
  if (!p.parse(args)) return 0;
  if (synthetic == !input.empty())
    throw UsageError{"stream produce: one of --synthetic or --input FILE.h5 is required"};
  const int targets = !output.empty() + !connect.empty() + !bind.empty();
  if (targets != 1)
    throw UsageError{"stream produce: exactly one of --output FILE.h5, --connect ENDPOINT or --bind ENDPOINT is required"};
  const bool to_socket = output.empty();
  if (!input.empty() && !to_socket)
    throw UsageError{
        "stream produce: --input goes with --connect or --bind (a file is already a file)"};
  if (!endpoint_file.empty() && bind.empty())
    throw UsageError{"stream produce: --endpoint-file goes with --bind"};
  if (!sample_type.empty() && (sample_type != "f32" || !to_socket))
    throw UsageError{"stream produce: --sample-type takes f32, with a socket; got '" + sample_type + "'"};
  const bool to_f32 = sample_type == "f32";
  std::optional<stream::Hdf5FrameReader> reader;
  stream::DetectorGeometry geometry;
  if (!input.empty()) {
    reader.emplace(input);
    geometry = stream::panel_centred_geometry(reader->panels(), reader->rows(), reader->cols());
    geometry.name = reader->file_path();
    if (frames == 0) frames = reader->frames();
  } else {
    geometry = parse_usage("stream produce", [&] { return stream::detector_geometry(detector); });
    if (frames == 0) frames = 100;
  }
  const stream::SampleType made_type = reader ? reader->sample_type() : stream::SampleType::U16;
  const stream::SampleType wire_type = to_f32 ? stream::SampleType::F32 : made_type;
  const std::string wire_name(stream::sample_type_name(wire_type));
  std::optional<stream::SyntheticDetector> det;
  if (!reader) det.emplace(geometry, stream::SyntheticConfig{}, static_cast<uint64_t>(seed));

  std::unique_ptr<stream::Hdf5FrameWriter> writer;
  std::unique_ptr<pipeline::ZmqFrameSender> sender;
  std::string target = output;
  if (to_socket) {
    const pipeline::ZmqOptions options{.bind = !bind.empty(),
                                       .high_water_mark = static_cast<int>(hwm),
                                       .linger = std::chrono::milliseconds(std::llround(linger * 1000))};
    if (!bind.empty()) {
      sender = std::make_unique<pipeline::ZmqFrameSender>(bind, options);
    } else {
      // One socket connected to every endpoint: PUSH deals the frames round-robin among them.
      const std::vector<std::string> endpoints = split_list(connect);
      if (endpoints.empty()) throw UsageError{"stream produce: --connect needs an endpoint"};
      sender = std::make_unique<pipeline::ZmqFrameSender>(endpoints[0], options);
      for (std::size_t i = 1; i < endpoints.size(); ++i) sender->connect(endpoints[i]);
    }
    target = bind.empty() ? connect : sender->endpoint();
    if (!endpoint_file.empty()) write_endpoint_file(endpoint_file, sender->endpoint());
    std::fprintf(stderr, "stream produce: pushing %lld %s frames (%s) to %s (%s), hwm %lld%s\n",
                 static_cast<long long>(frames), geometry.name.c_str(), wire_name.c_str(),
                 target.c_str(), bind.empty() ? "connected" : "bound", static_cast<long long>(hwm),
                 rate > 0 ? (", " + std::to_string(rate) + " frames/s").c_str() : "");
  } else {
    writer = std::make_unique<stream::Hdf5FrameWriter>(output, geometry, det->bad_pixel_mask(),
                                                       stream::Hdf5FrameWriterOptions{.deflate = static_cast<int>(deflate)});
    writer->set_attribute("generator", "mixprec stream produce --synthetic");
    writer->set_attribute("detector", geometry.name);
    writer->set_attribute("seed", std::to_string(seed));
  }

  using clock = std::chrono::steady_clock;
  // A socket's run stops cleanly on a signal (the end messages say how many frames were sent);
  // a file keeps the usual rule: interrupted, it is not written at all.
  std::optional<StopOnSignal> stop;
  if (to_socket) stop.emplace();
  const auto stop_requested = [] { return StopOnSignal::requested(); };
  const auto start = clock::now();
  double generating = 0;
  int64_t peaks = 0, sent = 0;
  stream::SyntheticFrame frame;
  std::vector<float> as_f32;  // the frame on the wire as f32 (--sample-type f32)
  ProgressBar bar("stream produce", frames);
  for (int64_t i = 0; i < frames && !StopOnSignal::requested(); ++i) {
    const auto t0 = clock::now();
    std::span<const std::byte> data;  // the frame in made_type
    if (reader) {
      data = to_f32 ? std::span<const std::byte>() : reader->read_raw(i % reader->frames());
      if (to_f32) {
        as_f32.resize(static_cast<std::size_t>(reader->frame_elements()));
        reader->read(i % reader->frames(), as_f32.data(), DType::F32);
      }
    } else {
      det->generate(i, frame);
      data = std::as_bytes(std::span(frame.adu));
      if (to_f32) as_f32.assign(frame.adu.begin(), frame.adu.end());
    }
    if (to_f32) data = std::as_bytes(std::span(as_f32));
    generating += std::chrono::duration<double>(clock::now() - t0).count();
    if (writer) {
      writer->append(frame.adu, frame.peaks);
    } else {
      if (rate > 0) std::this_thread::sleep_until(
          start + std::chrono::duration_cast<clock::duration>(
                      std::chrono::duration<double>(static_cast<double>(i) / rate)));
      const auto header = pipeline::frame_header(i, wire_type, geometry.panels, geometry.rows,
                                                 geometry.cols, pipeline::wall_clock_ns());
      if (!sender->send_frame(header, data, stop_requested)) break;
      ++sent;
    }
    if (!reader) peaks += static_cast<int64_t>(frame.peaks.size());  // of frames written or sent
    bar.update(i + 1, reader ? std::string() : std::to_string(peaks) + " peaks");
  }
  if (sender)
    for (int64_t e = 0; e < ends && !StopOnSignal::requested(); ++e)
      if (!sender->send_end(sent, stop_requested)) break;
  const int64_t made = writer ? writer->frames() : sent;
  if (writer) writer->close();
  sender.reset();  // lingers until the queued frames have left (or --linger passes)
  const double seconds = std::chrono::duration<double>(clock::now() - start).count();
  if (StopOnSignal::requested())
    bar.stop(std::to_string(peaks) + " peaks | stopped");
  else
    bar.finish(std::to_string(peaks) + " peaks");
  const std::string truth = reader ? "" : " with " + std::to_string(peaks) + " true peaks";
  std::printf(
      "stream produce: %s %lld frames of %s (%lld x %lld x %lld %s)%s to %s "
      "in %.2f s: %.1f frames/s %s, %.1f frames/s %s (%d threads)\n",
      writer ? "wrote" : "sent", static_cast<long long>(made), geometry.name.c_str(),
      static_cast<long long>(geometry.panels), static_cast<long long>(geometry.rows),
      static_cast<long long>(geometry.cols), wire_name.c_str(), truth.c_str(),
      target.c_str(), seconds, static_cast<double>(made) / seconds,
      writer ? "written" : "sent", static_cast<double>(made) / generating,
      reader ? "read" : "generated", num_threads());
  return StopOnSignal::requested() ? StopOnSignal::exit_status() : 0;
}

}  // namespace mixprec::app
