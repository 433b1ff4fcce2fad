// Attention of one row's query heads over the row's keys, for the native forward (forward.cpp).
//
// A row's result must not depend on how many rows share the forward, so every sum here runs in
// an order fixed by the key's index j in the row's own sequence (0 = the cache's first row):
// a key's score is its 16 lanes of products summed by hsum's tree; the softmax total keeps 16
// partial sums by j mod 16; the values are summed in j order. Where the keys live (cache rows,
// a tree's rows), how the loops are cut into blocks and which heads go together change nothing.
#pragma once

#include "tiles.h"

#include <cmath>
#include <cstdint>

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

// Asks for cache row j's head (head dim values) ahead of its use: a head's rows lie a whole
// cache row apart, a stride the CPU's own prefetching follows poorly across pages.
// Inlined and written out: GCC takes a call or a loop that only prefetches for one that does
// nothing, and drops it. Heads up to 128 values.
__attribute__((always_inline)) inline void ask(const uint16_t* base, const Keys& keys, int64_t j,
                                               int64_t hd) {
  if (j >= keys.length) return;
  const char* p = reinterpret_cast<const char*>(base + j * keys.stride);
  _mm_prefetch(p, _MM_HINT_T0);
  if (hd > 32) _mm_prefetch(p + 64, _MM_HINT_T0);
  if (hd > 64) _mm_prefetch(p + 128, _MM_HINT_T0);
  if (hd > 96) _mm_prefetch(p + 192, _MM_HINT_T0);
}

constexpr int64_t AHEAD = 32;  // keys

// A head's values in the order attend works in. With an even number of chunks of 16 (head
// sizes 32, 64, 128, ...), each 32 values are held as their even elements, then their odd ones:
// a row of bfloat16 then widens with one load and two operations per 32 values, where a
// widening load per 16 takes twice the work. Otherwise 16 at a time as they lie.
template <int C>
constexpr bool SPLIT = C > 0 && C % 2 == 0;

typedef uint32_t v16u __attribute__((vector_size(64)));

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

// The heads that share one key head, P at a time (P <= 4): for each, out (head dim, in C
// chunks of 16) = softmax(q . keys * scale) . values over keys 0 .. count - 1. A key and its
// value are read and widened once for the P heads; each head's sums are its own, so a head's
// result is the same whichever P it is taken with. q and out hold the P heads one after the
// other; sc holds P times count rounded up to 16 floats. C = 0: any head dim (`chunks`).
template <int C, int P>
void attend(const float* q, const Keys& keys, int64_t count, int64_t chunks, float scale,
            float* out, float* sc) {
  constexpr int MOST = C ? C : 32;
  const int64_t cs = C ? C : chunks, hd = cs * 16, pad = (count + 15) / 16 * 16;
  v16f qv[P][MOST];
  for (int h = 0; h < P; ++h) to_order<C>(q + h * hd, cs, qv[h]);
  const v16i lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  v16f best[P];
  for (int h = 0; h < P; ++h) best[h] = tiles::splat(-INFINITY);
  for (int64_t j0 = 0; j0 < count; j0 += 16) {
    const int64_t m = count - j0 < 16 ? count - j0 : 16;
    v16f d[P][16];
    for (int64_t k = 0; k < m; ++k) {
      ask(keys.k, keys, j0 + k + AHEAD, hd);
      const uint16_t* kp = keys.k + keys.row(j0 + k) * keys.stride;
      v16f kw[MOST];
      widen_head<C>(kp, cs, kw);
      for (int h = 0; h < P; ++h) {
        v16f dot = qv[h][0] * kw[0];
        for (int64_t c = 1; c < cs; ++c) dot = tiles::madd(qv[h][c], kw[c], dot);
        d[h][k] = dot;
      }
    }
    for (int h = 0; h < P; ++h) {
      for (int64_t k = m; k < 16; ++k) d[h][k] = v16f{};
      v16f s = sums16(d[h]) * tiles::splat(scale);
      s = lane < static_cast<int32_t>(m) ? s : tiles::splat(-INFINITY);
      best[h] = s > best[h] ? s : best[h];
      std::memcpy(sc + h * pad + j0, &s, 64);
    }
  }
  float inv[P];
  for (int h = 0; h < P; ++h) {
    float* e = sc + h * pad;
    const v16f top = tiles::splat(hmax(best[h]));
    v16f total{};
    for (int64_t j0 = 0; j0 < count; j0 += 16) {
      const int64_t m = count - j0 < 16 ? count - j0 : 16;
      v16f x = tiles::exp16(tiles::load16(e + j0) - top);
      x = lane < static_cast<int32_t>(m) ? x : v16f{};
      total += x;
      std::memcpy(e + j0, &x, 64);
    }
    inv[h] = 1.0f / tiles::hsum(total);
  }
  v16f acc[P][MOST];
  for (int h = 0; h < P; ++h)
    for (int64_t c = 0; c < cs; ++c) acc[h][c] = v16f{};
  for (int64_t j = 0; j < count; ++j) {
    ask(keys.v, keys, j + AHEAD, hd);
    const uint16_t* vp = keys.v + keys.row(j) * keys.stride;
    v16f vw[MOST];
    widen_head<C>(vp, cs, vw);
    for (int h = 0; h < P; ++h) {
      const v16f e = tiles::splat(sc[h * pad + j]);
      for (int64_t c = 0; c < cs; ++c) acc[h][c] = tiles::madd(e, vw[c], acc[h][c]);
    }
  }
  for (int h = 0; h < P; ++h) {
    v16f r[MOST];
    for (int64_t c = 0; c < cs; ++c) r[c] = acc[h][c] * tiles::splat(inv[h]);
    from_order<C>(r, cs, out + h * hd);
  }
}

// How many heads attend takes at once for a head dim (four measured faster than two at 128,
// though their sums then leave the registers).
inline int64_t pack(int64_t hd) { return hd == 64 || hd == 128 ? 4 : 1; }

template <int C>
void attend_c(const float* q, const Keys& keys, int64_t count, int64_t chunks, int64_t p,
              float scale, float* out, float* sc) {
  switch (p) {
    case 4:
      return attend<C, 4>(q, keys, count, chunks, scale, out, sc);
    case 3:
      return attend<C, 3>(q, keys, count, chunks, scale, out, sc);
    case 2:
      return attend<C, 2>(q, keys, count, chunks, scale, out, sc);
    default:
      return attend<C, 1>(q, keys, count, chunks, scale, out, sc);
  }
}

// p <= pack(hd) heads of one key head: attend, with C a constant for the common head dims.
inline void attend_any(const float* q, const Keys& keys, int64_t count, int64_t hd, int64_t p,
                       float scale, float* out, float* sc) {
  switch (hd / 16) {
    case 4:
      return attend_c<4>(q, keys, count, 4, p, scale, out, sc);
    case 8:
      return attend_c<8>(q, keys, count, 8, p, scale, out, sc);
    default:
      return attend<0, 1>(q, keys, count, hd / 16, scale, out, sc);
  }
}

}  // namespace attention
