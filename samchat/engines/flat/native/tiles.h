// Weight-only linears on tiles of 16 outputs: y (n, O) = x (n, K) @ W.T, float32 in and out.
// Each holds a GGUF tensor's own numbers (gguf_weights.py), so every weight is the value
// llama.cpp dequantizes; what differs by kind is how a row's products are summed.
//
// Quantized tiles, as llama.cpp computes them: each row's inputs are rounded to 8 bits per
// group of 32 (scale dx), and a group's products are summed in integers, four at a time (VNNI
// where the CPU has it), which is exact in any order. Then, per group of weights, y += s * dx *
// sum(q * xq) + z * dx * sum(xq) in float, in K order, for each row alone. So a row's result is
// the same whatever the number of rows, the tile or the thread, and extra rows cost only their
// integer products (the weights are read and unpacked once for all rows).
// - 4-bit tiles (Q4_0, Q4_1, Q4_K): t4 (O/16, K/32, 4, 16, 4) bytes: for group g, chunk c,
//   output l and i < 4, the low nibble is input 32g + 8c + i and the high one input 32g + 8c +
//   4 + i; s and z (O/16, K/32, 16) float32, w = q * s + z.
// - 8-bit tiles (Q2_K, Q3_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0): t8 (O/16, K/4, 16, 4) bytes, the
//   byte q + 128 of input 4c + i for output l; s and z (O/16, K/16, 16) float32 (z may be
//   empty: zero), w = q * s + z. The 128 is taken off in integers (sum(q * xq) exact).
//
// Float tiles (F32, F16, BF16): tf (O/16, K, 16) in the file's type; each row's inputs stay
// float32 and each output's products are added in K order, one fused multiply-add at a time.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace tiles {

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

// a * b + c, rounded once where the CPU fuses it (the same instruction for every row).
inline v16f madd(v16f a, v16f b, v16f c) {
#if defined(__AVX512F__)
  return reinterpret_cast<v16f>(_mm512_fmadd_ps(reinterpret_cast<__m512>(a),
                                                reinterpret_cast<__m512>(b),
                                                reinterpret_cast<__m512>(c)));
#elif defined(__FMA__)
  __m256 ah[2], bh[2], ch[2];
  std::memcpy(ah, &a, 64);
  std::memcpy(bh, &b, 64);
  std::memcpy(ch, &c, 64);
  ch[0] = _mm256_fmadd_ps(ah[0], bh[0], ch[0]);
  ch[1] = _mm256_fmadd_ps(ah[1], bh[1], ch[1]);
  v16f out;
  std::memcpy(&out, ch, 64);
  return out;
#else
  return a * b + c;  // compiled without contraction: two roundings, the same for every row
#endif
}

inline v16f splat(float x) { return v16f{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }

// 16 bfloat16 values as float32 (exact: a bfloat16 is a float32's upper half).
inline v16f widen_bf16(const uint16_t* p) {
#if defined(__AVX512F__)
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return reinterpret_cast<v16f>(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
#elif defined(__AVX2__)
  __m256i w[2];
  for (int i = 0; i < 2; ++i)
    w[i] = _mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8 * i))), 16);
  v16f out;
  std::memcpy(&out, w, 64);
  return out;
#else
  uint32_t u[16];
  for (int l = 0; l < 16; ++l) u[l] = static_cast<uint32_t>(p[l]) << 16;
  v16f out;
  std::memcpy(&out, u, 64);
  return out;
#endif
}

// The sum of the 16 lanes, always in the same tree order.
inline float hsum(v16f v) {
  v16f s = v + __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  s = s + __builtin_shufflevector(s, s, 4, 5, 6, 7, 0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15);
  s = s + __builtin_shufflevector(s, s, 2, 3, 0, 1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  s = s + __builtin_shufflevector(s, s, 1, 0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return s[0];
}

inline v16f load16(const float* p) {
  v16f v;
  std::memcpy(&v, p, 64);
  return v;
}

typedef uint8_t v64u __attribute__((vector_size(64)));

// acc + the sums of four products of unsigned bytes w and signed bytes x, lane by lane.
// Exact integers (at most 4 * 15 * 127 per step), so every instruction set agrees.
inline v16i dot4(v16i acc, v64u w, v16i x) {
#if defined(__AVX512VNNI__)
  return reinterpret_cast<v16i>(_mm512_dpbusd_epi32(
      reinterpret_cast<__m512i>(acc), reinterpret_cast<__m512i>(w), reinterpret_cast<__m512i>(x)));
#elif defined(__AVX512BW__)
  const __m512i pairs = _mm512_maddubs_epi16(reinterpret_cast<__m512i>(w),
                                             reinterpret_cast<__m512i>(x));
  return acc + reinterpret_cast<v16i>(_mm512_madd_epi16(pairs, _mm512_set1_epi16(1)));
#elif defined(__AVX2__)
  __m256i wh[2], xh[2], out[2];
  std::memcpy(wh, &w, 64);
  std::memcpy(xh, &x, 64);
  for (int h = 0; h < 2; ++h)
    out[h] = _mm256_madd_epi16(_mm256_maddubs_epi16(wh[h], xh[h]), _mm256_set1_epi16(1));
  v16i sum;
  std::memcpy(&sum, out, 64);
  return acc + sum;
#else
  int8_t xb[64];
  std::memcpy(xb, &x, 64);
  for (int l = 0; l < 16; ++l)
    for (int i = 0; i < 4; ++i) acc[l] += static_cast<int32_t>(w[4 * l + i]) * xb[4 * l + i];
  return acc;
#endif
}

inline v16i splat4(const int8_t* p) {
  int32_t word;
  std::memcpy(&word, p, 4);
  return v16i{} + word;
}

// Rows r0 .. r0 + R of T neighbouring 4-bit tiles.
template <int R, int T>
inline void tile4(const uint8_t* q, const float* s, const float* z, int64_t qstride,
                  int64_t sstride, int64_t K, const int8_t* xq, const float* dx, const float* sx,
                  int64_t r0, float* y, int64_t O, int64_t b) {
  const int64_t G = K / 32;
  v16f acc[T][R];
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) acc[t][r] = v16f{};
  for (int64_t g = 0; g < G; ++g) {
    v16i sums[T][R];
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) sums[t][r] = v16i{};
    for (int64_t c = 0; c < 4; ++c) {
      for (int t = 0; t < T; ++t) {
        v64u w;
        std::memcpy(&w, q + t * qstride + (g * 4 + c) * 64, 64);
        const v64u lo = w & 15, hi = w >> 4;
        for (int r = 0; r < R; ++r) {
          const int8_t* xr = xq + (r0 + r) * K + g * 32 + c * 8;
          sums[t][r] = dot4(sums[t][r], lo, splat4(xr));
          sums[t][r] = dot4(sums[t][r], hi, splat4(xr + 4));
        }
      }
    }
    for (int t = 0; t < T; ++t) {
      const v16f sg = load16(s + t * sstride + g * 16), zg = load16(z + t * sstride + g * 16);
      for (int r = 0; r < R; ++r) {
        const int64_t at = (r0 + r) * G + g;
        const v16f f = __builtin_convertvector(sums[t][r], v16f);
        acc[t][r] = madd(f, sg * splat(dx[at]), acc[t][r]);
        acc[t][r] = madd(zg, splat(sx[at]), acc[t][r]);
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) std::memcpy(y + (r0 + r) * O + (b + t) * 16, &acc[t][r], 64);
}

// acc + the sums of four products of unsigned bytes w (any value) and signed bytes x. Without
// VNNI each byte is split into nibbles so that no 16-bit pair sum saturates.
inline v16i dot8(v16i acc, v64u w, v16i x) {
#if defined(__AVX512VNNI__)
  return dot4(acc, w, x);
#else
  const v64u lo = w & 15, hi = w >> 4;
  return dot4(acc, lo, x) + (dot4(v16i{}, hi, x) << 4);
#endif
}

// Rows r0 .. r0 + R of T neighbouring 8-bit tiles.
template <int R, int T>
inline void tile8(const uint8_t* q, const float* s, const float* z, int64_t qstride,
                  int64_t sstride, int64_t K, const int8_t* xq, const float* dx,
                  const int32_t* x16, int64_t r0, float* y, int64_t O, int64_t b) {
  const int64_t G = K / 16, G32 = K / 32;
  v16f acc[T][R];
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) acc[t][r] = v16f{};
  for (int64_t g = 0; g < G; ++g) {
    v16i sums[T][R];
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) sums[t][r] = v16i{};
    for (int64_t c = 0; c < 4; ++c) {
      for (int t = 0; t < T; ++t) {
        v64u w;
        std::memcpy(&w, q + t * qstride + (g * 4 + c) * 64, 64);
        for (int r = 0; r < R; ++r)
          sums[t][r] = dot8(sums[t][r], w, splat4(xq + (r0 + r) * K + g * 16 + c * 4));
      }
    }
    for (int t = 0; t < T; ++t) {
      const v16f sg = load16(s + t * sstride + g * 16);
      for (int r = 0; r < R; ++r) {
        const int32_t xs = x16[(r0 + r) * G + g];
        const float d = dx[(r0 + r) * G32 + g / 2];
        const v16f f = __builtin_convertvector(sums[t][r] - 128 * xs, v16f);
        acc[t][r] = madd(f, sg * splat(d), acc[t][r]);
        if (z != nullptr)
          acc[t][r] = madd(load16(z + t * sstride + g * 16), splat(d * static_cast<float>(xs)),
                           acc[t][r]);
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) std::memcpy(y + (r0 + r) * O + (b + t) * 16, &acc[t][r], 64);
}

// 16 float16 values as float32 (exact).
inline v16f widen_f16(const uint16_t* p) {
#if defined(__AVX512F__)
  return reinterpret_cast<v16f>(
      _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
#elif defined(__F16C__)
  __m256 h[2] = {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
                 _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  v16f out;
  std::memcpy(&out, h, 64);
  return out;
#else
  v16f out;
  for (int l = 0; l < 16; ++l) out[l] = static_cast<float>(c10::Half(p[l], c10::Half::from_bits()));
  return out;
#endif
}

enum Elem : int { F32 = 0, F16 = 1, BF16 = 2 };

template <int E>
inline v16f load_elems(const void* p, int64_t at) {
  if constexpr (E == F32) return load16(static_cast<const float*>(p) + at);
  if constexpr (E == F16) return widen_f16(static_cast<const uint16_t*>(p) + at);
  return widen_bf16(static_cast<const uint16_t*>(p) + at);
}

// Rows r0 .. r0 + R of T neighbouring float tiles.
template <int R, int T, int E>
inline void tilef(const void* q, int64_t qstride, int64_t K, const float* x, int64_t r0,
                  float* y, int64_t O, int64_t b) {
  v16f acc[T][R];
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) acc[t][r] = v16f{};
  const float* xr = x + r0 * K;
  for (int64_t k = 0; k < K; ++k)
    for (int t = 0; t < T; ++t) {
      const v16f w = load_elems<E>(q, t * qstride + k * 16);
      for (int r = 0; r < R; ++r) acc[t][r] = madd(w, splat(xr[r * K + k]), acc[t][r]);
    }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) std::memcpy(y + (r0 + r) * O + (b + t) * 16, &acc[t][r], 64);
}

// How a tile holds its weights.
enum Held : int { HELD4 = 0, HELD8 = 1, HELDF = 2 };

// A row's inputs rounded to 8 bits per group of 32: xq, the scale dx, dx * sum(xq) per 32
// (sx, 4-bit tiles) and the integer sum per 16 (x16, 8-bit tiles).
struct Rows8 {
  const int8_t* xq;
  const float *dx, *sx;
  const int32_t* x16;
};

// All n rows of T tiles starting at tile b, a few rows at a time.
template <int T>
inline void span(Held held, int elem, const uint8_t* q, const float* s, const float* z,
                 int64_t qstride, int64_t sstride, int64_t K, const float* x, const Rows8& x8,
                 int64_t n, float* y, int64_t O, int64_t b) {
  constexpr int MOST = 4;
  for (int64_t r0 = 0; r0 < n; r0 += MOST) {
    const int64_t left = n - r0 < MOST ? n - r0 : MOST;
#define SAMCHAT_TILE(R)                                                                        \
  if (left == R) {                                                                             \
    if (held == HELD4)                                                                         \
      tile4<R, T>(q, s, z, qstride, sstride, K, x8.xq, x8.dx, x8.sx, r0, y, O, b);             \
    else if (held == HELD8)                                                                    \
      tile8<R, T>(q, s, z, qstride, sstride, K, x8.xq, x8.dx, x8.x16, r0, y, O, b);            \
    else if (elem == F32)                                                                      \
      tilef<R, T, F32>(q, qstride, K, x, r0, y, O, b);                                         \
    else if (elem == F16)                                                                      \
      tilef<R, T, F16>(q, qstride, K, x, r0, y, O, b);                                         \
    else                                                                                       \
      tilef<R, T, BF16>(q, qstride, K, x, r0, y, O, b);                                        \
  }
    SAMCHAT_TILE(1)
    SAMCHAT_TILE(2)
    SAMCHAT_TILE(3)
    SAMCHAT_TILE(4)
#undef SAMCHAT_TILE
  }
}

// Each row's inputs rounded to 8 bits per group of 32 (as llama.cpp's Q8_0 activations).
inline void quantize_rows(const float* x, int64_t n, int64_t K, int8_t* xq, float* dx, float* sx,
                          int32_t* x16) {
  const int64_t G = K / 32;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const float* v = x + r * K + g * 32;
      float amax = 0.0f;
      for (int i = 0; i < 32; ++i) {
        const float a = v[i] < 0 ? -v[i] : v[i];
        amax = a > amax ? a : amax;
      }
      const float d = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
      int32_t half[2] = {0, 0};
      int8_t* o = xq + r * K + g * 32;
      for (int i = 0; i < 32; ++i) {
        const float t = v[i] * inv;
        const float rounded = (t + 12582912.0f) - 12582912.0f;  // to nearest, ties to even
        o[i] = static_cast<int8_t>(static_cast<int32_t>(rounded));
        half[i / 16] += o[i];
      }
      dx[r * G + g] = d;
      sx[r * G + g] = d * static_cast<float>(half[0] + half[1]);
      x16[(r * G + g) * 2] = half[0];
      x16[(r * G + g) * 2 + 1] = half[1];
    }
}

// y = x @ W.T for x (n, K) float32. held: HELD4 (q = t4, s, z), HELD8 (q = t8, s, z or an
// empty z) or HELDF (q = tf of float32, float16 or bfloat16; s and z unused).
inline at::Tensor linear(Held held, const at::Tensor& x, const at::Tensor& q, const at::Tensor& s,
                         const at::Tensor& z) {
  const int64_t n = x.size(0), K = x.size(1), blocks = q.size(0), O = blocks * 16;
  TORCH_CHECK(K % 32 == 0, "a tiled linear takes inputs in groups of 32, not ", K);
  int elem = F32;
  int64_t per_byte = 1;  // bytes of q per input and output
  if (held == HELD4) {
    TORCH_CHECK(q.numel() == blocks * K / 2 * 16 && s.numel() == blocks * K / 32 * 16 &&
                    z.numel() == s.numel(), "4-bit tiles of another shape");
  } else if (held == HELD8) {
    TORCH_CHECK(q.numel() == blocks * K * 16 && s.numel() == blocks * K / 16 * 16 &&
                    (!z.defined() || z.numel() == 0 || z.numel() == s.numel()),
                "8-bit tiles of another shape");
  } else {
    elem = q.scalar_type() == at::kHalf ? F16 : (q.scalar_type() == at::kBFloat16 ? BF16 : F32);
    TORCH_CHECK(elem != F32 || q.scalar_type() == at::kFloat, "float tiles of another type");
    TORCH_CHECK(q.numel() == blocks * K * 16, "float tiles of another shape");
    per_byte = elem == F32 ? 4 : 2;
  }
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.is_contiguous(), "float32 rows");
  at::Tensor y = at::empty({n, O}, at::kFloat);
  const uint8_t* qp = reinterpret_cast<const uint8_t*>(q.data_ptr());
  const float* sp = held == HELDF ? nullptr : s.data_ptr<float>();
  const bool offsets = held != HELDF && z.defined() && z.numel() > 0;
  const float* zp = offsets ? z.data_ptr<float>() : nullptr;
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  // Strides between tiles, in q's elements (bytes for quantized tiles) and in scales.
  const int64_t qstride = held == HELD4 ? K / 2 * 16 : K * 16;
  const int64_t sstride = held == HELD4 ? K / 32 * 16 : K;
  at::Tensor xq, dx, sx, x16;
  Rows8 x8{nullptr, nullptr, nullptr, nullptr};
  if (held != HELDF) {
    xq = at::empty({n, K}, at::kChar);
    dx = at::empty({n, K / 32}, at::kFloat);
    sx = at::empty({n, K / 32}, at::kFloat);
    x16 = at::empty({n, K / 16}, at::kInt);
    quantize_rows(xp, n, K, xq.data_ptr<int8_t>(), dx.data_ptr<float>(), sx.data_ptr<float>(),
                  x16.data_ptr<int32_t>());
    x8 = Rows8{xq.data_ptr<int8_t>(), dx.data_ptr<float>(), sx.data_ptr<float>(),
               x16.data_ptr<int32_t>()};
  }
  // Four tiles at a time where they divide the outputs (independent sums keep the units busy).
  const int64_t T = blocks % 4 == 0 ? 4 : 1;
  at::parallel_for(0, blocks / T, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const int64_t b = c * T;
      const uint8_t* qb = qp + b * qstride * per_byte;
      const float* sb = sp != nullptr ? sp + b * sstride : nullptr;
      const float* zb = zp != nullptr ? zp + b * sstride : nullptr;
      if (T == 4)
        span<4>(held, elem, qb, sb, zb, qstride, sstride, K, xp, x8, n, yp, O, b);
      else
        span<1>(held, elem, qb, sb, zb, qstride, sstride, K, xp, x8, n, yp, O, b);
    }
  });
  return y;
}

}  // namespace tiles
