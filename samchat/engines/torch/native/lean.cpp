// The lean LLaMA forward in one native call: torch's weight-only int4/int8 kernels for the
// linears, and plain loops for everything else (norms, rotary, attention, SiLU).
//
// Lossless drafting needs each row of a k-row verification to equal a one-token step bit for
// bit. The linears give that by construction (one code path per row whatever the row count).
// Every other loop here works on one row at a time with a trip count fixed by the model's
// shape or by the row's own position, and is compiled without floating-point contraction or
// reassociation, so a row's result cannot depend on how many rows share the call, on which
// thread runs it, or on which of its elements a vector loop or its remainder handles.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

namespace {

constexpr int64_t LANES = 16;  // partial sums kept apart in every reduction (fixed order)

inline float bf2f(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t f2bf(float f) {  // round to nearest even, as torch converts
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// exp on [-87, 88] from a degree-6 polynomial on [-ln2/2, ln2/2] and a power of two put
// together from bits: only adds and multiplies, so every lane computes the same as a scalar.
inline float fexp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float t = x * 1.44269504088896341f;
  const float n = (t + 12582912.0f) - 12582912.0f;  // round to nearest
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t e = static_cast<int32_t>(n) + 127;
  const uint32_t bits = static_cast<uint32_t>(e) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

inline float lane_sum(const float* acc) {
  float s = 0.0f;
  for (int64_t l = 0; l < LANES; ++l) s += acc[l];
  return s;
}

struct Model {
  int64_t layers, hidden, ffn, heads, kv, hd;
  double eps;
  bool int4;
  std::vector<at::Tensor> t;  // per layer: attn_norm, ffn_norm, qkv w/s, o w/s, gu w/s, down w/s
  at::Tensor norm, out_w, out_s, embed_q, embed_d, embed_f, cos, sin;
};

std::mutex registry_lock;
std::vector<std::shared_ptr<Model>> registry;

std::shared_ptr<Model> model_at(int64_t handle) {
  std::lock_guard<std::mutex> guard(registry_lock);
  TORCH_CHECK(handle >= 0 && handle < static_cast<int64_t>(registry.size()) && registry[handle],
              "no lean model ", handle);
  return registry[handle];
}

at::Tensor linear(const Model& m, const at::Tensor& x, const at::Tensor& w, const at::Tensor& s,
                  bool int4) {
  if (int4) return at::_weight_int4pack_mm_for_cpu(x, w, 32, s);
  return at::_weight_int8pack_mm(x, w, s);
}

// x (n, hidden) float32 -> (n, hidden) bfloat16, normalized and scaled by w.
void rms_norm(const Model& m, const float* x, const float* w, uint16_t* out, int64_t n) {
  const int64_t d = m.hidden;
  at::parallel_for(0, n, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float* row = x + i * d;
      float acc[LANES] = {0};
      int64_t j = 0;
      for (; j + LANES <= d; j += LANES)
        for (int64_t l = 0; l < LANES; ++l) acc[l] += row[j + l] * row[j + l];
      for (; j < d; ++j) acc[0] += row[j] * row[j];
      const float mean = lane_sum(acc) / static_cast<float>(d);
      const float inv = 1.0f / std::sqrt(mean + static_cast<float>(m.eps));
      uint16_t* o = out + i * d;
      for (j = 0; j < d; ++j) o[j] = f2bf(row[j] * inv * w[j]);
    }
  });
}

// x += y (bfloat16), row by row.
void add_rows(float* x, const at::Tensor& y, int64_t count) {
  const uint16_t* p = reinterpret_cast<const uint16_t*>(y.data_ptr<at::BFloat16>());
  for (int64_t j = 0; j < count; ++j) x[j] += bf2f(p[j]);
}

}  // namespace

int64_t lean_load(std::vector<at::Tensor> t, std::vector<int64_t> dims, double eps, bool int4) {
  TORCH_CHECK(dims.size() == 6, "dims: layers, hidden, ffn, heads, kv heads, head dim");
  auto m = std::make_shared<Model>();
  m->layers = dims[0];
  m->hidden = dims[1];
  m->ffn = dims[2];
  m->heads = dims[3];
  m->kv = dims[4];
  m->hd = dims[5];
  m->eps = eps;
  m->int4 = int4;
  const int64_t per = 10, tail = 8;
  TORCH_CHECK(static_cast<int64_t>(t.size()) == m->layers * per + tail, "wrong tensor count");
  m->t.assign(t.begin(), t.begin() + m->layers * per);
  auto at_ = t.begin() + m->layers * per;
  m->norm = at_[0];
  m->out_w = at_[1];
  m->out_s = at_[2];
  m->embed_q = at_[3];
  m->embed_d = at_[4];
  m->embed_f = at_[5];
  m->cos = at_[6];
  m->sin = at_[7];
  std::lock_guard<std::mutex> guard(registry_lock);
  registry.push_back(m);
  return static_cast<int64_t>(registry.size()) - 1;
}

void lean_free(int64_t handle) {
  std::lock_guard<std::mutex> guard(registry_lock);
  if (handle >= 0 && handle < static_cast<int64_t>(registry.size())) registry[handle].reset();
}

// Appends `ids` at cache rows length + i and returns the float32 logits of the last
// `logits_rows` inputs. Row i's sequence is the cache's first `length` rows, then the rows
// length + a for a in its ancestors (itself last): anc[off[i]:off[i+1]]. An empty `off`
// means a plain sequence (row i's ancestors are 0..i).
at::Tensor lean_forward(int64_t handle, const at::Tensor& ids, const at::Tensor& anc,
                        const at::Tensor& off, int64_t length, const at::Tensor& cache,
                        int64_t logits_rows) {
  const std::shared_ptr<Model> mp = model_at(handle);
  const Model& m = *mp;
  const int64_t n = ids.numel();
  const int64_t H = m.hidden, hd = m.hd, heads = m.heads, kvh = m.kv, group = heads / kvh;
  const int64_t cap = cache.size(2);
  TORCH_CHECK(cache.scalar_type() == at::kBFloat16 && cache.is_contiguous(), "cache layout");
  TORCH_CHECK(length + n <= cap, "the cache has no room for ", n, " more rows");
  const bool seq = off.numel() == 0;
  const int64_t* a = seq ? nullptr : anc.data_ptr<int64_t>();
  const int64_t* o = seq ? nullptr : off.data_ptr<int64_t>();
  std::vector<int64_t> pos(n);
  for (int64_t i = 0; i < n; ++i) pos[i] = length + (seq ? i : o[i + 1] - o[i] - 1);

  // The embedding's exact rows.
  at::Tensor x = at::empty({n, H}, at::kFloat);
  float* xp = x.data_ptr<float>();
  const int64_t* idp = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    float* row = xp + i * H;
    if (m.embed_f.defined() && m.embed_f.numel()) {
      std::memcpy(row, m.embed_f.data_ptr<float>() + idp[i] * H, H * sizeof(float));
    } else {
      const int8_t* q = m.embed_q.data_ptr<int8_t>() + idp[i] * H;
      const float* d = m.embed_d.data_ptr<float>() + idp[i] * (H / 32);
      for (int64_t j = 0; j < H; ++j) row[j] = static_cast<float>(q[j]) * d[j / 32];
    }
  }

  at::Tensor h = at::empty({n, H}, at::kBFloat16);
  uint16_t* hp = reinterpret_cast<uint16_t*>(h.data_ptr<at::BFloat16>());
  at::Tensor qf = at::empty({n, heads, hd}, at::kFloat);
  float* qp = qf.data_ptr<float>();
  at::Tensor att = at::empty({n, heads * hd}, at::kBFloat16);
  uint16_t* ap = reinterpret_cast<uint16_t*>(att.data_ptr<at::BFloat16>());
  at::Tensor act = at::empty({n, m.ffn}, at::kBFloat16);
  uint16_t* actp = reinterpret_cast<uint16_t*>(act.data_ptr<at::BFloat16>());
  uint16_t* cp = reinterpret_cast<uint16_t*>(cache.data_ptr<at::BFloat16>());
  const float* cosp = m.cos.data_ptr<float>();
  const float* sinp = m.sin.data_ptr<float>();
  const int64_t half = hd / 2, width = (heads + 2 * kvh) * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  for (int64_t L = 0; L < m.layers; ++L) {
    const at::Tensor* w = &m.t[L * 10];
    uint16_t* kc = cp + (L * 2 + 0) * cap * kvh * hd;
    uint16_t* vc = cp + (L * 2 + 1) * cap * kvh * hd;
    rms_norm(m, xp, w[0].data_ptr<float>(), hp, n);
    at::Tensor qkv = linear(m, h, w[2], w[3], m.int4);
    const uint16_t* qkvp = reinterpret_cast<const uint16_t*>(qkv.data_ptr<at::BFloat16>());
    // Rotary on q (kept in float32) and k (rounded into the cache); v copied as it is.
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t* row = qkvp + i * width;
      const float* c = cosp + pos[i] * hd;
      const float* s = sinp + pos[i] * hd;
      for (int64_t g = 0; g < heads + kvh; ++g) {
        const uint16_t* src = row + g * hd;
        float r[512];
        for (int64_t j = 0; j < half; ++j) {
          const float lo = bf2f(src[j]), hi = bf2f(src[j + half]);
          r[j] = lo * c[j] + hi * s[j];
          r[j + half] = hi * c[j + half] + lo * s[j + half];
        }
        if (g < heads) {
          std::memcpy(qp + (i * heads + g) * hd, r, hd * sizeof(float));
        } else {
          uint16_t* dst = kc + ((length + i) * kvh + (g - heads)) * hd;
          for (int64_t j = 0; j < hd; ++j) dst[j] = f2bf(r[j]);
        }
      }
      std::memcpy(vc + (length + i) * kvh * hd, row + (heads + kvh) * hd,
                  kvh * hd * sizeof(uint16_t));
    }
    // Attention, one (row, head) at a time over the row's own keys in order.
    at::parallel_for(0, n * heads, 1, [&](int64_t lo, int64_t hi) {
      std::vector<float> sc;
      std::vector<float> acc(hd);
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t i = task / heads, head = task % heads, g = head / group;
        const int64_t keys = pos[i] + 1;
        sc.resize(keys);
        const float* q = qp + (i * heads + head) * hd;
        auto key_row = [&](int64_t j) -> int64_t {
          if (j < length) return j;
          return seq ? j : length + a[o[i] + (j - length)];
        };
        float best = -INFINITY;
        for (int64_t j = 0; j < keys; ++j) {
          const uint16_t* k = kc + (key_row(j) * kvh + g) * hd;
          float part[LANES] = {0};
          for (int64_t d = 0; d < hd; d += LANES)
            for (int64_t l = 0; l < LANES; ++l) part[l] += q[d + l] * bf2f(k[d + l]);
          const float v = lane_sum(part) * scale;
          sc[j] = v;
          best = v > best ? v : best;
        }
        float total = 0.0f;
        for (int64_t j = 0; j < keys; ++j) {
          sc[j] = fexp(sc[j] - best);
          total += sc[j];
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j < keys; ++j) {
          const uint16_t* v = vc + (key_row(j) * kvh + g) * hd;
          const float e = sc[j];
          for (int64_t d = 0; d < hd; ++d) acc[d] += e * bf2f(v[d]);
        }
        uint16_t* out = ap + (i * heads + head) * hd;
        for (int64_t d = 0; d < hd; ++d) out[d] = f2bf(acc[d] / total);
      }
    });
    add_rows(xp, linear(m, att, w[4], w[5], m.int4), n * H);
    rms_norm(m, xp, w[1].data_ptr<float>(), hp, n);
    at::Tensor gu = linear(m, h, w[6], w[7], m.int4);
    const uint16_t* gup = reinterpret_cast<const uint16_t*>(gu.data_ptr<at::BFloat16>());
    const int64_t F = m.ffn;
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t* g = gup + i * 2 * F;
      uint16_t* dst = actp + i * F;
      for (int64_t j = 0; j < F; ++j) {
        const float gv = bf2f(g[j]);
        dst[j] = f2bf(gv / (1.0f + fexp(-gv)) * bf2f(g[F + j]));
      }
    }
    add_rows(xp, linear(m, act, w[8], w[9], m.int4), n * H);
  }
  if (logits_rows <= 0) return at::empty({0}, at::kFloat);
  at::Tensor last = x.narrow(0, n - logits_rows, logits_rows).contiguous();
  at::Tensor hl = at::empty({logits_rows, H}, at::kBFloat16);
  rms_norm(m, last.data_ptr<float>(), m.norm.data_ptr<float>(),
           reinterpret_cast<uint16_t*>(hl.data_ptr<at::BFloat16>()), logits_rows);
  return linear(m, hl, m.out_w, m.out_s, false).to(at::kFloat);
}

TORCH_LIBRARY(samchat_lean, lib) {
  lib.def("load(Tensor[] t, int[] dims, float eps, bool int4) -> int", &lean_load);
  lib.def("free(int handle) -> ()", &lean_free);
  lib.def(
      "forward(int handle, Tensor ids, Tensor anc, Tensor off, int length, Tensor cache, "
      "int logits_rows) -> Tensor",
      &lean_forward);
}
