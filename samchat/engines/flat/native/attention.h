// Attention of a forward's query heads over their rows' keys, for the native forward (forward.cpp).
//
// A row's result must not depend on how many rows share the forward, so every sum here runs in
// an order fixed by the key's index j in the row's own sequence (0 = the cache's first row):
// a key's score is its 16 lanes of products summed by hsum's tree; the softmax total keeps 16
// partial sums by j mod 16; the values are summed in j order (two keys at a time, 2p + 1 then
// 2p, where bfloat16 products take them; see PAIRED). Where the keys live (cache rows,
// a tree's rows), how the loops are cut into blocks and which heads go together change nothing.
#pragma once

#include "tiles.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace attention {

using tiles::v16f;
using tiles::v16i;

// Lane k: the sum of d[k]'s 16 lanes, by hsum's tree, for every k (four rounds of pairs).
inline v16f sums16(const v16f* d) {
  v16f a[8], b[4], c[2];
  for (int p = 0; p < 8; ++p)  // x[i] + x[i + 8]: d[2p] in lanes 0-7, d[2p + 1] in 8-15
    a[p] = __builtin_shufflevector(d[2 * p], d[2 * p + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18,
                                   19, 20, 21, 22, 23) +
           __builtin_shufflevector(d[2 * p], d[2 * p + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25,
                                   26, 27, 28, 29, 30, 31);
  for (int p = 0; p < 4; ++p)  // + the partial four lanes on
    b[p] = __builtin_shufflevector(a[2 * p], a[2 * p + 1], 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10,
                                   11, 24, 25, 26, 27) +
           __builtin_shufflevector(a[2 * p], a[2 * p + 1], 4, 5, 6, 7, 20, 21, 22, 23, 12, 13,
                                   14, 15, 28, 29, 30, 31);
  for (int p = 0; p < 2; ++p)  // + the partial two lanes on
    c[p] = __builtin_shufflevector(b[2 * p], b[2 * p + 1], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24,
                                   25, 12, 13, 28, 29) +
           __builtin_shufflevector(b[2 * p], b[2 * p + 1], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26,
                                   27, 14, 15, 30, 31);
  const v16f s = __builtin_shufflevector(c[0], c[1], 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26,
                                         12, 28, 14, 30) +
                 __builtin_shufflevector(c[0], c[1], 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27,
                                         13, 29, 15, 31);
  // Lane l now holds d[bit-reversed l].
  return __builtin_shufflevector(s, s, 0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15);
}

inline float hmax(v16f v) {
  float best = v[0];
  for (int l = 1; l < 16; ++l) best = v[l] > best ? v[l] : best;
  return best;
}

// Where key j of one row lives: cache row j below `length`, then the row's ancestors among
// this forward's inputs (a sequence's: the inputs in order).
struct Keys {
  const uint16_t* k;  // this head's key in cache row 0; row r's is `stride` values on per row
  const uint16_t* v;
  int64_t stride, length;
  const int64_t* anc;  // null for a sequence
  int64_t row(int64_t j) const { return j < length || !anc ? j : length + anc[j - length]; }
};

// Asks for cache row j's head (head dim values) to be brought into L2 ahead of its use: the
// CPU's own prefetching alone leaves a stream of keys at a fraction of the memory's speed, and
// asking for L1 stalls on its few outstanding misses.
// Inlined and written out: GCC takes a call or a loop that only prefetches for one that does
// nothing, and drops it. Heads up to 128 values.
__attribute__((always_inline)) inline void ask(const uint16_t* base, const Keys& keys, int64_t j,
                                               int64_t hd) {
  if (j >= keys.length) return;
  const char* p = reinterpret_cast<const char*>(base + j * keys.stride);
  _mm_prefetch(p, _MM_HINT_T1);
  if (hd > 32) _mm_prefetch(p + 64, _MM_HINT_T1);
  if (hd > 64) _mm_prefetch(p + 128, _MM_HINT_T1);
  if (hd > 96) _mm_prefetch(p + 192, _MM_HINT_T1);
}

constexpr int64_t AHEAD = 32;  // keys

// A head's values in the order attend works in. With an even number of chunks of 16 (head
// sizes 32, 64, 128, ...), each 32 values are held as their even elements, then their odd ones:
// a row of bfloat16 then widens with one load and two operations per 32 values, where a
// widening load per 16 takes twice the work. Otherwise 16 at a time as they lie.
template <int C>
constexpr bool SPLIT = C > 0 && C % 2 == 0;

typedef uint32_t v16u __attribute__((vector_size(64)));

// Bfloat16 dot products where the CPU has them (AVX512-BF16), for heads of 32k values: two
// products per lane and instruction where the FMAs took one, on the unit that also multiplies
// the tiles' integers, and the cache's rows read as they are, unwidened. Scores take the query
// rounded to bfloat16 once (llama.cpp rounds it to float16); the values, each pair of keys
// (2p, 2p + 1) at once, their weights rounded to bfloat16 (llama.cpp: float16). Elsewhere float32
// products of widened rows.
#if defined(__AVX512BF16__)
constexpr bool BF16_DOTS = true;
#else
constexpr bool BF16_DOTS = false;
#endif
template <int C>
constexpr bool PAIRED = BF16_DOTS && SPLIT<C>;

// A head's query as PAIRED<C> scores take it: C / 2 vectors of 32 bfloat16 values in order.
template <int C>
inline void to_pairs(const float* q, v16f* out) {
#if defined(__AVX512BF16__)
  for (int c = 0; c < C / 2; ++c) {
    const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(q + 32 * c + 16),
                                           _mm512_loadu_ps(q + 32 * c));
    std::memcpy(&out[c], &b, 64);
  }
#else
  (void)q;
  (void)out;
#endif
}

// Weights rounded to bfloat16 (to nearest, ties to even; they lie in [0, 1]), kept as float32.
inline v16f to_bf16(v16f x) {
  const v16u u = reinterpret_cast<v16u>(x);
  return reinterpret_cast<v16f>((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);
}

// The weighted values of keys k0 .. k0 + m - 1 (m <= 16; rows in vw as the cache holds them,
// weights e, already bfloat16) added to P heads' sums a, two keys per product: for each 32
// values c, a[2c] holds values 0-3, 8-11, 16-19 and 24-27, a[2c + 1] the others (the
// interleaving's order; from_pairs puts them back).
template <int C, int P>
inline void pair_values(const float* e, int64_t pad, const v16f (*vw)[C], int64_t m,
                        v16f (*a)[C]) {
#if defined(__AVX512BF16__)
  uint32_t w[P][8];  // head h's weights of keys 2p and 2p + 1 as one bfloat16 pair
  for (int h = 0; h < P; ++h) {
    const v16f x = tiles::load16(e + h * pad);
    const __m256bh b = _mm512_cvtneps_pbh(reinterpret_cast<__m512>(x));
    std::memcpy(w[h], &b, 32);
  }
  for (int64_t k = 0; k < m; k += 2) {
    __m512i lo[C / 2], hi[C / 2];
    for (int c = 0; c < C / 2; ++c) {
      const __m512i x = reinterpret_cast<__m512i>(vw[k][c]);
      const __m512i y = k + 1 < m ? reinterpret_cast<__m512i>(vw[k + 1][c]) : __m512i{};
      lo[c] = _mm512_unpacklo_epi16(x, y);
      hi[c] = _mm512_unpackhi_epi16(x, y);
    }
    for (int h = 0; h < P; ++h) {
      const __m512bh pair = reinterpret_cast<__m512bh>(_mm512_set1_epi32(w[h][k / 2]));
      for (int c = 0; c < C / 2; ++c) {
        a[h][2 * c] = reinterpret_cast<v16f>(_mm512_dpbf16_ps(
            reinterpret_cast<__m512>(a[h][2 * c]), pair, reinterpret_cast<__m512bh>(lo[c])));
        a[h][2 * c + 1] = reinterpret_cast<v16f>(_mm512_dpbf16_ps(
            reinterpret_cast<__m512>(a[h][2 * c + 1]), pair, reinterpret_cast<__m512bh>(hi[c])));
      }
    }
  }
#else
  (void)e;
  (void)pad;
  (void)vw;
  (void)m;
  (void)a;
#endif
}

// pair_values' sums back to the values' own order.
template <int C>
inline void from_pairs(const v16f* in, float* out) {
  for (int c = 0; c < C / 2; ++c) {
    const v16f l = in[2 * c], h = in[2 * c + 1];
    const v16f a = __builtin_shufflevector(l, h, 0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21,
                                           22, 23);
    const v16f b = __builtin_shufflevector(l, h, 8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15,
                                           28, 29, 30, 31);
    std::memcpy(out + 32 * c, &a, 64);
    std::memcpy(out + 32 * c + 16, &b, 64);
  }
}

// q . k over C / 2 pairs of vectors: lane l sums the products of elements 2l and 2l + 1.
template <int C>
inline v16f pair_dots(const v16f* q, const v16f* k) {
#if defined(__AVX512BF16__)
  __m512 dot = _mm512_setzero_ps();
  for (int c = 0; c < C / 2; ++c)
    dot = _mm512_dpbf16_ps(dot, reinterpret_cast<__m512bh>(q[c]), reinterpret_cast<__m512bh>(k[c]));
  return reinterpret_cast<v16f>(dot);
#else
  (void)q;
  (void)k;
  return v16f{};
#endif
}

template <int C>
inline void widen_head(const uint16_t* p, int64_t cs, v16f* out) {
  if constexpr (SPLIT<C>) {
    for (int c = 0; c < C / 2; ++c) {
      v16u w;
      std::memcpy(&w, p + 32 * c, 64);
      out[2 * c] = reinterpret_cast<v16f>(w << 16);
      out[2 * c + 1] = reinterpret_cast<v16f>(w & 0xFFFF0000u);
    }
  } else {
    for (int64_t c = 0; c < cs; ++c) out[c] = tiles::widen_bf16(p + c * 16);
  }
}

// float32 values (a query) into that order.
template <int C>
inline void to_order(const float* q, int64_t cs, v16f* out) {
  if constexpr (SPLIT<C>) {
    for (int c = 0; c < C / 2; ++c) {
      const v16f a = tiles::load16(q + 32 * c), b = tiles::load16(q + 32 * c + 16);
      out[2 * c] = __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24,
                                           26, 28, 30);
      out[2 * c + 1] = __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23,
                                               25, 27, 29, 31);
    }
  } else {
    for (int64_t c = 0; c < cs; ++c) out[c] = tiles::load16(q + c * 16);
  }
}

// Vectors in that order back to the values' own order.
template <int C>
inline void from_order(const v16f* in, int64_t cs, float* out) {
  if constexpr (SPLIT<C>) {
    for (int c = 0; c < C / 2; ++c) {
      const v16f e = in[2 * c], o = in[2 * c + 1];
      const v16f a = __builtin_shufflevector(e, o, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6,
                                             22, 7, 23);
      const v16f b = __builtin_shufflevector(e, o, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29,
                                             14, 30, 15, 31);
      std::memcpy(out + 32 * c, &a, 64);
      std::memcpy(out + 32 * c + 16, &b, 64);
    }
  } else {
    for (int64_t c = 0; c < cs; ++c) std::memcpy(out + c * 16, &in[c], 64);
  }
}

// One forward's rows as attention sees them.
struct Rows {
  const float* q;         // row i's query head h at q + (i * heads + h) * head dim
  float* out;             // and its output at the same place
  int64_t heads, group;   // query heads, and how many of them share a key head
  const int64_t* pos;     // row i attends to its keys 0 .. pos[i]
  const int64_t* anc;     // a tree's ancestor lists, row i's at anc[off[i]]; null for a sequence
  const int64_t* off;
};

// A task's working memory: its heads' queries in attend's order, scores, maxima and sums.
struct Work {
  std::vector<v16f> q, acc, best;
  std::vector<float> sc, inv;
};

// Scores of keys j0 .. j0 + m - 1 (widened in kw) for P heads: sc[h * pad + j0 + k].
template <int C, int P>
inline void score_pack(const v16f* qo, const v16f (*kw)[C ? C : 32], int64_t m, int64_t cs,
                       float scale, float* sc, int64_t pad, v16f* best) {
  constexpr int MOST = C ? C : 32;
  v16f qv[P][MOST];
  for (int h = 0; h < P; ++h)
    for (int64_t c = 0; c < cs; ++c) qv[h][c] = qo[h * cs + c];
  v16f d[P][16];
  for (int64_t k = 0; k < m; ++k)
    for (int h = 0; h < P; ++h) {
      if constexpr (PAIRED<C>) {
        d[h][k] = pair_dots<C>(qv[h], kw[k]);
      } else {
        v16f dot = qv[h][0] * kw[k][0];
        for (int64_t c = 1; c < cs; ++c) dot = tiles::madd(qv[h][c], kw[k][c], dot);
        d[h][k] = dot;
      }
    }
  const v16i lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  for (int h = 0; h < P; ++h) {
    for (int64_t k = m; k < 16; ++k) d[h][k] = v16f{};
    v16f s = sums16(d[h]) * tiles::splat(scale);
    s = lane < static_cast<int32_t>(m) ? s : tiles::splat(-INFINITY);
    best[h] = s > best[h] ? s : best[h];
    std::memcpy(sc + h * pad, &s, 64);
  }
}

// The weighted values j0 .. j0 + m - 1 (widened in vw) added to P heads' sums, in j order.
template <int C, int P>
inline void value_pack(const float* e, int64_t pad, const v16f (*vw)[C ? C : 32], int64_t m,
                       int64_t cs, v16f* acc) {
  constexpr int MOST = C ? C : 32;
  v16f a[P][MOST];
  for (int h = 0; h < P; ++h)
    for (int64_t c = 0; c < cs; ++c) a[h][c] = acc[h * cs + c];
  if constexpr (PAIRED<C>) {
    pair_values<C, P>(e, pad, vw, m, a);
  } else {
    for (int64_t k = 0; k < m; ++k)
      for (int h = 0; h < P; ++h) {
        const v16f w = tiles::splat(e[h * pad + k]);
        for (int64_t c = 0; c < cs; ++c) a[h][c] = tiles::madd(w, vw[k][c], a[h][c]);
      }
  }
  for (int h = 0; h < P; ++h)
    for (int64_t c = 0; c < cs; ++c) acc[h * cs + c] = a[h][c];
}

// Heads a .. b - 1 of a task, four (scores) or as many as fill 16 registers (sums) at a time.
template <int C>
inline void score_heads(Work& w, int64_t a, int64_t b, const v16f (*kw)[C ? C : 32], int64_t m,
                        int64_t j0, int64_t cs, float scale, int64_t pad) {
  for (int64_t h = a; h < b; h += 4) {
    const v16f* qo = &w.q[h * cs];
    float* sc = &w.sc[h * pad + j0];
    v16f* best = &w.best[h];
    switch (b - h < 4 ? b - h : 4) {
      case 4:
        score_pack<C, 4>(qo, kw, m, cs, scale, sc, pad, best);
        break;
      case 3:
        score_pack<C, 3>(qo, kw, m, cs, scale, sc, pad, best);
        break;
      case 2:
        score_pack<C, 2>(qo, kw, m, cs, scale, sc, pad, best);
        break;
      default:
        score_pack<C, 1>(qo, kw, m, cs, scale, sc, pad, best);
    }
  }
}

template <int C>
inline void value_heads(Work& w, int64_t a, int64_t b, const v16f (*vw)[C ? C : 32], int64_t m,
                        int64_t j0, int64_t cs, int64_t pad) {
  const int64_t most = cs <= 4 ? 4 : cs <= 8 ? 2 : 1;
  for (int64_t h = a; h < b; h += most) {
    const float* e = &w.sc[h * pad + j0];
    v16f* acc = &w.acc[h * cs];
    switch (b - h < most ? b - h : most) {
      case 4:
        value_pack<C, 4>(e, pad, vw, m, cs, acc);
        break;
      case 3:
        value_pack<C, 3>(e, pad, vw, m, cs, acc);
        break;
      case 2:
        value_pack<C, 2>(e, pad, vw, m, cs, acc);
        break;
      default:
        value_pack<C, 1>(e, pad, vw, m, cs, acc);
    }
  }
}

// Query heads t0 .. t1 - 1 of key head g, where t = i * group + h is row i's head g * group + h:
// out = softmax(q . keys * scale) . values over each row's keys. Blocks of 16 keys that lie in
// the cache for every row are read and widened once for all these heads; the rest, row by row.
// `keys` is the key head's cache (its anc unused). C = 0: any head dim (`chunks`).
template <int C>
void attend(const Rows& R, const Keys& keys, int64_t g, int64_t t0, int64_t t1, int64_t chunks,
            float scale, Work& w) {
  constexpr int MOST = C ? C : 32;
  const int64_t cs = C ? C : chunks, hd = cs * 16, nh = t1 - t0, G = R.group;
  auto at = [&](int64_t t) { return (t / G * R.heads + g * G + t % G) * hd; };
  int64_t most = 0;
  for (int64_t t = t0; t < t1; ++t) most = std::max(most, R.pos[t / G] + 1);
  const int64_t pad = (most + 15) / 16 * 16, shared = keys.length / 16 * 16;
  w.q.resize(nh * cs);
  w.acc.assign(nh * cs, v16f{});
  w.best.assign(nh, tiles::splat(-INFINITY));
  w.sc.resize(nh * pad);
  w.inv.resize(nh);
  for (int64_t t = t0; t < t1; ++t) {
    if constexpr (PAIRED<C>)
      to_pairs<C>(R.q + at(t), &w.q[(t - t0) * cs]);
    else
      to_order<C>(R.q + at(t), cs, &w.q[(t - t0) * cs]);
  }
  v16f kw[16][MOST];
  // A cache row's head in kw: as it is (PAIRED<C>), or widened.
  auto load = [&](const uint16_t* p, v16f* out) {
    if (PAIRED<C>)
      std::memcpy(out, p, hd * sizeof(uint16_t));
    else
      widen_head<C>(p, cs, out);
  };
  // Runs `use(a, b, m, j0)` for every block of 16 keys, the heads a .. b - 1 that see its first
  // m keys, with those keys' rows of `base` (keys or values) in kw.
  auto blocks = [&](const uint16_t* base, auto&& use) {
    for (int64_t j0 = 0; j0 < pad; j0 += 16) {
      if (j0 < shared) {
        for (int64_t k = 0; k < 16; ++k) {
          ask(base, keys, j0 + k + AHEAD, hd);
          load(base + (j0 + k) * keys.stride, kw[k]);
        }
        use(0, nh, 16, j0);
        continue;
      }
      for (int64_t i = t0 / G; i * G < t1; ++i) {
        const int64_t m = std::min<int64_t>(16, R.pos[i] + 1 - j0);
        if (m <= 0) continue;
        const int64_t* anc = R.anc ? R.anc + R.off[i] : nullptr;
        const Keys own{keys.k, keys.v, keys.stride, keys.length, anc};
        for (int64_t k = 0; k < m; ++k) load(base + own.row(j0 + k) * keys.stride, kw[k]);
        use(std::max(t0, i * G) - t0, std::min(t1, (i + 1) * G) - t0, m, j0);
      }
    }
  };
  blocks(keys.k, [&](int64_t a, int64_t b, int64_t m, int64_t j0) {
    score_heads<C>(w, a, b, kw, m, j0, cs, scale, pad);
  });
  const v16i lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  for (int64_t h = 0; h < nh; ++h) {
    float* e = &w.sc[h * pad];
    const int64_t count = R.pos[(t0 + h) / G] + 1;
    const v16f top = tiles::splat(hmax(w.best[h]));
    v16f total{};
    for (int64_t j0 = 0; j0 < count; j0 += 16) {
      const int64_t m = count - j0 < 16 ? count - j0 : 16;
      v16f x = tiles::exp16(tiles::load16(e + j0) - top);
      if constexpr (PAIRED<C>) x = to_bf16(x);
      x = lane < static_cast<int32_t>(m) ? x : v16f{};
      total += x;
      std::memcpy(e + j0, &x, 64);
    }
    w.inv[h] = 1.0f / tiles::hsum(total);
  }
  blocks(keys.v, [&](int64_t a, int64_t b, int64_t m, int64_t j0) {
    value_heads<C>(w, a, b, kw, m, j0, cs, pad);
  });
  for (int64_t h = 0; h < nh; ++h) {
    v16f r[MOST];
    for (int64_t c = 0; c < cs; ++c) r[c] = w.acc[h * cs + c] * tiles::splat(w.inv[h]);
    if constexpr (PAIRED<C>)
      from_pairs<C>(r, R.out + at(t0 + h));
    else
      from_order<C>(r, cs, R.out + at(t0 + h));
  }
}

// attend, with C a constant for the common head dims.
inline void attend_any(const Rows& R, const Keys& keys, int64_t g, int64_t t0, int64_t t1,
                       int64_t hd, float scale, Work& w) {
  switch (hd / 16) {
    case 4:
      return attend<4>(R, keys, g, t0, t1, 4, scale, w);
    case 8:
      return attend<8>(R, keys, g, t0, t1, 8, scale, w);
    default:
      return attend<0>(R, keys, g, t0, t1, hd / 16, scale, w);
  }
}

}  // namespace attention
