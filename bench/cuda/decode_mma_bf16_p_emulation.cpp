// Host emulation of the tensor-core decode kernel's arithmetic (kernels/cuda/decode_attention_mma.cu,
// one split) over cuda_kv8_test's BF16-cache data (the same generators and seeds as Kv8Ops and
// the tests' batches), against the tests' float64 reference and 1e-2 x (|ref| + rms) tolerance:
// P rounded to BF16 once (mode bf16, the kernel before cuda-attn2), as hi + lo BF16 parts (bf16x2,
// the fix) and in F32. Reproduced the H200 failures of DecodeSplitKTensorCoreKernel (3 elements,
// 1.049e-2) and DecodeTensorCoreKernelGqaRatios (1, 1.064e-2) exactly. Not a test, not built:
//   g++ -O2 -o /tmp/emu bench/cuda/decode_mma_bf16_p_emulation.cpp && /tmp/emu
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <random>
#include <vector>
#include <numeric>
#include <algorithm>
constexpr int kD = 128, kBs = 16;
uint16_t ToBf16(float f){uint32_t b;memcpy(&b,&f,4);b+=0x7fffu+((b>>16)&1u);return b>>16;}
float FromBf16(uint16_t h){uint32_t b=uint32_t(h)<<16;float f;memcpy(&f,&b,4);return f;}
float R(float x){return FromBf16(ToBf16(x));}
void Run(const char* name, int H, int KVH, const std::vector<int32_t>& after, int mode) {
  const int S = after.size(); const int64_t kvrow = int64_t(KVH)*kD, qrow = int64_t(H)*kD;
  int mb=1; for (int a: after) mb=std::max(mb,(a+kBs-1)/kBs); int nb = mb*S+3;
  std::vector<int32_t> all(nb); std::iota(all.begin(),all.end(),0); std::mt19937 rng(7); std::shuffle(all.begin(),all.end(),rng);
  std::uniform_real_distribution<float> u(-1.0f,1.0f), mag(0.3f,2.0f);
  std::vector<std::vector<float>> keys(S), values(S);
  for (int s=0;s<S;++s) for (auto* kvs: {&keys[s],&values[s]}) { kvs->resize(size_t(after[s])*kvrow);
    for (int p=0;p<after[s];++p){ float m=mag(rng); for (int64_t e=0;e<kvrow;++e) (*kvs)[p*kvrow+e]=R(u(rng)*m);} }
  const int n = S;
  std::mt19937 qr(11+n); std::vector<float> q(size_t(n)*qrow); for (float& x: q) x = R(u(qr));
  const float scale = 1.0f/std::sqrt(float(kD)); const float mult = scale*1.4426950408889634f;
  std::vector<double> ref(q.size()); std::vector<float> got(q.size());
  for (int s=0;s<S;++s) for (int h=0;h<H;++h) {
    const int kvh = h/(H/KVH); const float* qh = q.data()+s*qrow+h*kD; const int L = after[s];
    std::vector<double> sc(L); double m=-INFINITY; std::vector<float> sf(L);
    for (int j=0;j<L;++j){ const float* kr = keys[s].data()+j*kvrow+kvh*kD; double dot=0; float df=0;
      for (int d=0;d<kD;++d){dot+=double(qh[d])*kr[d];} sc[j]=dot*scale; m=std::max(m,sc[j]); sf[j]=float(dot);}
    double l=0; std::vector<double> o(kD,0);
    for (int j=0;j<L;++j){ const float* vr=values[s].data()+j*kvrow+kvh*kD; double w=std::exp(sc[j]-m); l+=w; for(int d=0;d<kD;++d) o[d]+=w*vr[d]; }
    for (int d=0;d<kD;++d) ref[s*qrow+h*kD+d]=o[d]/l;
    // kernel: chunks of 16, running max in raw score units
    float mr=-INFINITY, lr=0; std::vector<float> of(kD,0);
    for (int c0=0;c0<L;c0+=16){ float mx=-INFINITY; for(int j=c0;j<std::min(L,c0+16);++j) mx=std::max(mx,sf[j]);
      float mnew=std::max(mr,mx); float muse=mnew*mult; float alpha=std::exp2(std::fma(mr,mult,-muse)); float sum=0;
      std::vector<float> p(16,0.f); for(int j=c0;j<std::min(L,c0+16);++j){p[j-c0]=std::exp2(std::fma(sf[j],mult,-muse)); sum+=p[j-c0];}
      lr=lr*alpha+sum; mr=mnew; for(int d=0;d<kD;++d) of[d]*=alpha;
      for(int j=c0;j<std::min(L,c0+16);++j){ float ph=R(p[j-c0]); float pl = mode==1? R(p[j-c0]-ph):0.f; if(mode==2){ph=p[j-c0];}
        const float* vr=values[s].data()+j*kvrow+kvh*kD; for(int d=0;d<kD;++d) of[d]+=ph*vr[d]+pl*vr[d]; }
    }
    for (int d=0;d<kD;++d) got[s*qrow+h*kD+d]=R(of[d]/lr);
  }
  double rms=0; for(double r:ref) rms+=r*r; rms=std::sqrt(rms/ref.size()); int64_t bad=0; double worst=0;
  for(size_t e=0;e<ref.size();++e){double err=std::fabs(got[e]-ref[e])/(std::fabs(ref[e])+rms); if(!(err<=1e-2)) ++bad; worst=std::max(worst,err);}
  printf("%-28s P=%-8s bad %lld of %zu, worst %.3e (rms %.3f)\n", name, mode==0?"bf16":mode==1?"bf16x2":"f32", (long long)bad, ref.size(), worst, rms);
}
int main(){
  std::mt19937 rng(5); std::vector<int32_t> b33={4113,4096,1,17,128,2049}; while(b33.size()<33) b33.push_back(1+int32_t(rng()%300));
  std::vector<int32_t> b130; while(b130.size()<130) b130.push_back(1+int32_t(rng()%200));
  std::mt19937 r9(9); std::vector<int32_t> g130; while(g130.size()<130) g130.push_back(1+int32_t(r9()%100));
  std::mt19937 r3(3); std::vector<int32_t> s256; while(s256.size()<256) s256.push_back(2+int32_t(r3()%7));
  std::vector<int32_t> mix; std::mt19937 r4(4); for (int i=0;i<130;++i) mix.push_back(i%32==0 ? 2+int32_t(r4()%2) : 300+int32_t(r4()%200));
  for (int mode=0;mode<2;++mode) Run("mix 130: 1/32 at 2..3 keys", 32, 8, mix, mode);
  std::vector<int32_t> mix33; std::mt19937 r6(6); for (int i=0;i<33;++i) mix33.push_back(i%8==0 ? 2+int32_t(r6()%2) : 300+int32_t(r6()%200));
  for (int mode=0;mode<2;++mode) Run("mix 33: 1/8 at 2..3 keys", 32, 8, mix33, mode);
  for (int mode=0;mode<2;++mode) Run("short 256 seqs 2..8 keys 32/8", 32, 8, s256, mode);
  for (int mode=0;mode<3;++mode){ Run("splitk 130 seqs 32/8", 32, 8, b130, mode); Run("ratios 130 seqs 32/2", 32, 2, g130, mode);
    Run("ratios 130 seqs 16/8", 16, 8, g130, mode); Run("ratios 130 seqs 8/8", 8, 8, g130, mode); }
}
