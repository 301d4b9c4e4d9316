// io_test_tool: the C++ side of the command-line and interoperability tests (CTest runs it
// beside `mixprec` and tools/safetensors_interop.py). Not installed; not a user tool.
//
//   io_test_tool sample OUT                   a file with every dtype and awkward bit pattern
//   io_test_tool truncate IN OUT N            the first N bytes of IN (N < 0: all but the last -N)
//   io_test_tool copy IN OUT                  load_safetensors + save_safetensors (metadata kept)
//   io_test_tool drop-metadata IN OUT KEY    copy without the metadata entry KEY
//   io_test_tool dump FILE                    every tensor's name, dtype, shape and bytes, in hex
//   io_test_tool same A B [--quiet-nans]      A and B hold the same tensors and metadata, bitwise
//                                             (--quiet-nans: a signaling NaN in A may be quiet in
//                                             B, as any conversion makes it)
//   io_test_tool set-metadata FILE KEY [VALUE]
//                                             rewrites FILE with __metadata__ KEY set to VALUE
//                                             (removed without VALUE): damaged inputs for the
//                                             command-line robustness tests
//   io_test_tool check-convert IN OUT DTYPE [KEEP_REGEX]
//                                             OUT is IN converted as `mixprec convert` promises,
//                                             checked against the independent rounding reference
// Exit status 0 when the check holds, 1 with a message on stderr otherwise.
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <regex>
#include <string>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/io/safetensors.h"
#include "support/fp_reference.h"

namespace mixprec::io {
namespace {

using test_support::Format16;

[[noreturn]] void fail(const std::string& what) { throw Error("io_test_tool: " + what); }

template <typename T>
Tensor from_bits(const std::vector<T>& bits, DType dtype, const Shape& shape) {
  return Tensor::from_buffer(bits.data(), shape, dtype);
}

void sample(const std::string& path) {
  NamedTensors t;
  Generator gen(1234);
  // Random values, sizes that leave SIMD tails, spanning the f16 range and beyond.
  t.emplace_back("embed.weight", Tensor::normal({33, 17}, 0.0, 3.0, gen, DType::F32));
  t.emplace_back("layer.0.norm.weight", Tensor::uniform({65}, 0.5, 1.5, gen, DType::F32));
  t.emplace_back("layer.0.norm.bias", Tensor::zeros({65}, DType::F32));
  t.emplace_back("layer.0.proj.weight",
                 from_bits<uint32_t>(
                     {0x80000000u, 0x7F800001u, 0x7FC12345u, 0xFF800000u, 0x00000001u, 0x3F808000u,
                      0x3F818000u, 0x477FF000u, 0x477FEFFFu, 0x7F7FFFFFu, 0x33000001u, 0x387FC000u},
                     DType::F32, {3, 4}));
  // f64 values where rounding through f32 first would give another 16-bit result.
  t.emplace_back("head.f64",
                 Tensor::from_vector<double>({1.0 + 0x1p-8 + 0x1p-30, -(1.0 + 0x1p-11 + 0x1p-40),
                                              std::nan("0x123"), -0.0, 1e300, 5e-324},
                                             {2, 3}));
  t.emplace_back(
      "half", from_bits<uint16_t>({0x8000, 0x7C01, 0x7E55, 0xFE01, 0x0001, 0x7BFF, 0xFC00, 0x3C00},
                                  DType::F16, {2, 4}));
  t.emplace_back("brain", from_bits<uint16_t>({0x8000, 0x7F81, 0xFFC1, 0x0001, 0x7F7F, 0xFF80},
                                              DType::BF16, {6}));
  t.emplace_back("steps", from_bits<int64_t>({INT64_MIN, -1, 0, INT64_MAX}, DType::I64, {4}));
  t.emplace_back("ids", from_bits<int32_t>({INT32_MIN, -7, 0, INT32_MAX}, DType::I32, {2, 2}));
  std::vector<uint8_t> bytes(256);
  for (int i = 0; i < 256; ++i) bytes[i] = static_cast<uint8_t>(i);
  t.emplace_back("bytes", from_bits(bytes, DType::U8, {256}));
  t.emplace_back("mask", from_bits<uint8_t>({1, 0, 1}, DType::Bool, {3}));
  t.emplace_back("scalar", Tensor::scalar(0.1, DType::F32));
  t.emplace_back("empty", Tensor::zeros({0, 3}, DType::BF16));
  save_safetensors(path, t, {{"format", "pt"}, {"source", "mixprec io_test_tool"}});
}

void truncate(const std::string& in, const std::string& out, long long n) {
  std::FILE* f = std::fopen(in.c_str(), "rb");
  if (f == nullptr) fail("cannot open " + in);
  std::vector<char> bytes;
  char buf[65536];
  for (std::size_t got; (got = std::fread(buf, 1, sizeof buf, f)) > 0;)
    bytes.insert(bytes.end(), buf, buf + got);
  std::fclose(f);
  const long long size = static_cast<long long>(bytes.size());
  const long long keep = n < 0 ? size + n : n;
  if (keep < 0 || keep > size)
    fail("cannot keep " + std::to_string(keep) + " of " + std::to_string(size) + " bytes");
  std::FILE* o = std::fopen(out.c_str(), "wb");
  if (o == nullptr || std::fwrite(bytes.data(), 1, static_cast<std::size_t>(keep), o) !=
                          static_cast<std::size_t>(keep))
    fail("cannot write " + out);
  std::fclose(o);
}

std::string hex(std::span<const std::byte> bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const std::byte b : bytes) {
    out += digits[static_cast<uint8_t>(b) >> 4];
    out += digits[static_cast<uint8_t>(b) & 15];
  }
  return out.empty() ? "-" : out;
}

std::string hex(std::string_view s) {
  return hex(std::as_bytes(std::span<const char>(s.data(), s.size())));
}

// One line per metadata entry and per tensor, in file order; hex keeps any name on one field.
void dump(const std::string& path) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  for (const auto& [key, value] : f.metadata())
    std::printf("meta %s %s\n", hex(key).c_str(), hex(value).c_str());
  for (const TensorInfo& t : f.tensors()) {
    std::string shape;
    for (std::size_t d = 0; d < t.shape.size(); ++d)
      shape += (d ? "," : "") + std::to_string(t.shape[d]);
    std::printf("tensor %s %.*s [%s] %s\n", hex(t.name).c_str(),
                static_cast<int>(t.dtype_name.size()), t.dtype_name.data(), shape.c_str(),
                hex(f.data(t)).c_str());
  }
}

// Element i of a floating tensor's bytes with its NaN quiet bit set (no change for numbers).
uint64_t quieted(std::span<const std::byte> bytes, std::size_t size, std::size_t i, DType dtype) {
  uint64_t v = 0;
  std::memcpy(&v, bytes.data() + i * size, size);
  const auto nan_with = [&](uint64_t exp_mask, uint64_t mant_mask, uint64_t quiet) {
    return (v & exp_mask) == exp_mask && (v & mant_mask) != 0 ? v | quiet : v;
  };
  switch (dtype) {
    case DType::F64:
      return nan_with(0x7FF0000000000000ull, 0x000FFFFFFFFFFFFFull, 1ull << 51);
    case DType::F32:
      return nan_with(0x7F800000u, 0x007FFFFFu, 1u << 22);
    case DType::F16:
      return nan_with(0x7C00u, 0x03FFu, 1u << 9);
    case DType::BF16:
      return nan_with(0x7F80u, 0x007Fu, 1u << 6);
    default:
      return v;
  }
}

void same(const std::string& a_path, const std::string& b_path, bool quiet_nans) {
  const SafetensorsFile a = SafetensorsFile::open(a_path), b = SafetensorsFile::open(b_path);
  if (a.metadata() != b.metadata()) fail("metadata differs");
  if (a.names() != b.names()) fail("tensor names or their order differ");
  for (const TensorInfo& t : a.tensors()) {
    const TensorInfo& u = b.info(t.name);
    if (t.dtype_name != u.dtype_name || t.shape != u.shape)
      fail("tensor " + t.name + ": dtype or shape differs");
    const auto x = a.data(t), y = b.data(u);
    if (x.size() != y.size()) fail("tensor " + t.name + ": sizes differ");
    if (x.empty() || std::memcmp(x.data(), y.data(), x.size()) == 0) continue;
    if (!quiet_nans || !t.dtype || !is_floating(*t.dtype))
      fail("tensor " + t.name + ": bytes differ");
    for (std::size_t i = 0; i < static_cast<std::size_t>(t.numel); ++i)
      if (quieted(x, t.element_size, i, *t.dtype) != quieted(y, t.element_size, i, *t.dtype))
        fail("tensor " + t.name + ": element " + std::to_string(i) + " differs");
  }
}

// ---- the conversion reference ----

template <typename T>
T load(std::span<const std::byte> bytes, std::size_t i) {
  T v;
  std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
  return v;
}

// Element i of a floating tensor, converted to `to`, as raw bits (zero-extended to 64).
uint64_t expected_bits(std::span<const std::byte> src, DType from, DType to, std::size_t i) {
  const Format16& f16 = Format16::f16();
  const Format16& bf16 = Format16::bf16();
  if (from == to) {
    uint64_t v = 0;
    std::memcpy(&v, src.data() + i * dtype_size(from), dtype_size(from));
    return v;
  }
  // Everything below rounds once from the exact source value.
  if (from == DType::F64) {
    const double d = load<double>(src, i);
    if (to == DType::F16) return f16.from_f64(d);
    if (to == DType::BF16) return bf16.from_f64(d);
    if (std::isnan(d)) {  // quiet, top payload bits
      const uint64_t u = std::bit_cast<uint64_t>(d);
      return static_cast<uint32_t>((u >> 63) << 31) | 0x7FC00000u |
             static_cast<uint32_t>((u & 0x000FFFFFFFFFFFFFull) >> 29);
    }
    return std::bit_cast<uint32_t>(static_cast<float>(d));  // RNE in the default FP mode
  }
  uint32_t f32_bits;  // every other source is exact in f32 (NaNs become quiet, payload moved up)
  if (from == DType::F32)
    f32_bits = load<uint32_t>(src, i);
  else if (from == DType::F16)
    f32_bits = f16.to_f32_bits(load<uint16_t>(src, i));
  else
    f32_bits = bf16.to_f32_bits(load<uint16_t>(src, i));
  const float f = std::bit_cast<float>(f32_bits);
  if (to == DType::F32) return f32_bits;
  return to == DType::F16 ? f16.from_f32(f) : bf16.from_f32(f);
}

void check_convert(const std::string& in_path, const std::string& out_path,
                   const std::string& dtype, const std::string& keep) {
  const DType target = parse_dtype(dtype);
  const SafetensorsFile in = SafetensorsFile::open(in_path), out = SafetensorsFile::open(out_path);
  if (in.metadata() != out.metadata()) fail("metadata not kept");
  if (in.names() != out.names()) fail("tensor names or their order not kept");
  const std::regex keep_re(keep.empty() ? "(?!)" : keep);  // "(?!)" never matches
  for (const TensorInfo& t : in.tensors()) {
    const TensorInfo& u = out.info(t.name);
    if (u.shape != t.shape) fail("tensor " + t.name + ": shape changed");
    const auto src = in.data(t), dst = out.data(u);
    if (!t.dtype || !is_floating(*t.dtype)) {
      if (u.dtype_name != t.dtype_name || src.size() != dst.size() ||
          (!src.empty() && std::memcmp(src.data(), dst.data(), src.size()) != 0))
        fail("tensor " + t.name + ": not copied bit for bit");
      continue;
    }
    const DType want = std::regex_search(t.name, keep_re) ? DType::F32 : target;
    if (u.dtype != want)
      fail("tensor " + t.name + ": dtype " + std::string(u.dtype_name) + ", expected " +
           std::string(safetensors_dtype_name(want)));
    for (std::size_t i = 0; i < static_cast<std::size_t>(t.numel); ++i) {
      uint64_t got = 0;
      std::memcpy(&got, dst.data() + i * dtype_size(want), dtype_size(want));
      const uint64_t expect = expected_bits(src, *t.dtype, want, i);
      if (got != expect) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "tensor %s element %zu: got 0x%llx, expected 0x%llx",
                      t.name.c_str(), i, static_cast<unsigned long long>(got),
                      static_cast<unsigned long long>(expect));
        fail(buf);
      }
    }
  }
}

int run(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  const auto need = [&](std::size_t n) {
    if (a.size() < n + 1)
      fail("'" + (a.empty() ? std::string() : a[0]) + "' needs " + std::to_string(n) +
           " arguments");
  };
  if (a.empty())
    fail(
        "usage: io_test_tool "
        "sample|truncate|copy|drop-metadata|set-metadata|dump|same|check-convert ...");
  const std::string& cmd = a[0];
  if (cmd == "sample") {
    need(1);
    sample(a[1]);
  } else if (cmd == "truncate") {
    need(3);
    truncate(a[1], a[2], std::stoll(a[3]));
  } else if (cmd == "copy") {
    need(2);
    save_safetensors(a[2], load_safetensors(a[1]), SafetensorsFile::open(a[1]).metadata());
  } else if (cmd == "set-metadata") {
    need(2);
    SafetensorsMetadata metadata = SafetensorsFile::open(a[1]).metadata();
    if (a.size() > 3)
      metadata[a[2]] = a[3];
    else
      metadata.erase(a[2]);
    save_safetensors(a[1], load_safetensors(a[1]), metadata);
  } else if (cmd == "drop-metadata") {
    need(3);
    SafetensorsMetadata meta = SafetensorsFile::open(a[1]).metadata();
    if (meta.erase(a[3]) == 0) fail(a[1] + " has no metadata '" + a[3] + "'");
    save_safetensors(a[2], load_safetensors(a[1]), meta);
  } else if (cmd == "dump") {
    need(1);
    dump(a[1]);
  } else if (cmd == "same") {
    need(2);
    same(a[1], a[2], a.size() > 3 && a[3] == "--quiet-nans");
  } else if (cmd == "check-convert") {
    need(3);
    check_convert(a[1], a[2], a[3], a.size() > 4 ? a[4] : "");
  } else {
    fail("unknown command '" + cmd + "'");
  }
  return 0;
}

}  // namespace
}  // namespace mixprec::io

int main(int argc, char** argv) {
  try {
    return mixprec::io::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
