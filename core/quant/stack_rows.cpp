#include "core/quant/stack_rows.h"

#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/quant/int4_pack.h"

namespace strata {
namespace {

bool SameLayout(const QuantizedTensor& a, const QuantizedTensor& b) {
  return a.format == b.format && a.cols == b.cols && a.group_size == b.group_size &&
         a.scales_dtype == b.scales_dtype && a.zeros.empty() == b.zeros.empty() && a.g_idx == b.g_idx &&
         a.smooth == b.smooth && a.outlier_cols == b.outlier_cols && a.outlier_dtype == b.outlier_dtype &&
         a.act_scale_mode == b.act_scale_mode && a.act_scale == b.act_scale &&
         a.outlier_threshold == b.outlier_threshold;
}

template <typename T>
void Append(std::vector<T>& dst, const std::vector<T>& src) {
  dst.insert(dst.end(), src.begin(), src.end());
}

}  // namespace

absl::StatusOr<QuantizedTensor> ToInt8Groups(const QuantizedTensor& t, int32_t group_size) {
  const bool int4 = t.format == STRATA_WEIGHT_INT4_GROUP;
  if ((!int4 && t.format != STRATA_WEIGHT_INT8_PER_CHANNEL) || !t.g_idx.empty())
    return absl::InvalidArgumentError(
        absl::StrCat(WeightFormatName(t.format), " cannot be re-expressed as INT8 groups"));
  if (group_size <= 0 || (t.group_size > 0 && t.group_size % group_size != 0))
    return absl::InvalidArgumentError(absl::StrCat("group size ", group_size, " does not divide ", t.group_size));
  QuantizedTensor o;
  o.format = STRATA_WEIGHT_INT8_PER_CHANNEL;
  o.rows = t.rows;
  o.cols = t.cols;
  o.group_size = group_size;
  o.scales_dtype = STRATA_DTYPE_F32;
  const int64_t ng = o.NumGroups(), src_ng = t.NumGroups();
  o.data.resize(static_cast<size_t>(t.rows * t.cols));
  o.scales.resize(static_cast<size_t>(t.rows * ng) * 4);
  for (int64_t r = 0; r < t.rows; ++r) {
    for (int64_t g = 0; g < ng; ++g) {
      const float s = t.Scale(r, t.GroupOf(g * group_size));
      std::memcpy(o.scales.data() + 4 * (r * ng + g), &s, 4);
    }
    for (int64_t c = 0; c < t.cols; ++c) {
      int v;
      if (int4) {
        const int64_t g = t.GroupOf(c);
        v = Int4At(t.data.data() + r * Int4RowBytes(t.cols), c) - (t.zeros.empty() ? 8 : t.zeros[r * src_ng + g]);
      } else {
        v = static_cast<int8_t>(t.data[r * t.cols + c]);
      }
      o.data[r * t.cols + c] = static_cast<uint8_t>(static_cast<int8_t>(v));
    }
  }
  return o;
}

absl::StatusOr<QuantizedTensor> StackQuantizedRows(const std::vector<const QuantizedTensor*>& parts,
                                                   const std::string& what) {
  if (parts.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": nothing to stack"));
  bool same = true;
  for (const QuantizedTensor* p : parts) same &= SameLayout(*p, *parts[0]);
  std::vector<QuantizedTensor> converted;
  std::vector<const QuantizedTensor*> use = parts;
  if (!same) {
    // Common INT8 grouping: the gcd of the parts' group sizes (per-row parts take any).
    int32_t g = 0;
    for (const QuantizedTensor* p : parts) {
      if (p->cols != parts[0]->cols)
        return absl::InvalidArgumentError(absl::StrCat(what, ": parts differ in columns"));
      if (p->group_size > 0) g = std::gcd(g, p->group_size);
    }
    if (g == 0) g = static_cast<int32_t>(parts[0]->cols);
    converted.reserve(parts.size());
    for (const QuantizedTensor* p : parts) {
      auto c = ToInt8Groups(*p, g);
      if (!c.ok())
        return absl::InvalidArgumentError(absl::StrCat(what, ": parts of different layouts (", c.status().message(), ")"));
      converted.push_back(*std::move(c));
    }
    use.clear();
    for (const QuantizedTensor& c : converted) use.push_back(&c);
  }
  QuantizedTensor o = *use[0];
  for (size_t i = 1; i < use.size(); ++i) {
    const QuantizedTensor& p = *use[i];
    o.rows += p.rows;
    Append(o.data, p.data);
    Append(o.scales, p.scales);
    Append(o.zeros, p.zeros);
    Append(o.outlier_weights, p.outlier_weights);
  }
  if (absl::Status s = o.Validate(what); !s.ok()) return s;
  return o;
}

}  // namespace strata
