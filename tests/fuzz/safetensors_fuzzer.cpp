// libFuzzer target for the safetensors header parser (coverage-guided; see run.sh). Every input
// must either parse, with a header consistent with the input's size, or throw mixprec::Error;
// ASan and UBSan turn any out-of-bounds read or undefined behaviour into a crash the fuzzer
// saves. libFuzzer hands over a buffer of exactly `size` bytes, so reading past it is caught.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "mixprec/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::span<const std::byte> image(reinterpret_cast<const std::byte*>(data), size);
  try {
    const mixprec::io::SafetensorsHeader h = mixprec::io::parse_safetensors_header(image, "fuzz");
    // What the reader relies on after a successful parse.
    if (h.data_offset + h.data_bytes != size) std::abort();
    uint64_t covered = 0;
    for (const mixprec::io::TensorInfo& t : h.tensors) {
      if (t.begin > t.end || t.end > h.data_bytes) std::abort();
      if (t.end - t.begin != static_cast<uint64_t>(t.numel) * t.element_size) std::abort();
      covered += t.end - t.begin;
    }
    if (covered != h.data_bytes) std::abort();
  } catch (const mixprec::Error&) {
    // Rejected with a message: the expected outcome for most inputs.
  }
  return 0;
}
