// The flat engine's forward of llama, qwen2 and qwen3 in one native call: the linears on tiles
// (tiles.h) or on torch's weight-only int4/int8 kernels, attention (attention.h), and plain
// loops for the rest (norms, q/k/v biases, per-head q/k norms, rotary, SiLU). Every input is
// checked before anything is read: a bad id, position, row or shape raises a Python exception.
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

#include "attention.h"
#include "tiles.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

namespace {

constexpr int64_t LANES = 16;  // partial sums kept apart in every reduction (fixed order)

inline uint16_t f2bf(float f) {  // round to nearest even, as torch converts
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float lane_sum(const float* acc) {
  float s = 0.0f;
  for (int64_t l = 0; l < LANES; ++l) s += acc[l];
  return s;
}

// How a linear's weights are held: torch's packed kernels, or tiles (tiles.h).
// The K kinds round their inputs per 256, as llama.cpp does for the K-quants.
enum Kind : int64_t {
  TORCH_INT4 = 0,
  TORCH_INT8 = 1,
  TILES4 = 2,
  TILES8 = 3,
  TILESF = 4,
  TILES4K = 5,
  TILES8K = 6
};

struct Lin {
  int64_t kind;  // a Kind, with a tile kind's scales and offsets modes above it (quant.py)
  at::Tensor a, b, c;  // torch: weight, scales; tiles: q, s, z (z may be empty; float: q)
};

struct Model {
  int64_t layers, hidden, ffn, heads, kv, hd, vocab;
  double eps;
  std::vector<at::Tensor> norms;  // per layer: attn_norm, ffn_norm
  // Per layer: the q/k/v bias (qwen2), the q and k norms (qwen3); empty where the model has none.
  std::vector<at::Tensor> extras;
  std::vector<Lin> lins;          // per layer: qkv, o, gate/up, down; then the output
  at::Tensor norm, embed_q, embed_d, embed_f, cos, sin;
};

std::mutex registry_lock;
std::vector<std::shared_ptr<Model>> registry;

std::shared_ptr<Model> model_at(int64_t handle) {
  std::lock_guard<std::mutex> guard(registry_lock);
  TORCH_CHECK(handle >= 0 && handle < static_cast<int64_t>(registry.size()) && registry[handle],
              "no flat model ", handle);
  return registry[handle];
}

// x (n, K) float32 -> (n, O) float32. torch's kernels take bfloat16 rows and give them back.
at::Tensor linear(const Lin& l, const at::Tensor& x) {
  const int sm = static_cast<int>((l.kind >> 3) & 3), zm = static_cast<int>((l.kind >> 5) & 7);
  const int eb = static_cast<int>((l.kind >> 8) & 3);
  const int32_t bias = static_cast<int32_t>((l.kind >> 10) & 3) * 16;
  switch (static_cast<Kind>(l.kind & 7)) {
    case TORCH_INT4:
      return at::_weight_int4pack_mm_for_cpu(x.to(at::kBFloat16), l.a, 32, l.b).to(at::kFloat);
    case TORCH_INT8:
      return at::_weight_int8pack_mm(x.to(at::kBFloat16), l.a, l.b).to(at::kFloat);
    case TILES4:
      return tiles::linear(tiles::HELD4, x, l.a, l.b, l.c, false, sm, zm, eb, bias);
    case TILES8:
      return tiles::linear(tiles::HELD8, x, l.a, l.b, l.c, false, sm, zm, eb, bias);
    case TILES4K:
      return tiles::linear(tiles::HELD4, x, l.a, l.b, l.c, true, sm, zm, eb, bias);
    case TILES8K:
      return tiles::linear(tiles::HELD8, x, l.a, l.b, l.c, true, sm, zm, eb, bias);
    default:
      return tiles::linear(tiles::HELDF, x, l.a, l.b, l.c);
  }
}

// One row of d values, normalized and scaled by w (the model's norms, and qwen3's per head).
void norm_row(const float* row, const float* w, float* o, int64_t d, double eps) {
  float acc[LANES] = {0};
  int64_t j = 0;
  for (; j + LANES <= d; j += LANES)
    for (int64_t l = 0; l < LANES; ++l) acc[l] += row[j + l] * row[j + l];
  for (; j < d; ++j) acc[0] += row[j] * row[j];
  const float mean = lane_sum(acc) / static_cast<float>(d);
  const float inv = 1.0f / std::sqrt(mean + static_cast<float>(eps));
  for (j = 0; j < d; ++j) o[j] = row[j] * inv * w[j];
}

// x (n, hidden) float32 -> (n, hidden) float32, normalized and scaled by w.
void rms_norm(const Model& m, const float* x, const float* w, float* out, int64_t n) {
  const int64_t d = m.hidden;
  at::parallel_for(0, n, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) norm_row(x + i * d, w, out + i * d, d, m.eps);
  });
}

bool present(const at::Tensor& t) { return t.defined() && t.numel() > 0; }

// A float32 vector of `count` values (or none at all, where `optional`).
void check_vector(const at::Tensor& t, int64_t count, bool optional, const char* what) {
  if (optional && !present(t)) return;
  TORCH_CHECK_VALUE(t.scalar_type() == at::kFloat && t.is_contiguous() && t.dim() == 1 &&
                        t.numel() == count,
                    what, ": ", count, " contiguous float32 values expected, got ", t.sizes());
}

// x += y, element by element.
void add_rows(float* x, const at::Tensor& y, int64_t count) {
  const float* p = y.data_ptr<float>();
  for (int64_t j = 0; j < count; ++j) x[j] += p[j];
}

}  // namespace

int64_t flat_load(std::vector<at::Tensor> t, std::vector<int64_t> kinds,
                  std::vector<int64_t> dims, double eps) {
  TORCH_CHECK(dims.size() == 6, "dims: layers, hidden, ffn, heads, kv heads, head dim");
  auto m = std::make_shared<Model>();
  m->layers = dims[0];
  m->hidden = dims[1];
  m->ffn = dims[2];
  m->heads = dims[3];
  m->kv = dims[4];
  m->hd = dims[5];
  m->eps = eps;
  const int64_t lins = m->layers * 4 + 1;
  TORCH_CHECK(static_cast<int64_t>(kinds.size()) == lins, "one kind per linear");
  TORCH_CHECK(static_cast<int64_t>(t.size()) == m->layers * 5 + lins * 3 + 6, "tensor count");
  auto it = t.begin();
  const int64_t width = (m->heads + 2 * m->kv) * m->hd;
  for (int64_t i = 0; i < m->layers; ++i) {
    check_vector(it[0], m->hidden, false, "attn_norm");
    check_vector(it[1], m->hidden, false, "ffn_norm");
    check_vector(it[2], width, true, "q/k/v bias");
    check_vector(it[3], m->hd, true, "q norm");
    check_vector(it[4], m->hd, true, "k norm");
    TORCH_CHECK_VALUE(present(it[3]) == present(it[4]), "q and k norms go together");
    m->norms.push_back(it[0]);
    m->norms.push_back(it[1]);
    for (int k = 2; k < 5; ++k) m->extras.push_back(it[k]);
    it += 5;
  }
  for (int64_t i = 0; i < lins; ++i) {
    TORCH_CHECK_VALUE(kinds[i] >= 0 && (kinds[i] & 7) <= TILES8K, "no linear of kind ", kinds[i]);
    Lin l{kinds[i], it[0], it[1], it[2]};
    it += 3;
    m->lins.push_back(l);
  }
  m->norm = *it++;
  m->embed_q = *it++;
  m->embed_d = *it++;
  m->embed_f = *it++;
  m->cos = *it++;
  m->sin = *it++;
  check_vector(m->norm, m->hidden, false, "output norm");
  if (present(m->embed_f)) {
    TORCH_CHECK_VALUE(m->embed_f.scalar_type() == at::kFloat && m->embed_f.dim() == 2 &&
                          m->embed_f.size(1) == m->hidden && m->embed_f.is_contiguous(),
                      "embedding: (vocab, hidden) float32 expected");
    m->vocab = m->embed_f.size(0);
  } else {
    TORCH_CHECK_VALUE(m->embed_q.scalar_type() == at::kChar && m->embed_q.dim() == 2 &&
                          m->embed_q.size(1) == m->hidden && m->hidden % 16 == 0 &&
                          m->embed_q.is_contiguous() && m->embed_d.is_contiguous() &&
                          m->embed_d.scalar_type() == at::kFloat &&
                          m->embed_d.numel() == m->embed_q.size(0) * (m->hidden / 16) * 2,
                      "embedding: (vocab, hidden) int8 and a float32 scale and offset per 16 "
                      "expected");
    m->vocab = m->embed_q.size(0);
  }
  for (const at::Tensor* table : {&m->cos, &m->sin})
    TORCH_CHECK_VALUE(table->scalar_type() == at::kFloat && table->dim() == 2 &&
                          table->size(1) == m->hd && table->is_contiguous() &&
                          table->size(0) == m->cos.size(0),
                      "rotary tables: (positions, head dim) float32 expected");
  std::lock_guard<std::mutex> guard(registry_lock);
  registry.push_back(m);
  return static_cast<int64_t>(registry.size()) - 1;
}

void flat_free(int64_t handle) {
  std::lock_guard<std::mutex> guard(registry_lock);
  if (handle >= 0 && handle < static_cast<int64_t>(registry.size())) registry[handle].reset();
}

// The cache holds each key head's rows end to end (layers, 2, kv heads, rows, head dim), so that
// attention reads each head's keys and values as one stream.
//
// Appends `ids` at cache rows length + i and returns the float32 logits of the last
// `logits_rows` inputs. Row i's sequence is the cache's first `length` rows, then the rows
// length + a for a in its ancestors (itself last): anc[off[i]:off[i+1]]. An empty `off`
// means a plain sequence (row i's ancestors are 0..i).
at::Tensor flat_forward(int64_t handle, const at::Tensor& ids, const at::Tensor& anc,
                        const at::Tensor& off, int64_t length, const at::Tensor& cache,
                        int64_t logits_rows) {
  const std::shared_ptr<Model> mp = model_at(handle);
  const Model& m = *mp;
  const int64_t H = m.hidden, hd = m.hd, heads = m.heads, kvh = m.kv, group = heads / kvh;
  // Everything below reads only where these checks allow.
  TORCH_CHECK_VALUE(ids.scalar_type() == at::kLong && ids.dim() == 1 && ids.is_contiguous(),
                    "ids: a contiguous int64 vector expected");
  const int64_t n = ids.numel();
  TORCH_CHECK_VALUE(n > 0, "no inputs to forward");
  TORCH_CHECK_VALUE(cache.scalar_type() == at::kBFloat16 && cache.is_contiguous() &&
                        cache.dim() == 5 && cache.size(0) == m.layers && cache.size(1) == 2 &&
                        cache.size(2) == kvh && cache.size(4) == hd,
                    "the cache is not (layers, 2, kv heads, rows, head dim) bfloat16 of this "
                    "model: ", cache.sizes());
  const int64_t cap = cache.size(3);
  TORCH_CHECK_INDEX(length >= 0 && length + n <= cap, "rows ", length, "..", length + n - 1,
                    " are outside the cache's ", cap, " rows");
  TORCH_CHECK_VALUE(logits_rows >= 0 && logits_rows <= n, "logits of ", logits_rows,
                    " rows asked of a forward of ", n);
  const int64_t* idp = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    TORCH_CHECK_INDEX(idp[i] >= 0 && idp[i] < m.vocab, "token id ", idp[i],
                      " is outside the vocabulary of ", m.vocab);
  const bool seq = off.numel() == 0;
  const int64_t* a = nullptr;
  const int64_t* o = nullptr;
  if (!seq) {
    TORCH_CHECK_VALUE(off.scalar_type() == at::kLong && off.dim() == 1 && off.is_contiguous() &&
                          off.numel() == n + 1 && anc.scalar_type() == at::kLong &&
                          anc.dim() == 1 && anc.is_contiguous(),
                      "a tree: ", n + 1, " int64 offsets and an int64 ancestor list expected");
    a = anc.data_ptr<int64_t>();
    o = off.data_ptr<int64_t>();
    TORCH_CHECK_VALUE(o[0] == 0 && o[n] == anc.numel(), "tree offsets do not span the ancestors");
    for (int64_t i = 0; i < n; ++i) {
      TORCH_CHECK_VALUE(o[i + 1] > o[i] && o[i + 1] <= o[n], "tree offsets must increase");
      for (int64_t k = o[i]; k < o[i + 1]; ++k)
        TORCH_CHECK_INDEX(a[k] >= 0 && a[k] <= i && (k > o[i] ? a[k] > a[k - 1] : true),
                          "row ", i, "'s ancestors must be earlier rows, in order");
      TORCH_CHECK_VALUE(a[o[i + 1] - 1] == i, "row ", i, "'s ancestry must end with itself");
    }
  }
  std::vector<int64_t> pos(n);
  for (int64_t i = 0; i < n; ++i) {
    pos[i] = length + (seq ? i : o[i + 1] - o[i] - 1);
    TORCH_CHECK_INDEX(pos[i] < m.cos.size(0), "position ", pos[i], " is past the rotary tables' ",
                      m.cos.size(0));
  }

  // The embedding's exact rows.
  at::Tensor x = at::empty({n, H}, at::kFloat);
  float* xp = x.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    float* row = xp + i * H;
    if (m.embed_f.defined() && m.embed_f.numel()) {
      std::memcpy(row, m.embed_f.data_ptr<float>() + idp[i] * H, H * sizeof(float));
    } else {
      // The file's own values: q * scale + offset per 16 (embed_d holds the pairs).
      const int8_t* q = m.embed_q.data_ptr<int8_t>() + idp[i] * H;
      const float* d = m.embed_d.data_ptr<float>() + idp[i] * (H / 16) * 2;
      for (int64_t j = 0; j < H; ++j)
        row[j] = static_cast<float>(q[j]) * d[j / 16 * 2] + d[j / 16 * 2 + 1];
    }
  }

  at::Tensor h = at::empty({n, H}, at::kFloat);
  float* hp = h.data_ptr<float>();
  at::Tensor qf = at::empty({n, heads, hd}, at::kFloat);
  float* qp = qf.data_ptr<float>();
  at::Tensor att = at::empty({n, heads * hd}, at::kFloat);
  float* ap = att.data_ptr<float>();
  at::Tensor act = at::empty({n, m.ffn}, at::kFloat);
  float* actp = act.data_ptr<float>();
  uint16_t* cp = reinterpret_cast<uint16_t*>(cache.data_ptr<at::BFloat16>());
  const float* cosp = m.cos.data_ptr<float>();
  const float* sinp = m.sin.data_ptr<float>();
  const int64_t half = hd / 2, width = (heads + 2 * kvh) * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  for (int64_t L = 0; L < m.layers; ++L) {
    const Lin* lin = &m.lins[L * 4];
    uint16_t* kc = cp + (L * 2 + 0) * cap * kvh * hd;
    uint16_t* vc = cp + (L * 2 + 1) * cap * kvh * hd;
    rms_norm(m, xp, m.norms[L * 2].data_ptr<float>(), hp, n);
    at::Tensor qkv = linear(lin[0], h);
    float* qkvp = qkv.data_ptr<float>();
    const at::Tensor& bias = m.extras[L * 3];
    const at::Tensor& qn = m.extras[L * 3 + 1];
    const at::Tensor& kn = m.extras[L * 3 + 2];
    // The bias (qwen2), then per head the q/k norm (qwen3) and the rotary on q (kept in
    // float32) and k (rounded into the cache); v copied as it is. Each row alone.
    at::parallel_for(0, n, 1, [&](int64_t first, int64_t end) {
      for (int64_t i = first; i < end; ++i) {
        float* row = qkvp + i * width;
        if (present(bias)) {
          const float* b = bias.data_ptr<float>();
          for (int64_t j = 0; j < width; ++j) row[j] += b[j];
        }
        const float* c = cosp + pos[i] * hd;
        const float* s = sinp + pos[i] * hd;
        for (int64_t g = 0; g < heads + kvh; ++g) {
          const float* src = row + g * hd;
          float normed[512];
          if (present(qn)) {
            norm_row(src, (g < heads ? qn : kn).data_ptr<float>(), normed, hd, m.eps);
            src = normed;
          }
          float r[512];
          for (int64_t j = 0; j < half; ++j) {
            const float lo = src[j], hi = src[j + half];
            r[j] = lo * c[j] + hi * s[j];
            r[j + half] = hi * c[j + half] + lo * s[j + half];
          }
          if (g < heads) {
            std::memcpy(qp + (i * heads + g) * hd, r, hd * sizeof(float));
          } else {
            uint16_t* dst = kc + ((g - heads) * cap + length + i) * hd;
            for (int64_t j = 0; j < hd; ++j) dst[j] = f2bf(r[j]);
          }
        }
        const float* v = row + (heads + kvh) * hd;
        for (int64_t g = 0; g < kvh; ++g) {
          uint16_t* vdst = vc + (g * cap + length + i) * hd;
          for (int64_t j = 0; j < hd; ++j) vdst[j] = f2bf(v[g * hd + j]);
        }
      }
    });
    // Attention by key head, over all rows' query heads that share it (attention.h); a key
    // head's heads are split in parts when there are fewer key heads than threads, or many rows.
    const attention::Rows rows{qp, ap, heads, group, pos.data(), a, o};
    const int64_t per = n * group;
    const int64_t parts = std::min(
        per, std::max((at::get_num_threads() + kvh - 1) / kvh, (per + 63) / 64));
    at::parallel_for(0, kvh * parts, 1, [&](int64_t lo, int64_t hi) {
      attention::Work work;
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t g = task / parts, part = task % parts;
        const attention::Keys keys{kc + g * cap * hd, vc + g * cap * hd, hd, length, nullptr};
        attention::attend_any(rows, keys, g, per * part / parts, per * (part + 1) / parts, hd,
                              scale, work);
      }
    });
    add_rows(xp, linear(lin[1], att), n * H);
    rms_norm(m, xp, m.norms[L * 2 + 1].data_ptr<float>(), hp, n);
    at::Tensor gu = linear(lin[2], h);
    const float* gup = gu.data_ptr<float>();
    // SiLU(gate) * up, 16 at a time (a short last piece padded with zeros).
    const int64_t F = m.ffn, pieces = (F + 15) / 16;
    at::parallel_for(0, n * pieces, 256, [&](int64_t first, int64_t end) {
      for (int64_t u = first; u < end; ++u) {
        const int64_t i = u / pieces, j = u % pieces * 16;
        const float* g = gup + i * 2 * F;
        const int64_t w = F - j < 16 ? F - j : 16;
        tiles::v16f gv{}, uv{};
        std::memcpy(&gv, g + j, w * sizeof(float));
        std::memcpy(&uv, g + F + j, w * sizeof(float));
        const tiles::v16f r = gv / (tiles::splat(1.0f) + tiles::exp16(-gv)) * uv;
        std::memcpy(actp + i * F + j, &r, w * sizeof(float));
      }
    });
    add_rows(xp, linear(lin[3], act), n * H);
  }
  if (logits_rows <= 0) return at::empty({0}, at::kFloat);
  at::Tensor last = x.narrow(0, n - logits_rows, logits_rows).contiguous();
  at::Tensor hl = at::empty({logits_rows, H}, at::kFloat);
  rms_norm(m, last.data_ptr<float>(), m.norm.data_ptr<float>(), hl.data_ptr<float>(),
           logits_rows);
  return linear(m.lins[m.layers * 4], hl);
}

// One tiled linear alone (tests and measurements): a tile kind, TILES4 .. TILES8K.
at::Tensor flat_linear(const at::Tensor& x, int64_t kind, const at::Tensor& q,
                       const at::Tensor& s, const at::Tensor& z) {
  TORCH_CHECK((kind & 7) >= TILES4 && (kind & 7) <= TILES8K, "no tiles of kind ", kind);
  return linear(Lin{kind, q, s, z}, x.contiguous());
}

// Reads every byte of `bytes` (a multiple of 64), on all threads, as a one-token step reads its
// weights: the machine's read bandwidth, the yardstick of a step (bench engines).
int64_t flat_read(const at::Tensor& bytes) {
  TORCH_CHECK(bytes.is_contiguous() && bytes.numel() * bytes.element_size() % 4096 == 0,
              "a contiguous tensor of whole 4096-byte pages");
  const auto* p = reinterpret_cast<const tiles::v16i*>(bytes.data_ptr());
  const int64_t pages = bytes.numel() * bytes.element_size() / 4096;
  std::atomic<int64_t> seen{0};
  at::parallel_for(0, pages, 64, [&](int64_t lo, int64_t hi) {
    tiles::v16i a{}, b{}, c{}, d{};
    for (int64_t i = lo * 64; i < hi * 64; i += 4) {
      a ^= p[i];
      b ^= p[i + 1];
      c ^= p[i + 2];
      d ^= p[i + 3];
    }
    const tiles::v16i all = a ^ b ^ c ^ d;
    int64_t mix = 0;
    for (int l = 0; l < 16; ++l) mix ^= all[l];
    seen ^= mix;
  });
  return seen.load();
}

TORCH_LIBRARY(samchat_flat, lib) {
  lib.def("read(Tensor bytes) -> int", &flat_read);
  lib.def("linear(Tensor x, int kind, Tensor q, Tensor s, Tensor z) -> Tensor", &flat_linear);
  lib.def("load(Tensor[] t, int[] kinds, int[] dims, float eps) -> int", &flat_load);
  lib.def("free(int handle) -> ()", &flat_free);
  lib.def(
      "forward(int handle, Tensor ids, Tensor anc, Tensor off, int length, Tensor cache, "
      "int logits_rows) -> Tensor",
      &flat_forward);
}
