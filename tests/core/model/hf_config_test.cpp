// config.json parsing: both rope layouts, id lists, per-architecture rules, and bad fields.
#include "core/model/formats/hf_config.h"

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

using nlohmann::json;

json Base() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "bos_token_id": 1,
    "eos_token_id": 2, "tie_word_embeddings": false})");
}

absl::StatusOr<ModelConfig> Parse(const json& j) { return ParseHfConfig(j.dump(), "/m/config.json"); }

TEST(HfConfig, DefaultsAndBasics) {
  auto c = Parse(Base());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "llama");
  EXPECT_EQ(c->head_dim, 128);  // hidden / heads when head_dim is absent
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kNone);
  EXPECT_EQ(c->rope_style, RopeStyle::kNeox);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{2});
}

TEST(HfConfig, LegacyRopeScalingLlama3) {
  json j = Base();
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  j["eos_token_id"] = {128001, 128008, 128009};
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_EQ(c->rope_scaling.original_max_position, 8192);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
}

TEST(HfConfig, LegacyRopeScalingTypeKey) {
  json j = Base();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_EQ(c->rope_scaling.factor, 2.0);
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kDynamicNtk);
}

TEST(HfConfig, RopeParametersTransformers5) {
  json j = Base();
  j["rope_parameters"] = {{"rope_theta", 1e6}, {"rope_type", "yarn"}, {"factor", 4.0},
                          {"original_max_position_embeddings", 32768}, {"beta_fast", 16.0}};
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_EQ(c->rope_scaling.factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position, 32768);
  EXPECT_EQ(c->rope_scaling.beta_fast, 16.0);
  EXPECT_EQ(c->rope_scaling.beta_slow, 1.0);
}

TEST(HfConfig, ArchitectureRules) {
  json j = Base();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["attention_bias"] = false;  // ignored: Qwen2 always has q/k/v biases
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->attention_bias);
  EXPECT_EQ(c->architecture, "qwen2");

  j = Base();
  j["attention_bias"] = true;
  c = Parse(j);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->attention_bias);

  j = Base();
  j["architectures"] = {"MistralForCausalLM"};
  j["sliding_window"] = 4096;
  j["head_dim"] = nullptr;
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(c->head_dim, 128);

  j = Base();
  j["architectures"] = {"GPT2LMHeadModel"};
  c = Parse(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("GPT2LMHeadModel"), std::string::npos);
}

TEST(HfConfig, GenerationConfigOverridesEos) {
  auto c = Parse(Base());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(ApplyHfGenerationConfig(R"({"eos_token_id": [2, 32000], "bos_token_id": 1})",
                                      "/m/generation_config.json", &*c).ok());
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{2, 32000}));
  ASSERT_TRUE(ApplyHfGenerationConfig(R"({"eos_token_id": null})", "/m/g.json", &*c).ok());
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{2, 32000}));
  EXPECT_FALSE(ApplyHfGenerationConfig(R"({"eos_token_id": "x"})", "/m/g.json", &*c).ok());
  EXPECT_FALSE(ApplyHfGenerationConfig("[", "/m/g.json", &*c).ok());
}

TEST(HfConfig, RejectsMissingAndWrongTypedFields) {
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads"}) {
    json j = Base();
    j.erase(key);
    auto c = Parse(j);
    ASSERT_FALSE(c.ok()) << key;
    EXPECT_NE(c.status().message().find(key), std::string::npos) << c.status();
    EXPECT_NE(c.status().message().find("/m/config.json"), std::string::npos) << c.status();
    j[key] = "128";
    EXPECT_FALSE(Parse(j).ok()) << key;
    j[key] = 1.5;
    EXPECT_FALSE(Parse(j).ok()) << key;
    j[key] = json::array();
    EXPECT_FALSE(Parse(j).ok()) << key;
  }
  const std::vector<std::pair<std::string, json>> bad = {
      {"rms_norm_eps", "small"},
      {"tie_word_embeddings", 1},
      {"eos_token_id", -3},
      {"eos_token_id", {1, "x"}},
      {"bos_token_id", 1e30},
      {"architectures", "LlamaForCausalLM"},
      {"architectures", json::array()},
      {"rope_scaling", {{"rope_type", "su"}, {"factor", 2.0}}},
      {"rope_scaling", {{"rope_type", "linear"}}},
      {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}},
      {"rope_scaling", 5},
      {"rope_parameters", "default"},
      {"rope_theta", -1.0},
      {"hidden_act", "gelu"},
      {"num_attention_heads", 0},
  };
  for (const auto& [key, value] : bad) {
    json j = Base();
    j[key] = value;
    EXPECT_FALSE(Parse(j).ok()) << key << " = " << value.dump();
  }
  EXPECT_FALSE(ParseHfConfig("{\"vocab_size\": ", "/m/config.json").ok());
  EXPECT_FALSE(ParseHfConfig("[]", "/m/config.json").ok());
  EXPECT_FALSE(ParseHfConfig("", "/m/config.json").ok());
}

}  // namespace
}  // namespace strata
