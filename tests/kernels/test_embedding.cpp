#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/kernels/embedding.h"
#include "support/error_of.h"
#include "support/isa_levels.h"

namespace mixprec::kernels {
namespace {

using test_support::IsaTest;

std::vector<double> values(const Tensor& t) {
  const Tensor c = t.to(DType::F64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

Tensor random_indices(const Shape& shape, int64_t rows, DType dtype, Generator& gen) {
  const Tensor t = Tensor::empty(shape, dtype);
  const Tensor flat = t.view({-1});
  for (int64_t i = 0; i < flat.numel(); ++i)
    flat.set({i}, static_cast<double>(gen.next_u32() % rows));
  return t;
}

// out must equal the selected rows of weight, rounded once to out's dtype (exact comparison:
// Tensor::to is the reference rounding).
void check(const Tensor& weight, const Tensor& indices, const Tensor& out,
           const std::string& what) {
  SCOPED_TRACE(what + " weight " + shape_to_string(weight.shape()) + " " +
               std::string(dtype_name(weight.dtype())) + " indices " +
               shape_to_string(indices.shape()) + " -> " + std::string(dtype_name(out.dtype())));
  embedding(weight, indices, out);
  const int64_t dim = weight.size(1);
  const std::vector<double> idx = values(indices), got = values(out);
  const std::vector<double> table = values(weight.to(out.dtype()));
  ASSERT_EQ(got.size(), idx.size() * static_cast<std::size_t>(dim));
  for (std::size_t p = 0; p < idx.size(); ++p)
    for (int64_t j = 0; j < dim; ++j)
      ASSERT_EQ(got[p * static_cast<std::size_t>(dim) + static_cast<std::size_t>(j)],
                table[static_cast<std::size_t>(idx[p]) * static_cast<std::size_t>(dim) +
                      static_cast<std::size_t>(j)])
          << "position " << p << " column " << j;
}

class EmbeddingTest : public IsaTest {};

TEST_P(EmbeddingTest, GathersRowsEveryDtypeAndShape) {
  Generator gen(71);
  for (int64_t rows : {1, 7, 65})
    for (int64_t dim : {1, 7, 17, 129})
      for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F64})
        for (const Shape& shape : {Shape{}, Shape{5}, Shape{3, 4}}) {
          const Tensor weight = Tensor::uniform({rows, dim}, -1.0, 1.0, gen, t);
          const Tensor indices =
              random_indices(shape, rows, shape.size() == 1 ? DType::I32 : DType::I64, gen);
          Shape out_shape = shape;
          out_shape.push_back(dim);
          check(weight, indices, Tensor::empty(out_shape, t), "same dtype");
          const DType other = t == DType::F32 ? DType::BF16 : DType::F32;
          check(weight, indices, Tensor::empty(out_shape, other), "converted");
        }
}

TEST_P(EmbeddingTest, StridedTableIndicesAndOutput) {
  Generator gen(72);
  const Tensor table_t = Tensor::uniform({17, 65}, -1.0, 1.0, gen, DType::BF16);  // [D, V]
  const Tensor indices = random_indices({4, 9}, 65, DType::I64, gen);
  check(table_t.t(), indices, Tensor::empty({4, 9, 17}, DType::BF16), "transposed table");
  check(table_t.t(), indices.t(), Tensor::empty({9, 4, 17}, DType::F32), "transposed indices");
  const Tensor out = Tensor::empty({17, 4, 9}, DType::BF16).permute({1, 2, 0});
  check(table_t.t().contiguous(), indices, out, "permuted output");
  const Tensor big_table = Tensor::uniform({1000, 64}, -1.0, 1.0, gen, DType::F32);
  check(big_table, random_indices({2000}, 1000, DType::I64, gen), Tensor::empty({2000, 64}),
        "many positions");
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(EmbeddingTest);

using test_support::error_of;

TEST(Embedding, BadIndicesAndShapesAreClearErrors) {
  const Tensor weight = Tensor::zeros({5, 3});
  const Tensor out = Tensor::full({2, 2, 3}, 9.0);
  EXPECT_EQ(error_of([&] {
              embedding(weight, Tensor::from_vector<int64_t>({0, 1, 5, 2}, {2, 2}), out);
            }),
            "[embedding] index 5 at position [1, 0] of indices [2, 2] is out of range for a table "
            "of 5 rows");
  EXPECT_EQ(values(out), std::vector<double>(12, 9.0)) << "nothing written before the check";
  EXPECT_EQ(
      error_of([&] {
        embedding(weight, Tensor::from_vector<int32_t>({-1}), Tensor::empty({1, 3}));
      }),
      "[embedding] index -1 at position [0] of indices [1] is out of range for a table of 5 rows");
  EXPECT_EQ(error_of([&] {
              embedding(weight, Tensor::from_vector<int64_t>({0, 1}), Tensor::empty({2, 4}));
            }),
            "[embedding] out has shape [2, 4], expected [2, 3] (indices' shape + [D])");
  EXPECT_EQ(error_of([&] {
              embedding(weight, Tensor::zeros({2}), Tensor::empty({2, 3}));
            }),
            "[embedding] indices has dtype f32, expected i64 or i32");
  EXPECT_EQ(error_of([&] {
              embedding(Tensor::zeros({5}), Tensor::zeros({2}, DType::I64), Tensor::empty({2, 3}));
            }),
            "[embedding] weight has shape [5], expected [V, D]");
}

}  // namespace
}  // namespace mixprec::kernels
