#include "mixprec/stream/sample_types.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "mixprec/core/error.h"
#include "mixprec/kernels/convert.h"

namespace mixprec::stream {
namespace {

struct SampleInfo {
  SampleType type;
  std::string_view name;
  std::size_t size;
};
constexpr std::array<SampleInfo, 9> kSamples{{
    {SampleType::U8, "u8", 1},
    {SampleType::I8, "i8", 1},
    {SampleType::U16, "u16", 2},
    {SampleType::I16, "i16", 2},
    {SampleType::U32, "u32", 4},
    {SampleType::I32, "i32", 4},
    {SampleType::I64, "i64", 8},
    {SampleType::F32, "f32", 4},
    {SampleType::F64, "f64", 8},
}};

const SampleInfo& info(SampleType t) { return kSamples[static_cast<std::size_t>(t)]; }

// Widens a block of `Narrow` samples to `Wide` (exact), then converts the block with the kernel.
template <typename Narrow, typename Wide>
void widen_then_convert(const void* src, DType wide_dtype, void* dst, DType dst_type, std::size_t n) {
  // 2048 elements: 8-16 KiB of staging, resident in L1 while the kernel reads it back.
  constexpr std::size_t kBlock = 2048;
  Narrow narrow[kBlock];
  Wide wide[kBlock];
  const auto* in = static_cast<const std::byte*>(src);
  auto* out = static_cast<std::byte*>(dst);
  const std::size_t out_size = dtype_size(dst_type);
  for (std::size_t at = 0; at < n; at += kBlock) {
    const std::size_t m = std::min(kBlock, n - at);
    std::memcpy(narrow, in + at * sizeof(Narrow), m * sizeof(Narrow));  // src may be unaligned
    for (std::size_t i = 0; i < m; ++i) wide[i] = static_cast<Wide>(narrow[i]);
    kernels::convert(wide, wide_dtype, out + at * out_size, dst_type, m);
  }
}

}  // namespace

std::string_view sample_type_name(SampleType type) { return info(type).name; }
std::size_t sample_size(SampleType type) { return info(type).size; }

std::optional<DType> sample_dtype(SampleType type) {
  switch (type) {
    case SampleType::U8: return DType::U8;
    case SampleType::I32: return DType::I32;
    case SampleType::I64: return DType::I64;
    case SampleType::F32: return DType::F32;
    case SampleType::F64: return DType::F64;
    default: return std::nullopt;
  }
}

void convert_samples(const void* src, SampleType src_type, void* dst, DType dst_type, std::size_t n) {
  if (n == 0) return;
  MIXPREC_CHECK(src != nullptr && dst != nullptr, "[convert_samples] null buffer");
  if (const std::optional<DType> same = sample_dtype(src_type)) {
    kernels::convert(src, *same, dst, dst_type, n);
    return;
  }
  switch (src_type) {
    case SampleType::I8: return widen_then_convert<int8_t, int32_t>(src, DType::I32, dst, dst_type, n);
    case SampleType::U16:
      // The detectors' own type, straight into the working dtype (bf16 at the source).
      if (dst_type == DType::F32 || dst_type == DType::F16 || dst_type == DType::BF16)
        return kernels::convert_u16(static_cast<const uint16_t*>(src), dst, dst_type, n);
      return widen_then_convert<uint16_t, int32_t>(src, DType::I32, dst, dst_type, n);
    case SampleType::I16: return widen_then_convert<int16_t, int32_t>(src, DType::I32, dst, dst_type, n);
    case SampleType::U32: return widen_then_convert<uint32_t, int64_t>(src, DType::I64, dst, dst_type, n);
    default: MIXPREC_ASSERT(false);
  }
}

}  // namespace mixprec::stream
