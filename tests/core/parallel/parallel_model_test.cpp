// Tensor and pipeline parallel runs of the model on CPU ranks (processes joined by the CPU
// backend's shared-memory communicator), against the same model on one device:
//   - logits of mixed steps (two prompts in chunks, then decode beside a prefill) within
//     1e-4 on stories260K and the hf-tiny models, TP=2 and PP=2;
//   - the engine's greedy output (mixed batches, prefix-cache hits, preemption, an abort)
//     equal to the single-device Generator's, TP=2 and PP=2;
//   - a rank that exits or hangs ends rank 0's next step with an error naming it, within
//     the timeout, and the replica reports itself down.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "backends/cpu/cpu_backend.h"
#include "core/engine/engine.h"
#include "core/engine/generator.h"
#include "core/model/model_tokenizer.h"
#include "core/parallel/micro_batches.h"
#include "core/parallel/mpi_group.h"
#include "core/parallel/runtime/parallel_runtime.h"
#include "core/parallel/tensor_shard.h"
#include "nlohmann/json.hpp"
#include "tests/core/engine/cpu_test_device.h"
#include "tests/core/parallel/rank_process.h"

namespace strata {
namespace {

using testing_util::RankExit;
using testing_util::RunRanks;
using testing_util::ThisRank;

const std::string kStories = std::string(STRATA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";
const std::string kHfDir = std::string(STRATA_SHARED_DIR) + "/models/hf-tiny";

constexpr double kLogitsTolerance = 1e-4;

void ExpectAllExitedZero(const std::vector<RankExit>& exits) {
  for (size_t r = 0; r < exits.size(); ++r) {
    EXPECT_FALSE(exits[r].killed) << "rank " << r << " hung";
    EXPECT_EQ(exits[r].code, 0) << "rank " << r << " failed (signal " << exits[r].signal << ")";
  }
}

// One rank's device, file, runtime and model shard.
struct RankRun {
  std::unique_ptr<Device> dev;
  std::unique_ptr<ModelFile> file;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<ParallelRuntime> rt;
  std::unique_ptr<LlamaModel> model;
};

// `mpi`: a rank started by mpirun, over the MPI transport; else one of RunRanks's, over
// shared memory.
void StartRank(RankRun& r, const std::string& path, int32_t tp, int32_t pp, ModelRuntimeOptions o,
               int32_t timeout_ms = 30000, bool mpi = false) {
  const testing_util::RankEnv env = ThisRank();
  r.dev = testing::OpenCpuTestDevice();
  ASSERT_NE(r.dev, nullptr);
  auto file = LoadModelFile(path);
  ASSERT_TRUE(file.ok()) << file.status();
  r.file = std::move(*file);
  auto tok = LoadModelTokenizer(*r.file);
  if (tok.ok()) r.tok = std::move(*tok);
  ParallelEnv pe;
  pe.world_size = env.nranks;
  pe.rank = env.rank;
  pe.control_id = env.comm_id;
  if (mpi) {
    auto from_mpi = ParallelEnvFromEnvironment("mpi");
    ASSERT_TRUE(from_mpi.ok()) << from_mpi.status();
    pe = *from_mpi;
    ASSERT_EQ(pe.transport, ParallelTransport::kMpi);
    ASSERT_EQ(pe.world_size, tp * pp);
  }
  auto rt = ParallelRuntime::Create(*r.dev, pe, r.file->config, tp, pp, timeout_ms);
  ASSERT_TRUE(rt.ok()) << rt.status();
  r.rt = std::move(*rt);
  ASSERT_TRUE(r.rt->SyncRuntimeOptions(o).ok());
  o.parallel = r.rt->parallelism();
  auto m = LlamaModel::Load(*r.dev, *r.file, o);
  ASSERT_TRUE(m.ok()) << m.status();
  r.model = std::move(*m);
}

std::unique_ptr<LlamaModel> LoadSingle(Device& dev, const ModelFile& file, const ModelRuntimeOptions& o) {
  auto m = LlamaModel::Load(dev, file, o);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// ---- A backend without a communicator. ----

void* NoExtensions(const char*) { return nullptr; }

TEST(Communicator, BackendWithoutOneIsRefusedClearly) {
  static const strata_backend_v1 table = [] {
    strata_backend_v1 t = *strata_cpu_plugin_info()->backend;
    t.get_proc_address = NoExtensions;  // a plugin that predates include/strata/comm.h
    return t;
  }();
  strata_device_options o{};
  o.struct_size = sizeof(o);
  o.num_threads = 1;
  auto dev = Device::Open(&table, "old", 0, o);
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ(Communicator::Table(**dev), nullptr);
  auto id = Communicator::NewUniqueId(**dev);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(id.status().message().find("the old backend has no communicator"), std::string::npos) << id.status();
  // The real CPU backend has one; an id of the wrong size is refused before any wait.
  std::unique_ptr<Device> cpu = testing::OpenCpuTestDevice();
  ASSERT_NE(Communicator::Table(*cpu), nullptr);
  auto c = Communicator::Create(*cpu, "short", 2, 0, 100);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
}

// ---- Choosing the transport. ----

// Outside mpirun (as ctest runs this): mpi is refused with how to start it; bad names are
// refused; auto and shm leave a single process on shared memory (our launcher's way).
TEST(ParallelTransport, MpiNeedsMpirunAndNamesAreChecked) {
  if (testing_util::MpiChild() || std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr ||
      std::getenv("STRATA_WORLD_SIZE") != nullptr)
    GTEST_SKIP() << "runs outside any launcher";
  auto mpi = ParallelEnvFromEnvironment("mpi");
  ASSERT_FALSE(mpi.ok());
  EXPECT_NE(mpi.status().message().find("start the ranks with mpirun"), std::string::npos) << mpi.status();
  auto bad = ParallelEnvFromEnvironment("infiniband");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("must be auto, shm or mpi"), std::string::npos) << bad.status();
  for (const char* t : {"auto", "shm"}) {
    auto e = ParallelEnvFromEnvironment(t);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_FALSE(e->active());
    EXPECT_EQ(e->transport, ParallelTransport::kShm);
  }
}

// ---- The plan and the shards. ----

TEST(ParallelPlan, SplitsHeadsLayersAndVocabulary) {
  ModelConfig c;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.intermediate_size = 352;
  c.num_layers = 5;
  c.vocab_size = 1000;
  auto p = ParallelPlan::For(c, 4, 1, 3);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->q_heads_per_rank, 2);
  EXPECT_EQ(p->q_head_begin, 6);
  EXPECT_EQ(p->kv_heads_per_rank, 1);  // 2 KV heads for 4 ranks: replicated
  EXPECT_EQ(p->kv_head_begin, 1);      // query heads 6, 7 use KV head 1
  EXPECT_EQ(p->ff_per_rank, 88);
  EXPECT_EQ(p->vocab_per_rank, 250);
  // Layers 5 over 2 stages: 3 + 2.
  auto s0 = ParallelPlan::For(c, 1, 2, 0), s1 = ParallelPlan::For(c, 1, 2, 1);
  ASSERT_TRUE(s0.ok() && s1.ok());
  EXPECT_EQ(s0->layer_begin, 0);
  EXPECT_EQ(s0->layer_end, 3);
  EXPECT_EQ(s1->layer_begin, 3);
  EXPECT_EQ(s1->layer_end, 5);
  EXPECT_TRUE(s0->first_stage() && !s0->last_stage());
  EXPECT_EQ(s0->vocab_per_rank, 0);  // no tensor parallelism: whole tables
  // World rank = stage * tp + tp rank.
  auto q = ParallelPlan::For(c, 2, 2, 3);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->pp_rank, 1);
  EXPECT_EQ(q->tp_rank, 1);
  // What does not divide is refused with the numbers.
  auto bad = ParallelPlan::For(c, 3, 1, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("8 attention heads"), std::string::npos) << bad.status();
  EXPECT_FALSE(ParallelPlan::For(c, 1, 6, 0).ok());  // more stages than layers
  EXPECT_FALSE(ParallelPlan::For(c, 2, 1, 2).ok());  // no such rank
  c.vocab_size = 999;
  EXPECT_EQ(ParallelPlan::For(c, 2, 1, 0)->vocab_per_rank, 0);  // odd vocabulary: replicated
}

TEST(TensorShard, EachRankHoldsItsSlices) {
  if (!std::filesystem::exists(kHfDir + "/qwen2-bias")) GTEST_SKIP() << "missing shared model";
  auto file = LoadModelFile(kHfDir + "/qwen2-bias");
  ASSERT_TRUE(file.ok()) << file.status();
  const ModelConfig& c = (*file)->config;
  auto plan = ParallelPlan::For(c, 2, 1, 1);
  ASSERT_TRUE(plan.ok());
  auto shard = ShardModelFile(**file, *plan);
  ASSERT_TRUE(shard.ok()) << shard.status();
  const ModelFile& s = **shard;
  EXPECT_EQ(s.config.num_heads, c.num_heads / 2);
  EXPECT_EQ(s.config.num_kv_heads, c.num_kv_heads / 2);
  EXPECT_EQ(s.config.intermediate_size, c.intermediate_size / 2);
  EXPECT_FALSE(s.config.tie_word_embeddings);  // tied head copied into "output"
  const int64_t hd = c.head_dim, d = c.hidden_size, V = c.vocab_size;
  EXPECT_EQ(s.Find("tok_embeddings")->shape, (std::vector<int64_t>{V / 2 + 1, d}));
  EXPECT_EQ(s.Find("output")->shape, (std::vector<int64_t>{V / 2, d}));
  EXPECT_EQ(s.Find("layers.0.wq")->shape, (std::vector<int64_t>{c.num_heads / 2 * hd, d}));
  EXPECT_EQ(s.Find("layers.0.wo")->shape, (std::vector<int64_t>{d, c.num_heads / 2 * hd}));
  EXPECT_EQ(s.Find("layers.0.w_down")->shape, (std::vector<int64_t>{d, c.intermediate_size / 2}));
  // Rank 1's wk rows are the second KV head's rows; its wo columns the second half's.
  const TensorView* wk = (*file)->Find("layers.1.wk");
  const TensorView* swk = s.Find("layers.1.wk");
  const size_t row = wk->bytes / wk->shape[0];
  EXPECT_EQ(std::memcmp(swk->data, wk->data + (c.num_kv_heads / 2) * hd * row, swk->bytes), 0);
  const TensorView* bq = (*file)->Find("layers.2.wq.bias");
  const TensorView* sbq = s.Find("layers.2.wq.bias");
  ASSERT_NE(sbq, nullptr);
  EXPECT_EQ(std::memcmp(sbq->data, bq->data + bq->bytes / 2, sbq->bytes), 0);
  // Zero row behind the embedding rows.
  const TensorView* e = s.Find("tok_embeddings");
  const size_t erow = e->bytes / e->shape[0];
  for (size_t i = 0; i < erow; ++i) ASSERT_EQ(e->data[(V / 2) * erow + i], 0);
}

// Four sequences (prefill 6 tokens, decode, prefill chunk of 5 with no logits row, decode)
// in two parts: tokens balanced, every part with a logits row, arrays rebased.
TEST(MicroBatches, SplitsBySequencesWithLogitsRows) {
  StepInput in;
  const int32_t mb = 2;
  in.token_ids = {10, 11, 12, 13, 14, 15, 20, 30, 31, 32, 33, 34, 40};
  for (int i = 0; i < 13; ++i) {
    in.positions.push_back(i);
    in.slot_mapping.push_back(100 + i);
  }
  in.query_start_loc = {0, 6, 7, 12, 13};
  in.seq_lens = {6, 9, 5, 4};
  in.block_tables = {0, 1, 2, 3, 4, 5, 6, 7};
  in.logits_rows = {5, 6, 12};  // the chunk of sequence 2 has none
  const std::vector<StepInput> parts = SplitMicroBatches(in, 2, mb);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].token_ids, (std::vector<int32_t>{10, 11, 12, 13, 14, 15}));  // 6 of 13 tokens
  EXPECT_EQ(parts[0].query_start_loc, (std::vector<int32_t>{0, 6}));
  EXPECT_EQ(parts[0].logits_rows, (std::vector<int32_t>{5}));
  EXPECT_EQ(parts[1].token_ids, (std::vector<int32_t>{20, 30, 31, 32, 33, 34, 40}));
  EXPECT_EQ(parts[1].query_start_loc, (std::vector<int32_t>{0, 1, 6, 7}));
  EXPECT_EQ(parts[1].seq_lens, (std::vector<int32_t>{9, 5, 4}));
  EXPECT_EQ(parts[1].block_tables, (std::vector<int32_t>{2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(parts[1].slot_mapping.front(), 106);
  EXPECT_EQ(parts[1].logits_rows, (std::vector<int32_t>{0, 6}));
  // One part where a split would leave a part without logits rows, or one sequence.
  StepInput one = in;
  one.logits_rows = {12};
  EXPECT_EQ(SplitMicroBatches(one, 2, mb).size(), 1u);
  EXPECT_EQ(SplitMicroBatches(in, 1, mb).size(), 1u);
  EXPECT_EQ(SplitMicroBatches(in, 4, mb).size(), 3u);  // at most one part per logits row
}

// ---- Logits of mixed steps. ----

// Two sequences: A's 9-token prompt and B's first 5 prompt tokens; then A's first decode
// token beside B's next 4 prompt tokens; then both decode.
std::vector<StepInput> MixedSteps(const LlamaModel& m, int32_t vocab) {
  const int32_t mb = m.max_blocks_per_seq(), bs = m.options().block_size;
  std::vector<int32_t> tables(2 * mb, 0);
  for (int32_t i = 0; i < std::min(mb, 4); ++i) {  // A: blocks 0..3, B: 8..11 (of 16)
    tables[i] = i;
    tables[mb + i] = 8 + i;
  }
  auto tok = [vocab](int i) { return static_cast<int32_t>((i * 37 + 11) % (vocab - 3) + 3); };
  std::vector<StepInput> steps;
  struct Part {
    int seq, start, count;
  };
  int next_token = 0;
  for (const std::vector<Part>& parts : std::vector<std::vector<Part>>{{{0, 0, 9}, {1, 0, 5}},
                                                                      {{0, 9, 1}, {1, 5, 4}},
                                                                      {{0, 10, 1}, {1, 9, 1}},
                                                                      {{0, 11, 1}, {1, 10, 1}}}) {
    StepInput in;
    in.query_start_loc.push_back(0);
    for (const Part& p : parts) {
      for (int j = 0; j < p.count; ++j) {
        const int pos = p.start + j;
        in.token_ids.push_back(tok(next_token++));
        in.positions.push_back(pos);
        in.slot_mapping.push_back(tables[p.seq * mb + pos / bs] * bs + pos % bs);
      }
      in.query_start_loc.push_back(static_cast<int32_t>(in.token_ids.size()));
      in.seq_lens.push_back(p.start + p.count);
      in.block_tables.insert(in.block_tables.end(), tables.begin() + p.seq * mb, tables.begin() + (p.seq + 1) * mb);
      in.logits_rows.push_back(static_cast<int32_t>(in.token_ids.size()) - 1);
    }
    steps.push_back(in);
  }
  return steps;
}

struct SplitCase {
  std::string model;  // path under shared/models
  int32_t tp, pp;
};

std::string CaseName(const ::testing::TestParamInfo<SplitCase>& i) {
  std::string n = std::filesystem::path(i.param.model).filename().stem().string();
  for (char& ch : n) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n + "_tp" + std::to_string(i.param.tp) + "_pp" + std::to_string(i.param.pp);
}

class ParallelLogits : public ::testing::TestWithParam<SplitCase> {};

// One rank of a logits comparison: rank 0 runs the mixed steps against one device.
void RunMixedStepsRank(const SplitCase& sc, const std::string& path, bool mpi) {
  ModelRuntimeOptions o;
  o.max_batch_tokens = 16;
  o.max_seqs = 2;
  o.num_blocks = 16;
  RankRun r;
  ASSERT_NO_FATAL_FAILURE(StartRank(r, path, sc.tp, sc.pp, o, 30000, mpi));
  if (!r.rt->is_rank_zero()) {
    absl::Status st = r.rt->RunWorker(*r.model);
    EXPECT_TRUE(st.ok()) << st;
    return;
  }
  ModelRuntimeOptions single = o;
  single.parallel = {};
  std::unique_ptr<LlamaModel> ref = LoadSingle(*r.dev, *r.file, single);
  ASSERT_NE(ref, nullptr);
  const int32_t vocab = static_cast<int32_t>(r.file->config.vocab_size);
  EXPECT_EQ(r.model->config().vocab_size, vocab);
  for (const StepInput& in : MixedSteps(*ref, vocab)) {
    std::vector<float> want, got;
    absl::Status rs = ref->Forward(in, &want);
    ASSERT_TRUE(rs.ok()) << rs;
    absl::Status st = r.model->Forward(in, &got);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
    EXPECT_LE(worst, kLogitsTolerance);
    ::testing::Test::RecordProperty("max_abs_logit_diff", std::to_string(worst));
    std::printf("[ parallel ] %s tp=%d pp=%d: max |logit - one device| = %.3g\n", sc.model.c_str(), sc.tp, sc.pp, worst);
    // Greedy agrees row by row.
    for (size_t row = 0; row < in.logits_rows.size(); ++row) {
      auto first = want.begin() + row * vocab, got_first = got.begin() + row * vocab;
      EXPECT_EQ(std::max_element(got_first, got_first + vocab) - got_first,
                std::max_element(first, first + vocab) - first);
    }
  }
  EXPECT_TRUE(r.rt->health().ok());
  EXPECT_TRUE(r.rt->Shutdown().ok());
}

TEST_P(ParallelLogits, MixedStepsMatchOneDevice) {
  const SplitCase& sc = GetParam();
  const std::string path = std::string(STRATA_SHARED_DIR) + "/models/" + sc.model;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing shared model " << path;
  const testing_util::RankEnv env = ThisRank();
  if (!env.child()) {
    ExpectAllExitedZero(RunRanks(sc.tp * sc.pp, 120));
    return;
  }
  RunMixedStepsRank(sc, path, /*mpi=*/false);
}

INSTANTIATE_TEST_SUITE_P(
    Models, ParallelLogits,
    ::testing::Values(SplitCase{"stories260K/stories260K.gguf", 2, 1}, SplitCase{"stories260K/stories260K.gguf", 1, 2},
                      SplitCase{"hf-tiny/llama-gqa", 2, 1}, SplitCase{"hf-tiny/llama-gqa", 1, 2},
                      SplitCase{"hf-tiny/qwen2-bias", 2, 1}, SplitCase{"hf-tiny/qwen2-bias", 1, 2},
                      SplitCase{"hf-tiny/qwen3", 2, 1}, SplitCase{"hf-tiny/qwen3", 1, 2}),
    CaseName);

// ---- The engine on rank 0. ----

struct Case {
  std::vector<int32_t> prompt;
  int max_new = 0;
  std::vector<int32_t> expected;
};

class ParallelEngine : public ::testing::TestWithParam<SplitCase> {};

// Mixed batches, a shared 40-token prefix (prefix-cache hits), a KV pool small enough to
// preempt, and one request aborted mid-decode: every other request's greedy tokens equal
// the single-device Generator's.
void RunEngineRank(const SplitCase& sc, const std::string& path, bool mpi) {
  ModelRuntimeOptions o;
  o.max_batch_tokens = 32;
  o.max_seqs = 4;
  o.num_blocks = 14;  // preemption
  RankRun r;
  ASSERT_NO_FATAL_FAILURE(StartRank(r, path, sc.tp, sc.pp, o, 30000, mpi));
  if (!r.rt->is_rank_zero()) {
    absl::Status st = r.rt->RunWorker(*r.model);
    EXPECT_TRUE(st.ok()) << st;
    return;
  }
  ModelRuntimeOptions single;
  single.max_batch_tokens = 32;
  single.max_seqs = 1;
  std::unique_ptr<LlamaModel> ref = LoadSingle(*r.dev, *r.file, single);
  ASSERT_NE(ref, nullptr);
  const int32_t vocab = static_cast<int32_t>(r.file->config.vocab_size);
  std::mt19937 rng(5);
  std::vector<int32_t> shared(40);
  for (int32_t& t : shared) t = 3 + static_cast<int32_t>(rng() % (vocab - 3));
  std::vector<Case> cases;
  Generator gen(*ref, nullptr);
  for (int i = 0; i < 6; ++i) {
    Case c;
    if (i % 2 == 0) c.prompt = shared;
    const int len = 3 + static_cast<int>(rng() % 50);
    for (int j = 0; j < len; ++j) c.prompt.push_back(3 + static_cast<int32_t>(rng() % (vocab - 3)));
    c.max_new = 6 + static_cast<int>(rng() % 20);
    GenerationRequest req;
    req.prompt_ids = c.prompt;
    req.sampling.temperature = 0;
    req.sampling.max_new_tokens = c.max_new;
    req.sampling.ignore_eos = true;
    auto res = gen.Generate(req);
    ASSERT_TRUE(res.ok()) << res.status();
    c.expected = res->generated_ids;
    cases.push_back(c);
  }
  EngineConfig ec;
  ec.max_num_seqs = 4;
  ec.max_batched_tokens = 32;
  auto engine = Engine::Create(*r.model, nullptr, ec);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (size_t i = 0; i < cases.size(); ++i) {
    EngineRequest q;
    q.request_id = "case-" + std::to_string(i);
    q.prompt_ids = cases[i].prompt;
    q.sampling.temperature = 0;
    q.sampling.max_new_tokens = cases[i].max_new;
    q.sampling.ignore_eos = true;
    auto h = (*engine)->Submit(q);
    ASSERT_TRUE(h.ok()) << h.status();
    handles.push_back(*h);
  }
  EngineRequest victim;
  victim.request_id = "victim";
  victim.prompt_ids = {1, 5, 9, 13};
  victim.sampling.temperature = 0;
  victim.sampling.max_new_tokens = 100;
  victim.sampling.ignore_eos = true;
  auto hv = (*engine)->Submit(victim);
  ASSERT_TRUE(hv.ok()) << hv.status();
  for (int steps = 0; steps < 20000; ++steps) {
    if (steps == 6) {
      EXPECT_TRUE((*engine)->Abort("victim"));
    }
    auto more = (*engine)->Step();
    ASSERT_TRUE(more.ok()) << more.status();
    ASSERT_TRUE((*engine)->kv_cache().CheckInvariants().ok());
    if (!*more) break;
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(handles[i]->finished()) << i;
    EXPECT_EQ(handles[i]->Wait().generated_ids, cases[i].expected) << "case " << i;
  }
  ASSERT_TRUE((*hv)->finished());
  EXPECT_EQ((*hv)->Wait().finish_reason, "aborted");
  const EngineMetrics m = (*engine)->Metrics();
  EXPECT_GT(m.prefix_hit_tokens, 0);
  EXPECT_GT(m.num_preemptions, 0);
  EXPECT_EQ((*engine)->kv_cache().pool().num_used_blocks(), 0);
  // Pipeline stages ran steps of several sequences as micro-batches.
  if (sc.pp > 1) {
    EXPECT_GT(r.model->pipeline_micro_batches(), r.model->call_times().calls);
  }
  engine->reset();
  EXPECT_TRUE(r.rt->Shutdown().ok());
}

TEST_P(ParallelEngine, GreedyMatchesOneDevice) {
  const SplitCase& sc = GetParam();
  const std::string path = std::string(STRATA_SHARED_DIR) + "/models/" + sc.model;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing shared model " << path;
  const testing_util::RankEnv env = ThisRank();
  if (!env.child()) {
    ExpectAllExitedZero(RunRanks(sc.tp * sc.pp, 240));
    return;
  }
  RunEngineRank(sc, path, /*mpi=*/false);
}

INSTANTIATE_TEST_SUITE_P(Models, ParallelEngine,
                         ::testing::Values(SplitCase{"stories260K/stories260K.gguf", 2, 1},
                                           SplitCase{"stories260K/stories260K.gguf", 1, 2},
                                           SplitCase{"hf-tiny/llama-gqa", 2, 1}, SplitCase{"hf-tiny/qwen2-bias", 1, 2}),
                         CaseName);

// ---- Failure. ----

// Rank 1 exits after loading (as a crashed rank would): rank 0's next step fails naming
// it, well within the timeout, and the replica is down from then on.
TEST(ParallelFailure, ExitedRankEndsTheStepWithAnError) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "missing shared model " << kStories;
  const testing_util::RankEnv env = ThisRank();
  if (!env.child()) {
    const std::vector<RankExit> exits = RunRanks(2, 120);
    EXPECT_FALSE(exits[0].killed) << "rank 0 hung";
    EXPECT_EQ(exits[0].code, 0);
    return;
  }
  ModelRuntimeOptions o;
  o.max_batch_tokens = 16;
  o.max_seqs = 2;
  o.num_blocks = 16;
  RankRun r;
  ASSERT_NO_FATAL_FAILURE(StartRank(r, kStories, 2, 1, o, 30000));
  if (!r.rt->is_rank_zero()) _exit(3);  // gone without a word
  const std::vector<StepInput> steps = MixedSteps(*r.model, static_cast<int32_t>(r.file->config.vocab_size));
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status st = r.model->Forward(steps[0], &logits);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st;
  EXPECT_NE(st.message().find("exited"), std::string::npos) << st;
  EXPECT_LT(s, 20.0);
  EXPECT_FALSE(r.rt->health().ok());
  EXPECT_FALSE(r.model->Forward(steps[0], &logits).ok());  // and stays down
}

// Rank 1 is alive but stops answering: rank 0 gives up after its 1 s timeout.
TEST(ParallelFailure, HungRankTimesOut) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "missing shared model " << kStories;
  const testing_util::RankEnv env = ThisRank();
  if (!env.child()) {
    const std::vector<RankExit> exits = RunRanks(2, 60);
    EXPECT_FALSE(exits[0].killed) << "rank 0 hung";
    EXPECT_EQ(exits[0].code, 0);
    return;
  }
  ModelRuntimeOptions o;
  o.max_batch_tokens = 16;
  o.max_seqs = 2;
  o.num_blocks = 16;
  RankRun r;
  ASSERT_NO_FATAL_FAILURE(StartRank(r, kStories, 1, 2, o, 1000));
  if (!r.rt->is_rank_zero()) {
    std::this_thread::sleep_for(std::chrono::seconds(8));  // hangs, then leaves
    _exit(0);
  }
  const std::vector<StepInput> steps = MixedSteps(*r.model, static_cast<int32_t>(r.file->config.vocab_size));
  std::vector<float> logits;
  absl::Status st = r.model->Forward(steps[0], &logits);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("timed out after 1000 ms"), std::string::npos) << st;
  EXPECT_FALSE(r.rt->health().ok());
}

// ---- The MPI transport: `mpirun -np 2 --oversubscribe` on this host, with
// --parallel-transport mpi forced (the control channel, the NCCL-style id and the CPU
// backend's collectives all go over MPI, as between two hosts). ----

// The parent's side: runs the test under mpirun; skips where MPI is not built in.
#define STRATA_RUN_UNDER_MPIRUN(nranks, timeout_s, x)                                        \
  if (!parallel::MpiBuiltIn()) GTEST_SKIP() << "this build has no MPI (libopenmpi-dev)";     \
  const bool strata_mpi_child = testing_util::MpiChild();                                   \
  testing_util::MpirunExit x;                                                               \
  if (!strata_mpi_child) x = testing_util::RunUnderMpirun(nranks, timeout_s)

class MpiLogits : public ::testing::TestWithParam<SplitCase> {};

TEST_P(MpiLogits, MixedStepsMatchOneDevice) {
  const SplitCase& sc = GetParam();
  const std::string path = std::string(STRATA_SHARED_DIR) + "/models/" + sc.model;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing shared model " << path;
  STRATA_RUN_UNDER_MPIRUN(sc.tp * sc.pp, 60, x);
  if (!strata_mpi_child) {
    EXPECT_FALSE(x.killed) << "mpirun hung:\n" << x.output;
    EXPECT_EQ(x.code, 0) << x.output;
    EXPECT_NE(x.output.find("max |logit - one device|"), std::string::npos) << x.output;
    return;
  }
  RunMixedStepsRank(sc, path, /*mpi=*/true);
}

// TP=2 x PP=2: four processes, a world communicator and one per stage, all formed at once.
INSTANTIATE_TEST_SUITE_P(Models, MpiLogits,
                         ::testing::Values(SplitCase{"stories260K/stories260K.gguf", 2, 1},
                                           SplitCase{"stories260K/stories260K.gguf", 1, 2},
                                           SplitCase{"hf-tiny/llama-gqa", 2, 1},
                                           SplitCase{"stories260K/stories260K.gguf", 2, 2}),
                         CaseName);

class MpiEngine : public ::testing::TestWithParam<SplitCase> {};

TEST_P(MpiEngine, GreedyMatchesOneDevice) {
  const SplitCase& sc = GetParam();
  const std::string path = std::string(STRATA_SHARED_DIR) + "/models/" + sc.model;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing shared model " << path;
  STRATA_RUN_UNDER_MPIRUN(sc.tp * sc.pp, 60, x);
  if (!strata_mpi_child) {
    EXPECT_FALSE(x.killed) << "mpirun hung:\n" << x.output;
    EXPECT_EQ(x.code, 0) << x.output;
    return;
  }
  RunEngineRank(sc, path, /*mpi=*/true);
}

INSTANTIATE_TEST_SUITE_P(Models, MpiEngine,
                         ::testing::Values(SplitCase{"stories260K/stories260K.gguf", 2, 1},
                                           SplitCase{"stories260K/stories260K.gguf", 1, 2}),
                         CaseName);

// Rank 1 exits after loading, without a word: the job ends with an error (mpirun notices the
// rank's end, or rank 0's collective fails at its 5 s deadline and aborts the job), no hang.
TEST(MpiFailure, KilledRankEndsTheJobWithAnError) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "missing shared model " << kStories;
  STRATA_RUN_UNDER_MPIRUN(2, 60, x);
  if (!strata_mpi_child) {
    EXPECT_FALSE(x.killed) << "mpirun hung:\n" << x.output;
    EXPECT_NE(x.code, 0) << x.output;
    EXPECT_EQ(x.output.find("rank 0 finished its step"), std::string::npos) << x.output;
    return;
  }
  ModelRuntimeOptions o;
  o.max_batch_tokens = 16;
  o.max_seqs = 2;
  o.num_blocks = 16;
  RankRun r;
  ASSERT_NO_FATAL_FAILURE(StartRank(r, kStories, 2, 1, o, 5000, /*mpi=*/true));
  if (!r.rt->is_rank_zero()) _exit(3);  // gone without a word
  const std::vector<StepInput> steps = MixedSteps(*r.model, static_cast<int32_t>(r.file->config.vocab_size));
  std::vector<float> logits;
  absl::Status st = r.model->Forward(steps[0], &logits);
  // Not reached while the job ends (mpirun kills this rank, or the failed collective aborts
  // the job); if it were, the step must have failed.
  ASSERT_FALSE(st.ok());
  std::printf("rank 0 finished its step: %s\n", std::string(st.message()).c_str());
}

// Rank 1 is alive but stops answering: rank 0's collective gives up after its 1 s timeout and
// aborts the job with the reason, long before the rank would answer.
TEST(MpiFailure, HungRankAbortsTheJobAtTheTimeout) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "missing shared model " << kStories;
  STRATA_RUN_UNDER_MPIRUN(2, 60, x);
  if (!strata_mpi_child) {
    EXPECT_FALSE(x.killed) << "mpirun hung:\n" << x.output;
    EXPECT_NE(x.code, 0) << x.output;
    EXPECT_NE(x.output.find("timed out after 1000 ms"), std::string::npos) << x.output;
    EXPECT_NE(x.output.find("aborting the MPI job"), std::string::npos) << x.output;
    EXPECT_LT(x.seconds, 25.0) << x.output;  // rank 1 would answer after 30 s
    return;
  }
  ModelRuntimeOptions o;
  o.max_batch_tokens = 16;
  o.max_seqs = 2;
  o.num_blocks = 16;
  RankRun r;
  ASSERT_NO_FATAL_FAILURE(StartRank(r, kStories, 1, 2, o, 1000, /*mpi=*/true));
  if (!r.rt->is_rank_zero()) {
    std::this_thread::sleep_for(std::chrono::seconds(30));  // hangs, then leaves
    _exit(0);
  }
  const std::vector<StepInput> steps = MixedSteps(*r.model, static_cast<int32_t>(r.file->config.vocab_size));
  std::vector<float> logits;
  absl::Status st = r.model->Forward(steps[0], &logits);
  ASSERT_FALSE(st.ok());  // not reached: the failed collective aborts the job
}

}  // namespace
}  // namespace strata
