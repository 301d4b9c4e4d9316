// libFuzzer target for the HDF5 frame reader (stream/hdf5_frames.h; see run.sh). The input is
// written to a file (libhdf5 reads files) and opened as a frame file the way the pipeline opens
// one: with the reader's default probe, a forked child doing the reader's work first
// (core/forked_child.h), so that a crash inside libhdf5 (Debian's, uninstrumented) kills the
// child and becomes a clean Error here. Then everything the pipeline reads is read: the first
// and the last frame (the ones the default probe reads; the frames between are covered by the
// probe's walk of the chunk index only) raw and converted to f32, the bad-pixel mask, the
// geometry, the ground truth. Every input must either be refused with mixprec::Error or give
// values that keep the reader's promises (shapes as declared, buffers of the declared sizes,
// true peaks on existing panels and frames). ASan and UBSan make any bad access in our code a
// crash, here in the parent: the child came through, so the parent runs the same code on the
// same file. The child resets the crash signals to their defaults, so libFuzzer and ASan's
// handlers (which would report the child's crash as this process's and save an artifact) never
// run there; itimers (libFuzzer's -timeout) are not inherited by a forked child.
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/stream/hdf5_frames.h"

namespace {

// One scratch file per fuzzing process, in memory when /dev/shm exists, removed at exit (a
// crash leaves it: it is the crashing input, also saved by libFuzzer).
struct ScratchFile {
  std::string path;
  ScratchFile() {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    path = std::string(dir) + "/mixprec-hdf5-fuzz-" + std::to_string(getpid()) + ".h5";
  }
  ~ScratchFile() { std::remove(path.c_str()); }
};

const std::string& scratch_path() {
  static const ScratchFile file;
  return file.path;
}

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace mixprec::stream;
  {
    FILE* f = std::fopen(scratch_path().c_str(), "wb");
    if (f == nullptr) return 0;
    const bool written = std::fwrite(data, 1, size, f) == size;
    std::fclose(f);
    if (!written) return 0;
  }
  try {
    // A probe that hangs is killed well before libFuzzer's -timeout (run.sh: 10 s) would call
    // it a hang of this process.
    Hdf5FrameReader reader(scratch_path(), {.probe_timeout = std::chrono::seconds(5)});
    check(reader.frames() >= 0 && reader.panels() >= 1 && reader.rows() >= 1 && reader.cols() >= 1);
    const auto elements = static_cast<std::size_t>(reader.frame_elements());
    // The probed frames, each way the pipeline reads them; a huge declared frame is refused by
    // the reader's own limit before any buffer is made.
    std::vector<float> f32(elements);
    for (const int64_t i : {int64_t{0}, reader.frames() - 1}) {
      if (i < 0 || i >= reader.frames()) continue;
      const auto raw = reader.read_raw(i);
      check(raw.size() == elements * sample_size(reader.sample_type()));
      reader.read(i, f32.data(), mixprec::DType::F32);
    }
    const std::vector<uint8_t> mask = reader.bad_pixel_mask();
    check(mask.empty() || mask.size() == elements);
    if (const auto geometry = reader.geometry()) {
      check(geometry->panels == reader.panels() && geometry->rows == reader.rows() &&
            geometry->cols == reader.cols());
      check(geometry->placement.size() == static_cast<std::size_t>(geometry->panels));
    }
    if (const auto truth = reader.ground_truth()) {
      check(truth->size() == static_cast<std::size_t>(reader.frames()));
      for (const auto& frame : *truth)
        for (const TruePeak& p : frame) check(p.panel >= 0 && p.panel < reader.panels());
    }
  } catch (const mixprec::Error&) {
    // Refused with a message: the expected outcome for most inputs.
  }
  return 0;
}
