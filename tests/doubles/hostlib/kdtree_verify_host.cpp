// Host-memory stand-in of libkdtree_verify.so: a TEST DOUBLE, never deployed.
//
// Exports the C ABI of files/csrc/kdtree_verify.h (the one owner of its constants,
// included here) with the same argument meanings, and computes the verify attention on the calling
// thread in fp32, reading host memory (torch CPU tensors' data_ptr()). It lets the kdtree path run for
// real in a CPU engine (float32, TRITON_INTERPRET=1). workspace and stream are ignored.
// kdtree_verify_capabilities says fp32 on host; build_info says double=host (kernel.py accepts a CPU
// device only from a library that declares both).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "kdtree_verify.h"

#define KDTREE_EXPORT extern "C" __attribute__((visibility("default")))
#define KDTREE_STR2(x) #x
#define KDTREE_STR(x) KDTREE_STR2(x)

#ifndef KDTREE_HOST_FAULT
#define KDTREE_HOST_FAULT 0 /* tests only: 1 drops the last prefix key of every request, 2 fails every launch,
                               3 sleeps KDTREE_HOST_SLOW_MS in every launch (a correct but slow kernel) */
#endif
#ifndef KDTREE_HOST_SLOW_MS
// fault 3: longer than one call of SGLang's Triton kernel under TRITON_INTERPRET=1 on the CPU test host
// (0.1-0.5 s per call), so validate's timing finds the kernel slower than the original on every bucket
#define KDTREE_HOST_SLOW_MS 600
#endif

namespace {

constexpr int D = KDTREE_HEAD_DIM;
constexpr int DV = KDTREE_V_DIM;

int64_t load_index(const void* p, int32_t i64, int64_t i) {
  return i64 ? static_cast<const int64_t*>(p)[i] : static_cast<const int32_t*>(p)[i];
}

float dot(const float* a, const float* b, int n) {
  float s = 0.f;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

KDTREE_EXPORT int kdtree_verify_abi_version(void) { return KDTREE_VERIFY_ABI_VERSION; }

KDTREE_EXPORT const char* kdtree_verify_build_info(void) {
  return "archs= double=host abi=" KDTREE_STR(KDTREE_VERIFY_ABI_VERSION) " fault=" KDTREE_STR(KDTREE_HOST_FAULT);
}

KDTREE_EXPORT int kdtree_verify_capabilities(uint32_t* io_dtypes, uint32_t* kv_dtypes, uint32_t* devices) {
  if (io_dtypes == nullptr || kv_dtypes == nullptr || devices == nullptr) return KDTREE_ERR_ARG;
  *io_dtypes = 1u << KDTREE_DTYPE_FP32;
  *kv_dtypes = 1u << KDTREE_DTYPE_FP32;
  *devices = KDTREE_DEVICE_HOST;
  return KDTREE_OK;
}

KDTREE_EXPORT int kdtree_verify_prepare(int /*device*/) { return KDTREE_OK; }

KDTREE_EXPORT int kdtree_verify_block_m(int num_heads, int max_extend_len, int hint) {
  // Same answers as the CUDA library (the host loop has no layouts; the hint is only checked).
  const int64_t rows = static_cast<int64_t>(num_heads > 0 ? num_heads : 1) * (max_extend_len > 0 ? max_extend_len : 1);
  const bool small_fits = rows <= KDTREE_BLOCK_M_SMALL;
  if (hint == 0) return small_fits ? KDTREE_BLOCK_M_SMALL : KDTREE_BLOCK_M;
  if (hint == KDTREE_BLOCK_M) return KDTREE_BLOCK_M;
  if (hint == KDTREE_BLOCK_M_SMALL && small_fits) return KDTREE_BLOCK_M_SMALL;
  return -1;
}

KDTREE_EXPORT int kdtree_verify_block_n(int block_m) {
  return block_m == KDTREE_BLOCK_M_SMALL ? KDTREE_BLOCK_N_SMALL : block_m == KDTREE_BLOCK_M ? KDTREE_BLOCK_N : -1;
}

KDTREE_EXPORT int kdtree_verify_min_split_tiles(int, int, int) { return KDTREE_MIN_SPLIT_TILES; }

KDTREE_EXPORT int kdtree_verify_num_splits(int, int, int, int, int64_t, int) { return 1; }

KDTREE_EXPORT int64_t kdtree_verify_workspace_bytes(int, int, int, int) { return 0; }

KDTREE_EXPORT int64_t kdtree_verify_max_workspace_bytes(int) { return 0; }

// The double never splits (kdtree_verify_num_splits is 1): its one unit runs every request whole (ABI 6:
// num_splits entries); its tiles are the 64-row layout's 16-key tiles. Any other unit count is refused.
KDTREE_EXPORT int64_t kdtree_verify_partition(int batch_size, int num_heads, int max_extend_len, int num_splits, int,
                                              int, const int64_t* prefix_lens, const int32_t* draft_lens,
                                              int64_t* unit_tiles, int32_t* unit_segments,
                                              int64_t* min_unit_tiles) {
  if (batch_size < 1 || num_heads < 1 || max_extend_len < 1 || num_splits != 1 || prefix_lens == nullptr ||
      draft_lens == nullptr || unit_tiles == nullptr || unit_segments == nullptr || min_unit_tiles == nullptr)
    return -1;
  *min_unit_tiles = KDTREE_MIN_SPLIT_TILES;
  unit_tiles[0] = 0;
  unit_segments[0] = 0;
  for (int r = 0; r < batch_size; ++r) {
    const int64_t keys = prefix_lens[r] < 0 || draft_lens[r] <= 0 ? 0 : prefix_lens[r] + draft_lens[r];
    const int64_t tiles = (keys + KDTREE_BLOCK_N - 1) / KDTREE_BLOCK_N;
    unit_tiles[0] += tiles;
    unit_segments[0] += tiles > 0;
  }
  return unit_tiles[0];
}

KDTREE_EXPORT int kdtree_verify_run(const kdtree_verify_args* a, void* /*stream*/) {
  if (a == nullptr) return KDTREE_ERR_ARG;
  if (a->struct_size != static_cast<int32_t>(sizeof(kdtree_verify_args))) return KDTREE_ERR_STRUCT;
  if (a->io_dtype != KDTREE_DTYPE_FP32 || a->kv_dtype != KDTREE_DTYPE_FP32) return KDTREE_ERR_ARG;
  if (a->mask_mode != KDTREE_MASK_TREE && a->mask_mode != KDTREE_MASK_CAUSAL) return KDTREE_ERR_ARG;
  if (a->num_heads < 1 || a->batch_size < 0 || a->batch_size > 65535 || a->max_extend_len < 0 ||
      a->num_tokens < 0 || a->num_splits < 1 || a->num_splits > KDTREE_MAX_SPLITS)
    return KDTREE_ERR_ARG;
  if (a->batch_size == 0 || a->num_tokens == 0 || a->max_extend_len == 0) return KDTREE_OK;
  if (!a->q || !a->k_extend || !a->v_extend || !a->kv_buffer || !a->qo_indptr || !a->kv_indptr ||
      !a->kv_indices || !a->out)
    return KDTREE_ERR_ARG;
  if (a->mask_mode == KDTREE_MASK_TREE && (!a->mask_indptr || !a->custom_mask)) return KDTREE_ERR_ARG;
  if (kdtree_verify_block_m(a->num_heads, a->max_extend_len, a->block_m) < 0) return KDTREE_ERR_ARG;
#if KDTREE_HOST_FAULT == 2
  return KDTREE_ERR_LAUNCH;  // as a CUDA launch that fails on a real call: the patch falls back at run time
#endif
#if KDTREE_HOST_FAULT == 3
  {  // the answer stays right; only the time is wrong (promotion on speed refuses it)
    struct timespec slow = {KDTREE_HOST_SLOW_MS / 1000, (KDTREE_HOST_SLOW_MS % 1000) * 1000000L};
    while (nanosleep(&slow, &slow) != 0) {
    }
  }
#endif

  const float* q = static_cast<const float*>(a->q);
  const float* ke = static_cast<const float*>(a->k_extend);
  const float* ve = static_cast<const float*>(a->v_extend);
  const float* kv = static_cast<const float*>(a->kv_buffer);
  const uint8_t* mask = static_cast<const uint8_t*>(a->custom_mask);
  float* out = static_cast<float*>(a->out);
  const int H = a->num_heads;
  // Scores of the longest request, then DV accumulators (plain malloc: no C++ runtime symbols exported).
  int64_t longest = 0;
  for (int r = 0; r < a->batch_size; ++r) {
    const int64_t len = load_index(a->kv_indptr, a->kv_indptr_i64, r + 1) - load_index(a->kv_indptr, a->kv_indptr_i64, r) +
                        load_index(a->qo_indptr, a->qo_indptr_i64, r + 1) - load_index(a->qo_indptr, a->qo_indptr_i64, r);
    if (len > longest) longest = len;
  }
  float* scores = static_cast<float*>(malloc(sizeof(float) * static_cast<size_t>(longest + DV)));
  if (scores == nullptr) return KDTREE_ERR_WORKSPACE;
  // ABI 4: the CUDA library's one count per launch; here a host uint64 (a CPU tensor), plain ++.
  if (a->call_counter != nullptr) ++*a->call_counter;
  float* acc = scores + longest;

  for (int r = 0; r < a->batch_size; ++r) {
    const int64_t q0 = load_index(a->qo_indptr, a->qo_indptr_i64, r);
    const int64_t n = load_index(a->qo_indptr, a->qo_indptr_i64, r + 1) - q0;
    const int64_t kv0 = load_index(a->kv_indptr, a->kv_indptr_i64, r);
    int64_t prefix = load_index(a->kv_indptr, a->kv_indptr_i64, r + 1) - kv0;
    if (n <= 0 || prefix < 0) continue;  // as the CUDA kernel: nothing written for such a request
    const int64_t m0 = a->mask_mode == KDTREE_MASK_TREE ? load_index(a->mask_indptr, a->mask_indptr_i64, r) : 0;
    const int64_t row_len = prefix + n;  // the mask row covers the whole prefix, then the drafts
#if KDTREE_HOST_FAULT == 1
    if (prefix > 0) --prefix;
#endif
    // Rows beyond max_extend_len are not served (the CUDA grid covers max_extend_len rows per request).
    const int64_t rows = n < a->max_extend_len ? n : a->max_extend_len;
    for (int64_t t = 0; t < rows && q0 + t < a->num_tokens; ++t) {
      for (int h = 0; h < H; ++h) {
        const float* qr = q + (q0 + t) * a->q_stride_t + h * a->q_stride_h;
        float mx = -INFINITY;
        for (int64_t j = 0; j < prefix; ++j) {
          const int64_t slot = load_index(a->kv_indices, a->kv_indices_i64, kv0 + j);
          scores[j] = dot(qr, kv + slot * a->kv_stride_t, D) * a->k_scale * a->sm_scale;
          mx = fmaxf(mx, scores[j]);
        }
        for (int64_t c = 0; c < n; ++c) {
          const bool visible = a->mask_mode == KDTREE_MASK_CAUSAL ? c <= t : mask[m0 + t * row_len + prefix + c] != 0;
          if (!visible) {
            scores[prefix + c] = -INFINITY;
            continue;
          }
          scores[prefix + c] = dot(qr, ke + (q0 + c) * a->k_extend_stride_t, D) * a->sm_scale;
          mx = fmaxf(mx, scores[prefix + c]);
        }
        for (int i = 0; i < DV; ++i) acc[i] = 0.f;
        float sum = 0.f;
        if (mx != -INFINITY) {
          for (int64_t j = 0; j < prefix + n; ++j) {
            if (scores[j] == -INFINITY) continue;
            const float p = expf(scores[j] - mx);
            sum += p;
            const float* v;
            float w = p;
            if (j < prefix) {
              v = kv + load_index(a->kv_indices, a->kv_indices_i64, kv0 + j) * a->kv_stride_t;
              w *= a->v_scale;
            } else {
              v = ve + (q0 + (j - prefix)) * a->v_extend_stride_t;
            }
            for (int i = 0; i < DV; ++i) acc[i] += w * v[i];
          }
        }
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        float* o = out + (q0 + t) * a->out_stride_t + h * a->out_stride_h;
        for (int i = 0; i < DV; ++i) o[i] = acc[i] * inv;
      }
    }
  }
  free(scores);
  return KDTREE_OK;
}
