// GGUF reader and writer: the real stories260K conversion, round trips, and hostile inputs.
#include "core/model/formats/gguf_file.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/common/half.h"
#include "core/model/formats/gguf_writer.h"
#include "core/model/model_file.h"
#include "gtest/gtest.h"
#include "model_test_util.h"

namespace strata {
namespace {

using namespace testing_util;

const std::string kGguf = "models/stories260K/stories260K.gguf";

TEST(GgufFile, LoadsStories260K) {
  const std::string path = SharedPath(kGguf);
  STRATA_REQUIRE_SHARED(path);
  auto m = LoadModelFile(path);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config;
  // PROVENANCE.md: dim 64, hidden 172, 5 layers, 8 heads, 4 KV heads, vocab 512.
  EXPECT_EQ((*m)->format, "gguf");
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  // The model was trained with context 512 (PROVENANCE, and the .bin's seq_len), but llama.cpp's
  // llama2.c converter wrote its default llama.context_length = 2048 into this GGUF; the loader
  // reports what the file says.
  EXPECT_EQ(c.max_position, 2048);
  EXPECT_FLOAT_EQ(static_cast<float>(c.rms_norm_eps), 1e-5f);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_style, RopeStyle::kInterleaved);
  EXPECT_EQ(c.partial_rotary_factor, 1.0);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.tie_word_embeddings);  // the GGUF stores output.weight explicitly
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{2});  // tokenizer.ggml.eos_token_id

  const TokenizerSource& t = (*m)->tokenizer;
  ASSERT_EQ(t.kind, TokenizerSource::Kind::kSentencePieceVocab);
  ASSERT_EQ(t.vocab.pieces.size(), 512u);
  EXPECT_EQ(t.vocab.pieces[0], "<unk>");
  EXPECT_EQ(t.vocab.pieces[1], "<s>");
  EXPECT_EQ(t.vocab.pieces[2], "</s>");
  EXPECT_EQ(t.vocab.pieces[3], "<0x00>");
  EXPECT_EQ(t.vocab.pieces[259], "\xE2\x96\x81t");
  EXPECT_EQ(t.vocab.types[0], 2);
  EXPECT_EQ(t.vocab.types[1], 3);
  EXPECT_EQ(t.vocab.types[3], 6);
  EXPECT_EQ(t.vocab.scores[260], -1.0f);
  EXPECT_EQ(t.vocab.bos_id, 1);
  EXPECT_EQ(t.vocab.eos_id, 2);
  EXPECT_EQ(t.vocab.unk_id, 0);
  EXPECT_TRUE(t.vocab.add_bos);

  const TensorView* emb = (*m)->Find("tok_embeddings");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(emb->dtype, TensorDType::kF32);
  const TensorView* wk = (*m)->Find("layers.4.wk");
  ASSERT_NE(wk, nullptr);
  EXPECT_EQ(wk->shape, (std::vector<int64_t>{32, 64}));  // [kv_heads*head_dim, hidden]
  EXPECT_EQ((*m)->tensors.size(), 48u);
}

TEST(GgufFile, ParsesMetadataTypesAndArrays) {
  const std::string path = SharedPath(kGguf);
  STRATA_REQUIRE_SHARED(path);
  auto f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok());
  auto g = GgufFile::Parse(**f);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->version, 3u);
  EXPECT_EQ((*g)->alignment, 32u);
  EXPECT_EQ((*g)->metadata.size(), 19u);
  EXPECT_EQ((*g)->tensors.size(), 48u);
  EXPECT_EQ((*g)->data_offset % 32, 0u);
  auto name = (*g)->GetString("general.name");
  ASSERT_TRUE(name.ok());
  EXPECT_EQ(*name, "llama");
  // A wrong-typed read is an error naming the key, not a crash.
  auto bad = (*g)->GetString("llama.block_count");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("llama.block_count"), std::string::npos);
}

std::vector<uint8_t> F32Bytes(const std::vector<float>& v) { return AsBytes(v); }

// A small but complete llama model written with GgufWriter in the given dtype.
absl::Status WriteTinyLlama(const std::string& path, TensorDType dtype, bool with_output,
                            std::map<std::string, std::vector<float>>* values) {
  const int64_t H = 8, F = 12, V = 6, L = 2, heads = 2, kv = 1, hd = 4;
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddString("general.name", "tiny");
  w.AddUint32("general.alignment", 32);
  w.AddUint32("llama.context_length", 64);
  w.AddUint32("llama.embedding_length", H);
  w.AddUint32("llama.block_count", L);
  w.AddUint32("llama.feed_forward_length", F);
  w.AddUint32("llama.attention.head_count", heads);
  w.AddUint32("llama.attention.head_count_kv", kv);
  w.AddFloat32("llama.attention.layer_norm_rms_epsilon", 1e-6f);
  w.AddFloat32("llama.rope.freq_base", 500000.0f);
  w.AddUint32("llama.rope.dimension_count", hd);
  w.AddString("tokenizer.ggml.model", "llama");
  w.AddStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\xE2\x96\x81" "a", "b", "c"});
  w.AddFloat32Array("tokenizer.ggml.scores", {0, 0, 0, -1, -2, -3});
  w.AddInt32Array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1});
  w.AddUint32("tokenizer.ggml.bos_token_id", 1);
  w.AddUint32("tokenizer.ggml.eos_token_id", 2);
  w.AddBool("tokenizer.ggml.add_bos_token", false);
  w.AddString("tokenizer.chat_template", "{{ messages }}");
  float next = 0.25f;
  auto add = [&](const std::string& canonical, std::vector<int64_t> shape) -> absl::Status {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(n);
    // Values exactly representable in f16 and bf16, so every dtype round-trips exactly.
    for (auto& x : v) {
      x = next;
      next = next >= 8.0f ? -8.0f : next + 0.25f;
    }
    (*values)[canonical] = v;
    std::vector<uint8_t> bytes;
    if (dtype == TensorDType::kF32) {
      bytes = F32Bytes(v);
    } else {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = dtype == TensorDType::kF16 ? F32ToF16(v[i]) : F32ToBf16(v[i]);
      bytes = AsBytes(h);
    }
    return w.AddTensor(GgufNameFromCanonical(canonical), dtype, shape, std::move(bytes));
  };
  absl::Status st = add("tok_embeddings", {V, H});
  for (int i = 0; i < L && st.ok(); ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    for (auto [n, s] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
             {"attn_norm", {H}}, {"wq", {heads * hd, H}}, {"wk", {kv * hd, H}},
             {"wv", {kv * hd, H}}, {"wo", {H, heads * hd}}, {"ffn_norm", {H}},
             {"w_gate", {F, H}}, {"w_up", {F, H}}, {"w_down", {H, F}}}) {
      if (st.ok()) st = add(l + n, s);
    }
  }
  if (st.ok()) st = add("norm", {H});
  if (st.ok() && with_output) st = add("output", {V, H});
  if (!st.ok()) return st;
  return w.Write(path);
}

class GgufRoundTrip : public ::testing::TestWithParam<TensorDType> {};

TEST_P(GgufRoundTrip, WriteThenReadIsEqual) {
  const std::string path = TmpPath(std::string(TensorDTypeName(GetParam())) + ".gguf");
  std::map<std::string, std::vector<float>> values;
  absl::Status written = WriteTinyLlama(path, GetParam(), /*with_output=*/true, &values);
  ASSERT_TRUE(written.ok()) << written;
  auto m = LoadModelFile(path);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config;
  EXPECT_EQ(c.hidden_size, 8);
  EXPECT_EQ(c.intermediate_size, 12);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_heads, 2);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.vocab_size, 6);
  EXPECT_EQ(c.max_position, 64);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_FLOAT_EQ(static_cast<float>(c.rms_norm_eps), 1e-6f);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ((*m)->chat_template, "{{ messages }}");
  EXPECT_FALSE((*m)->tokenizer.vocab.add_bos);
  EXPECT_EQ((*m)->tokenizer.vocab.pieces[3], "\xE2\x96\x81" "a");
  EXPECT_EQ((*m)->tokenizer.vocab.scores[5], -3.0f);
  ASSERT_EQ((*m)->tensors.size(), values.size());
  for (const auto& [name, expect] : values) {
    const TensorView* t = (*m)->Find(name);
    ASSERT_NE(t, nullptr) << name;
    ASSERT_EQ(t->dtype, GetParam());
    ASSERT_EQ(t->numel(), static_cast<int64_t>(expect.size()));
    for (size_t i = 0; i < expect.size(); ++i) {
      float got;
      if (t->dtype == TensorDType::kF32) {
        std::memcpy(&got, t->data + 4 * i, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, t->data + 2 * i, 2);
        got = t->dtype == TensorDType::kF16 ? F16ToF32(h) : Bf16ToF32(h);
      }
      ASSERT_EQ(got, expect[i]) << name << "[" << i << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, GgufRoundTrip,
                         ::testing::Values(TensorDType::kF32, TensorDType::kF16, TensorDType::kBF16),
                         [](const auto& info) { return std::string(TensorDTypeName(info.param)); });

TEST(GgufFile, MissingOutputMeansTiedEmbeddings) {
  const std::string path = TmpPath("tied.gguf");
  std::map<std::string, std::vector<float>> values;
  ASSERT_TRUE(WriteTinyLlama(path, TensorDType::kF32, /*with_output=*/false, &values).ok());
  auto m = LoadModelFile(path);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE((*m)->config.tie_word_embeddings);
  EXPECT_EQ((*m)->Find("output"), nullptr);
}

TEST(GgufFile, ParsesQ8_0TensorInfo) {
  // One Q8_0 block: f16 scale 0x3800 (= 0.5 in IEEE half), quants -16..15.
  std::vector<uint8_t> block(34);
  block[0] = 0x00;
  block[1] = 0x38;
  for (int j = 0; j < 32; ++j) block[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  std::vector<uint8_t> two = block;
  two.insert(two.end(), block.begin(), block.end());
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  ASSERT_TRUE(w.AddRawTensor("blk.0.ffn_up.weight", 8, {2, 32}, two).ok());
  const std::string path = TmpPath("q8.gguf");
  ASSERT_TRUE(w.Write(path).ok());
  auto f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok());
  auto g = GgufFile::Parse(**f);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_FALSE(LoadGgufModel(path).ok());  // no llama config in this file
  ASSERT_EQ((*g)->tensors.size(), 1u);
  EXPECT_EQ((*g)->tensors[0].bytes, 68u);
  EXPECT_EQ((*g)->tensors[0].Shape(), (std::vector<int64_t>{2, 32}));
}

// Tensors added with AddTensorLater are made while the file is written (make_random_llama
// writes a 16 GB model that way), in the order added: the file is byte for byte the one
// written from the same data up front; a producer's wrong byte count or error fails Write.
TEST(GgufFile, TensorsMadeAtWriteTimeGiveTheSameFile) {
  const std::vector<float> a = {1.0f, -2.0f, 3.5f, 0.25f, 7.0f, -1.0f};
  std::vector<uint8_t> a16(a.size() * 2);
  for (size_t i = 0; i < a.size(); ++i) {
    const uint16_t h = F32ToF16(a[i]);
    std::memcpy(a16.data() + 2 * i, &h, 2);
  }
  std::vector<uint8_t> raw(34, 3);
  auto write_now = [&](const std::string& path) {
    GgufWriter w;
    w.AddString("general.architecture", "llama");
    ASSERT_TRUE(w.AddTensor("first.weight", TensorDType::kF16, {2, 3}, a16).ok());
    ASSERT_TRUE(w.AddRawTensor("second.weight", 8, {1, 32}, raw).ok());
    ASSERT_TRUE(w.Write(path).ok());
  };
  std::vector<std::string> order;
  auto write_later = [&](const std::string& path) {
    GgufWriter w;
    w.AddString("general.architecture", "llama");
    ASSERT_TRUE(w.AddTensorLater("first.weight", TensorDType::kF16, {2, 3}, [&]() -> absl::StatusOr<std::vector<uint8_t>> {
                   order.push_back("first");
                   return a16;
                 }).ok());
    ASSERT_TRUE(w.AddTensorLater("second.weight", 8, {1, 32}, 34, [&]() -> absl::StatusOr<std::vector<uint8_t>> {
                   order.push_back("second");
                   return raw;
                 }).ok());
    EXPECT_TRUE(order.empty());  // nothing made before Write
    ASSERT_TRUE(w.Write(path).ok());
  };
  const std::string now = TmpPath("now.gguf"), later = TmpPath("later.gguf");
  write_now(now);
  write_later(later);
  EXPECT_EQ(order, (std::vector<std::string>{"first", "second"}));
  auto read = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  EXPECT_EQ(read(now), read(later));
  EXPECT_FALSE(read(now).empty());

  GgufWriter wrong;
  ASSERT_TRUE(wrong.AddTensorLater("t.weight", TensorDType::kF32, {4}, [] {
                     return absl::StatusOr<std::vector<uint8_t>>(std::vector<uint8_t>(12));
                   }).ok());
  EXPECT_FALSE(wrong.Write(TmpPath("wrong.gguf")).ok());  // 12 bytes made, 16 declared
  GgufWriter failing;
  ASSERT_TRUE(failing.AddTensorLater("t.weight", TensorDType::kF32, {4}, [] {
                       return absl::StatusOr<std::vector<uint8_t>>(absl::DataLossError("no data"));
                     }).ok());
  const absl::Status st = failing.Write(TmpPath("failing.gguf"));
  EXPECT_TRUE(absl::IsDataLoss(st)) << st;
}

// A Q8_0 embedding comes back as F32 scale * quant.
TEST(GgufFile, DequantizesQ8_0InModel) {
  std::vector<uint8_t> block(34);
  block[1] = 0x38;  // scale 0.5
  for (int j = 0; j < 32; ++j) block[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddUint32("llama.context_length", 16);
  w.AddUint32("llama.embedding_length", 32);
  w.AddUint32("llama.block_count", 0);
  w.AddUint32("llama.feed_forward_length", 32);
  w.AddUint32("llama.attention.head_count", 4);
  ASSERT_TRUE(w.AddRawTensor("token_embd.weight", 8, {1, 32}, block).ok());
  const std::string path = TmpPath("q8model.gguf");
  ASSERT_TRUE(w.Write(path).ok());
  auto m = LoadGgufModel(path);
  ASSERT_TRUE(m.ok()) << m.status();
  const TensorView* t = (*m)->Find("tok_embeddings");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->dtype, TensorDType::kF32);
  ASSERT_EQ(t->shape, (std::vector<int64_t>{1, 32}));
  for (int j = 0; j < 32; ++j) {
    float v;
    std::memcpy(&v, t->data + 4 * j, 4);
    EXPECT_EQ(v, 0.5f * (j - 16));
  }
}

TEST(GgufFile, UnsupportedGgmlTypeIsUnimplementedNamingTheTensor) {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  ASSERT_TRUE(w.AddRawTensor("blk.0.attn_q.weight", 13, {256}, std::vector<uint8_t>(176)).ok());
  const std::string path = TmpPath("q5k.gguf");
  ASSERT_TRUE(w.Write(path).ok());
  auto m = LoadModelFile(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("blk.0.attn_q.weight"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("Q5_K"), std::string::npos) << m.status();
}

// ---- hostile inputs -------------------------------------------------------------------------

class CorruptGguf : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = SharedPath(kGguf);
    if (!std::filesystem::exists(path_)) GTEST_SKIP() << "missing shared data: " << path_;
    bytes_ = ReadAll(path_);
    ASSERT_GT(bytes_.size(), 1000u);
  }
  // Writes `b` to a scratch file and expects LoadModelFile to fail cleanly.
  absl::Status Load(const std::vector<uint8_t>& b, const std::string& name) {
    const std::string p = TmpPath(name);
    WriteAll(p, b);
    auto m = LoadModelFile(p);
    if (m.ok()) return absl::OkStatus();
    EXPECT_NE(m.status().message().find(p), std::string::npos)
        << "error does not name the file: " << m.status();
    return m.status();
  }
  // Offset of the tensor info of `name` just after its name bytes.
  size_t InfoAfterName(const std::string& name) {
    const size_t p = Find(bytes_, name);
    EXPECT_NE(p, std::string::npos);
    return p + name.size();
  }
  std::string path_;
  std::vector<uint8_t> bytes_;
};

TEST_F(CorruptGguf, TruncatedAtManyCutPoints) {
  for (int k = 0; k < 50; ++k) {
    const size_t cut = bytes_.size() * k / 50;
    std::vector<uint8_t> b(bytes_.begin(), bytes_.begin() + cut);
    EXPECT_FALSE(Load(b, "cut.gguf").ok()) << "cut at " << cut;
  }
  for (size_t cut : {4u, 5u, 8u, 23u, 24u, 30u, 60u, 70u}) {
    std::vector<uint8_t> b(bytes_.begin(), bytes_.begin() + cut);
    EXPECT_FALSE(Load(b, "cut.gguf").ok()) << "cut at " << cut;
  }
  std::vector<uint8_t> b(bytes_.begin(), bytes_.end() - 1);
  EXPECT_FALSE(Load(b, "cut.gguf").ok());
}

TEST_F(CorruptGguf, WrongMagic) {
  auto b = bytes_;
  b[0] = 'X';
  EXPECT_FALSE(Load(b, "magic.gguf").ok());  // then read as llama2.c: bad header / size
  auto f = MappedFile::Open(TmpPath("magic.gguf"));
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(GgufFile::Parse(**f).ok());
}

TEST_F(CorruptGguf, UnsupportedVersions) {
  for (uint32_t v : {1u, 99u, 0u}) {
    auto b = bytes_;
    Poke<uint32_t>(b, 4, v);
    absl::Status st = Load(b, "version.gguf");
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("version"), std::string::npos) << st;
  }
  auto b = bytes_;
  Poke<uint32_t>(b, 4, 2);  // v2 has the same layout: must still load
  EXPECT_TRUE(Load(b, "v2.gguf").ok());
}

TEST_F(CorruptGguf, AbsurdCounts) {
  for (uint64_t n : {uint64_t{1} << 60, ~uint64_t{0}, uint64_t{100000}}) {
    auto b = bytes_;
    Poke<uint64_t>(b, 8, n);  // tensor count
    EXPECT_FALSE(Load(b, "ntensors.gguf").ok()) << n;
    b = bytes_;
    Poke<uint64_t>(b, 16, n);  // kv count
    EXPECT_FALSE(Load(b, "nkv.gguf").ok()) << n;
  }
}

TEST_F(CorruptGguf, AbsurdStringAndArrayLengths) {
  // First key: "tokenizer.ggml.tokens" (length at 24), its type at 53, array type 57, count 61.
  ASSERT_EQ(Find(bytes_, "tokenizer.ggml.tokens"), 32u);
  for (uint64_t n : {uint64_t{1} << 62, ~uint64_t{0}, uint64_t{bytes_.size()}}) {
    auto b = bytes_;
    Poke<uint64_t>(b, 24, n);
    EXPECT_FALSE(Load(b, "keylen.gguf").ok());
    b = bytes_;
    Poke<uint64_t>(b, 61, n);
    EXPECT_FALSE(Load(b, "arraylen.gguf").ok());
    b = bytes_;
    Poke<uint64_t>(b, 65, n);  // length of the first token string
    EXPECT_FALSE(Load(b, "strlen.gguf").ok());
  }
}

TEST_F(CorruptGguf, UnknownValueTypes) {
  auto b = bytes_;
  Poke<uint32_t>(b, 53, 13);  // kv value type
  EXPECT_FALSE(Load(b, "kvtype.gguf").ok());
  b = bytes_;
  Poke<uint32_t>(b, 57, 1234);  // array element type
  EXPECT_FALSE(Load(b, "arrtype.gguf").ok());
  b = bytes_;
  Poke<uint32_t>(b, 57, 9);  // array of arrays: reinterprets strings as nested arrays
  EXPECT_FALSE(Load(b, "nested.gguf").ok());
}

TEST_F(CorruptGguf, BadTensorInfos) {
  const size_t info = InfoAfterName("token_embd.weight");  // n_dims, 2 dims, type, offset
  for (uint32_t nd : {0u, 5u, 1000000u}) {
    auto b = bytes_;
    Poke<uint32_t>(b, info, nd);
    absl::Status st = Load(b, "ndims.gguf");
    EXPECT_FALSE(st.ok()) << nd;
  }
  for (uint64_t d : {uint64_t{0}, uint64_t{1} << 63, uint64_t{1} << 40, ~uint64_t{0}}) {
    auto b = bytes_;
    Poke<uint64_t>(b, info + 4, d);
    EXPECT_FALSE(Load(b, "dim.gguf").ok()) << d;
  }
  {
    auto b = bytes_;  // product overflows int64 although each dim alone is fine
    Poke<uint64_t>(b, info + 4, uint64_t{1} << 40);
    Poke<uint64_t>(b, info + 12, uint64_t{1} << 40);
    EXPECT_FALSE(Load(b, "overflow.gguf").ok());
  }
  {
    auto b = bytes_;
    Poke<uint32_t>(b, info + 20, 77);  // unknown ggml type
    absl::Status st = Load(b, "type.gguf");
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("unknown ggml type"), std::string::npos) << st;
  }
  for (uint64_t off : {uint64_t{1} << 50, uint64_t{bytes_.size()}, ~uint64_t{0} - 31}) {
    auto b = bytes_;
    Poke<uint64_t>(b, info + 24, off);
    EXPECT_FALSE(Load(b, "offset.gguf").ok()) << off;
  }
  {
    auto b = bytes_;
    Poke<uint64_t>(b, info + 24, 4);  // misaligned
    EXPECT_FALSE(Load(b, "misaligned.gguf").ok());
  }
  {
    auto b = bytes_;  // output_norm.weight moved on top of token_embd.weight
    Poke<uint64_t>(b, InfoAfterName("output_norm.weight") + 4 + 8 + 4, 32);
    absl::Status st = Load(b, "overlap.gguf");
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("overlap"), std::string::npos) << st;
  }
  {
    auto b = bytes_;  // a shape that parses but does not match the config
    Poke<uint64_t>(b, InfoAfterName("output_norm.weight") + 4, 32);
    absl::Status st = Load(b, "shape.gguf");
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("norm"), std::string::npos) << st;
  }
}

// Random byte changes in the header region: any outcome but a crash or an out-of-bounds read
// (this suite runs under AddressSanitizer in CI).
TEST_F(CorruptGguf, RandomHeaderMutationsNeverCrash) {
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  const size_t header = 14176;  // the data area of this file starts here
  ASSERT_GT(bytes_.size(), header);
  for (int iter = 0; iter < 300; ++iter) {
    auto b = bytes_;
    const int n = 1 + static_cast<int>(next() % 4);
    for (int k = 0; k < n; ++k) b[next() % header] = static_cast<uint8_t>(next());
    (void)Load(b, "mutated.gguf");
  }
}

TEST_F(CorruptGguf, BadAlignmentAndMissingMetadata) {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddUint32("general.alignment", 24);  // not a power of two
  const std::string p = TmpPath("align.gguf");
  ASSERT_TRUE(w.Write(p).ok());
  EXPECT_FALSE(LoadModelFile(p).ok());

  GgufWriter w2;
  w2.AddString("general.architecture", "gpt2");
  ASSERT_TRUE(w2.Write(p).ok());
  auto m = LoadModelFile(p);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("gpt2"), std::string::npos);

  GgufWriter w3;
  w3.AddString("general.architecture", "llama");
  w3.AddUint32("llama.context_length", 16);
  ASSERT_TRUE(w3.Write(p).ok());
  m = LoadModelFile(p);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("llama.embedding_length"), std::string::npos) << m.status();

  GgufWriter w4;
  w4.AddString("general.architecture", "llama");
  w4.AddString("dup", "a");
  w4.AddString("dup", "b");
  ASSERT_TRUE(w4.Write(p).ok());
  m = LoadModelFile(p);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("twice"), std::string::npos) << m.status();
}

}  // namespace
}  // namespace strata
