// `mixprec bench stream`: the streaming peak-finding pipeline end to end, the same frames read
// from an HDF5 file and pulled over ZeroMQ (u16 as made, and f32 on the wire), at each batch
// size: frames/s, megapixels/s, latency percentiles, F1. Every run is a separate `mixprec
// stream run` process (and, for ZeroMQ, a `stream produce --input` process pushing the file's
// frames), so a figure is what a user running the commands gets.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.h"
#include "cli_args.h"
#include "commands.h"
#include "mixprec/core/parallel.h"
#include "mixprec/io/json.h"
#include "mixprec/models/peaknet_train.h"
#include "mixprec/stream/hdf5_frames.h"
#include "run_guard.h"
#include "stream_common.h"

namespace mixprec::app {
namespace {

struct StreamRow {
  std::string input, wire, precision = "-";
  int64_t batch = 0;
  double tensor_mib = NAN, rss_mib = NAN;
  double fps = 0, mpix = 0, p50 = 0, p99 = 0, transport_p50 = NAN, transport_p99 = NAN, f1 = NAN;
  int64_t processed = 0, dropped = 0;
};

double number(const io::JsonValue& v, std::string_view key) {
  const io::JsonValue& m = json_member(v, key, "bench stream");
  return m.is_null() ? NAN : m.as_double();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

}  // namespace

int run_bench_stream(Args args) {
  std::string detector = "single", batches = "1,8", inputs = "hdf5,zmq", json_path, model,
              precisions = "bf16,fp32,autocast-bf16";
  int64_t frames = 200, seed = 1, repeats = 1;
  double rate = 0;
  ArgParser p("bench stream",
              "The streaming peak-finding pipeline end to end (`stream run`): the same synthetic\n"
              "frames from an HDF5 file and over ZeroMQ (u16 as made, and f32 on the wire; a\n"
              "`stream produce --input` process pushing to a `stream run --zmq` worker over IPC),\n"
              "at each batch size. Prints a table; --json writes the rows.");
  p.option("--detector", &detector, "single | quad | epix10k2m | jungfrau4m");
  p.option("--frames", &frames, "frames per run (generated once)", {1, 1'000'000});
  p.option("--batches", &batches, "batch sizes, comma-separated");
  p.option("--inputs", &inputs, "hdf5 and/or zmq");
  p.option("--rate", &rate,
           "frames/s delivered (0: as fast as the pipeline takes them); "
           "latency at a detector's pace needs a rate",
           {.min = 0});
  p.option("--model", &model,
           "a PeakNet file: run the network finder (--finder net) instead of the classical one");
  p.option("--precisions", &precisions,
           "with --model: bf16 | fp32 | fp16 | autocast-bf16, comma-separated (a precision axis)");
  p.option("--seed", &seed, "generator seed", {.min = 0});
  p.option("--runs", &repeats,
           "runs of each configuration; the median one (by frames/s) is reported", {1, 100});
  p.option("--json", &json_path, "write the rows as JSON to this file");
  p.epilog("Threads: MIXPREC_NUM_THREADS, inherited by every child process.");
  if (!p.parse(args)) return 0;
  std::vector<int64_t> batch_sizes;
  for (const std::string& b : split_list(batches)) {
    batch_sizes.push_back(integer_option("bench stream", "--batches", b));
    if (batch_sizes.back() < 1 || batch_sizes.back() > 4096)
      throw UsageError{"bench stream: --batches must be in [1, 4096]"};
  }
  const std::vector<std::string> input_list = split_list(inputs);
  for (const std::string& in : input_list)
    if (in != "hdf5" && in != "zmq")
      throw UsageError{"bench stream: --inputs takes hdf5 and zmq, got '" + in + "'"};
  std::vector<std::string> precision_list = {"-"};
  if (!model.empty()) {
    precision_list = split_list(precisions);
    for (const std::string& pr : precision_list)
      parse_usage("bench stream", [&] { return models::parse_net_precision(pr); });
    model = std::filesystem::absolute(model).string();
    if (!std::filesystem::exists(model)) throw Error("[bench stream] no model file " + model);
  }
  if (batch_sizes.empty() || input_list.empty() || precision_list.empty())
    throw UsageError{"bench stream: --batches and --inputs must not be empty"};

  const std::string self = quote(std::filesystem::canonical("/proc/self/exe").string());
  const ScratchFolder scratch("mixprec-bench-stream-");
  const std::string dir = scratch.path();
  const std::string frames_file = dir + "/frames.h5";
  std::fprintf(stderr, "bench stream: generating %lld %s frames ...\n",
               static_cast<long long>(frames), detector.c_str());
  run_and_capture(self + " stream produce --synthetic --output " + quote(frames_file) +
                      " --frames " + std::to_string(frames) + " --detector " + quote(detector) +
                      " --seed " + std::to_string(seed) + " 2>/dev/null",
                  "bench stream");
  const std::string rate_text = rate > 0 ? " --rate " + io::json_number(rate) : "";

  std::vector<StreamRow> rows;
  for (const std::string& precision : precision_list) {
    for (int64_t batch : batch_sizes) {
      const std::string common =
          " --batch " + std::to_string(batch) + " --output " + quote(dir + "/peaks.cxi") +
          (precision == "-" ? "" : " --finder net --model " + quote(model) + " --precision " + precision);
      for (const std::string& in : input_list) {
        std::vector<std::string> wires =
            in == "hdf5" ? std::vector<std::string>{"-"} : std::vector<std::string>{"u16", "f32"};
        for (const std::string& wire : wires) {
          std::fprintf(stderr, "bench stream: %s%s%s, batch %lld ...\n",
                       precision == "-" ? "" : ("net " + precision + ", ").c_str(), in.c_str(),
                       wire == "-" ? "" : (" " + wire).c_str(), static_cast<long long>(batch));
          std::vector<StreamRow> runs;
          for (int64_t run = 0; run < repeats; ++run) {
            std::string summary;
            if (in == "hdf5") {
              summary = run_and_capture(self + " stream run --input " + quote(frames_file) + common +
                                            rate_text + " 2>/dev/null",
                                        "bench stream");
            } else {
              // The worker binds; once its endpoint file says it is listening (so the first frames
              // do not wait out a reconnect, which would be start-up, not transport, latency) the
              // producer pushes the file's frames to it; the shell then waits for the worker and
              // exits with its status.
              const std::string endpoint = "ipc://" + dir + "/frames.ipc";
              const std::string worker_out = dir + "/worker.json", ready = dir + "/endpoint";
              std::filesystem::remove(ready);
              run_and_capture(self + " stream run --zmq " + quote(endpoint) +
                                  " --zmq-bind --endpoint-file " + quote(ready) + " --geometry " +
                                  quote(frames_file) + common + " --idle-timeout 60 >" +
                                  quote(worker_out) + " 2>/dev/null & w=$!; while [ ! -s " +
                                  quote(ready) +
                                  " ] && kill -0 $w 2>/dev/null; do sleep 0.02; done; " + self +
                                  " stream produce --input " + quote(frames_file) + " --connect " +
                                  quote(endpoint) + (wire == "f32" ? " --sample-type f32" : "") +
                                  rate_text + " >/dev/null 2>&1 && wait $w",
                              "bench stream");
              summary = read_text(worker_out);
            }
            const io::JsonValue v = io::parse_json(summary);
            StreamRow r;
            r.input = in;
            r.wire = wire == "-" ? "u16 file" : wire;
            r.batch = batch;
            r.precision = precision == "-" ? "classic" : precision;
            r.tensor_mib = number(v, "peak_tensor_mib");
            r.rss_mib = number(v, "peak_rss_mib");
            r.processed = static_cast<int64_t>(number(v, "processed"));
            r.dropped = static_cast<int64_t>(number(v, "dropped"));
            // A worker's rate counts from its first frame (it starts before the producer).
            r.fps = in == "zmq" ? number(v, "streaming_frames_per_second")
                                : number(v, "frames_per_second");
            r.mpix = r.fps * number(v, "megapixels_per_second") / number(v, "frames_per_second");
            const io::JsonValue& latency = json_member(v, "latency_ms", "bench stream");
            r.p50 = number(latency, "p50");
            r.p99 = number(latency, "p99");
            if (in == "zmq") {
              const io::JsonValue& transport = json_member(v, "transport_ms", "bench stream");
              r.transport_p50 = number(transport, "p50");
              r.transport_p99 = number(transport, "p99");
            }
            r.f1 = number(v, "f1");
            runs.push_back(r);
          }
          // The median run by frames/s, whole (its latencies with it): on a shared machine one
          // run can be slowed by a neighbour's burst; the median is the typical one.
          std::sort(runs.begin(), runs.end(),
                    [](const StreamRow& a, const StreamRow& b) { return a.fps < b.fps; });
          rows.push_back(runs[runs.size() / 2]);
        }
      }
    }
  }

  std::printf("stream run, %lld %s frames, %s, %d threads, median of %lld runs%s\n",
              static_cast<long long>(frames), detector.c_str(),
              model.empty() ? "classic finder" : ("PeakNet " + model).c_str(), num_threads(),
              static_cast<long long>(repeats),
              rate > 0 ? (", " + io::json_number(rate) + " frames/s in").c_str() : "");
  std::printf("%-13s %-6s %-9s %6s %10s %8s %9s %9s %14s %14s %11s %9s %7s\n", "finder", "input",
              "samples", "batch", "frames/s", "Mpix/s", "p50 ms", "p99 ms", "transport p50",
              "transport p99", "tensors MiB", "RSS MiB", "F1");
  std::string json =
      "{\"detector\": " + io::json_quote(detector) + ", \"frames\": " + std::to_string(frames) +
      ", \"threads\": " + std::to_string(num_threads()) + ", \"runs\": " + std::to_string(repeats) +
      ", \"rate\": " + io::json_number(rate) + ", \"rows\": [";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const StreamRow& r = rows[i];
    std::printf("%-13s %-6s %-9s %6lld %10.1f %8.1f %9.2f %9.2f %14.2f %14.2f %11.1f %9.1f %7.4f\n",
                r.precision.c_str(), r.input.c_str(), r.wire.c_str(), static_cast<long long>(r.batch),
                r.fps, r.mpix, r.p50, r.p99, r.transport_p50, r.transport_p99, r.tensor_mib, r.rss_mib,
                r.f1);
    auto num = [](double x) {
      return std::isfinite(x) ? io::json_number(x, 5) : std::string("null");
    };
    json += std::string(i ? ", " : "") + "{\"finder\": \"" + r.precision + "\", \"input\": \"" +
            r.input + "\", \"samples\": \"" +
            r.wire + "\", \"batch\": " + std::to_string(r.batch) +
            ", \"processed\": " + std::to_string(r.processed) +
            ", \"dropped\": " + std::to_string(r.dropped) +
            ", \"frames_per_second\": " + num(r.fps) +
            ", \"megapixels_per_second\": " + num(r.mpix) +
            ", \"latency_ms\": {\"p50\": " + num(r.p50) + ", \"p99\": " + num(r.p99) +
            "}, \"peak_tensor_mib\": " + num(r.tensor_mib) + ", \"peak_rss_mib\": " + num(r.rss_mib) +
            ", \"transport_ms\": {\"p50\": " + num(r.transport_p50) +
            ", \"p99\": " + num(r.transport_p99) + "}, \"f1\": " + num(r.f1) + "}";
  }
  json += "]";
  // The network's masks in each precision against fp32's, frame by frame on the same frames (in
  // this process: the figure is about numerics, not speed).
  if (!model.empty()) {
    stream::Hdf5FrameReader reader(frames_file);
    const DetectorSetup setup = detector_setup(reader);
    const Shape shape = {1, reader.panels(), reader.rows(), reader.cols()};
    auto reference_model = models::load_peaknet(model);
    models::PeakNetFinder reference(*reference_model, models::NetPrecision::F32, setup.geometry, setup.bad_pixels);
    json += ", \"mask_iou_vs_fp32\": {";
    bool first = true;
    for (const std::string& precision : precision_list) {
      const models::NetPrecision np = models::parse_net_precision(precision);
      if (np == models::NetPrecision::F32) continue;
      auto other_model = models::load_peaknet(model);
      models::PeakNetFinder other(*other_model, np, setup.geometry, setup.bad_pixels);
      int64_t both = 0, either = 0;
      for (int64_t i = 0; i < reader.frames(); ++i) {
        Tensor f32 = Tensor::empty(shape, DType::F32), mine = Tensor::empty(shape, other.input_dtype());
        reader.read(i, f32.data_ptr(), DType::F32);
        reader.read(i, mine.data_ptr(), other.input_dtype());
        reference.find(f32);
        other.find(mine);
        const std::vector<uint8_t>& a = reference.last_masks();
        const std::vector<uint8_t>& b = other.last_masks();
        for (std::size_t k = 0; k < a.size(); ++k) both += a[k] & b[k], either += a[k] | b[k];
      }
      const double iou = either == 0 ? 1.0 : static_cast<double>(both) / static_cast<double>(either);
      std::printf("mask IoU, %s vs fp32: %.5f (%lld peak pixels in either, %lld frames)\n", precision.c_str(), iou,
                  static_cast<long long>(either), static_cast<long long>(reader.frames()));
      json += std::string(first ? "" : ", ") + io::json_quote(precision) + ": " + io::json_number(iou, 6);
      first = false;
    }
    json += "}";
  }
  json += "}\n";
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << json;
    if (!out) throw Error("[bench stream] cannot write " + json_path);
  }
  return 0;
}

}  // namespace mixprec::app
