// The GEMM driver: checks, picks the micro-kernel for (kernel level, input dtypes), splits the
// output over threads, packs B (and A when it is not usable in place) and walks the tiles.
// Two candidate lists (isa/candidates.h) make the choices: kUkernels the micro-kernel, which
// fixes the packed layout; kBlockAlgorithms how a thread's block of C is computed over it.
//
// Loop nest of one thread over its [m0, m1) x [n0, n1) block of C:
//   for each chunk of rows:            pack A into mr-row micro-panels [K][mr]   (<= 4 MiB)
//     for each slab of nc columns:     pack B[:, slab] into nr-column panels      (in L2)
//       for each mr-row micro-panel:
//         for each nr-column panel:    tile: f32 accumulators over all K, epilogue, store
// Both operands of a tile are read as two sequential streams, which the prefetchers follow.
// K is never split, so the f32 sums live in registers until the single rounding on store.
#include "mixprec/kernels/gemm.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "../conv/conv_direct.h"
#include "../isa/candidates.h"
#include "gemm_internal.h"
#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"
#include "mixprec/kernels/convert.h"

namespace mixprec::kernels {

gemm_detail::TileEpilogue gemm_detail::tile_epilogue(const GemmEpilogue& ep,
                                                     const MutableMatrixView& c, int64_t row,
                                                     int64_t col) {
  TileEpilogue tep{ep.alpha,
                   ep.beta,
                   nullptr,
                   ep.bias_dtype,
                   ep.activation,
                   nullptr,
                   ep.residual_dtype,
                   ep.residual_ld,
                   static_cast<char*>(c.data) +
                       static_cast<std::size_t>(row * c.row_stride + col) * dtype_size(c.dtype),
                   c.dtype,
                   c.row_stride};
  if (ep.bias != nullptr)
    tep.bias = static_cast<const char*>(ep.bias) +
               static_cast<std::size_t>(col) * dtype_size(ep.bias_dtype);
  if (ep.residual != nullptr)
    tep.residual =
        static_cast<const char*>(ep.residual) +
        static_cast<std::size_t>(row * ep.residual_ld + col) * dtype_size(ep.residual_dtype);
  return tep;
}

namespace {

using gemm_detail::TileEpilogue;
using gemm_detail::Ukernel;

constexpr std::size_t kSlabBytes = 512 * 1024;  // packed B slab: about half of a 1 MiB L2
constexpr std::size_t kAChunkBytes = 4 << 20;   // packed A rows per pass over B (in L3)

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

struct UkernelRequest {
  DType a, b;
  IsaLevel level;
  bool caller_chose = false;  // b is the compute dtype a caller chose for its panels
};
// bf16 pairs for two bf16 inputs: on AMX, whose tiles read these panels, and on vdpbf16ps
// except where it issues at half rate (Intel's AMX cores with AMX off), where the f32 FMA
// micro-kernel, converting while packing, is twice as fast (conv.cpp's rule too). A caller that
// chose bf16 pairs itself (a convolution told to use vdpbf16ps) gets them.
bool bf16_pairs_take(const UkernelRequest& r) {
  return r.a == DType::BF16 && r.b == DType::BF16 &&
         (r.caller_chose || r.level >= IsaLevel::Amx || !vdpbf16ps_at_half_rate());
}

// The micro-kernel for the input dtypes. It fixes the compute dtype (bf16 pairs or f32, inputs
// converted while packing) and the panel width, so packed B and the block algorithms follow it.
// AMX is not here: it reads the avx512bf16 panels (kBlockAlgorithms).
using UkernelCandidate = Candidate<UkernelRequest, const Ukernel& (*)()>;
constexpr std::array<UkernelCandidate, 4> kUkernels{{
    {"vdpbf16ps", IsaLevel::Avx512Bf16, bf16_pairs_take, gemm_detail::ukernel_avx512bf16},
    {"avx512 fma", IsaLevel::Avx512, nullptr, gemm_detail::ukernel_avx512},
    {"avx2 fma", IsaLevel::Avx2, nullptr, gemm_detail::ukernel_avx2},
    {"scalar", IsaLevel::Scalar, nullptr, gemm_detail::ukernel_scalar},
}};
static_assert(ends_with_reference(kUkernels));

const Ukernel& choose_ukernel(IsaLevel level, DType a, DType b) {
  return pick(kUkernels, UkernelRequest{a, b, level}, level).kernel();
}

// The micro-kernel for panels whose compute dtype is already chosen (packed, or to be filled by
// the caller), `compute` at `level`.
const Ukernel& ukernel_for_panels(IsaLevel level, DType a, DType compute) {
  return pick(kUkernels, UkernelRequest{a, compute, level, true}, level).kernel();
}

// Geometry of the packed operands for one micro-kernel and K.
struct PackShape {
  int64_t k;
  int64_t k_padded;  // k rounded up to the pair size for bf16 compute
  int nr;
  std::size_t elem;  // bytes per packed element
  std::size_t panel_bytes() const { return static_cast<std::size_t>(k_padded * nr) * elem; }
};

PackShape pack_shape(const Ukernel& uk, int64_t k) {
  const bool pairs = uk.compute == DType::BF16;
  return {k, pairs ? round_up(k, 2) : k, uk.nr, dtype_size(uk.compute)};
}

// Per-thread packing buffers, grown on demand and reused by every later call: the hot path
// allocates nothing once shapes have been seen.
struct Workspace {
  Allocation b_slab;
  Allocation a_rows;
};
Workspace& thread_workspace() {
  thread_local Workspace workspace;
  return workspace;
}

// Where a thread's B panels come from: packed on the fly, or already packed (pack_b). A
// prepacked source may be a sub-block: `packed` then points at row k0 of column panel n0/nr, and
// consecutive panels are `panel_stride` bytes apart (the whole matrix's panel size).
struct BSource {
  const MatrixView* view = nullptr;  // pack from here when non-null
  const char* packed = nullptr;      // else panels start here
  std::size_t panel_stride = 0;
};

struct Problem {
  MatrixView a;
  BSource b;
  MutableMatrixView c;
  GemmEpilogue ep;
  const Ukernel* uk;
  PackShape ps;
  IsaLevel level;  // the level uk was chosen at (and B packed at)
};

// One thread's block of C: rows [m0, m1), columns [n0, n1).
struct Block {
  const Problem& p;
  int64_t m0, m1, n0, n1;
};

// B's packed panels for columns [j0, j1): packed now into this thread's slab buffer, or a
// pointer into the pre-packed matrix. `panel_stride` receives the bytes between panels.
const char* b_slab(const Problem& p, Workspace& ws, int64_t j0, int64_t j1,
                   std::size_t& panel_stride) {
  const Ukernel& uk = *p.uk;
  if (p.b.view == nullptr) {
    panel_stride = p.b.panel_stride;
    return p.b.packed + static_cast<std::size_t>(j0 / uk.nr) * p.b.panel_stride;
  }
  panel_stride = p.ps.panel_bytes();
  void* buf =
      ws.b_slab.reserve(static_cast<std::size_t>(round_up(j1 - j0, uk.nr) / uk.nr) * panel_stride);
  uk.pack_b(*p.b.view, j0, j1, p.ps.k_padded, buf);
  return static_cast<const char*>(buf);
}

// Columns per B slab: as many panels as fit in kSlabBytes.
int64_t slab_columns(const Problem& p) {
  return p.uk->nr *
         std::max<int64_t>(
             1, static_cast<int64_t>(kSlabBytes / std::max<std::size_t>(1, p.ps.panel_bytes())));
}

// bf16 x bf16 with K a multiple of 32 and A rows contiguous: AMX tiles read A in place.
bool amx_takes(const Block& blk) {
  const Problem& p = blk.p;
  return p.uk->compute == DType::BF16 && p.uk->nr == gemm_detail::kAmxNr &&
         p.a.dtype == DType::BF16 && p.a.col_stride == 1 && p.a.cols % 32 == 0 && p.a.cols > 0;
}

// On AMX: B slabs as the packed kernel has them, A never packed.
void run_block_amx(const Block& blk) {
  const Problem& p = blk.p;
  const int64_t m0 = blk.m0, m1 = blk.m1, n0 = blk.n0, n1 = blk.n1;
  Workspace& ws = thread_workspace();
  const int64_t nc = slab_columns(p);
  for (int64_t jc = n0; jc < n1; jc += nc) {
    const int64_t jc_end = std::min(n1, jc + nc);
    std::size_t panel_stride = 0;
    const char* slab = b_slab(p, ws, jc, jc_end, panel_stride);
    gemm_detail::amx_gemm_block(p.a, m0, m1, slab, panel_stride, jc, jc_end, p.c, p.ep);
  }
}

// Thin f32-compute products (at most kThinPanels column panels per thread) on AVX-512 skip
// packing A: each packed A element would feed only a panel or two, so packing costs as much as
// the FMAs it feeds. The direct-convolution tile (conv_direct.h, one tap, Cg = K) broadcasts A
// from its rows in place instead; f16 or bf16 rows are first widened, kDirectMaxMr at a time,
// into a per-thread f32 buffer (14 K floats: in L1 for K up to about 800, else in L2).
constexpr int64_t kThinPanels = 2;

bool thin_takes(const Block& blk) {
  const Problem& p = blk.p;
  return p.uk->compute == DType::F32 && p.a.col_stride == 1 &&
         blk.n1 - blk.n0 <= kThinPanels * p.uk->nr &&
         conv_detail::direct_kernel_avx512()->nr == p.uk->nr;
}

void run_block_thin(const Block& blk) {
  const conv_detail::DirectKernel& dk = *conv_detail::direct_kernel_avx512();
  const Problem& p = blk.p;
  const int64_t m0 = blk.m0, m1 = blk.m1, n0 = blk.n0, n1 = blk.n1;
  const Ukernel& uk = *p.uk;
  const PackShape& ps = p.ps;
  Workspace& ws = thread_workspace();
  std::size_t panel_stride = 0;
  const char* slab = b_slab(p, ws, n0, n1, panel_stride);
  const void* rows[conv_detail::kDirectMaxMr];
  const int tap0 = 0;
  const std::size_t a_elem = dtype_size(p.a.dtype);
  const char* a = static_cast<const char*>(p.a.data);
  float* widened = p.a.dtype == DType::F32
                       ? nullptr
                       : static_cast<float*>(ws.a_rows.reserve(
                             static_cast<std::size_t>(conv_detail::kDirectMaxMr * ps.k) * 4));
  for (int64_t ir = m0; ir < m1; ir += conv_detail::kDirectMaxMr) {
    const int height = static_cast<int>(std::min<int64_t>(conv_detail::kDirectMaxMr, m1 - ir));
    for (int i = 0; i < height; ++i) {
      const char* row = a + static_cast<std::size_t>((ir + i) * p.a.row_stride) * a_elem;
      if (widened == nullptr) {
        rows[i] = row;
      } else {
        convert(row, p.a.dtype, widened + i * ps.k, DType::F32, static_cast<std::size_t>(ps.k));
        rows[i] = widened + i * ps.k;
      }
    }
    for (int64_t jr = n0; jr < n1; jr += uk.nr) {
      const conv_detail::DirectArgs args{
          1, rows, &tap0, slab + static_cast<std::size_t>((jr - n0) / uk.nr) * panel_stride,
          0, ps.k};
      const TileEpilogue tep = gemm_detail::tile_epilogue(p.ep, p.c, ir, jr);
      dk.tiles[height - 1](args, static_cast<int>(std::min<int64_t>(uk.nr, n1 - jr)), tep);
    }
  }
}

// The BLIS loop nest at the top of this file: A and B packed, the micro-kernel per tile.
void run_block_packed(const Block& blk) {
  const Problem& p = blk.p;
  const int64_t m0 = blk.m0, m1 = blk.m1, n0 = blk.n0, n1 = blk.n1;
  const Ukernel& uk = *p.uk;
  const PackShape& ps = p.ps;
  Workspace& ws = thread_workspace();
  const int64_t nc = slab_columns(p);
  const std::size_t a_panel_bytes = static_cast<std::size_t>(ps.k_padded * uk.mr) * ps.elem;
  const int64_t mc =
      uk.mr * std::max<int64_t>(
                  1, static_cast<int64_t>(kAChunkBytes / std::max<std::size_t>(1, a_panel_bytes)));

  for (int64_t ic = m0; ic < m1; ic += mc) {
    const int64_t ic_end = std::min(m1, ic + mc);
    char* a_chunk = static_cast<char*>(ws.a_rows.reserve(
        static_cast<std::size_t>(round_up(ic_end - ic, uk.mr) / uk.mr) * a_panel_bytes));
    uk.pack_a(p.a, ic, static_cast<int>(ic_end - ic), ps.k_padded, a_chunk);
    for (int64_t jc = n0; jc < n1; jc += nc) {
      const int64_t jc_end = std::min(n1, jc + nc);
      std::size_t panel_stride = 0;
      const char* slab = b_slab(p, ws, jc, jc_end, panel_stride);
      for (int64_t ir = ic; ir < ic_end; ir += uk.mr) {
        const int rows = static_cast<int>(std::min<int64_t>(uk.mr, ic_end - ir));
        const char* a_panel = a_chunk + static_cast<std::size_t>((ir - ic) / uk.mr) * a_panel_bytes;
        gemm_detail::TileFn* tile = uk.tiles[rows - 1];
        for (int64_t jr = jc; jr < jc_end; jr += uk.nr) {
          const int cols = static_cast<int>(std::min<int64_t>(uk.nr, jc_end - jr));
          const TileEpilogue tep = gemm_detail::tile_epilogue(p.ep, p.c, ir, jr);
          tile(ps.k, a_panel, slab + static_cast<std::size_t>((jr - jc) / uk.nr) * panel_stride,
               cols, tep);
        }
      }
    }
  }
}

// How one thread's block is computed over the chosen micro-kernel's packing. All round alike
// (f32 sums over the whole K, one rounding), except that AMX, like vdpbf16ps, flushes bf16
// subnormals (docs/NUMERICS.md).
using BlockCandidate = Candidate<Block, void (*)(const Block&)>;
constexpr std::array<BlockCandidate, 3> kBlockAlgorithms{{
    {"amx tiles", IsaLevel::Amx, amx_takes, run_block_amx},
    {"thin direct (A in place)", IsaLevel::Avx512, thin_takes, run_block_thin},
    {"packed micro-kernel", IsaLevel::Scalar, nullptr, run_block_packed},
}};
static_assert(ends_with_reference(kBlockAlgorithms));

void run_block(const Problem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const Block blk{p, m0, m1, n0, n1};
  pick(kBlockAlgorithms, blk, p.level).kernel(blk);
}

// Splits C over `threads` as a tm x tn grid (column blocks aligned to nr). Each thread packs
// its own rows of A and columns of B, so the grid minimises padded compute plus packing:
// rows * cols + kPackWeight * (rows + cols), packing one element costing about as much as a
// few lanes of FMA work. (A thin N, as in convolutions, is then split by rows.) AMX, which
// reads A in place, uses the same model: dropping A's packing term from it (so columns split
// and B is packed once) measured 17-25% slower at the GPT's forward and a convolution's shapes.
void run_parallel(const Problem& p, int threads) {
  constexpr int64_t kPackWeight = 64;
  const int64_t m = p.c.rows, n = p.c.cols;
  const int64_t n_panels = (n + p.uk->nr - 1) / p.uk->nr;
  int best_tm = 1, best_tn = 1;
  int64_t best_cost = -1;
  for (int tn = 1; tn <= threads; ++tn) {
    if (threads % tn != 0) continue;
    const int tm = threads / tn;
    const int64_t rows = round_up((m + tm - 1) / tm, p.uk->mr);
    const int64_t cols = (n_panels + tn - 1) / tn * p.uk->nr;
    const int64_t cost = rows * cols + kPackWeight * (rows + cols);
    if (best_cost < 0 || cost <= best_cost) {
      best_cost = cost;
      best_tm = tm;
      best_tn = tn;
    }
  }
  const int tm = best_tm, tn = best_tn;
  auto block = [&](int t) {
    const int64_t mi = t / tn, ni = t % tn;
    const int64_t m0 = m * mi / tm, m1 = m * (mi + 1) / tm;
    const int64_t n0 = n_panels * ni / tn * p.uk->nr;
    const int64_t n1 = std::min(n, n_panels * (ni + 1) / tn * p.uk->nr);
    if (m0 < m1 && n0 < n1) run_block(p, m0, m1, n0, n1);
  };
  // Blocks are claimed, not assigned: a thread that starts late (preempted) finds its block
  // taken by one that is already running.
  parallel_for(0, threads, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) block(static_cast<int>(t));
  });
}

// Threads worth using: about 2 MFLOP of work, or 256 KiB of B to read, per thread, or it is not
// worth waking them. A few rows of A (a decoding step's matrix-vector products) are bound by
// reading B, not by their flops: split by columns, each thread streams its share of B.
int threads_for(int64_t m, int64_t n, int64_t k, std::size_t b_elem) {
  if (in_parallel_region()) return 1;  // called from a parallel region (attention, conv tiles)
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const double b_bytes =
      static_cast<double>(k) * static_cast<double>(n) * static_cast<double>(b_elem);
  const int by_work = static_cast<int>(std::max({1.0, flops / 2e6, b_bytes / 262144.0}));
  return std::min(num_threads(), by_work);
}

bool is_gemm_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

void check_shapes(const char* op, const MatrixView& a, int64_t b_rows, int64_t b_cols,
                  const MutableMatrixView& c) {
  MIXPREC_CHECK(a.cols == b_rows, "[", op, "] inner dimensions differ: A is [", a.rows, ", ",
                a.cols, "], B is [", b_rows, ", ", b_cols, "]");
  MIXPREC_CHECK(c.rows == a.rows && c.cols == b_cols, "[", op, "] C is [", c.rows, ", ", c.cols,
                "], expected [", a.rows, ", ", b_cols, "]");
}

void check_operands(const char* op, const MatrixView& a, int64_t b_rows, int64_t b_cols,
                    DType b_dtype, const MutableMatrixView& c, const GemmEpilogue& ep) {
  check_shapes(op, a, b_rows, b_cols, c);
  MIXPREC_CHECK(is_gemm_float(a.dtype) && is_gemm_float(b_dtype) && is_gemm_float(c.dtype), "[", op,
                "] expected f32, f16 or bf16 operands, got A ", dtype_name(a.dtype), ", B ",
                dtype_name(b_dtype), ", C ", dtype_name(c.dtype),
                " (f64 runs only when all are f64)");
  MIXPREC_CHECK(ep.bias == nullptr || is_gemm_float(ep.bias_dtype), "[", op, "] bias dtype ",
                dtype_name(ep.bias_dtype), " is not a float type");
  MIXPREC_CHECK(ep.residual == nullptr || is_gemm_float(ep.residual_dtype), "[", op,
                "] residual dtype ", dtype_name(ep.residual_dtype), " is not a float type");
  MIXPREC_CHECK(c.row_stride >= c.cols || c.rows <= 1, "[", op, "] C row stride ", c.row_stride,
                " is smaller than its ", c.cols, " columns");
}

bool involves_f64(const MatrixView& a, DType b, const MutableMatrixView& c) {
  return a.dtype == DType::F64 || b == DType::F64 || c.dtype == DType::F64;
}

}  // namespace

bool gemm_packs_transposed_a(DType a, DType b) {
  const IsaLevel level = active_isa();
  return level == IsaLevel::Avx512Bf16 && choose_ukernel(level, a, b).compute == DType::BF16;
}

void gemm(const MatrixView& a, const MatrixView& b, const MutableMatrixView& c,
          const GemmEpilogue& epilogue) {
  if (involves_f64(a, b.dtype, c)) {  // gradient checks: exact f64, no fast path needed
    check_shapes("gemm", a, b.rows, b.cols, c);
    return gemm_reference(a, b, c, epilogue);
  }
  check_operands("gemm", a, b.rows, b.cols, b.dtype, c, epilogue);
  if (c.rows == 0 || c.cols == 0) return;
  const IsaLevel level = active_isa();
  const Ukernel& uk = choose_ukernel(level, a.dtype, b.dtype);
  const Problem p{a, BSource{&b, nullptr, 0}, c, epilogue, &uk, pack_shape(uk, a.cols), level};
  run_parallel(p, threads_for(c.rows, c.cols, a.cols, p.ps.elem));
}

namespace {

// Item i of a batch: the operands and the epilogue's residual moved on by i strides.
struct BatchItem {
  MatrixView a, b;
  MutableMatrixView c;
  GemmEpilogue ep;
};
BatchItem batch_item(const MatrixView& a, const MatrixView& b, const MutableMatrixView& c,
                     const GemmEpilogue& ep, const BatchStrides& strides, int64_t i) {
  BatchItem it{a, b, c, ep};
  it.a.data = static_cast<const char*>(a.data) +
              static_cast<std::size_t>(i * strides.a) * dtype_size(a.dtype);
  it.b.data = static_cast<const char*>(b.data) +
              static_cast<std::size_t>(i * strides.b) * dtype_size(b.dtype);
  it.c.data =
      static_cast<char*>(c.data) + static_cast<std::size_t>(i * strides.c) * dtype_size(c.dtype);
  if (ep.residual != nullptr)
    it.ep.residual = static_cast<const char*>(ep.residual) +
                     static_cast<std::size_t>(i * strides.residual) * dtype_size(ep.residual_dtype);
  return it;
}

}  // namespace

void gemm_batched(int64_t batch, const MatrixView& a, const MatrixView& b,
                  const MutableMatrixView& c, const BatchStrides& strides,
                  const GemmEpilogue& epilogue) {
  MIXPREC_CHECK(batch >= 0, "[gemm_batched] batch must be >= 0, got ", batch);
  if (involves_f64(a, b.dtype, c)) {
    check_shapes("gemm_batched", a, b.rows, b.cols, c);
    for (int64_t i = 0; i < batch; ++i) {
      const BatchItem it = batch_item(a, b, c, epilogue, strides, i);
      gemm_reference(it.a, it.b, it.c, it.ep);
    }
    return;
  }
  check_operands("gemm_batched", a, b.rows, b.cols, b.dtype, c, epilogue);
  if (batch == 0 || c.rows == 0 || c.cols == 0) return;
  const IsaLevel level = active_isa();
  const Ukernel& uk = choose_ukernel(level, a.dtype, b.dtype);
  const PackShape ps = pack_shape(uk, a.cols);
  auto item = [&](int64_t i, int threads) {
    const BatchItem it = batch_item(a, b, c, epilogue, strides, i);
    const Problem p{it.a, BSource{&it.b, nullptr, 0}, it.c, it.ep, &uk, ps, level};
    run_parallel(p, threads);
  };
  const int per_item = threads_for(c.rows, c.cols, a.cols, ps.elem);
  const int threads = num_threads();
  if (batch >= threads && threads > 1) {
    // Whole items per thread: no synchronisation inside a GEMM.
    parallel_for(0, batch, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) item(i, 1);
    });
  } else {
    for (int64_t i = 0; i < batch; ++i) item(i, per_item);
  }
}

PackedMatrix pack_b(const MatrixView& b, DType a_dtype) {
  PackedMatrix packed;
  repack_b(packed, b, a_dtype);
  return packed;
}

void repack_b(PackedMatrix& packed, const MatrixView& b, DType a_dtype) {
  MIXPREC_CHECK(is_gemm_float(b.dtype) && is_gemm_float(a_dtype),
                "[pack_b] expected f32, f16 or bf16, got B ", dtype_name(b.dtype), " for A ",
                dtype_name(a_dtype));
  packed.level_ = active_isa();
  const Ukernel& uk = choose_ukernel(packed.level_, a_dtype, b.dtype);
  const PackShape ps = pack_shape(uk, b.rows);
  const int64_t panels = (b.cols + uk.nr - 1) / uk.nr;
  packed.storage_.reserve(static_cast<std::size_t>(panels) * ps.panel_bytes());
  packed.k_ = b.rows;
  packed.n_ = b.cols;
  packed.compute_ = uk.compute;
  packed.a_dtype_ = a_dtype;
  packed.nr_ = uk.nr;
  if (panels > 0) uk.pack_b(b, 0, b.cols, ps.k_padded, packed.storage_.data());
}

void reserve_packed_b(PackedMatrix& packed, int64_t k, int64_t n, DType b_dtype, DType a_dtype) {
  const Ukernel& uk = choose_ukernel(active_isa(), a_dtype, b_dtype);
  const int64_t panels = (n + uk.nr - 1) / uk.nr;
  packed.storage_.reserve(static_cast<std::size_t>(panels) * pack_shape(uk, k).panel_bytes());
}

PackedMatrix allocate_packed_b(int64_t k, int64_t n, DType b_dtype, DType a_dtype) {
  MIXPREC_CHECK(is_gemm_float(b_dtype) && is_gemm_float(a_dtype) && k >= 0 && n >= 0,
                "[allocate_packed_b] expected f32, f16 or bf16 and k, n >= 0, got B ",
                dtype_name(b_dtype), " [", k, ", ", n, "] for A ", dtype_name(a_dtype));
  PackedMatrix packed;
  packed.level_ = active_isa();
  const Ukernel& uk = ukernel_for_panels(packed.level_, a_dtype, b_dtype);
  const PackShape ps = pack_shape(uk, k);
  const int64_t panels = (n + uk.nr - 1) / uk.nr;
  packed.storage_ = Allocation(static_cast<std::size_t>(panels) * ps.panel_bytes());
  packed.k_ = k;
  packed.n_ = n;
  packed.compute_ = uk.compute;
  packed.a_dtype_ = a_dtype;
  packed.nr_ = uk.nr;
  return packed;
}

void gemm_prepacked(const MatrixView& a, const PackedMatrix& b, const MutableMatrixView& c,
                    const GemmEpilogue& epilogue, const PackedRange& range) {
  const int64_t k1 = range.k_end < 0 ? b.rows() : range.k_end;
  const int64_t n1 = range.n_end < 0 ? b.cols() : range.n_end;
  MIXPREC_CHECK(b.level_ == active_isa(), "[gemm_prepacked] B was packed at kernel level ",
                isa_name(b.level_), " but the active level is ", isa_name(active_isa()),
                "; pack it again");
  // The micro-kernel of B's compute dtype: bf16 panels need a bf16 A; f32 panels take any A
  // (converted while packing), whatever A dtype they were packed for.
  const Ukernel& uk = ukernel_for_panels(b.level_, a.dtype, b.compute_);
  MIXPREC_CHECK(uk.compute == b.compute_, "[gemm_prepacked] B was packed for ",
                dtype_name(b.compute_), " compute, but A of dtype ", dtype_name(a.dtype), " needs ",
                dtype_name(uk.compute), "; pack B for this A dtype");
  MIXPREC_CHECK(0 <= range.k_begin && range.k_begin <= k1 && k1 <= b.rows() && 0 <= range.n_begin &&
                    range.n_begin <= n1 && n1 <= b.cols(),
                "[gemm_prepacked] range rows [", range.k_begin, ", ", k1, ") x cols [",
                range.n_begin, ", ", n1, ") is outside B [", b.rows(), ", ", b.cols(), "]");
  MIXPREC_CHECK(
      range.n_begin % uk.nr == 0 && range.k_begin % 2 == 0 && (k1 % 2 == 0 || k1 == b.rows()),
      "[gemm_prepacked] a range must start at a column multiple of ", uk.nr,
      " and at an even row, and end at an even row or the last; got rows [", range.k_begin, ", ",
      k1, ") cols [", range.n_begin, ", ", n1, ")");
  check_operands("gemm_prepacked", a, k1 - range.k_begin, n1 - range.n_begin, b.compute_, c,
                 epilogue);
  if (c.rows == 0 || c.cols == 0) return;
  const PackShape whole = pack_shape(uk, b.rows());
  const char* base = static_cast<const char*>(b.storage_.data()) +
                     static_cast<std::size_t>(range.n_begin / uk.nr) * whole.panel_bytes() +
                     static_cast<std::size_t>(range.k_begin * uk.nr) * whole.elem;
  const Problem p{a,   BSource{nullptr, base, whole.panel_bytes()}, c, epilogue,
                  &uk, pack_shape(uk, k1 - range.k_begin), b.level_};
  run_parallel(p, threads_for(c.rows, c.cols, a.cols, whole.elem));
}

}  // namespace mixprec::kernels
