#include "backends/cuda/gemm_config_table.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

namespace strata::cuda {
namespace {

bool DtypeOf(const std::string& s, int32_t* t) {
  if (s == "f32") {
    *t = STRATA_DTYPE_F32;
  } else if (s == "f16") {
    *t = STRATA_DTYPE_F16;
  } else if (s == "bf16") {
    *t = STRATA_DTYPE_BF16;
  } else {
    return false;
  }
  return true;
}

const char* DtypeName(int32_t t) {
  return t == STRATA_DTYPE_F32 ? "f32" : t == STRATA_DTYPE_F16 ? "f16" : "bf16";
}

// Each attribute with its size: the cluster shape id is a uint16_t, the others 32-bit.
bool SetConfig(cublasLtMatmulAlgo_t* a, cublasLtMatmulAlgoConfigAttributes_t attr, int32_t v) {
  if (attr == CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID) {
    const uint16_t s = static_cast<uint16_t>(v);
    return cublasLtMatmulAlgoConfigSetAttribute(a, attr, &s, sizeof(s)) == CUBLAS_STATUS_SUCCESS;
  }
  return cublasLtMatmulAlgoConfigSetAttribute(a, attr, &v, sizeof(v)) == CUBLAS_STATUS_SUCCESS;
}

// The same attributes read back; -1 where the algorithm has no such attribute.
int32_t GetConfig(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  size_t written = 0;
  if (attr == CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID) {
    uint16_t v = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS) return -1;
    return v;
  }
  int32_t v = -1;
  if (cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS) return -1;
  return v;
}

}  // namespace

Status GemmConfigTable::Load(const std::string& path, GemmConfigTable* out) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("gemm_configs: cannot read '", path, "'");
  std::stringstream text;
  text << in.rdbuf();
  return Parse(text.str(), path, out);
}

Status GemmConfigTable::Parse(const std::string& text, const std::string& origin, GemmConfigTable* out) {
  GemmConfigTable t;
  std::istringstream lines(text);
  int line_no = 0;
  for (std::string line; std::getline(lines, line);) {
    ++line_no;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream f(line);
    std::vector<std::string> v;
    for (std::string w; f >> w;) v.push_back(w);
    if (v.empty()) continue;
    auto bad = [&](const std::string& why) {
      return InvalidArgument("gemm_configs: ", origin, " line ", line_no, ": ", why,
                             " (expected: m n k w_dtype x_dtype out_dtype accumulate algo_id tile stages splitk "
                             "reduction swizzle cluster)");
    };
    if (v.size() != 14) return bad(StrCat(v.size(), " fields"));
    int64_t dims[3];
    for (int i = 0; i < 3; ++i) {
      char* end = nullptr;
      dims[i] = std::strtoll(v[i].c_str(), &end, 10);
      if (*end != '\0' || dims[i] <= 0) return bad(StrCat("size '", v[i], "'"));
    }
    int32_t types[3];
    for (int i = 0; i < 3; ++i) {
      if (!DtypeOf(v[3 + i], &types[i])) return bad(StrCat("dtype '", v[3 + i], "'"));
    }
    int32_t ints[7];
    for (int i = 0; i < 8; ++i) {
      char* end = nullptr;
      const long x = std::strtol(v[6 + i].c_str(), &end, 10);
      if (*end != '\0' || x < 0 || x > 1000000) return bad(StrCat("value '", v[6 + i], "'"));
      if (i == 0) {
        if (x > 1) return bad("accumulate must be 0 or 1");
        continue;
      }
      ints[i - 1] = static_cast<int32_t>(x);
    }
    GemmConfig c;
    c.algo_id = ints[0];
    c.tile = ints[1];
    c.stages = ints[2];
    c.splitk = ints[3] == 0 ? 1 : ints[3];
    c.reduction = ints[4];
    c.swizzle = ints[5];
    c.cluster = ints[6];
    t.entries_[Key{dims[0], dims[1], dims[2], types[0], types[1], types[2], v[6] == "1"}] = c;
  }
  *out = std::move(t);
  return Ok();
}

const GemmConfig* GemmConfigTable::Find(int64_t m, int64_t n, int64_t k, int32_t w_dtype, int32_t x_dtype,
                                        int32_t out_dtype, bool accumulate) const {
  auto it = entries_.find(Key{m, n, k, w_dtype, x_dtype, out_dtype, accumulate});
  return it == entries_.end() ? nullptr : &it->second;
}

bool GemmConfigTable::Configure(cublasLtHandle_t h, const GemmConfig& c, cudaDataType_t w, cudaDataType_t x,
                                cudaDataType_t out, cublasLtMatmulAlgo_t* algo) {
  cublasLtMatmulAlgo_t a{};
  if (cublasLtMatmulAlgoInit(h, CUBLAS_COMPUTE_32F, CUDA_R_32F, w, x, out, out, c.algo_id, &a) !=
      CUBLAS_STATUS_SUCCESS) {
    return false;
  }
  if (!SetConfig(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, c.tile) || !SetConfig(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, c.stages) ||
      !SetConfig(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, c.splitk) ||
      !SetConfig(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, c.reduction) ||
      !SetConfig(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, c.swizzle) ||
      !SetConfig(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, c.cluster)) {
    return false;
  }
  *algo = a;
  return true;
}

GemmConfig GemmConfigTable::Read(const cublasLtMatmulAlgo_t& a) {
  GemmConfig c;
  c.algo_id = GetConfig(a, CUBLASLT_ALGO_CONFIG_ID);
  c.tile = GetConfig(a, CUBLASLT_ALGO_CONFIG_TILE_ID);
  c.stages = GetConfig(a, CUBLASLT_ALGO_CONFIG_STAGES_ID);
  c.splitk = std::max(1, GetConfig(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM));
  c.reduction = std::max(0, GetConfig(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME));
  c.swizzle = std::max(0, GetConfig(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING));
  c.cluster = std::max(0, GetConfig(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
  return c;
}

std::string GemmConfigTable::Line(int64_t m, int64_t n, int64_t k, int32_t w_dtype, int32_t x_dtype,
                                  int32_t out_dtype, bool accumulate, const GemmConfig& c) {
  return StrCat(m, " ", n, " ", k, " ", DtypeName(w_dtype), " ", DtypeName(x_dtype), " ", DtypeName(out_dtype), " ",
                accumulate ? 1 : 0, " ", c.algo_id, " ", c.tile, " ", c.stages, " ", c.splitk, " ", c.reduction, " ",
                c.swizzle, " ", c.cluster);
}

}  // namespace strata::cuda
