// `mixprec convert IN OUT --dtype f32|f16|bf16 [--keep-f32 REGEX]`: change the precision of a
// safetensors file's floating tensors, streaming from the mapped input to an atomic output.
#include "mixprec/kernels/convert.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "commands.h"
#include "mixprec/io/atomic_file.h"
#include "mixprec/io/json.h"
#include "mixprec/io/safetensors.h"

namespace mixprec::app {
namespace {

// libstdc++'s regex matcher recurses once per character, so a hostile megabyte-long name
// could overflow the stack; names past this are refused with a clear error instead.
constexpr std::size_t kMaxRegexName = 4096;

void print_help() {
  std::printf(
      "Usage: mixprec convert IN OUT --dtype f32|f16|bf16 [--keep-f32 REGEX]\n\n"
      "Writes OUT, a copy of the safetensors file IN whose floating tensors (F64, F32, F16,\n"
      "BF16) are converted to --dtype with round-to-nearest-even (NaN stays NaN, overflow\n"
      "gives inf, subnormals are kept). Integer and BOOL tensors, dtypes mixprec has no type\n"
      "for (I8, F8_E4M3, ...) and tensors already in the target dtype are copied bit for bit;\n"
      "__metadata__ and the tensor order are kept.\n\n"
      "  --dtype D         f32, f16 or bf16\n"
      "  --keep-f32 REGEX  floating tensors whose name matches REGEX (ECMAScript syntax,\n"
      "                    matched anywhere in the name: anchor with ^...$) are written as f32,\n"
      "                    e.g. --keep-f32 'norm|bias'\n\n"
      "OUT appears only when complete (temporary file, fsync, rename); on any error nothing\n"
      "is written. An OUT that is a symbolic link is written through: the file it points to\n"
      "is replaced and the link stays. Exit status: 0 ok, 1 unreadable or malformed input or\n"
      "failed write, 2 usage mistake.\n");
}

struct Options {
  std::string in, out;
  std::optional<DType> dtype;
  std::optional<std::regex> keep_f32;
};

// The option's value: "--name=value" or "--name value".
std::string_view take_value(Args args, std::size_t& i, std::string_view name) {
  const std::string_view a = args[i];
  if (a.size() > name.size() && a.substr(0, name.size()) == name && a[name.size()] == '=')
    return a.substr(name.size() + 1);
  if (i + 1 >= args.size()) throw UsageError{"convert: " + std::string(name) + " needs a value"};
  return args[++i];
}

bool is_option(std::string_view a, std::string_view name) {
  return a == name ||
         (a.size() > name.size() && a.substr(0, name.size()) == name && a[name.size()] == '=');
}

Options parse_options(Args args) {
  Options o;
  std::vector<std::string> positional;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (is_option(a, "--dtype")) {
      const std::string_view v = take_value(args, i, "--dtype");
      if (v == "f32" || v == "float32")
        o.dtype = DType::F32;
      else if (v == "f16" || v == "float16")
        o.dtype = DType::F16;
      else if (v == "bf16" || v == "bfloat16")
        o.dtype = DType::BF16;
      else
        throw UsageError{"convert: --dtype must be f32, f16 or bf16, got '" + std::string(v) + "'"};
    } else if (is_option(a, "--keep-f32")) {
      const std::string pattern(take_value(args, i, "--keep-f32"));
      try {
        o.keep_f32.emplace(pattern, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        throw UsageError{"convert: --keep-f32 '" + pattern + "' is not a valid regex: " + e.what()};
      }
    } else if (a.size() > 1 && a[0] == '-') {
      throw UsageError{"convert: unknown option '" + std::string(a) +
                       "' (see 'mixprec convert --help')"};
    } else {
      positional.emplace_back(a);
    }
  }
  if (positional.size() != 2)
    throw UsageError{"convert: expected IN and OUT, got " + std::to_string(positional.size()) +
                     " file names (see 'mixprec convert --help')"};
  if (!o.dtype) throw UsageError{"convert: missing --dtype f32|f16|bf16"};
  o.in = positional[0];
  o.out = positional[1];
  return o;
}

// Converts `n` elements from the (possibly unaligned) input bytes into the output, a chunk at a
// time so the scratch memory stays small whatever the tensor size.
void write_converted(std::span<const std::byte> src, DType from, DType to, std::size_t n,
                     io::AtomicFile& out) {
  constexpr std::size_t kChunk = 1 << 16;
  std::vector<double> in(kChunk), converted(kChunk);  // double storage: aligned for any dtype
  const std::size_t from_size = dtype_size(from), to_size = dtype_size(to);
  for (std::size_t at = 0; at < n; at += kChunk) {
    const std::size_t m = std::min(kChunk, n - at);
    std::memcpy(in.data(), src.data() + at * from_size, m * from_size);
    kernels::convert(in.data(), from, converted.data(), to, m);
    out.write(converted.data(), m * to_size);
  }
}

}  // namespace

int run_convert(Args args) {
  for (std::string_view a : args)
    if (a == "--help" || a == "-h") {
      print_help();
      return 0;
    }
  const Options o = parse_options(args);

  // The input is fully validated here, before the output's temporary file exists.
  const io::SafetensorsFile in = io::SafetensorsFile::open(o.in);
  std::vector<io::TensorRecord> records;
  std::vector<std::optional<DType>> targets;  // per tensor: convert to this, or copy bytes
  int converted = 0, kept = 0, copied = 0;
  uint64_t out_bytes = 0;
  for (const io::TensorInfo& t : in.tensors()) {
    std::optional<DType> target;
    if (t.dtype && is_floating(*t.dtype)) {
      bool keep = false;
      if (o.keep_f32) {
        if (t.name.size() > kMaxRegexName)
          throw Error("[convert] " + o.in + ": tensor name of " + std::to_string(t.name.size()) +
                      " bytes is too long to match --keep-f32 against");
        keep = std::regex_search(t.name, *o.keep_f32);
      }
      target = keep ? DType::F32 : *o.dtype;
      (keep ? kept : converted) += 1;
    } else {
      ++copied;
    }
    records.push_back(
        {t.name, target ? io::safetensors_dtype_name(*target) : t.dtype_name, t.shape});
    targets.push_back(target);
    out_bytes += static_cast<uint64_t>(t.numel) * (target ? dtype_size(*target) : t.element_size);
  }

  io::write_safetensors(o.out, records, in.metadata(), [&](std::size_t i, io::AtomicFile& out) {
    const io::TensorInfo& t = in.tensors()[i];
    const std::span<const std::byte> bytes = in.data(t);
    if (!targets[i] || *targets[i] == *t.dtype) {  // same dtype: every bit kept, NaN payloads too
      if (!bytes.empty()) out.write(bytes.data(), bytes.size());
    } else {
      write_converted(bytes, *t.dtype, *targets[i], static_cast<std::size_t>(t.numel), out);
    }
  });

  const std::string target_name(dtype_name(*o.dtype));
  std::printf("%s -> %s: %zu tensors (%d to %s, %d kept f32, %d copied), %llu -> %llu data bytes\n",
              o.in.c_str(), o.out.c_str(), in.size(), converted, target_name.c_str(), kept, copied,
              static_cast<unsigned long long>(in.header().data_bytes),
              static_cast<unsigned long long>(out_bytes));
  return 0;
}

}  // namespace mixprec::app
