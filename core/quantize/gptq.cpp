#include "core/quantize/gptq.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/common/half.h"

namespace strata {
namespace {

using Eigen::MatrixXd;
using Eigen::VectorXd;

absl::Status CheckOptions(int64_t rows, int64_t cols, size_t w_size, const GptqOptions& o) {
  if (rows <= 0 || cols <= 0 || w_size != static_cast<size_t>(rows * cols))
    return absl::InvalidArgumentError(absl::StrCat("weight of ", w_size, " values is not [", rows, ", ", cols, "]"));
  if (o.bits < 2 || o.bits > 8) return absl::InvalidArgumentError(absl::StrCat("bits must be 2..8, not ", o.bits));
  if (o.group_size <= 0) return absl::InvalidArgumentError("group size must be positive");
  if (!(o.damp > 0 && o.damp < 1)) return absl::InvalidArgumentError("damp must be in (0, 1)");
  if (o.block_size <= 0) return absl::InvalidArgumentError("block size must be positive");
  return absl::OkStatus();
}

float RoundToF16(float v) { return F16ToF32(F32ToF16(v)); }

// GPTQ's quantizer (min-max over the group, 0 always inside the range), one row's group:
// the scale rounded to f16 as it is stored, so the codes and W^ agree with the file.
struct GroupParams {
  float scale;
  uint8_t zero;
};

GroupParams FindParams(const double* values, int64_t n, int64_t stride, int32_t bits, bool symmetric) {
  const double maxq = std::ldexp(1.0, bits) - 1;
  double lo = 0, hi = 0;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, values[i * stride]);
    hi = std::max(hi, values[i * stride]);
  }
  if (symmetric) {
    hi = std::max(-lo, hi);
    if (lo < 0) lo = -hi;
  }
  if (lo == 0 && hi == 0) {
    lo = -1;
    hi = 1;
  }
  float scale = RoundToF16(static_cast<float>((hi - lo) / maxq));
  if (!(scale > 0)) scale = RoundToF16(6.104e-5f);  // below f16's normal range: its smallest normal
  const double zero = symmetric ? std::ldexp(1.0, bits - 1) : std::clamp(std::nearbyint(-lo / scale), 0.0, maxq);
  return {scale, static_cast<uint8_t>(zero)};
}

// Code of v on the grid (round half to even, as torch.round), clamped to [0, maxq].
uint8_t Quantize(double v, const GroupParams& p, int32_t bits) {
  const double maxq = std::ldexp(1.0, bits) - 1;
  return static_cast<uint8_t>(std::clamp(std::nearbyint(v / p.scale) + p.zero, 0.0, maxq));
}

GroupQuantized Empty(int64_t rows, int64_t cols, const GptqOptions& o) {
  GroupQuantized g;
  g.rows = rows;
  g.cols = cols;
  g.bits = o.bits;
  g.group_size = std::min(o.group_size, cols);
  g.symmetric = o.symmetric;
  g.q.assign(static_cast<size_t>(rows * cols), 0);
  g.scales.assign(static_cast<size_t>(rows * g.ngroups()), 0.0f);
  g.zeros.assign(static_cast<size_t>(rows * g.ngroups()), 0);
  g.g_idx.resize(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) g.g_idx[static_cast<size_t>(c)] = static_cast<int32_t>(c / g.group_size);
  return g;
}

}  // namespace

absl::StatusOr<GroupQuantized> RtnGroupQuantize(std::span<const float> w, int64_t rows, int64_t cols,
                                                const GptqOptions& o) {
  if (absl::Status s = CheckOptions(rows, cols, w.size(), o); !s.ok()) return s;
  GroupQuantized g = Empty(rows, cols, o);
  const int64_t gs = g.group_size, ng = g.ngroups();
  std::vector<double> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) row[static_cast<size_t>(c)] = w[static_cast<size_t>(r * cols + c)];
    for (int64_t gi = 0; gi < ng; ++gi) {
      const int64_t c0 = gi * gs, n = std::min(gs, cols - c0);
      const GroupParams p = FindParams(row.data() + c0, n, 1, o.bits, o.symmetric);
      g.scales[static_cast<size_t>(r * ng + gi)] = p.scale;
      g.zeros[static_cast<size_t>(r * ng + gi)] = p.zero;
      for (int64_t c = c0; c < c0 + n; ++c) g.q[static_cast<size_t>(r * cols + c)] = Quantize(row[static_cast<size_t>(c)], p, o.bits);
    }
  }
  return g;
}

absl::StatusOr<GroupQuantized> GptqQuantize(std::span<const float> w, int64_t rows, int64_t cols,
                                            std::span<const double> hessian, const GptqOptions& o) {
  if (absl::Status s = CheckOptions(rows, cols, w.size(), o); !s.ok()) return s;
  if (hessian.size() != static_cast<size_t>(cols * cols))
    return absl::InvalidArgumentError(absl::StrCat("Hessian of ", hessian.size(), " values is not [", cols, ", ", cols, "]"));
  GroupQuantized g = Empty(rows, cols, o);
  g.act_order = o.act_order;
  const int64_t gs = g.group_size, ng = g.ngroups();

  MatrixXd W(rows, cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) W(r, c) = w[static_cast<size_t>(r * cols + c)];
  MatrixXd H = Eigen::Map<const MatrixXd>(hessian.data(), cols, cols);
  if (!H.allFinite()) return absl::InvalidArgumentError("the Hessian has non-finite entries (calibration overflow?)");
  // Inputs that were always zero carry no information: their weights are dropped (0), and
  // a unit diagonal keeps H invertible.
  for (int64_t c = 0; c < cols; ++c) {
    if (H(c, c) == 0) {
      H(c, c) = 1;
      W.col(c).setZero();
    }
  }
  std::vector<int64_t> perm(static_cast<size_t>(cols));
  std::iota(perm.begin(), perm.end(), 0);
  if (o.act_order) {
    // Largest diag(H) first: the columns whose errors matter most are quantized before the
    // compensation of everything else has moved them.
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return H(a, a) > H(b, b); });
    MatrixXd Wp(rows, cols), Hp(cols, cols);
    for (int64_t i = 0; i < cols; ++i) Wp.col(i) = W.col(perm[static_cast<size_t>(i)]);
    for (int64_t i = 0; i < cols; ++i)
      for (int64_t j = 0; j < cols; ++j) Hp(i, j) = H(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
    W.swap(Wp);
    H.swap(Hp);
  }
  H.diagonal().array() += o.damp * H.diagonal().mean();
  // The upper Cholesky factor U of H^-1 (H^-1 = U^T U): row i of U, scaled by 1/U(i,i), is
  // how quantizing column i must move the columns after it.
  Eigen::LLT<MatrixXd> llt(H);
  if (llt.info() != Eigen::Success)
    return absl::FailedPreconditionError("the dampened Hessian is not positive definite; raise --damp");
  const MatrixXd Hinv = llt.solve(MatrixXd::Identity(cols, cols));
  Eigen::LLT<MatrixXd> llt_inv(Hinv);
  if (llt_inv.info() != Eigen::Success)
    return absl::FailedPreconditionError("the inverse Hessian is not positive definite; raise --damp");
  const MatrixXd U = llt_inv.matrixU();

  std::vector<GroupParams> params(static_cast<size_t>(rows));
  std::vector<double> group_values;
  for (int64_t i1 = 0; i1 < cols; i1 += o.block_size) {
    const int64_t i2 = std::min(cols, i1 + o.block_size), count = i2 - i1;
    MatrixXd W1 = W.middleCols(i1, count);
    MatrixXd Err1(rows, count);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t col = i1 + i;  // position in quantization order
      if (col % gs == 0) {
        // A new group: its parameters from its columns as they stand now (inside this block
        // with the updates so far, beyond it with the earlier blocks' updates).
        const int64_t n = std::min(gs, cols - col);
        group_values.resize(static_cast<size_t>(n));
        const int64_t gi = col / gs;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t k = 0; k < n; ++k)
            group_values[static_cast<size_t>(k)] = i + k < count ? W1(r, i + k) : W(r, col + k);
          params[static_cast<size_t>(r)] = FindParams(group_values.data(), n, 1, o.bits, o.symmetric);
          g.scales[static_cast<size_t>(r * ng + gi)] = params[static_cast<size_t>(r)].scale;
          g.zeros[static_cast<size_t>(r * ng + gi)] = params[static_cast<size_t>(r)].zero;
        }
      }
      const int64_t orig = perm[static_cast<size_t>(col)];
      g.g_idx[static_cast<size_t>(orig)] = static_cast<int32_t>(col / gs);
      const double d = U(col, col);
      for (int64_t r = 0; r < rows; ++r) {
        const GroupParams& p = params[static_cast<size_t>(r)];
        const uint8_t code = Quantize(W1(r, i), p, o.bits);
        g.q[static_cast<size_t>(r * cols + orig)] = code;
        const double deq = (static_cast<double>(code) - p.zero) * p.scale;
        Err1(r, i) = (W1(r, i) - deq) / d;
      }
      // Spread this column's error over the rest of the block.
      W1.rightCols(count - i) -= Err1.col(i) * U.row(col).segment(col, count - i);
    }
    // The lazy batch update: the whole block's errors onto the columns after it, one GEMM.
    if (i2 < cols) W.rightCols(cols - i2) -= Err1 * U.block(i1, i2, count, cols - i2);
  }
  return g;
}

}  // namespace strata
