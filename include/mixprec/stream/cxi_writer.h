#pragma once
// Peak lists as a CXI file, the layout Cheetah and psocake write and CrystFEL reads with
//   peak_list = /entry_1/result_1
//   peak_list_type = cxi
// in its geometry file (indexamajig --peaks=cxi). Per frame i, line i of:
//   /entry_1/result_1/nPeaks              int32   [N]
//   /entry_1/result_1/peakXPosRaw         float32 [N, 2048]  X: fast-scan column
//   /entry_1/result_1/peakYPosRaw         float32 [N, 2048]  Y: slow-scan row in the slab
//   /entry_1/result_1/peakTotalIntensity  float32 [N, 2048]
//   /entry_1/result_1/peakNPixels         float32 [N, 2048]
//   /entry_1/result_1/peakMaximumValue    float32 [N, 2048]
//   /entry_1/result_1/peakSNR             float32 [N, 2048]
//   /entry_1/result_1/frameIndex          int64   [N]   the input frame of each row (rows are
//                                                       the input frames in order unless a
//                                                       pipeline dropped some)
// CrystFEL reads nPeaks as a 1-D integer array and the first nPeaks entries of each 2-D row
// (any width; 2048 is Cheetah's and psocake's, kept so other tools find what they expect);
// unused entries are 0.
// Coordinates are in the "slab" layout of the raw data: panels stacked along the slow scan,
// so panel p, row r is Y = p * rows + r, as CrystFEL maps them through the geometry file's
// min_ss/max_ss. Positions are pixel centres at integers (the CXI convention): CrystFEL adds
// half a pixel on reading (its default half-pixel shift).
// A frame with more peaks than the width keeps the strongest (by total intensity), in their
// found order, and is counted in truncated_frames().
//
// The file is written under a temporary name and renamed into place by close(), so the path
// holds either nothing (or the previous file) or a complete list. Rows are buffered and written
// chunk_frames at a time into extendible datasets, so a run of any length uses bounded memory.
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "mixprec/stream/peaks.h"

namespace mixprec::stream {

struct CxiLayout {
  int64_t panels = 1, rows = 0, cols = 0;  // of the frames the peaks were found in
};

struct CxiWriterOptions {
  int64_t max_peaks = 2048;    // the row width
  int64_t chunk_frames = 64;   // frames per HDF5 chunk and per write
  int deflate = 1;             // gzip level (0: none); rows are mostly zeros
};

class CxiWriter {
 public:
  // Creates the temporary file next to `path`; an unwritable directory throws Error here.
  CxiWriter(std::string path, CxiLayout layout, CxiWriterOptions options = {});
  ~CxiWriter();  // without close(): the temporary is removed, `path` untouched
  CxiWriter(const CxiWriter&) = delete;
  CxiWriter& operator=(const CxiWriter&) = delete;

  // The peaks of the next frame (panel coordinates, as the finders give them); `frame_index`
  // is the input frame they belong to (-1: the row number, as when no frame is dropped).
  void append(std::span<const Peak> peaks, int64_t frame_index = -1);
  // Writes what is buffered, closes and renames the file into place.
  void close();

  int64_t frames() const;
  int64_t peaks_written() const;
  int64_t truncated_frames() const;
  const std::string& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mixprec::stream
