#include "core/quantize/hessian.h"

#include <Eigen/Dense>

namespace strata {

void HessianAccumulator::Add(const float* x, int64_t tokens) {
  if (tokens <= 0) return;
  using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const RowMajorF> X(x, tokens, cols_);
  Eigen::Map<Eigen::MatrixXd> S(sum_.data(), cols_, cols_);
  // S += X^T X as a symmetric rank-k update of the lower triangle (half the work of a GEMM).
  S.selfadjointView<Eigen::Lower>().rankUpdate(X.cast<double>().transpose());
  tokens_ += tokens;
}

std::vector<double> HessianAccumulator::Hessian() const {
  std::vector<double> h(sum_.size(), 0.0);
  if (tokens_ == 0) return h;
  const Eigen::Map<const Eigen::MatrixXd> S(sum_.data(), cols_, cols_);
  Eigen::Map<Eigen::MatrixXd> H(h.data(), cols_, cols_);
  H = S.selfadjointView<Eigen::Lower>();
  H *= 2.0 / static_cast<double>(tokens_);
  return h;
}

}  // namespace strata
