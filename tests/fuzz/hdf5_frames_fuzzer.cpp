// libFuzzer target for the HDF5 frame reader (stream/hdf5_frames.h; see run.sh). The input is
// written to a file (libhdf5 reads files) and opened as a frame file; everything the pipeline
// reads is read: the first frames raw and converted to f32, the bad-pixel mask, the geometry,
// the ground truth. Every input must either be refused with mixprec::Error or give values
// that keep the reader's promises (shapes as declared, buffers of the declared sizes, true
// peaks on existing panels and frames). ASan and UBSan make any bad access in our code a
// crash. libhdf5 itself is Debian's, uninstrumented: a crash inside it is reported too (with
// its stack), since the reader's job is to keep such files from reaching the pipeline.
#include <unistd.h>

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
    Hdf5FrameReader reader(scratch_path());
    check(reader.frames() >= 0 && reader.panels() >= 1 && reader.rows() >= 1 && reader.cols() >= 1);
    const auto elements = static_cast<std::size_t>(reader.frame_elements());
    // A few frames, each way the pipeline reads them; a huge declared frame is refused by the
    // reader's own limit before any buffer is made.
    std::vector<float> f32(elements);
    for (int64_t i = 0; i < std::min<int64_t>(reader.frames(), 3); ++i) {
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
