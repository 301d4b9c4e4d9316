// safetensors round trips: every dtype bit for bit, metadata, names, order, layout, views.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <limits>

#include "io_test_util.h"
#include "mixprec/io/json.h"
#include "mixprec/io/safetensors.h"

namespace mixprec::io {
namespace {

using test::Bytes;
using test::error_of;
using test::ScratchDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <typename T>
Tensor from_bits(const std::vector<T>& bits, DType dtype, const Shape& shape) {
  return Tensor::from_buffer(bits.data(), shape, dtype);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return a.dtype() == b.dtype() && a.shape() == b.shape() && ca.nbytes() == cb.nbytes() &&
         (ca.nbytes() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0);
}

// One tensor per dtype, holding the bit patterns a careless reader or writer would change:
// signaling and payload NaNs, -0.0, infinities, subnormals, integer extremes.
NamedTensors every_dtype() {
  NamedTensors t;
  t.emplace_back("f64", from_bits<uint64_t>(
                            {0x8000000000000000ull, 0x7FF0000000000123ull, 0xFFF8000000000abcull,
                             0x7FF0000000000000ull, 0x0000000000000001ull, 0x3FF0000000000000ull},
                            DType::F64, {2, 3}));
  t.emplace_back("f32", from_bits<uint32_t>({0x80000000u, 0x7F800001u, 0x7FC12345u, 0xFF800000u,
                                             0x00000001u, 0x3F800000u, 0x7F7FFFFFu, 0xFFFFFFFFu},
                                            DType::F32, {2, 2, 2}));
  t.emplace_back("f16",
                 from_bits<uint16_t>({0x8000, 0x7C01, 0x7E55, 0xFE01, 0x0001, 0x7BFF, 0xFC00},
                                     DType::F16, {7}));
  t.emplace_back("bf16", from_bits<uint16_t>({0x8000, 0x7F81, 0xFFC1, 0x0001, 0x7F7F, 0xFF80},
                                             DType::BF16, {3, 2}));
  t.emplace_back("i64", from_bits<int64_t>({INT64_MIN, -1, 0, INT64_MAX}, DType::I64, {4}));
  t.emplace_back("i32", from_bits<int32_t>({INT32_MIN, -7, INT32_MAX}, DType::I32, {1, 3}));
  std::vector<uint8_t> all_bytes(256);
  for (int i = 0; i < 256; ++i) all_bytes[i] = static_cast<uint8_t>(i);
  t.emplace_back("u8", from_bits(all_bytes, DType::U8, {16, 16}));
  t.emplace_back("bool", from_bits<uint8_t>({1, 0, 0, 1, 1}, DType::Bool, {5}));
  return t;
}

TEST(Safetensors, RoundTripEveryDtypeBitExact) {
  ScratchDir dir;
  const NamedTensors in = every_dtype();
  save_safetensors(dir.file("all.safetensors"), in);
  const NamedTensors out = load_safetensors(dir.file("all.safetensors"));
  ASSERT_EQ(out.size(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].first, in[i].first);
    EXPECT_TRUE(same_bytes(out[i].second, in[i].second)) << in[i].first;
  }
}

TEST(Safetensors, FileInfoAndRawData) {
  ScratchDir dir;
  const NamedTensors in = every_dtype();
  save_safetensors(dir.file("all.safetensors"), in);
  const SafetensorsFile f = SafetensorsFile::open(dir.file("all.safetensors"));
  EXPECT_EQ(f.path(), dir.file("all.safetensors"));
  EXPECT_EQ(f.size(), in.size());
  EXPECT_THAT(f.names(), ElementsAre("f64", "f32", "f16", "bf16", "i64", "i32", "u8", "bool"));
  const TensorInfo& info = f.info("bf16");
  EXPECT_EQ(info.dtype_name, "BF16");
  EXPECT_EQ(info.dtype, DType::BF16);
  EXPECT_EQ(info.element_size, 2u);
  EXPECT_EQ(info.shape, (Shape{3, 2}));
  EXPECT_EQ(info.numel, 6);
  EXPECT_EQ(info.nbytes(), 12u);
  const std::span<const std::byte> raw = f.data("bf16");
  ASSERT_EQ(raw.size(), 12u);
  uint16_t second;
  std::memcpy(&second, raw.data() + 2, 2);
  EXPECT_EQ(second, 0x7F81);  // a signaling NaN survives unquieted
  EXPECT_TRUE(f.contains("u8"));
  EXPECT_FALSE(f.contains("nope"));
  EXPECT_THAT(error_of([&] { f.info("nope"); }),
              HasSubstr("no tensor named \"nope\" (the file has 8)"));
  EXPECT_THAT(error_of([&] { f.tensor("nope"); }), HasSubstr("[safetensors] "));
}

TEST(Safetensors, LayoutIsAlignedAndPadded) {
  // The header length is a multiple of 8 and each tensor starts at a multiple of its element
  // size, as the reference writer lays files out (largest elements first).
  ScratchDir dir;
  NamedTensors in;
  in.emplace_back("a_u8", Tensor::ones({3}, DType::U8));
  in.emplace_back("b_f16", Tensor::ones({5}, DType::F16));
  in.emplace_back("c_f64", Tensor::ones({1}, DType::F64));
  in.emplace_back("d_f32", Tensor::ones({3}, DType::F32));
  save_safetensors(dir.file("x.safetensors"), in);
  const SafetensorsFile f = SafetensorsFile::open(dir.file("x.safetensors"));
  EXPECT_EQ(f.header().header_bytes % 8, 0u);
  EXPECT_THAT(f.names(), ElementsAre("a_u8", "b_f16", "c_f64", "d_f32"));  // header: caller order
  for (const TensorInfo& t : f.tensors()) EXPECT_EQ(t.begin % t.element_size, 0u) << t.name;
  EXPECT_EQ(f.info("c_f64").begin, 0u);
  EXPECT_EQ(f.info("d_f32").begin, 8u);
  EXPECT_EQ(f.info("b_f16").begin, 20u);
  EXPECT_EQ(f.info("a_u8").begin, 30u);
  // The padding is spaces after the JSON.
  const Bytes image = test::read_file(dir.file("x.safetensors"));
  const std::string header(reinterpret_cast<const char*>(image.data()) + 8,
                           f.header().header_bytes);
  EXPECT_EQ(header.find_first_not_of(' ', header.rfind('}') + 1), std::string::npos);
}

TEST(Safetensors, MetadataRoundTrip) {
  ScratchDir dir;
  const SafetensorsMetadata meta = {{"format", "pt"},
                                    {"quote\"back\\slash", "line\nbreak\ttab\x01"},
                                    {"unicode \xC3\xA9", "\xF0\x9F\x98\x80"},
                                    {"empty", ""},
                                    {"long", std::string(100000, 'v')}};
  save_safetensors(dir.file("m.safetensors"), {{"x", Tensor::zeros({2})}}, meta);
  const SafetensorsFile f = SafetensorsFile::open(dir.file("m.safetensors"));
  EXPECT_EQ(f.metadata(), meta);
}

TEST(Safetensors, NoMetadataWritesNoMetadataKey) {
  ScratchDir dir;
  save_safetensors(dir.file("m.safetensors"), {{"x", Tensor::zeros({2})}});
  const Bytes image = test::read_file(dir.file("m.safetensors"));
  const std::string text(reinterpret_cast<const char*>(image.data()), image.size());
  EXPECT_EQ(text.find("__metadata__"), std::string::npos);
  EXPECT_TRUE(SafetensorsFile::open(dir.file("m.safetensors")).metadata().empty());
}

TEST(Safetensors, NamesWithAnyCharacters) {
  ScratchDir dir;
  NamedTensors in;
  for (const std::string& name :
       {std::string("layer.0.weight"), std::string(""), std::string("quo\"te"),
        std::string("new\nline"), std::string("caf\xC3\xA9"), std::string("nul\0byte", 8),
        std::string(5000, 'n')})
    in.emplace_back(name, Tensor::full({1}, static_cast<double>(in.size())));
  save_safetensors(dir.file("n.safetensors"), in);
  const NamedTensors out = load_safetensors(dir.file("n.safetensors"));
  ASSERT_EQ(out.size(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].first, in[i].first);
    EXPECT_EQ(out[i].second.item<float>(), static_cast<float>(i));
  }
}

TEST(Safetensors, ScalarsAndEmptyTensors) {
  ScratchDir dir;
  NamedTensors in;
  in.emplace_back("scalar", Tensor::scalar(2.5, DType::F64));
  in.emplace_back("empty", Tensor::zeros({0, 4}, DType::BF16));
  in.emplace_back("empty2", Tensor::zeros({3, 0}, DType::I32));
  in.emplace_back("after", Tensor::ones({2}, DType::F16));
  save_safetensors(dir.file("e.safetensors"), in);
  const SafetensorsFile f = SafetensorsFile::open(dir.file("e.safetensors"));
  EXPECT_EQ(f.info("scalar").shape, Shape{});
  EXPECT_EQ(f.tensor("scalar").item<double>(), 2.5);
  EXPECT_EQ(f.tensor("empty").shape(), (Shape{0, 4}));
  EXPECT_EQ(f.tensor("empty2").numel(), 0);
  EXPECT_EQ(f.tensor("after").value({1}), 1.0);
}

TEST(Safetensors, EmptyFileOfTensors) {
  ScratchDir dir;
  save_safetensors(dir.file("none.safetensors"), NamedTensors{}, {{"k", "v"}});
  const SafetensorsFile f = SafetensorsFile::open(dir.file("none.safetensors"));
  EXPECT_EQ(f.size(), 0u);
  EXPECT_EQ(f.metadata().at("k"), "v");
  save_safetensors(dir.file("bare.safetensors"), NamedTensors{});
  EXPECT_EQ(SafetensorsFile::open(dir.file("bare.safetensors")).size(), 0u);
}

TEST(Safetensors, NonContiguousTensorsAreWrittenRowMajor) {
  ScratchDir dir;
  const Tensor base = Tensor::arange(0, 24, 1, DType::F32).view({4, 6});
  const Tensor transposed = base.t();            // [6, 4], strides [1, 6]
  const Tensor sliced = base.slice(1, 1, 6, 2);  // [4, 3], every other column
  const Tensor expanded = Tensor::arange(3, DType::BF16).expand({2, 3});  // stride 0
  save_safetensors(dir.file("v.safetensors"), {{"t", transposed}, {"s", sliced}, {"e", expanded}});
  const SafetensorsFile f = SafetensorsFile::open(dir.file("v.safetensors"));
  EXPECT_TRUE(same_bytes(f.tensor("t"), transposed));
  EXPECT_TRUE(same_bytes(f.tensor("s"), sliced));
  EXPECT_TRUE(same_bytes(f.tensor("e"), expanded));
  EXPECT_EQ(f.tensor("t").value({5, 1}), 11.0);
}

TEST(Safetensors, FromMapAndOverwrite) {
  ScratchDir dir;
  const std::string path = dir.file("map.safetensors");
  const std::map<std::string, Tensor> m{{"b", Tensor::ones({1})}, {"a", Tensor::zeros({2})}};
  save_safetensors(path, NamedTensors(m.begin(), m.end()));
  EXPECT_THAT(SafetensorsFile::open(path).names(), ElementsAre("a", "b"));
  save_safetensors(path, {{"c", Tensor::ones({3}, DType::I64)}});  // replaces the file whole
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_THAT(f.names(), ElementsAre("c"));
  EXPECT_EQ(dir.entries().size(), 1u);  // no temporaries left over
}

TEST(Safetensors, TensorsOutliveTheFile) {
  ScratchDir dir;
  save_safetensors(dir.file("o.safetensors"), {{"x", Tensor::full({3}, 7.0)}});
  Tensor kept;
  {
    const SafetensorsFile f = SafetensorsFile::open(dir.file("o.safetensors"));
    kept = f.tensor("x");
  }  // unmapped here: the tensor is a copy
  EXPECT_EQ(kept.value({2}), 7.0);
}

TEST(Safetensors, MoveKeepsTheMapping) {
  ScratchDir dir;
  save_safetensors(dir.file("o.safetensors"), {{"x", Tensor::full({3}, 7.0)}});
  SafetensorsFile a = SafetensorsFile::open(dir.file("o.safetensors"));
  SafetensorsFile b = std::move(a);
  EXPECT_EQ(b.tensor("x").value({0}), 7.0);
  a = std::move(b);
  EXPECT_EQ(a.tensor("x").value({1}), 7.0);
}

TEST(Safetensors, HeaderOrderIsFreeAndNamesFollowIt) {
  // Writers may list tensors in any order; offsets decide the data layout.
  const std::string header = R"({"second":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},)"
                             R"("first":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  const Bytes image =
      test::make_image(header, Bytes{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}});
  const SafetensorsFile f = SafetensorsFile::from_bytes(image);
  EXPECT_THAT(f.names(), ElementsAre("second", "first"));
  EXPECT_EQ(f.tensor("second").value({0}), 3.0);
  EXPECT_EQ(f.tensor("first").value({1}), 2.0);
}

TEST(Safetensors, ZeroSizedTensorsMaySitAnywhere) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("c":{"dtype":"F32","shape":[0,7],"data_offsets":[0,0]}})";
  const SafetensorsFile f = SafetensorsFile::from_bytes(test::make_image(header, test::zeros(4)));
  EXPECT_EQ(f.size(), 3u);
}

TEST(Safetensors, DtypesMixprecLacksOpenAndCopyRaw) {
  const std::string header = R"({"q":{"dtype":"I8","shape":[2],"data_offsets":[0,2]},)"
                             R"("f8":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[2,3]}})";
  const Bytes image =
      test::make_image(header, Bytes{std::byte{0xFF}, std::byte{0x01}, std::byte{0x38}});
  const SafetensorsFile f = SafetensorsFile::from_bytes(image, "q.safetensors");
  EXPECT_EQ(f.info("q").dtype, std::nullopt);
  EXPECT_EQ(f.info("q").dtype_name, "I8");
  EXPECT_EQ(f.data("q").size(), 2u);
  EXPECT_EQ(f.data("f8")[0], std::byte{0x38});
  EXPECT_EQ(error_of([&] { f.tensor("q"); }),
            "[safetensors] q.safetensors: tensor \"q\" has dtype I8, which mixprec has no element "
            "type for");
}

TEST(Safetensors, BoolBytesOtherThanZeroOrOneAreRejected) {
  const std::string header = R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})";
  const Bytes image = test::make_image(header, Bytes{std::byte{1}, std::byte{0}, std::byte{2}});
  const SafetensorsFile f = SafetensorsFile::from_bytes(image, "b.st");
  EXPECT_EQ(f.data("m").size(), 3u);  // raw access still works
  EXPECT_EQ(error_of([&] { f.tensor("m"); }),
            "[safetensors] b.st: tensor \"m\": BOOL element 2 is 2, not 0 or 1");
}

TEST(Safetensors, DtypeTable) {
  EXPECT_EQ(safetensors_dtype_name(DType::F64), "F64");
  EXPECT_EQ(safetensors_dtype_name(DType::Bool), "BOOL");
  EXPECT_EQ(safetensors_dtype_name(DType::BF16), "BF16");
  ASSERT_NE(find_safetensors_dtype("U16"), nullptr);
  EXPECT_EQ(find_safetensors_dtype("U16")->size, 2u);
  EXPECT_FALSE(find_safetensors_dtype("U16")->has_dtype);
  EXPECT_EQ(find_safetensors_dtype("f32"), nullptr);  // the format's names are upper case
  for (const SafetensorsDType& row : kSafetensorsDTypes)
    if (row.has_dtype) {
      EXPECT_EQ(row.size, dtype_size(row.dtype)) << row.name;
    }
}

TEST(SafetensorsWrite, RejectsBadNames) {
  ScratchDir dir;
  const std::string path = dir.file("bad.safetensors");
  EXPECT_THAT(error_of([&] {
                save_safetensors(path, {{"__metadata__", Tensor::ones({1})}});
              }),
              HasSubstr("tensor name \"__metadata__\" is reserved"));
  EXPECT_THAT(error_of([&] {
                save_safetensors(path, {{"a", Tensor::ones({1})}, {"a", Tensor::ones({1})}});
              }),
              HasSubstr("duplicate tensor name \"a\""));
  EXPECT_THAT(error_of([&] {
                save_safetensors(path, {{"bad\xFF", Tensor::ones({1})}});
              }),
              HasSubstr("is not valid UTF-8"));
  EXPECT_THAT(error_of([&] {
                save_safetensors(path, {{"x", Tensor::ones({1})}}, {{"k", "\xC0"}});
              }),
              HasSubstr("metadata entry \"k\" is not valid UTF-8"));
  EXPECT_THAT(error_of([&] {
                save_safetensors(path, {{"u", Tensor()}});
              }),
              HasSubstr("tensor \"u\" is undefined"));
  EXPECT_TRUE(dir.entries().empty());
}

TEST(SafetensorsWrite, StreamingWriterChecksByteCounts) {
  ScratchDir dir;
  const std::string path = dir.file("s.safetensors");
  const std::vector<TensorRecord> records = {{"a", "F32", {2}}, {"q", "I8", {3}}};
  write_safetensors(path, records, {}, [](std::size_t i, AtomicFile& out) {
    const uint8_t bytes[8] = {0, 0, 128, 63, 0, 0, 0, 64};  // 1.0f, 2.0f
    out.write(bytes, i == 0 ? 8 : 3);
  });
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.tensor("a").value({1}), 2.0);
  EXPECT_EQ(f.info("q").dtype_name, "I8");
  EXPECT_THAT(error_of([&] {
                write_safetensors(dir.file("short.safetensors"), records, {},
                                  [](std::size_t, AtomicFile& out) { out.write("x", 1); });
              }),
              HasSubstr("tensor \"a\": wrote 1 bytes, expected 8"));
  EXPECT_THAT(error_of([&] {
                const std::vector<TensorRecord> bad = {{"z", "F17", {1}}};
                write_safetensors(dir.file("bad.safetensors"), bad, {},
                                  [](std::size_t, AtomicFile&) {});
              }),
              HasSubstr("tensor \"z\": unknown dtype \"F17\""));
  EXPECT_EQ(dir.entries().size(), 1u);  // only s.safetensors
}

}  // namespace
}  // namespace mixprec::io
