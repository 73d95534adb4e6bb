// safetensors + config.json: the hf-tiny models, writer round trips, sharding, bf16 export and
// hostile headers.
#include "core/model/formats/safetensors_file.h"

#include <cmath>

#include "core/common/half.h"
#include "core/model/formats/hf_bf16_export.h"
#include "core/model/formats/hf_tensor_names.h"
#include "core/model/formats/safetensors_writer.h"
#include "core/model/model_file.h"
#include "gtest/gtest.h"
#include "model_test_util.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

using namespace testing_util;
using nlohmann::json;

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// Checks every tensor of `m` against the raw bytes of dir/model.safetensors, located with an
// independent parse of its header here.
void ExpectTensorsMatchFile(const ModelFile& m, const std::string& dir) {
  const auto bytes = ReadAll(dir + "/model.safetensors");
  uint64_t len;
  std::memcpy(&len, bytes.data(), 8);
  const json header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + len);
  size_t checked = 0;
  for (const auto& [hf_name, info] : header.items()) {
    if (hf_name == "__metadata__") continue;
    const std::string name = CanonicalFromHfName(hf_name);
    if (name == "output" && m.config.tie_word_embeddings) continue;
    const TensorView* t = m.Find(name);
    ASSERT_NE(t, nullptr) << hf_name;
    EXPECT_EQ(t->shape, info["shape"].get<std::vector<int64_t>>()) << hf_name;
    EXPECT_STREQ(TensorDTypeName(t->dtype), info["dtype"].get<std::string>().c_str());
    const uint64_t begin = info["data_offsets"][0], end = info["data_offsets"][1];
    ASSERT_EQ(t->bytes, end - begin) << hf_name;
    EXPECT_EQ(std::memcmp(t->data, bytes.data() + 8 + len + begin, t->bytes), 0) << hf_name;
    ++checked;
  }
  EXPECT_EQ(checked, m.tensors.size());
}

void ExpectConfigMatchesJson(const ModelConfig& c, const json& j) {
  EXPECT_EQ(c.vocab_size, j["vocab_size"].get<int64_t>());
  EXPECT_EQ(c.hidden_size, j["hidden_size"].get<int64_t>());
  EXPECT_EQ(c.intermediate_size, j["intermediate_size"].get<int64_t>());
  EXPECT_EQ(c.num_layers, j["num_hidden_layers"].get<int64_t>());
  EXPECT_EQ(c.num_heads, j["num_attention_heads"].get<int64_t>());
  EXPECT_EQ(c.num_kv_heads, j["num_key_value_heads"].get<int64_t>());
  EXPECT_EQ(c.max_position, j["max_position_embeddings"].get<int64_t>());
  EXPECT_EQ(c.rms_norm_eps, j["rms_norm_eps"].get<double>());
  EXPECT_EQ(c.rope_theta, j["rope_parameters"]["rope_theta"].get<double>());
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kNone);
  EXPECT_EQ(c.tie_word_embeddings, j["tie_word_embeddings"].get<bool>());
  const int64_t head_dim = j.contains("head_dim") ? j["head_dim"].get<int64_t>()
                                                  : c.hidden_size / c.num_heads;
  EXPECT_EQ(c.head_dim, head_dim);
  EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
}

TEST(HfCheckpoint, LoadsLlamaGqa) {
  const std::string dir = SharedPath("models/hf-tiny/llama-gqa");
  STRATA_REQUIRE_SHARED(dir + "/model.safetensors");
  auto m = LoadModelFile(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  const json j = ReadJson(dir + "/config.json");
  ExpectConfigMatchesJson((*m)->config, j);
  EXPECT_EQ((*m)->config.architecture, "llama");
  EXPECT_FALSE((*m)->config.attention_bias);
  EXPECT_EQ((*m)->config.bos_token_id, j["bos_token_id"].get<int32_t>());
  EXPECT_EQ((*m)->config.eos_token_ids, std::vector<int32_t>{j["eos_token_id"].get<int32_t>()});
  EXPECT_NE((*m)->Find("output"), nullptr);
  EXPECT_EQ((*m)->Find("layers.0.wq.bias"), nullptr);
  EXPECT_EQ((*m)->tokenizer.kind, TokenizerSource::Kind::kNone);  // no tokenizer.json there
  ExpectTensorsMatchFile(**m, dir);
}

TEST(HfCheckpoint, LoadsQwen2WithBiasAndTiedEmbeddings) {
  const std::string dir = SharedPath("models/hf-tiny/qwen2-bias");
  STRATA_REQUIRE_SHARED(dir + "/model.safetensors");
  auto m = LoadModelFile(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  ExpectConfigMatchesJson((*m)->config, ReadJson(dir + "/config.json"));
  EXPECT_EQ((*m)->config.architecture, "qwen2");
  EXPECT_TRUE((*m)->config.tie_word_embeddings);
  EXPECT_TRUE((*m)->config.attention_bias);
  EXPECT_EQ((*m)->Find("output"), nullptr);
  const int64_t kv = (*m)->config.num_kv_heads * (*m)->config.head_dim;
  for (int i = 0; i < (*m)->config.num_layers; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    ASSERT_NE((*m)->Find(l + "wq.bias"), nullptr);
    EXPECT_EQ((*m)->Find(l + "wq.bias")->shape,
              (std::vector<int64_t>{(*m)->config.num_heads * (*m)->config.head_dim}));
    ASSERT_NE((*m)->Find(l + "wk.bias"), nullptr);
    EXPECT_EQ((*m)->Find(l + "wk.bias")->shape, (std::vector<int64_t>{kv}));
    ASSERT_NE((*m)->Find(l + "wv.bias"), nullptr);
  }
  EXPECT_EQ((*m)->config.bos_token_id, -1);  // null in config.json
  EXPECT_TRUE((*m)->config.eos_token_ids.empty());
  ExpectTensorsMatchFile(**m, dir);
}

TEST(HfCheckpoint, TokenizerFilesAndChatTemplate) {
  const std::string src = SharedPath("models/hf-tiny/llama-gqa");
  STRATA_REQUIRE_SHARED(src + "/model.safetensors");
  const std::string dir = TmpPath("dir");
  std::filesystem::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) {
    std::filesystem::copy_file(src + "/" + f, dir + "/" + f,
                               std::filesystem::copy_options::overwrite_existing);
  }
  WriteText(dir + "/tokenizer.json", "{}");
  WriteText(dir + "/tokenizer_config.json", R"({"chat_template": "{{ bos_token }}"})");
  WriteText(dir + "/generation_config.json", R"({"eos_token_id": [2, 7]})");
  auto m = LoadModelFile(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->tokenizer.kind, TokenizerSource::Kind::kTokenizerJson);
  EXPECT_EQ((*m)->tokenizer.tokenizer_json_path, dir + "/tokenizer.json");
  EXPECT_EQ((*m)->tokenizer.tokenizer_config_path, dir + "/tokenizer_config.json");
  EXPECT_EQ((*m)->chat_template, "{{ bos_token }}");
  EXPECT_EQ((*m)->config.eos_token_ids, (std::vector<int32_t>{2, 7}));
}

// Independent round-to-nearest-even check: no other bf16 value is closer to f.
void ExpectNearestBf16(float f, uint16_t got) {
  const double err = std::fabs(static_cast<double>(Bf16ToF32(got)) - f);
  for (int d : {-1, 1}) {
    const double other = std::fabs(static_cast<double>(Bf16ToF32(static_cast<uint16_t>(got + d))) - f);
    ASSERT_LE(err, other) << f;
    if (err == other) {
      ASSERT_EQ(got & 1, 0) << "tie not rounded to even: " << f;
    }
  }
}

TEST(HfCheckpoint, ExportsBf16Directory) {
  const std::string src = SharedPath("models/hf-tiny/qwen2-bias");
  STRATA_REQUIRE_SHARED(src + "/model.safetensors");
  auto m = LoadModelFile(src);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string out = TmpPath("bf16");
  std::filesystem::remove_all(out);
  ASSERT_TRUE(ExportHfModelAsBf16(**m, out).ok());
  EXPECT_EQ(ReadAll(out + "/config.json"), ReadAll(src + "/config.json"));
  auto b = LoadModelFile(out);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ((*b)->tensors.size(), (*m)->tensors.size());
  for (const auto& [name, t] : (*m)->tensors) {
    const TensorView* h = (*b)->Find(name);
    ASSERT_NE(h, nullptr) << name;
    ASSERT_EQ(h->dtype, TensorDType::kBF16);
    ASSERT_EQ(h->shape, t.shape);
    for (int64_t i = 0; i < t.numel(); ++i) {
      float f;
      uint16_t v;
      std::memcpy(&f, t.data + 4 * i, 4);
      std::memcpy(&v, h->data + 2 * i, 2);
      ExpectNearestBf16(f, v);
    }
  }
}

std::vector<SafetensorsTensor> SmallTensors() {
  std::vector<SafetensorsTensor> ts;
  std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f};
  ts.push_back({"a", TensorDType::kF32, {2, 3}, AsBytes(a)});
  std::vector<uint16_t> b = {F32ToF16(0.5f), F32ToF16(-1.0f), F32ToF16(65504.0f)};
  ts.push_back({"b", TensorDType::kF16, {3}, AsBytes(b)});
  std::vector<uint16_t> c = {F32ToBf16(2.0f), F32ToBf16(-0.125f)};
  ts.push_back({"c", TensorDType::kBF16, {1, 2}, AsBytes(c)});
  return ts;
}

TEST(SafetensorsFile, WriterRoundTrip) {
  const std::string p = TmpPath("rt.safetensors");
  const auto ts = SmallTensors();
  ASSERT_TRUE(WriteSafetensors(p, ts).ok());
  ModelFile m;
  auto got = LoadSafetensorsFile(p, &m);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), ts.size());
  for (const auto& t : ts) {
    const TensorView& v = got->at(t.name);
    EXPECT_EQ(v.dtype, t.dtype);
    EXPECT_EQ(v.shape, t.shape);
    ASSERT_EQ(v.bytes, t.data.size());
    EXPECT_EQ(std::memcmp(v.data, t.data.data(), v.bytes), 0);
  }
}

TEST(SafetensorsFile, ShardedIndex) {
  const std::string src = SharedPath("models/hf-tiny/llama-gqa");
  STRATA_REQUIRE_SHARED(src + "/model.safetensors");
  auto m = LoadModelFile(src);
  ASSERT_TRUE(m.ok()) << m.status();
  // Split the tensors over two shards, odd and even, with an index.
  std::vector<SafetensorsTensor> s1, s2;
  json weight_map;
  int k = 0;
  for (const auto& [name, t] : (*m)->tensors) {
    const std::string hf = HfNameFromCanonical(name);
    auto& shard = (k++ % 2) ? s2 : s1;
    shard.push_back({hf, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.bytes)});
    weight_map[hf] = (&shard == &s1) ? "model-00001-of-00002.safetensors"
                                     : "model-00002-of-00002.safetensors";
  }
  const std::string dir = TmpPath("sharded");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00001-of-00002.safetensors", s1).ok());
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00002-of-00002.safetensors", s2).ok());
  std::filesystem::copy_file(src + "/config.json", dir + "/config.json");
  WriteText(dir + "/model.safetensors.index.json", json{{"weight_map", weight_map}}.dump());
  auto sharded = LoadModelFile(dir);
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  ASSERT_EQ((*sharded)->tensors.size(), (*m)->tensors.size());
  for (const auto& [name, t] : (*m)->tensors) {
    const TensorView* s = (*sharded)->Find(name);
    ASSERT_NE(s, nullptr) << name;
    ASSERT_EQ(s->bytes, t.bytes);
    EXPECT_EQ(std::memcmp(s->data, t.data, t.bytes), 0) << name;
  }
  // An index that names a file outside the directory, or a tensor in the wrong shard.
  json bad = weight_map;
  bad[weight_map.begin().key()] = "../model-00001-of-00002.safetensors";
  WriteText(dir + "/model.safetensors.index.json", json{{"weight_map", bad}}.dump());
  EXPECT_FALSE(LoadModelFile(dir).ok());
  bad = weight_map;
  const std::string first = weight_map.begin().key();
  bad[first] = weight_map[first] == "model-00001-of-00002.safetensors"
                   ? "model-00002-of-00002.safetensors"
                   : "model-00001-of-00002.safetensors";
  WriteText(dir + "/model.safetensors.index.json", json{{"weight_map", bad}}.dump());
  EXPECT_FALSE(LoadModelFile(dir).ok());
  WriteText(dir + "/model.safetensors.index.json", "{not json");
  EXPECT_FALSE(LoadModelFile(dir).ok());
}

// ---- hostile inputs -------------------------------------------------------------------------

// A safetensors file from a header string and a data area.
std::vector<uint8_t> RawSafetensors(const std::string& header, size_t data_bytes, uint64_t len_override = 0) {
  std::vector<uint8_t> out(8 + header.size() + data_bytes, 0);
  const uint64_t len = len_override ? len_override : header.size();
  std::memcpy(out.data(), &len, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

absl::Status LoadRaw(const std::vector<uint8_t>& b) {
  const std::string p = TmpPath("x.safetensors");
  WriteAll(p, b);
  ModelFile m;
  auto r = LoadSafetensorsFile(p, &m);
  if (r.ok()) return absl::OkStatus();
  EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status();
  return r.status();
}

TEST(SafetensorsFile, AcceptsWellFormedRawHeader) {
  EXPECT_TRUE(LoadRaw(RawSafetensors(
      R"({"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})", 16)).ok());
}

TEST(SafetensorsFile, RejectsCorruptHeaders) {
  struct Case {
    const char* what;
    std::string header;
    size_t data;
  };
  const std::vector<Case> cases = {
      {"not json", "{\"x\": ", 0},
      {"not an object", "[1,2]", 0},
      {"unknown dtype", R"({"x":{"dtype":"F99","shape":[2],"data_offsets":[0,8]}})", 8},
      {"unsupported dtype", R"({"x":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8},
      {"dtype not a string", R"({"x":{"dtype":3,"shape":[2],"data_offsets":[0,8]}})", 8},
      {"missing shape", R"({"x":{"dtype":"F32","data_offsets":[0,8]}})", 8},
      {"negative dim", R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8},
      {"huge dims", R"({"x":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", 8},
      {"shape vs offsets", R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8},
      {"offsets past end", R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 8},
      {"begin after end", R"({"x":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8},
      {"huge offsets", R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,0]}})", 8},
      {"one offset", R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8},
      {"overlap", R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12},
      {"gap", R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"y":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12},
      {"misaligned", R"({"x":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},"y":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})", 6},
      {"trailing bytes", R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8},
      {"entry not object", R"({"x":5})", 0},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(LoadRaw(RawSafetensors(c.header, c.data)).ok()) << c.what;
  }
  absl::Status st = LoadRaw(RawSafetensors(R"({"x":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8));
  EXPECT_NE(st.message().find("I64"), std::string::npos) << st;
  // Header length past the end of the file, and absurd.
  EXPECT_FALSE(LoadRaw(RawSafetensors("{}", 0, 1000)).ok());
  EXPECT_FALSE(LoadRaw(RawSafetensors("{}", 0, ~uint64_t{0})).ok());
  EXPECT_FALSE(LoadRaw({1, 2, 3}).ok());
  EXPECT_FALSE(LoadRaw({}).ok());
}

TEST(SafetensorsFile, TruncatedAtManyCutPoints) {
  const std::string p = SharedPath("models/hf-tiny/llama-gqa/model.safetensors");
  STRATA_REQUIRE_SHARED(p);
  const auto bytes = ReadAll(p);
  for (int k = 0; k < 50; ++k) {
    std::vector<uint8_t> b(bytes.begin(), bytes.begin() + bytes.size() * k / 50);
    EXPECT_FALSE(LoadRaw(b).ok()) << k;
  }
  EXPECT_FALSE(LoadRaw(std::vector<uint8_t>(bytes.begin(), bytes.end() - 1)).ok());
}

TEST(HfCheckpoint, MissingFilesAreErrors) {
  const std::string dir = TmpPath("empty");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto m = LoadModelFile(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("config.json"), std::string::npos) << m.status();
  const std::string src = SharedPath("models/hf-tiny/llama-gqa");
  STRATA_REQUIRE_SHARED(src + "/config.json");
  std::filesystem::copy_file(src + "/config.json", dir + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  m = LoadModelFile(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("model.safetensors"), std::string::npos) << m.status();
}

}  // namespace
}  // namespace strata
