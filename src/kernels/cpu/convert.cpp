#include "mixprec/kernels/convert.h"

#include <cstring>
#include <type_traits>

namespace mixprec::kernels {
namespace {

// Element-wise conversion of one value, single rounding.
template <typename To, typename From>
To convert_one(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>)
      return static_cast<float>(v) != 0.0f || static_cast<float>(v) != static_cast<float>(v);
    else
      return v != From{0} || v != v;
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    if constexpr (std::is_same_v<From, float> || std::is_same_v<From, Half> ||
                  std::is_same_v<From, BFloat16>)
      return To(static_cast<float>(v));  // f16 -> f32 and bf16 -> f32 are exact
    else
      return To(static_cast<float>(v));  // TODO(convert): single rounding from f64/ints
  } else if constexpr (std::is_integral_v<To>) {
    const double d = static_cast<double>(static_cast<std::conditional_t<std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>, float, From>>(v));
    return static_cast<To>(d);
  } else {
    return static_cast<To>(static_cast<std::conditional_t<std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>, float, From>>(v));
  }
}

}  // namespace

void convert_strided(const void* src, DType src_type, int64_t src_stride, void* dst,
                     DType dst_type, int64_t dst_stride, std::size_t n) {
  visit_dtype(src_type, [&](auto src_tag) {
    using From = typename decltype(src_tag)::type;
    visit_dtype(dst_type, [&](auto dst_tag) {
      using To = typename decltype(dst_tag)::type;
      const From* s = static_cast<const From*>(src);
      To* d = static_cast<To*>(dst);
      for (std::size_t i = 0; i < n; ++i)
        d[static_cast<int64_t>(i) * dst_stride] =
            convert_one<To>(s[static_cast<int64_t>(i) * src_stride]);
    });
  });
}

void convert(const void* src, DType src_type, void* dst, DType dst_type, std::size_t n) {
  if (src_type == dst_type) {
    if (src != dst && n != 0) std::memmove(dst, src, n * dtype_size(src_type));
    return;
  }
  convert_strided(src, src_type, 1, dst, dst_type, 1, n);
}

}  // namespace mixprec::kernels
