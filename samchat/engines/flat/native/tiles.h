// Weight-only linears on tiles of 16 outputs: y (n, O) = x (n, K) @ W.T, float32 in and out.
// Each holds a GGUF tensor's own numbers (gguf_weights.py), so every weight is the value
// llama.cpp dequantizes; what differs by kind is how a row's products are summed.
//
// Quantized tiles, as llama.cpp computes them: each row's inputs are rounded to 8 bits per
// group of 32, or of 256 for the K-quants, with llama.cpp's scale dx (quantize_rows), and a
// group's products are summed in integers, four at a time (VNNI where the CPU has it), which is
// exact in any order. Then, per group of weights, y += s * dx * sum(q * xq) + z * sx in float
// (sx about dx * sum(xq), see quantize_rows), in K order, for each row alone. So a row's result is
// the same whatever the number of rows, the tile or the thread, and extra rows cost only their
// integer products (the weights are read and unpacked once for all rows).
// - 4-bit tiles (Q4_0, Q4_1, Q4_K): t4 (O/16, K/32, 4, 16, 4) bytes: for group g, chunk c,
//   output l and i < 4, the low nibble is input 32g + 8c + i and the high one input 32g + 8c +
//   4 + i; s and z (O/16, K/32, 16) float32, w = q * s + z.
// - 8-bit tiles (Q2_K, Q3_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0): t8 (O/16, K/4, 16, 4) bytes, the
//   byte q + 128 of input 4c + i for output l; s and z (O/16, K/16, 16) float32 (z may be
//   empty: zero), w = q * s + z. The 128 is taken off in integers (sum(q * xq) exact).
//
// Scales and offsets are held in the fewest bytes that keep them exact (a step's time is the
// reading of the weights): float32 or float16 per group, or a K-quant's own form, a float32 per
// block of 256 inputs times a signed byte per group (bytes (O/16, K/256, 64 + 16 * groups): the
// 16 outputs' floats, then each group's 16 bytes), rebuilt here as one exact product; offsets
// may also be none, or -8 times the scale (Q4_0). Each rebuilt value equals the stored float.
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

// exp on [-87, 88] in each lane, from a degree-6 polynomial on [-ln2/2, ln2/2] and a power of
// two put together from bits: only adds and multiplies, so every lane computes alike.
inline v16f exp16(v16f x) {
  const v16f lo = splat(-87.0f), hi = splat(88.0f);
  x = x < lo ? lo : (x > hi ? hi : x);
  const v16f t = x * splat(1.44269504088896341f);
  const v16f big = splat(12582912.0f);
  const v16f n = (t + big) - big;  // round to nearest
  const v16f r = (x - n * splat(0.693145751953125f)) -
                 n * splat(1.428606765330187045e-06f);
  v16f p = splat(1.0f / 720.0f);
  p = p * r + splat(1.0f / 120.0f);
  p = p * r + splat(1.0f / 24.0f);
  p = p * r + splat(1.0f / 6.0f);
  p = p * r + splat(0.5f);
  p = p * r + splat(1.0f);
  p = p * r + splat(1.0f);
  const v16i e = (__builtin_convertvector(n, v16i) + 127) << 23;
  return p * reinterpret_cast<v16f>(e);
}

inline v16f load16(const float* p) {
  v16f v;
  std::memcpy(&v, p, 64);
  return v;
}

typedef uint8_t v64u __attribute__((vector_size(64)));
typedef int8_t v16c __attribute__((vector_size(16)));

// How group scales and offsets are held (quant.py's S32 .. ZM8).
enum Scales : int { S32 = 0, S16 = 1, SK = 2 };
enum Offsets : int { Z0 = 0, Z32 = 1, Z16 = 2, ZK = 3, ZM8 = 4 };

inline v16f widen_f16(const uint16_t* p);

// 16 signed bytes as float32 (exact), with the CPU's widening instructions: a generic vector
// conversion of bytes to floats may be compiled lane by lane.
inline v16f widen_i8(const int8_t* p) {
#if defined(__AVX512F__)
  return reinterpret_cast<v16f>(_mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))));
#elif defined(__AVX2__)
  __m256 h[2] = {
      _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))),
      _mm256_cvtepi32_ps(
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8))))};
  v16f out;
  std::memcpy(&out, h, 64);
  return out;
#else
  v16c ints;
  std::memcpy(&ints, p, 16);
  return __builtin_convertvector(ints, v16f);
#endif
}

// Group g's 16 values held as M (S32, S16 or SK), at p, a tile's scales; GPB groups per 256.
template <int M, int GPB>
inline v16f group_values(const uint8_t* p, int64_t g) {
  if constexpr (M == S32) {
    return load16(reinterpret_cast<const float*>(p) + g * 16);
  } else if constexpr (M == S16) {
    return widen_f16(reinterpret_cast<const uint16_t*>(p) + g * 16);
  } else {
    const uint8_t* block = p + (g / GPB) * (64 + 16 * GPB);
    return load16(reinterpret_cast<const float*>(block)) *
           widen_i8(reinterpret_cast<const int8_t*>(block + 64 + (g % GPB) * 16));
  }
}

// Group g's 16 offsets held as ZM, tile t's at z + t * zstride (zero for tiles without any, and
// for Q4_0's -8, which the sums take).
template <int ZM, int GPB>
inline v16f group_offsets(const uint8_t* z, int64_t zstride, int t, int64_t g) {
  if constexpr (ZM == Z32)
    return group_values<S32, GPB>(z + t * zstride, g);
  else if constexpr (ZM == Z16)
    return group_values<S16, GPB>(z + t * zstride, g);
  else if constexpr (ZM == ZK)
    return group_values<SK, GPB>(z + t * zstride, g);
  else
    return v16f{};
}

// Bytes of a tile's scales held as M, for K inputs in groups of `group`.
inline int64_t scale_bytes(int m, int64_t K, int64_t group) {
  if (m == SK) return K / 256 * (64 + 16 * (256 / group));
  return K / group * 16 * (m == S16 ? 2 : 4);
}

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

// Asks for the bytes AHEAD past p .. p + bytes (a tile's next groups, or the next tile's: tiles
// lie end to end) to be brought into L2 before they are read. With several rows the sums take
// long enough per byte that the CPU's own prefetching falls behind and reading and summing take
// turns; with one row it keeps up, and asking costs more than it brings.
constexpr int64_t AHEAD = 4096;

inline void ahead(const uint8_t* p, int64_t bytes) {
  for (int64_t i = 0; i < bytes; i += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + AHEAD + i), _MM_HINT_T1);
}

// The scales or offsets of group g of G, held in `stride` bytes per tile (a whole number of
// bytes per group, divided once outside the loops), asked for ahead.
inline void ahead_scales(const uint8_t* p, int64_t stride, int64_t g, int64_t G) {
  if (p != nullptr && g % 4 == 0)
    _mm_prefetch(reinterpret_cast<const char*>(p + stride / G * g + AHEAD / 4), _MM_HINT_T1);
}

// The K-quants' rows are rounded with one d per 256 inputs (Q8_K), so a tile's sums of a
// block of 256, scaled and offset, are multiplied by it once, and added to the outputs in y:
// their accumulators then serve the next block (no more registers than the other tiles).
template <int T, int R>
inline void by_d(const v16f (&block)[T][R], const float* d, bool first, float* y, int64_t O) {
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) {
      float* out = y + r * O + t * 16;
      const v16f sum = madd(block[t][r], splat(d[r]), first ? v16f{} : load16(out));
      std::memcpy(out, &sum, 64);
    }
}

// Rows r0 .. r0 + R of T neighbouring 4-bit tiles, scales held as SM, offsets as ZM.
template <int R, int T, int SM, int ZM>
inline void tile4(const uint8_t* q, const uint8_t* s, const uint8_t* z, int64_t qstride,
                  int64_t sstride, int64_t zstride, int64_t K, const int8_t* xq, const float* dx,
                  const float* sx, int64_t n, int64_t r0, float* y, int64_t O, int64_t b) {
  const int64_t G = K / 32, per = SM == SK ? 8 : G;  // groups per block (by_d)
  v16f acc[T][R];
  for (int64_t g0 = 0; g0 < G; g0 += per) {
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) acc[t][r] = v16f{};
    for (int64_t g = g0; g < g0 + per; ++g) {
      v16i sums[T][R];
      for (int t = 0; t < T; ++t)
        for (int r = 0; r < R; ++r) sums[t][r] = v16i{};
      for (int t = 0; t < T && R > 1; ++t) {
        ahead(q + t * qstride + g * 256, 256);
        ahead_scales(s + t * sstride, sstride, g, G);
        ahead_scales(z == nullptr ? nullptr : z + t * zstride, zstride, g, G);
      }
      for (int64_t c = 0; c < 4; ++c) {
        for (int t = 0; t < T; ++t) {
          v64u w;
          std::memcpy(&w, q + t * qstride + (g * 4 + c) * 64, 64);
          const v64u lo = w & 15, hi = w >> 4;
          for (int r = 0; r < R; ++r) {
            const int8_t* xr = xq + (g * n + r0 + r) * 32 + c * 8;
            sums[t][r] = dot4(sums[t][r], lo, splat4(xr));
            sums[t][r] = dot4(sums[t][r], hi, splat4(xr + 4));
          }
        }
      }
      for (int t = 0; t < T; ++t) {
        const v16f sg = group_values<SM, 8>(s + t * sstride, g);
        const v16f zg = group_offsets<ZM, 8>(z, zstride, t, g);
        for (int r = 0; r < R; ++r) {
          const int64_t at = g * n + r0 + r;
          v16f f = __builtin_convertvector(sums[t][r], v16f);
          // Q4_0: the sums of (q - 8) * x whole, as llama.cpp takes them (sx = -8 * sum(xq))
          if constexpr (ZM == ZM8) f += splat(sx[at]);
          if constexpr (SM == SK) {
            acc[t][r] = madd(f, sg, acc[t][r]);
            if constexpr (ZM != Z0) acc[t][r] = madd(zg, splat(sx[at]), acc[t][r]);
          } else {
            acc[t][r] = madd(f, sg * splat(dx[at]), acc[t][r]);
            if constexpr (ZM != Z0 && ZM != ZM8) acc[t][r] = madd(zg, splat(sx[at]), acc[t][r]);
          }
        }
      }
    }
    if constexpr (SM == SK) by_d(acc, dx + g0 * n + r0, g0 == 0, y + r0 * O + b * 16, O);
  }
  if constexpr (SM != SK)
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

// Rows r0 .. r0 + R of T neighbouring 8-bit tiles, scales held as SM, offsets as ZM.
template <int R, int T, int SM, int ZM>
inline void tile8(const uint8_t* q, const uint8_t* s, const uint8_t* z, int64_t qstride,
                  int64_t sstride, int64_t zstride, int64_t K, const int8_t* xq,
                  const float* dx, const int32_t* x16, const int32_t* xb, int64_t n,
                  int64_t r0, float* y, int64_t O, int64_t b) {
  const int64_t G = K / 16, per = SM == SK ? 16 : G;  // groups per block (by_d)
  v16f acc[T][R];
  for (int64_t g0 = 0; g0 < G; g0 += per) {
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) acc[t][r] = v16f{};
    for (int64_t g = g0; g < g0 + per; ++g) {
      v16i sums[T][R];
      for (int t = 0; t < T; ++t)
        for (int r = 0; r < R; ++r) sums[t][r] = v16i{};
      for (int t = 0; t < T && R > 1; ++t) {
        ahead(q + t * qstride + g * 256, 256);
        ahead_scales(s + t * sstride, sstride, g, G);
        ahead_scales(z == nullptr ? nullptr : z + t * zstride, zstride, g, G);
      }
      const int8_t* xg = xq + (g / 2 * n + r0) * 32 + g % 2 * 16;  // row r's 16 at xg + 32r
      for (int64_t c = 0; c < 4; ++c) {
        for (int t = 0; t < T; ++t) {
          v64u w;
          std::memcpy(&w, q + t * qstride + (g * 4 + c) * 64, 64);
          for (int r = 0; r < R; ++r)
            sums[t][r] = dot8(sums[t][r], w, splat4(xg + r * 32 + c * 4));
        }
      }
      for (int t = 0; t < T; ++t) {
        const v16f sg = group_values<SM, 16>(s + t * sstride, g);
        const v16f zg = group_offsets<ZM, 16>(z, zstride, t, g);
        for (int r = 0; r < R; ++r) {
          [[maybe_unused]] const int32_t xs = x16[g * n + r0 + r];
          const float d = dx[g / 2 * n + r0 + r];
          const v16f f = __builtin_convertvector(sums[t][r] - xb[g * n + r0 + r], v16f);
          if constexpr (SM == SK) {
            acc[t][r] = madd(f, sg, acc[t][r]);
            if constexpr (ZM != Z0) acc[t][r] = madd(zg, splat(static_cast<float>(xs)), acc[t][r]);
          } else {
            acc[t][r] = madd(f, sg * splat(d), acc[t][r]);
            if constexpr (ZM != Z0)
              acc[t][r] = madd(zg, splat(d * static_cast<float>(xs)), acc[t][r]);
          }
        }
      }
    }
    if constexpr (SM == SK) by_d(acc, dx + g0 / 2 * n + r0, g0 == 0, y + r0 * O + b * 16, O);
  }
  if constexpr (SM != SK)
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) std::memcpy(y + (r0 + r) * O + (b + t) * 16, &acc[t][r], 64);
}

// Chunk c of a 5- or 6-bit tile's group of 32 inputs at base (8 inputs, 16 outputs): its
// values rebuilt from the low nibbles and B extra bits (layout below), their products with
// rows r0 .. r0 + R's rounded inputs at xr (the group's first, row r's 32 bytes on) summed into
// sums.
template <int R, int B>
inline void plane_chunk(const uint8_t* base, int c, const int8_t* xr, v16i (&sums)[R]) {
  constexpr uint8_t MASK = (1 << B) - 1;
  const int p0 = B * (2 * c), p1 = B * (2 * c + 1);  // both in the same vector of extra bits
  v64u n, ext;
  std::memcpy(&n, base + c * 64, 64);
  std::memcpy(&ext, base + 256 + 64 * (p0 / 8), 64);
  const v64u lo = (n & 15) | (((ext >> (p0 % 8)) & MASK) << 4);
  const v64u hi = (n >> 4) | (((ext >> (p1 % 8)) & MASK) << 4);
  for (int r = 0; r < R; ++r) {
    sums[r] = dot4(sums[r], lo, splat4(xr + r * 32 + c * 8));
    sums[r] = dot4(sums[r], hi, splat4(xr + r * 32 + c * 8 + 4));
  }
}

// Rows r0 .. r0 + R of T neighbouring 5- or 6-bit tiles (B extra bits: Q5_0, Q5_1, Q5_K, Q6_K
// in their own bits, not a byte each). Per tile and group of 32 inputs: 256 bytes of low
// nibbles in the 4-bit tiles' order, then B vectors of 64 bytes holding the high bits, each
// byte (output l, i) those of the inputs 8c + 4h + i at bit B * (2c + h) of vector
// B * (2c + h) / 8. The unsigned value u = q + bias; the bias is taken off in integers, so the
// sums, and so the results, equal the 8-bit tiles' of the same numbers.
template <int R, int T, int SM, int ZM, int B>
inline void tilep(const uint8_t* q, const uint8_t* s, const uint8_t* z, int64_t qstride,
                  int64_t sstride, int64_t zstride, int64_t K, const int8_t* xq,
                  const float* dx, const float* sx, const int32_t* x16, const int32_t* xb,
                  int64_t n, int64_t r0, float* y, int64_t O, int64_t b) {
  constexpr int64_t GB = 256 + 64 * B;  // bytes per group of 32 inputs, per tile
  const int64_t G32 = K / 32, per = SM == SK ? 8 : G32;  // groups per block (by_d)
  v16f acc[T][R];
  // Few rows (R <= 4): both halves of a group are summed in one pass over each tile's
  // bytes. More: each half is summed and scaled before the next, so that the sums stay in
  // registers. The same integers and the same float steps either way.
  constexpr bool BOTH = R <= 4;
  for (int64_t g0 = 0; g0 < G32; g0 += per) {
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) acc[t][r] = v16f{};
    for (int64_t g = g0; g < g0 + per; ++g) {
      for (int t = 0; t < T && R > 1; ++t) {
        ahead(q + t * qstride + g * GB, GB);
        ahead_scales(s + t * sstride, sstride, g, G32);
        ahead_scales(z == nullptr ? nullptr : z + t * zstride, zstride, g, G32);
      }
      const int8_t* xr = xq + (g * n + r0) * 32;
      v16i both[2][T][R];
      if constexpr (BOTH) {
        for (int j = 0; j < 2; ++j)
          for (int t = 0; t < T; ++t)
            for (int r = 0; r < R; ++r) both[j][t][r] = v16i{};
        for (int t = 0; t < T; ++t)
  #pragma GCC unroll 4
          for (int c = 0; c < 4; ++c)
            plane_chunk<R, B>(q + t * qstride + g * GB, c, xr, both[c / 2][t]);
      }
      // Unrolled, so that each chunk's bit positions are constants.
  #pragma GCC unroll 2
      for (int j = 0; j < 2; ++j) {
        v16i sums[T][R];
        for (int t = 0; t < T; ++t)
          for (int r = 0; r < R; ++r) sums[t][r] = BOTH ? both[j][t][r] : v16i{};
        for (int t = 0; t < T && !BOTH; ++t)
  #pragma GCC unroll 2
          for (int c = 2 * j; c < 2 * j + 2; ++c)
            plane_chunk<R, B>(q + t * qstride + g * GB, c, xr, sums[t]);
        const int64_t g16 = 2 * g + j;
        for (int t = 0; t < T; ++t) {
          const v16f sg = group_values<SM, 16>(s + t * sstride, g16);
          const v16f zg = group_offsets<ZM, 16>(z, zstride, t, g16);
          for (int r = 0; r < R; ++r) {
            [[maybe_unused]] const int32_t xs = x16[g16 * n + r0 + r];
            const float d = dx[g * n + r0 + r];
            const v16f f = __builtin_convertvector(sums[t][r] - xb[g16 * n + r0 + r], v16f);
            if constexpr (SM == SK) {
              acc[t][r] = madd(f, sg, acc[t][r]);
              if constexpr (ZM != Z0)
                acc[t][r] = madd(zg, splat(static_cast<float>(xs)), acc[t][r]);
            } else {
              acc[t][r] = madd(f, sg * splat(d), acc[t][r]);
              if constexpr (ZM == Z16) {  // Q5_1: one offset per 32, by its rounded d * sum(xq)
                if (j == 0) acc[t][r] = madd(zg, splat(sx[g * n + r0 + r]), acc[t][r]);
              } else if constexpr (ZM != Z0) {
                acc[t][r] = madd(zg, splat(d * static_cast<float>(xs)), acc[t][r]);
              }
            }
          }
        }
      }
    }
    if constexpr (SM == SK) by_d(acc, dx + g0 * n + r0, g0 == 0, y + r0 * O + b * 16, O);
  }
  if constexpr (SM != SK)
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

// n rows' inputs rounded to 8 bits per group of 32: xq, the scale dx, d * sum(xq) per 32
// (sx, for offsets per 32) and the integer sum per 16 (x16, for offsets per 16). Held group
// by group, the rows side by side: row r's group g at xq + (g * n + r) * 32, its dx and sx at
// g * n + r, its halves' sums at x16[(2g + h) * n + r]. So a tile reaches its rows' inputs at
// fixed offsets from one place, not through a register per row.
struct Rows8 {
  const int8_t* xq;
  const float *dx, *sx;
  const int32_t *x16, *xb;  // xb: x16 times the 8-bit tiles' bias (128, or the 5/6-bit one)
};

// Where a linear's tiles are: q, the scales s and offsets z (bytes), and the strides between
// tiles (q in its elements, s and z in bytes).
struct Where {
  const uint8_t *q, *s, *z;
  int64_t qstride, sstride, zstride;
  int32_t bias;  // 5- and 6-bit tiles: u = q + bias
};

// Rows r0 .. r0 + R of T tiles starting at tile b, where R = left (at most MOST).
template <int MOST, int T, int H, int SM, int ZM, int EB>
inline void rows(int64_t left, const Where& h, int64_t K, const float* x, const Rows8& x8,
                 int64_t n, int64_t r0, float* y, int64_t O, int64_t b) {
  if (left == MOST) {
    if constexpr (H == HELD4)
      tile4<MOST, T, SM, ZM>(h.q, h.s, h.z, h.qstride, h.sstride, h.zstride, K, x8.xq, x8.dx,
                             x8.sx, n, r0, y, O, b);
    else if constexpr (H == HELD8 && EB > 0)
      tilep<MOST, T, SM, ZM, EB>(h.q, h.s, h.z, h.qstride, h.sstride, h.zstride, K, x8.xq,
                                  x8.dx, x8.sx, x8.x16, x8.xb, n, r0, y, O, b);
    else if constexpr (H == HELD8)
      tile8<MOST, T, SM, ZM>(h.q, h.s, h.z, h.qstride, h.sstride, h.zstride, K, x8.xq, x8.dx,
                             x8.x16, x8.xb, n, r0, y, O, b);
    else
      tilef<MOST, T, SM>(h.q, h.qstride, K, x, r0, y, O, b);
  } else if constexpr (MOST > 1) {
    rows<MOST - 1, T, H, SM, ZM, EB>(left, h, K, x, x8, n, r0, y, O, b);
  }
}

// All n rows of T tiles starting at tile b, MOST rows at a time: T * MOST sums and as many
// accumulators fit the registers, and each tile's weights are unpacked once per MOST rows.
template <int T, int MOST, int H, int SM, int ZM, int EB>
inline void span(const Where& h, int64_t K, const float* x, const Rows8& x8, int64_t n, float* y,
                 int64_t O, int64_t b) {
  for (int64_t r0 = 0; r0 < n; r0 += MOST) {
    const int64_t left = n - r0 < MOST ? n - r0 : MOST;
    rows<MOST, T, H, SM, ZM, EB>(left, h, K, x, x8, n, r0, y, O, b);
  }
}

// All tiles of a linear, split between the threads: one row four neighbouring tiles at a time
// (independent sums keep the units busy), up to four rows two tiles at a time, more rows one
// tile and eight rows at a time. Each row's arithmetic is the same whichever is taken.
template <int H, int SM, int ZM, int EB = 0>
inline void all_tiles(const Where& h, int64_t blocks, int64_t K, const float* x, const Rows8& x8,
                      int64_t n, float* y, int64_t O, int64_t per_byte) {
  const int64_t T = n == 1 ? (blocks % 4 == 0 ? 4 : 1) : (n <= 4 && blocks % 2 == 0 ? 2 : 1);
  at::parallel_for(0, blocks / T, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const int64_t b = c * T;
      const Where hb{h.q + b * h.qstride * per_byte, h.s + b * h.sstride,
                    h.z == nullptr ? nullptr : h.z + b * h.zstride, h.qstride, h.sstride,
                    h.zstride, h.bias};
      if (T == 4)
        span<4, 1, H, SM, ZM, EB>(hb, K, x, x8, n, y, O, b);
      else if (T == 2)
        span<2, 4, H, SM, ZM, EB>(hb, K, x, x8, n, y, O, b);
      else
        span<1, 8, H, SM, ZM, EB>(hb, K, x, x8, n, y, O, b);
    }
  });
}

// v rounded to float16 (ties to even, subnormals kept), as ggml stores a block's scale.
inline float half(float v) {
#if defined(__F16C__)
  return _cvtsh_ss(_cvtss_sh(v, 0));
#else
  return static_cast<float>(static_cast<_Float16>(v));
#endif
}

// How llama.cpp rounds a row's inputs for the weights' type: Q8_0 (for Q4_0, Q5_0, Q8_0) and
// Q8_1 (for Q4_1, Q5_1) per 32, Q8_K per 256 (the K-quants).
enum Acts : int { A80 = 0, A81 = 1, A8K = 2 };

// Each row's inputs rounded to 8 bits as llama.cpp rounds them: per 32 by 127 / amax, with
// d = amax / 127 kept as float16 (Q8_0, Q8_1; Q8_1 also keeps d * sum(xq) as float16, the
// sum its offsets are multiplied by), or per 256 by -127 / max, max the input of largest
// magnitude, with d = 1 / (-127 / max) kept as float32 (Q8_K). dx holds each group of 32's d,
// sx what offsets are multiplied by (Q8_1: d * sum(xq); Q8_0: -8 * sum(xq), for Q4_0; Q8_K:
// sum(xq), scaled by d once per 256), x16 the sums of its halves; all laid out as Rows8 says.
inline void quantize_block(const float* x, int64_t n, int64_t K, int act, int8_t* xq, float* dx,
                           float* sx, int32_t* x16, int64_t r, int64_t b) {
  const int64_t span = act == A8K ? 256 : 32;
  const v16i magnitude = v16i{} + 0x7fffffff;
  const float* v = x + r * K + b * span;
  v16f most{};
  for (int64_t i = 0; i < span; i += 16) {
    const v16f a = reinterpret_cast<v16f>(reinterpret_cast<v16i>(load16(v + i)) & magnitude);
    most = a > most ? a : most;
  }
  float amax = 0.0f, max = 0.0f;
  for (int l = 0; l < 16; ++l) amax = most[l] > amax ? most[l] : amax;
  // The signed input of largest magnitude: the first that reaches it.
  if (act == A8K)
    for (int64_t i = 0; i < span && amax > 0; ++i)
      if ((v[i] < 0 ? -v[i] : v[i]) == amax) {
        max = v[i];
        break;
      }
  float d, inv;
  if (act == A8K) {
    inv = amax > 0 ? -127.0f / max : 0.0f;
    d = amax > 0 ? 1.0f / inv : 0.0f;
  } else {
    d = amax / 127.0f;
    inv = amax > 0 ? 127.0f / amax : 0.0f;
  }
  // Each input times inv, rounded to the nearest integer (ties to even), at most 127; the
  // sums of each 16 (integers: exact in any order).
  for (int64_t i = 0; i < span; i += 16) {
    const int64_t at = b * span + i;  // the input's index in the row
    const v16f big = splat(12582912.0f), top = splat(127.0f);
    v16f q = (load16(v + i) * splat(inv) + big) - big;
    q = q > top ? top : q;
    const v16i qi = __builtin_convertvector(q, v16i);
    const v16c qb = __builtin_convertvector(qi, v16c);
    std::memcpy(xq + (at / 32 * n + r) * 32 + at % 32, &qb, 16);
    v16i s = qi + __builtin_shufflevector(qi, qi, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4,
                                          5, 6, 7);
    s = s + __builtin_shufflevector(s, s, 4, 5, 6, 7, 0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15);
    s = s + __builtin_shufflevector(s, s, 2, 3, 0, 1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    x16[at / 16 * n + r] = s[0] + s[1];
  }
  for (int64_t g = b * span / 32; g < (b + 1) * span / 32; ++g) {
    const float sum = static_cast<float>(x16[2 * g * n + r] + x16[(2 * g + 1) * n + r]);
    const float kept = act == A8K ? d : half(d);
    dx[g * n + r] = kept;
    // exact: |sum| <= 32 * 127
    sx[g * n + r] = act == A81 ? half(d * sum) : act == A80 ? -8.0f * sum : sum;
  }
}

// All n rows, each span of each row alone (on the threads when there are enough of them): the
// same numbers however they are shared out. bias (8-bit tiles): x16 times it is put in xb.
inline void quantize_rows(const float* x, int64_t n, int64_t K, int act, int8_t* xq, float* dx,
                          float* sx, int32_t* x16, int32_t* xb = nullptr, int32_t bias = 0) {
  const int64_t span = act == A8K ? 256 : 32, per_row = K / span;
  at::parallel_for(0, n * per_row, 4096 / span, [&](int64_t lo, int64_t hi) {
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t r = u / per_row, b = u % per_row;
      quantize_block(x, n, K, act, xq, dx, sx, x16, r, b);
      if (xb != nullptr)
        for (int64_t i = b * span / 16; i < (b + 1) * span / 16; ++i)
          xb[i * n + r] = bias * x16[i * n + r];
    }
  });
}

// y = x @ W.T for x (n, K) float32. held: HELD4 (q = t4), HELD8 (q = t8, or with eb extra
// bits the 5- or 6-bit planes and bias of tilep) with scales s held as sm and offsets z as zm
// (quant.py's modes), or HELDF (q = tf of float32, float16 or bfloat16; s and z unused); k256:
// inputs rounded per 256 (quantize_rows).
inline at::Tensor linear(Held held, const at::Tensor& x, const at::Tensor& q, const at::Tensor& s,
                         const at::Tensor& z, bool k256 = false, int sm = S32, int zm = Z32,
                         int eb = 0, int32_t bias = 0) {
  const int64_t n = x.size(0), K = x.size(1), blocks = q.size(0), O = blocks * 16;
  TORCH_CHECK(K % (k256 ? 256 : 32) == 0, "a tiled linear takes inputs in groups of ",
              k256 ? 256 : 32, ", not ", K);
  int elem = F32;
  int64_t per_byte = 1;  // bytes of q per input and output
  const auto bytes = [](const at::Tensor& t) {
    return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
  };
  const int64_t group = held == HELD4 ? 32 : 16;
  if (held != HELDF) {
    TORCH_CHECK(sm >= S32 && sm <= SK && zm >= Z0 && zm <= ZM8, "no scales of mode ", sm, "/", zm);
    TORCH_CHECK(held == HELD4 || zm != ZM8, "8-bit tiles take no -8 offsets");
    TORCH_CHECK((sm != SK && zm != ZK) || K % 256 == 0, "K-quant scales need inputs in 256s");
    TORCH_CHECK(eb == 0 || (held == HELD8 && (eb == 1 || eb == 2)), "no tiles of ", eb, " bits more");
    TORCH_CHECK(q.numel() == (eb > 0 ? blocks * (K / 32) * (256 + 64 * eb)
                                     : blocks * K * 16 / (held == HELD4 ? 2 : 1)),
                held == HELD4 ? "4-bit" : (eb > 0 ? "5- or 6-bit" : "8-bit"),
                " tiles of another shape");
    TORCH_CHECK(bytes(s) == blocks * scale_bytes(sm, K, group), "scales of another shape");
    const bool offsets = zm != Z0 && zm != ZM8;
    TORCH_CHECK(offsets ? bytes(z) == blocks * scale_bytes(zm - 1, K, group) : bytes(z) == 0,
                "offsets of another shape");
    TORCH_CHECK(s.is_contiguous() && (!offsets || z.is_contiguous()), "contiguous scales");
  } else {
    elem = q.scalar_type() == at::kHalf ? F16 : (q.scalar_type() == at::kBFloat16 ? BF16 : F32);
    TORCH_CHECK(elem != F32 || q.scalar_type() == at::kFloat, "float tiles of another type");
    TORCH_CHECK(q.numel() == blocks * K * 16, "float tiles of another shape");
    per_byte = elem == F32 ? 4 : 2;
  }
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.is_contiguous(), "float32 rows");
  TORCH_CHECK(q.is_contiguous(), "contiguous tiles");
  at::Tensor y = at::empty({n, O}, at::kFloat);
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  // Strides between tiles: q's in its elements (bytes for quantized tiles), s's and z's bytes.
  Where h{reinterpret_cast<const uint8_t*>(q.data_ptr()), nullptr, nullptr,
         held == HELD4 ? K / 2 * 16 : (eb > 0 ? K / 32 * (256 + 64 * eb) : K * 16), 0, 0, bias};
  at::Tensor xq, dx, sx, x16;
  Rows8 x8{nullptr, nullptr, nullptr, nullptr, nullptr};
  if (held != HELDF) {
    h.s = reinterpret_cast<const uint8_t*>(s.data_ptr());
    h.sstride = scale_bytes(sm, K, group);
    if (zm != Z0 && zm != ZM8) {
      h.z = reinterpret_cast<const uint8_t*>(z.data_ptr());
      h.zstride = scale_bytes(zm - 1, K, group);
    }
    xq = at::empty({n, K}, at::kChar);
    dx = at::empty({n, K / 32}, at::kFloat);
    sx = at::empty({n, K / 32}, at::kFloat);
    x16 = at::empty({held == HELD8 ? 2 : 1, n, K / 16}, at::kInt);  // with xb after
    const int act = k256 ? A8K : (zm == Z16 || zm == Z32 ? A81 : A80);
    // xb: what the 8-bit tiles' unsigned values add to each sum of 16
    int32_t* xb = held == HELD8 ? x16.data_ptr<int32_t>() + n * (K / 16) : nullptr;
    quantize_rows(xp, n, K, act, xq.data_ptr<int8_t>(), dx.data_ptr<float>(),
                  sx.data_ptr<float>(), x16.data_ptr<int32_t>(), xb, eb > 0 ? bias : 128);
    x8 = Rows8{xq.data_ptr<int8_t>(), dx.data_ptr<float>(), sx.data_ptr<float>(),
               x16.data_ptr<int32_t>(), xb};
  }
  // The forms quant.py writes; any other pair is refused above or here.
#define SAMCHAT_HELD(H, SM, ZM, EB)                                          \
  if (held == H && sm == SM && zm == ZM && eb == EB)                         \
    return all_tiles<H, SM, ZM, EB>(h, blocks, K, xp, x8, n, yp, O, per_byte), y;
  if (held == HELDF) {
    if (elem == F32) return all_tiles<HELDF, F32, Z0>(h, blocks, K, xp, x8, n, yp, O, per_byte), y;
    if (elem == F16) return all_tiles<HELDF, F16, Z0>(h, blocks, K, xp, x8, n, yp, O, per_byte), y;
    return all_tiles<HELDF, BF16, Z0>(h, blocks, K, xp, x8, n, yp, O, per_byte), y;
  }
  SAMCHAT_HELD(HELD4, S32, Z32, 0)  // requantized, or any other 4-bit type
  SAMCHAT_HELD(HELD4, S16, ZM8, 0)  // Q4_0
  SAMCHAT_HELD(HELD4, S16, Z16, 0)  // Q4_1
  SAMCHAT_HELD(HELD4, SK, ZK, 0)    // Q4_K
  SAMCHAT_HELD(HELD8, S32, Z0, 0)
  SAMCHAT_HELD(HELD8, S32, Z32, 0)
  SAMCHAT_HELD(HELD8, S16, Z0, 0)   // Q8_0
  SAMCHAT_HELD(HELD8, SK, Z0, 0)    // Q3_K
  SAMCHAT_HELD(HELD8, SK, ZK, 0)    // Q2_K
  SAMCHAT_HELD(HELD8, S16, Z0, 1)   // Q5_0
  SAMCHAT_HELD(HELD8, S16, Z16, 1)  // Q5_1
  SAMCHAT_HELD(HELD8, SK, ZK, 1)    // Q5_K
  SAMCHAT_HELD(HELD8, SK, Z0, 2)    // Q6_K
#undef SAMCHAT_HELD
  TORCH_CHECK(false, "no tiles hold scales ", sm, " with offsets ", zm);
  return y;
}

}  // namespace tiles
