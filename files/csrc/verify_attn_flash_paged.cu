// kdtree_verify: speculative-decoding verify attention for absorbed MLA (DeepSeek-V3 / Kimi-K2).
//
// Per request r: n = qo_indptr[r+1]-qo_indptr[r] draft tokens x H heads (the M dimension) attend to
//   (a) prefix_len = kv_indptr[r+1]-kv_indptr[r] committed tokens, pool slots
//       kv_indices[kv_indptr[r] + j], always visible;
//   (b) the n draft tokens' own K/V (k_extend/v_extend rows qo_indptr[r] + c), visible when
//       custom_mask[mask_indptr[r] + t*(prefix_len+n) + prefix_len + c] != 0 (mask_mode TREE), or
//       when c <= t (mask_mode CAUSAL: DFlash / EAGLE top-k 1 chains, SGLang passes no mask).
// Scales as SGLang's extend_attention_fwd: prefix scores are multiplied by k_scale, prefix P.V terms
// by v_scale; draft keys/values are never scaled.
// Concatenating (a) and (b) gives a "virtual" key sequence j in [0, total), total = prefix_len + n,
// and the mask byte of (row token t, key j >= prefix_len) is simply mask[mask_indptr[r] + t*total + j].
//
// Flash-decoding: grid (m_block, split, request). A CTA owns BM rows (row = t*H + h) and a contiguous
// range of BN-key tiles (with splits, a length-balanced share of the whole batch's tiles: the work
// partition below); every KV tile is read once per (request, work unit, m_block) and used for all BM
// rows through tensor-core mma.sync m16n8k16 (bf16 in, fp32 accumulate). Two layouts (Layout<BM>):
// BM = 64 / BN = 16, and BM = 32 / BN = 32 for H*n <= 32 (H = 8, n = 4: no padding rows, half the
// MMA work and Q shared-memory reads per key). Online softmax in fp32 (base-2 exponentials). With
// more than one split, each split writes a normalised partial output + log-sum-exp to the workspace
// and a combine kernel merges them.
// kv_indices of tile i+2 are loaded (one register, threads 0..BN-1) while tile i is computed and
// parked in a 3-slot shared-memory ring, so the data gathers of tile i+1 never wait on an index load.
//
// Warp layout (8 warps): rg = warp % RG owns rows rg*16..rg*16+15, ch = warp / RG (CG = 8 / RG
// column groups) owns
//   - for S = Q K^T: key columns ch*8..ch*8+7 of the tile (one n8 MMA tile, 36 k16 steps in two
//     independent accumulator chains of 18, summed at the end);
//   - for O += P V:  output dims ch*DVW..+DVW-1 (DVW = 512 / CG: NT_O n8 MMA tiles, BN/16 k16 steps).
// The CG warps of a row group exchange their row maxima (sMax) and their columns of P (sP) through
// shared memory, so all keep the same running max and rescale identically.
//
// CUDA-graph safety: no host synchronisation, no allocation; every range is read from the indptr
// arrays on the device; the grid depends only on host-known maxima (batch, max_extend_len, H, splits).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <utility>

#include "kdtree_verify.h"

#ifndef KDTREE_ARCHS
#define KDTREE_ARCHS "unknown"
#endif

// Fault injection for the tests' teeth (build.sh --fault): 1 drops the last key tile of every request,
// 2 drops the keys of work unit 1 of a split call (it reports its segments empty). Never set in a
// production build.
#ifndef KDTREE_FAULT
#define KDTREE_FAULT 0
#endif

// KDTREE_CPU_EMULATION (tests/kernel/cpu_emu, g++ only) runs this source on the CPU: its header,
// force-included, emulates the CUDA built-ins; the inline PTX and the launches below take its path.
// KDTREE_LAUNCH_PDL(grid, block, smem, stream, kernel, args...) launches with programmatic stream
// serialization (the kernel may start while the previous launch on the stream runs and waits for it with
// griddepcontrol.wait: grid_dependency_wait) and returns the launch's cudaError_t.
#ifdef KDTREE_CPU_EMULATION
#define KDTREE_LAUNCH(grid, block, smem, stream, ...) ((void)(stream), ::kdtree_emu::launch(grid, block, smem, __VA_ARGS__))
// The emulator runs the launches one after another: a plain launch, griddepcontrol a no-op.
#define KDTREE_LAUNCH_PDL(grid, block, smem, stream, kernel, ...) \
  (KDTREE_LAUNCH(grid, block, smem, stream, kernel)(__VA_ARGS__), cudaSuccess)
#else
#define KDTREE_LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<grid, block, smem, stream>>>
#define KDTREE_LAUNCH_PDL(grid, block, smem, stream, kernel, ...) \
  ::kdtree::launch_pdl(grid, block, smem, stream, kernel, __VA_ARGS__)
#endif

#define KDTREE_STR2(x) #x
#define KDTREE_STR(x) KDTREE_STR2(x)
#define KDTREE_EXPORT extern "C" __attribute__((visibility("default")))

namespace kdtree {

constexpr int D = KDTREE_HEAD_DIM;     // 576: K / Q dim
constexpr int DV = KDTREE_V_DIM;       // 512: V / O dim (V = first 512 dims of the latent)
constexpr int NWARPS = 8;
constexpr int NTHREADS = NWARPS * 32;  // 256
constexpr int SROW = D + 8;            // padded smem row of Q / K tiles, in bf16 elements
constexpr int Q_CHUNKS_PER_ROW = D / 8;   // 72 x 16 B per bf16 row of 576
constexpr int V_CHUNKS_PER_ROW = DV / 8;  // 64 x 16 B per bf16 row of 512
constexpr int IDX_RING = 3;               // kv_indices slots of tiles i, i+1, i+2
constexpr float LOG2E = 1.4426950408889634f;

static_assert(D % 32 == 0, "QK loop consumes 32 dims (two k16 MMA steps) per ldmatrix.x4 of K");
static_assert(DV <= D, "V is a prefix of the latent");
// ldmatrix: each row address 16-byte aligned; a row stride of 16 mod 128 bytes puts the 8 rows of
// an 8x8 matrix in 8 distinct 16-byte bank groups (no bank conflicts).
static_assert((SROW * 2) % 16 == 0 && (SROW * 2) % 128 == 16, "Q/K smem row padding");

// The two CTA layouts (8 warps each). Warp w owns row group rg = w % RG (16 rows, one m16 MMA tile)
// and key-column group cg = w / RG: keys cg*8..cg*8+7 of every BN-key tile for S = Q K^T, and
// output dims cg*DVW..cg*DVW+DVW-1 for O += P V.
//   BM = 64: 4 row groups x 2 column groups, BN = 16 keys per tile (KDTREE_BLOCK_M / KDTREE_BLOCK_N);
//   BM = 32: 2 row groups x 4 column groups, BN = 32 keys per tile (H*n <= 32: EAGLE3 top-k 1 at
//            H = 8, n = 4), half the MMA rows and half the Q shared-memory reads per key.
template <int BM_>
struct Layout {
  static constexpr int BM = BM_;
  static constexpr int RG = BM / 16;
  static constexpr int CG = NWARPS / RG;
  static constexpr int BN = 8 * CG;
  static constexpr int DVW = DV / CG;      // output dims per warp
  static constexpr int NT_O = DVW / 8;     // n8 accumulator tiles per warp
  static constexpr int SP_ROW = BN + 8;    // padded smem row of P, in bf16 elements
  // Shared memory layout (bytes).
  static constexpr int SQ_OFF = 0;
  static constexpr int SK_OFF = SQ_OFF + BM * SROW * 2;
  static constexpr int SP_OFF = SK_OFF + BN * SROW * 2;
  static constexpr int SMAX_OFF = SP_OFF + BM * SP_ROW * 2;
  static constexpr int SL_OFF = SMAX_OFF + CG * BM * 4;
  static constexpr int SIDX_OFF = SL_OFF + CG * BM * 4;
  static constexpr int SMEM_BYTES = SIDX_OFF + IDX_RING * BN * 8;
  static_assert(BM % 16 == 0 && NWARPS % RG == 0, "row groups of 16 rows");
  static_assert(BN % 16 == 0, "PV loop consumes 16 keys per k16 step");
  static_assert(DV == CG * DVW && DVW % 16 == 0, "PV loop consumes 16 dims per ldmatrix.x4.trans");
  static_assert((SP_ROW * 2) % 16 == 0, "P smem row alignment");
  static_assert(SK_OFF % 16 == 0 && SP_OFF % 16 == 0, "K and P tiles 16-byte aligned");
  static_assert(SMAX_OFF % 16 == 0 && SL_OFF % 16 == 0 && SIDX_OFF % 16 == 0, "stats / index arrays aligned");
  // 99 KB is the opt-in per-block limit of sm_120 (and sm_86/89); sm_90 / sm_100 allow 227 KB.
  static_assert(SMEM_BYTES <= 101376, "must fit the sm_120 per-block shared memory limit");
};
using Layout64 = Layout<KDTREE_BLOCK_M>;
using Layout32 = Layout<KDTREE_BLOCK_M_SMALL>;
static_assert(Layout64::BN == KDTREE_BLOCK_N, "the header's BLOCK_N is the 64-row layout's tile");
static_assert(Layout32::BN == KDTREE_BLOCK_N_SMALL, "the header's BLOCK_N_SMALL is the 32-row layout's tile");

// ---------------------------------------------------------------------------------------------
// Small device helpers.

__device__ __forceinline__ int64_t load_index(const void* p, int is64, int64_t i) {
  return is64 ? static_cast<const int64_t*>(p)[i] : static_cast<int64_t>(static_cast<const int32_t*>(p)[i]);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
#ifdef KDTREE_CPU_EMULATION
  kdtree_emu::ldmatrix_x4(r, p, false);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
#endif
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
#ifdef KDTREE_CPU_EMULATION
  kdtree_emu::ldmatrix_x4(r, p, true);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
#endif
}

// D = A(16x16, row) * B(16x8, col) + D, bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef KDTREE_CPU_EMULATION
  kdtree_emu::mma_m16n8k16_bf16(d, a, b0, b1);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low 16 bits) = lo
  return *reinterpret_cast<uint32_t*>(&v);
}

// Two fp8-e4m3 bytes (first element in the low byte) -> bf16x2, exactly (e4m3 values are bf16 values).
__device__ __forceinline__ uint32_t fp8x2_to_bf16x2(uint32_t two_bytes) {
  __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_bytes & 0xffffu), __NV_E4M3);
  float2 f = __half22float2(__half2(h));
  return pack_bf16x2(f.x, f.y);
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Programmatic dependent launch (sm_90 and later; every arch this library builds): the main kernel lets the
// combine start early (grid_dependents_launch), the combine waits for the main kernel's completion and
// memory (grid_dependency_wait) before it reads the workspace. No-ops on the CPU emulator, which runs the
// launches one after another.
__device__ __forceinline__ void grid_dependents_launch() {
#if !defined(KDTREE_CPU_EMULATION) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void grid_dependency_wait() {
#if !defined(KDTREE_CPU_EMULATION) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// ---------------------------------------------------------------------------------------------
// KV cache element types. A prefix tile is fetched as 16-byte chunks into registers one tile ahead
// (the loads are in flight while the current tile is computed) and converted to bf16 into sK, unscaled
// (the scales apply to the scores and to P, as in SGLang's Triton kernel).

struct KvBf16 {
  static constexpr int ELEMS_PER_CHUNK = 8;  // 16 B of bf16
  static constexpr int ELEM_BYTES = 2;
};
struct KvFp8 {
  static constexpr int ELEMS_PER_CHUNK = 16;  // 16 B of e4m3
  static constexpr int ELEM_BYTES = 1;
};

template <class Kv, int BN>
struct TileLoader {
  static constexpr int CHUNKS_PER_ROW = D / Kv::ELEMS_PER_CHUNK;       // 72 (bf16) or 36 (fp8)
  static constexpr int CHUNKS = BN * CHUNKS_PER_ROW;                  // BN=16: 1152 or 576
  static constexpr int ITERS = (CHUNKS + NTHREADS - 1) / NTHREADS;    // 5 or 3
  static_assert(D % Kv::ELEMS_PER_CHUNK == 0, "row is a whole number of 16-byte chunks");

  uint4 reg[ITERS];

  // Issue the global loads of the prefix rows of the tile starting at virtual key j0; `slots` holds
  // its BN pool slots (kv_indices, already in shared memory). Rows that are not prefix tokens (draft
  // keys, or past the end) are zero.
  __device__ __forceinline__ void fetch(const kdtree_verify_args& a, const int64_t* slots, int j0, int prefix_len) {
    const char* base = static_cast<const char*>(a.kv_buffer);
    const int64_t row_bytes = a.kv_stride_t * Kv::ELEM_BYTES;
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int c = it * NTHREADS + static_cast<int>(threadIdx.x);
      const int row = c / CHUNKS_PER_ROW;
      const int col = c % CHUNKS_PER_ROW;
      const int j = j0 + row;
      reg[it] = make_uint4(0u, 0u, 0u, 0u);
      if (c < CHUNKS && j < prefix_len) reg[it] = __ldg(reinterpret_cast<const uint4*>(base + slots[row] * row_bytes) + col);
    }
  }

  // Write the fetched chunks as bf16 into sK rows 0..BN-1. Draft rows (prefix_len <= j < total) are
  // skipped: copy_draft_rows owns them (no two writers per element).
  __device__ __forceinline__ void store(__nv_bfloat16* sK, int j0, int prefix_len, int total) const {
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int c = it * NTHREADS + static_cast<int>(threadIdx.x);
      if (c >= CHUNKS) continue;
      const int row = c / CHUNKS_PER_ROW;
      const int col = c % CHUNKS_PER_ROW;
      if (j0 + row >= prefix_len && j0 + row < total) continue;
      __nv_bfloat16* dst = sK + row * SROW + col * Kv::ELEMS_PER_CHUNK;
      const uint4 v = reg[it];
      if constexpr (Kv::ELEM_BYTES == 2) {
        *reinterpret_cast<uint4*>(dst) = v;
      } else {
        const uint4 lo = make_uint4(fp8x2_to_bf16x2(v.x), fp8x2_to_bf16x2(v.x >> 16), fp8x2_to_bf16x2(v.y),
                                    fp8x2_to_bf16x2(v.y >> 16));
        const uint4 hi = make_uint4(fp8x2_to_bf16x2(v.z), fp8x2_to_bf16x2(v.z >> 16), fp8x2_to_bf16x2(v.w),
                                    fp8x2_to_bf16x2(v.w >> 16));
        reinterpret_cast<uint4*>(dst)[0] = lo;
        reinterpret_cast<uint4*>(dst)[1] = hi;
      }
    }
  }
};

// Copy draft rows (virtual keys j in [prefix_len, total) of the tile at j0) of a bf16 [T, 1, width]
// tensor into sK[:, 0:width]. Only tiles that contain draft keys call this.
template <int CHUNKS_PER_ROW, int BN>
__device__ __forceinline__ void copy_draft_rows(__nv_bfloat16* sK, const void* src, int64_t stride_t, int64_t qo0,
                                                int j0, int prefix_len, int total, int num_tokens) {
  const __nv_bfloat16* base = static_cast<const __nv_bfloat16*>(src);
  for (int c = threadIdx.x; c < BN * CHUNKS_PER_ROW; c += NTHREADS) {
    const int row = c / CHUNKS_PER_ROW;
    const int col = c % CHUNKS_PER_ROW;
    const int j = j0 + row;
    if (j < prefix_len || j >= total) continue;
    const int64_t tok = qo0 + (j - prefix_len);
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (tok < num_tokens) v = __ldg(reinterpret_cast<const uint4*>(base + tok * stride_t) + col);
    *reinterpret_cast<uint4*>(sK + row * SROW + col * 8) = v;
  }
}

// ---------------------------------------------------------------------------------------------
// Work partition (ABI 6): one owner of the arithmetic for the kernel, the combine and the host's
// kdtree_verify_partition.
//
// Grid (m_blocks, units): units = kdtree_verify_num_splits = floor(SMs / m_blocks) for every batch size,
// so one wave fills the GPU whatever the batch. The batch's requests, one after another, form one
// sequence of cost positions: request r costs its request_tiles(prefix_r, n_r, BN) tiles plus
// SEGMENT_COST (its prologue: Q load, index ring, first gather, about one tile), C_r positions come
// before it, and its tile k sits at position C_r + SEGMENT_COST + k. The total cost is spread evenly over
// `used` = used_units(total, units, KDTREE_MIN_SPLIT_TILES) units: unit u = blockIdx.y takes the positions
// [unit_start(u), unit_start(u + 1)), floor(u * total / used) on, so every used unit has work and none more
// than ceil(total / used) positions: a long request spans several units, a unit may visit several short
// requests (one segment each), and no unit costs more than ceil(total / used) + SEGMENT_COST tiles
// whatever the mix of lengths. Every CTA plans from
// qo_indptr / kv_indptr on the device (a block-wide scan over the batch), so the grid comes from host
// maxima only and a CUDA-graph replay with new lengths is planned anew. A request one unit holds whole
// is written to `out` directly; a unit's other segments are its first (slot 2u) and its last (slot
// 2u + 1): every segment between them is a whole request. With more than one unit, CTA (0, 0) also
// writes the plan (C_0..C_batch, used) after the partials for the combine, which merges request r's
// slots for u in [unit_of(C_r + SEGMENT_COST), unit_of(C_{r+1} - 1)] when that range has more than one
// unit (segment_slot).

constexpr int SEGMENT_COST = KDTREE_SEGMENT_COST_TILES;

__host__ __device__ __forceinline__ int64_t request_tiles(int64_t prefix_len, int64_t n, int bn) {
  return (n <= 0 || prefix_len < 0) ? 0 : (prefix_len + n + bn - 1) / bn;
}

// A request's cost positions: its tiles and its segment cost (an empty request costs nothing).
__host__ __device__ __forceinline__ int64_t request_cost(int64_t tiles) {
  return tiles > 0 ? tiles + SEGMENT_COST : 0;
}

// The units the batch's cost is spread over: every unit, or fewer when the batch has fewer than
// min_tiles positions per unit (at least 1).
__host__ __device__ __forceinline__ int64_t used_units(int64_t total, int64_t units, int64_t min_tiles) {
  const int64_t by_cost = total / (min_tiles > 0 ? min_tiles : 1);
  const int64_t used = by_cost < units ? by_cost : units;
  return used > 0 ? used : 1;
}

// The first cost position of unit u of `used` (unit_start(used) == total).
__host__ __device__ __forceinline__ int64_t unit_start(int64_t u, int64_t total, int64_t used) {
  return u >= used ? total : u * total / used;
}

// The unit that holds position p < total: the largest u with unit_start(u) <= p, i.e. u * total < (p + 1) * used.
__host__ __device__ __forceinline__ int64_t unit_of(int64_t p, int64_t total, int64_t used) {
  return ((p + 1) * used - 1) / total;
}

// kdtree_verify_min_split_tiles counts KDTREE_BLOCK_N-key tiles; in a layout of bn-key tiles:
__host__ __device__ __forceinline__ int64_t min_tiles_of_layout(int min_split_tiles, int bn) {
  return (static_cast<int64_t>(min_split_tiles) * KDTREE_BLOCK_N + bn - 1) / bn;
}

// The request's tile at relative cost position `rel` (position - C_r), clamped to [0, tiles]: the tiles
// [tile_at(start - C_r), tile_at(end - C_r)) of a request fall in the positions [start, end).
__host__ __device__ __forceinline__ int64_t tile_at(int64_t rel, int64_t tiles) {
  rel -= SEGMENT_COST;
  return rel < 0 ? 0 : (rel > tiles ? tiles : rel);
}

// Workspace slots of a launch of `units` work units: 2 each (the partial rows are slots x m_blocks x BM).
__host__ __device__ __forceinline__ int64_t workspace_slots(int64_t units) { return 2 * units; }

// The workspace slot of request r's segment in unit u (a request cut between units): 2u when it is the
// unit's first segment (no earlier request has a tile in the unit: C_r <= unit_start(u)), else 2u + 1 (the
// unit's last segment, a request that starts in it and goes on in the next unit).
__host__ __device__ __forceinline__ int64_t segment_slot(int64_t u, int64_t c_r, int64_t total, int64_t used) {
  return 2 * u + (c_r <= unit_start(u, total, used) ? 0 : 1);
}

struct Request {
  int64_t qo0, kv0, mask0;
  int n, prefix_len;
};

__device__ __forceinline__ Request load_request(const kdtree_verify_args& a, int r) {
  Request q;
  q.qo0 = load_index(a.qo_indptr, a.qo_indptr_i64, r);
  q.n = static_cast<int>(load_index(a.qo_indptr, a.qo_indptr_i64, r + 1) - q.qo0);
  q.kv0 = load_index(a.kv_indptr, a.kv_indptr_i64, r);
  q.prefix_len = static_cast<int>(load_index(a.kv_indptr, a.kv_indptr_i64, r + 1) - q.kv0);
  q.mask0 = a.mask_mode == KDTREE_MASK_CAUSAL ? 0 : load_index(a.mask_indptr, a.mask_indptr_i64, r);
  return q;
}

__device__ __forceinline__ int64_t tiles_of_request(const kdtree_verify_args& a, int r, int bn) {
  const int64_t qo0 = load_index(a.qo_indptr, a.qo_indptr_i64, r);
  const int64_t kv0 = load_index(a.kv_indptr, a.kv_indptr_i64, r);
  return request_tiles(load_index(a.kv_indptr, a.kv_indptr_i64, r + 1) - kv0,
                       load_index(a.qo_indptr, a.qo_indptr_i64, r + 1) - qo0, bn);
}

// Inclusive scan of one value per thread across the CTA, in scan[0..NTHREADS); every thread gets its
// own inclusive sum and scan[NTHREADS - 1] holds the total when it returns.
__device__ __forceinline__ int64_t block_scan(int64_t* scan, int64_t v) {
  const int tid = threadIdx.x;
  scan[tid] = v;
  __syncthreads();
  for (int off = 1; off < NTHREADS; off <<= 1) {
    const int64_t add = tid >= off ? scan[tid - off] : 0;
    __syncthreads();
    scan[tid] += add;
    __syncthreads();
  }
  return scan[tid];
}

// ---------------------------------------------------------------------------------------------
// One segment: rows [mb*BM, mb*BM + BM) of request q over its key tiles [t_begin, t_end) (of n_tiles).
// slot < 0: the whole request, normalised into `out`; else a partial output + lse into workspace slot
// `slot` (an empty range writes lse = -inf). Uniform across the CTA; it leaves shared memory free for the
// next segment (its last reads are before its last __syncthreads).

template <class Kv, int BM_>
__device__ __forceinline__ void attend(const kdtree_verify_args& a, unsigned char* smem, const Request& q, int mb,
                                       int t_begin, int t_end, int64_t slot) {
  using L = Layout<BM_>;
  constexpr int BM = L::BM, BN = L::BN, RG = L::RG, CG = L::CG, NT_O = L::NT_O, SP_ROW = L::SP_ROW;
  constexpr int DV_PER_WARP = L::DVW;
  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem + L::SQ_OFF);
  __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem + L::SK_OFF);
  __nv_bfloat16* sP = reinterpret_cast<__nv_bfloat16*>(smem + L::SP_OFF);
  float* sMax = reinterpret_cast<float*>(smem + L::SMAX_OFF);
  float* sL = reinterpret_cast<float*>(smem + L::SL_OFF);
  int64_t* sIdx = reinterpret_cast<int64_t*>(smem + L::SIDX_OFF);  // [IDX_RING][BN] pool slots

  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int rg = warp % RG;  // row group: rows rg*16 .. rg*16+15 of the CTA
  const int ch = warp / RG;  // key-column group (keys ch*8.. of a tile; output dims ch*DV_PER_WARP..)
  const int g = lane >> 2;   // MMA fragment row within 8
  const int qd = lane & 3;   // MMA fragment column pair

  const int H = a.num_heads;
  const int64_t qo0 = q.qo0, kv0 = q.kv0, mask0 = q.mask0;
  const int n = q.n, prefix_len = q.prefix_len;
  const bool causal = a.mask_mode == KDTREE_MASK_CAUSAL;
  const int rows = n * H;     // valid rows of this request
  const int row0 = mb * BM;   // first row of this CTA
  if (n <= 0 || prefix_len < 0 || row0 >= rows) return;  // uniform across the CTA
  const int total = prefix_len + n;

  // The two accumulator rows of this thread: local rows lr[0] = rg*16+g and lr[1] = lr[0]+8.
  int lr[2], grow[2], tok[2];
  bool valid[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    lr[i] = rg * 16 + g + 8 * i;
    grow[i] = row0 + lr[i];            // row within the request: t * H + h
    tok[i] = grow[i] / H;              // draft token index t within the request
    valid[i] = grow[i] < rows && qo0 + tok[i] < a.num_tokens;
  }
  // Workspace row of (slot, m_block, local row); its size depends only on the grid, never on the token
  // buffer length (see kdtree_verify_workspace_bytes).
  const int64_t ws_rows = workspace_slots(gridDim.y) * gridDim.x * BM;
  const int64_t ws_row0 = (slot * gridDim.x + mb) * BM;
  float* ws_o = static_cast<float*>(a.workspace);
  float* ws_lse = ws_o + ws_rows * DV;

  if (t_begin >= t_end) {  // an empty segment (fault builds only): contributes nothing to the combine
    if (slot >= 0 && ch == 0 && qd == 0) {
#pragma unroll
      for (int i = 0; i < 2; ++i)
        if (valid[i]) ws_lse[ws_row0 + lr[i]] = -INFINITY;
    }
    return;
  }

  // ---- Q tile -> sQ (rows past the request are zero) ----
  {
    const __nv_bfloat16* qp = static_cast<const __nv_bfloat16*>(a.q);
    for (int c = tid; c < BM * Q_CHUNKS_PER_ROW; c += NTHREADS) {
      const int row = c / Q_CHUNKS_PER_ROW;
      const int col = c % Q_CHUNKS_PER_ROW;
      const int gr = row0 + row;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (gr < rows) {
        const int64_t t = qo0 + gr / H;
        if (t < a.num_tokens) v = __ldg(reinterpret_cast<const uint4*>(qp + t * a.q_stride_t + (gr % H) * a.q_stride_h) + col);
      }
      *reinterpret_cast<uint4*>(sQ + row * SROW + col * 8) = v;
    }
  }

  // ---- kv_indices of the first two tiles -> index ring slots 0 and 1 ----
  if (tid < 2 * BN) {
    const int j = (t_begin + tid / BN) * BN + tid % BN;
    sIdx[tid] = j < prefix_len ? load_index(a.kv_indices, a.kv_indices_i64, kv0 + j) : 0;
  }
  __syncthreads();

  TileLoader<Kv, BN> loader;
  loader.fetch(a, sIdx, t_begin * BN, prefix_len);

  float o[NT_O][4];
#pragma unroll
  for (int nt = 0; nt < NT_O; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_run[2] = {0.f, 0.f};  // this thread's partial row sums (its 2 of the BN keys of each tile)
  const float scale2 = a.sm_scale * LOG2E;
  const float scale2k = scale2 * a.k_scale;  // prefix keys: SGLang's qk *= sm_scale * k_scale
  const float v_scale = a.v_scale;           // prefix values: SGLang's acc += (P V) * v_scale
  const unsigned char* mask = static_cast<const unsigned char*>(a.custom_mask);

  for (int tile = t_begin; tile < t_end; ++tile) {
    const int j0 = tile * BN;
    const int ring = (tile - t_begin) % IDX_RING;
    const bool has_draft = j0 + BN > prefix_len;  // the tile holds draft keys (uniform)
    // Index of tile + 2, into a register now, into the ring at the end of this tile (latency hidden).
    int64_t next_slot = 0;
    if (tid < BN) {
      const int j = j0 + 2 * BN + tid;
      if (j < prefix_len && tile + 2 < t_end) next_slot = load_index(a.kv_indices, a.kv_indices_i64, kv0 + j);
    }

    __syncthreads();  // (A) every warp finished reading sK, sP, sMax of the previous tile; ring slot visible
    loader.store(sK, j0, prefix_len, total);
    if (has_draft)
      copy_draft_rows<Q_CHUNKS_PER_ROW, BN>(sK, a.k_extend, a.k_extend_stride_t, qo0, j0, prefix_len, total,
                                        a.num_tokens);
    if (tile + 1 < t_end)  // in flight during compute; its indices were parked one tile ago
      loader.fetch(a, sIdx + ((ring + 1) % IDX_RING) * BN, j0 + BN, prefix_len);
    __syncthreads();  // (B) sK (and, on the first tile, sQ) complete

    // ---- S = Q K^T: rows rg*16.., keys ch*8.. (fp32), two independent MMA chains ----
    float s[4];
    {
      float s0[4] = {0.f, 0.f, 0.f, 0.f}, s1[4] = {0.f, 0.f, 0.f, 0.f};
      const __nv_bfloat16* qa = sQ + (rg * 16 + (lane & 15)) * SROW + (lane >> 4) * 8;
      const __nv_bfloat16* kb = sK + (ch * 8 + (lane & 7)) * SROW + (lane >> 3) * 8;
#pragma unroll 6
      for (int kk = 0; kk < D; kk += 32) {
        uint32_t a0[4], a1[4], b[4];
        ldmatrix_x4(a0, qa + kk);       // A rows 0-15, dims kk..kk+15
        ldmatrix_x4(a1, qa + kk + 16);  // A rows 0-15, dims kk+16..kk+31
        ldmatrix_x4(b, kb + kk);        // B: keys 0-7, dims kk, kk+8, kk+16, kk+24 (8 each)
        mma_bf16(s0, a0, b[0], b[1]);
        mma_bf16(s1, a1, b[2], b[3]);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) s[e] = s0[e] + s1[e];
    }

    // ---- scale, mask, row max ----
    // s[e]: row lr[e/2], key column ch*8 + 2*qd + (e&1) of the tile.
    float mx[2];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = e >> 1;
      const int j = j0 + ch * 8 + 2 * qd + (e & 1);
      bool visible = j < total;
      if (visible && j >= prefix_len && grow[i] < rows) {
        // causal: draft key c = j - prefix_len is visible to draft row t when c <= t.
        // tree: mask[mask_indptr[r] + t*(prefix_len+n) + prefix_len + c] == mask[mask0 + t*total + j]
        visible = causal ? j - prefix_len <= tok[i] : mask[mask0 + static_cast<int64_t>(tok[i]) * total + j] != 0;
      }
      s[e] = visible ? s[e] * (j < prefix_len ? scale2k : scale2) : -INFINITY;
    }
    mx[0] = quad_max(fmaxf(s[0], s[1]));
    mx[1] = quad_max(fmaxf(s[2], s[3]));
    if (qd == 0) {
      sMax[ch * BM + lr[0]] = mx[0];
      sMax[ch * BM + lr[1]] = mx[1];
    }
    __syncthreads();  // (C) all QK reads of sK done; every column group's maxima are visible

    if (has_draft)  // V of draft keys comes from v_extend: overwrite dims 0..511 of those rows
      copy_draft_rows<V_CHUNKS_PER_ROW, BN>(sK, a.v_extend, a.v_extend_stride_t, qo0, j0, prefix_len, total,
                                        a.num_tokens);

    float alpha[2], p[4];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float m_tile = mx[i];
#pragma unroll
      for (int c = 0; c < CG; ++c) m_tile = fmaxf(m_tile, sMax[c * BM + lr[i]]);  // all column groups
      const float m_new = fmaxf(m_run[i], m_tile);
      // m_new == -inf: nothing visible so far; keep everything at zero (avoids inf - inf).
      alpha[i] = (m_new == -INFINITY) ? 1.f : exp2f(m_run[i] - m_new);
      p[2 * i] = (m_new == -INFINITY) ? 0.f : exp2f(s[2 * i] - m_new);
      p[2 * i + 1] = (m_new == -INFINITY) ? 0.f : exp2f(s[2 * i + 1] - m_new);
      l_run[i] = l_run[i] * alpha[i] + p[2 * i] + p[2 * i + 1];
      m_run[i] = m_new;
    }
#pragma unroll
    for (int nt = 0; nt < NT_O; ++nt) {
      o[nt][0] *= alpha[0];
      o[nt][1] *= alpha[0];
      o[nt][2] *= alpha[1];
      o[nt][3] *= alpha[1];
    }
    // P.V weights: prefix keys carry v_scale (l_run above stays unscaled, as Triton's deno).
    const int jp = j0 + ch * 8 + 2 * qd;
    const float w0 = jp < prefix_len ? v_scale : 1.f;
    const float w1 = jp + 1 < prefix_len ? v_scale : 1.f;
    *reinterpret_cast<uint32_t*>(sP + lr[0] * SP_ROW + ch * 8 + 2 * qd) = pack_bf16x2(p[0] * w0, p[1] * w1);
    *reinterpret_cast<uint32_t*>(sP + lr[1] * SP_ROW + ch * 8 + 2 * qd) = pack_bf16x2(p[2] * w0, p[3] * w1);
    __syncthreads();  // (D) P (all column groups) and the draft V rows are in smem

    // ---- O += P V: rows rg*16.., dims ch*DV_PER_WARP.., BN / 16 k16 steps over the tile's keys ----
    // Not unrolled: with BN = 32 two unrolled k-steps hoist 2 x 16 V fragments and the bf16 kernel of
    // the 32-row layout spills (255 registers); one step at a time it has 0 spills.
#pragma unroll 1
    for (int ks = 0; ks < BN / 16; ++ks) {
      uint32_t pa[4];
      ldmatrix_x4(pa, sP + (rg * 16 + (lane & 15)) * SP_ROW + ks * 16 + (lane >> 4) * 8);
      // ldmatrix.trans matrix i = lane/8: keys ks*16 + (i&1)*8.., dims base + (i>>1)*8.. ->
      // regs {b0,b1} of n-tile base and {b0,b1} of n-tile base+8.
      const __nv_bfloat16* vb =
          sK + (ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * SROW + ch * DV_PER_WARP + (lane >> 4) * 8;
#pragma unroll
      for (int np = 0; np < NT_O / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, vb + np * 16);
        mma_bf16(o[2 * np], pa, b[0], b[1]);
        mma_bf16(o[2 * np + 1], pa, b[2], b[3]);
      }
    }
    // Park the index of tile + 2 in the slot tile - 1 used (read before (A) of this tile).
    if (tid < BN) sIdx[((ring + 2) % IDX_RING) * BN + tid] = next_slot;
  }

  // ---- row sums across the quad and the column groups ----
  float l_tot[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) l_tot[i] = quad_sum(l_run[i]);
  if (qd == 0) {
    sL[ch * BM + lr[0]] = l_tot[0];
    sL[ch * BM + lr[1]] = l_tot[1];
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l_tot[i] = 0.f;
#pragma unroll
    for (int c = 0; c < CG; ++c) l_tot[i] += sL[c * BM + lr[i]];
  }

  // ---- epilogue ----
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (!valid[i]) continue;
    const int h = grow[i] % H;
    const int64_t t = qo0 + tok[i];
    const float inv = l_tot[i] > 0.f ? 1.f / l_tot[i] : 0.f;
    if (slot < 0) {
      __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.out) + t * a.out_stride_t + h * a.out_stride_h +
                           ch * DV_PER_WARP + 2 * qd;
#pragma unroll
      for (int nt = 0; nt < NT_O; ++nt)
        *reinterpret_cast<uint32_t*>(out + nt * 8) = pack_bf16x2(o[nt][2 * i] * inv, o[nt][2 * i + 1] * inv);
    } else {
      const int64_t R = ws_row0 + lr[i];
      float* dst = ws_o + R * DV + ch * DV_PER_WARP + 2 * qd;
#pragma unroll
      for (int nt = 0; nt < NT_O; ++nt)
        *reinterpret_cast<float2*>(dst + nt * 8) = make_float2(o[nt][2 * i] * inv, o[nt][2 * i + 1] * inv);
      if (ch == 0 && qd == 0) ws_lse[R] = l_tot[i] > 0.f ? m_run[i] + log2f(l_tot[i]) : -INFINITY;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Main kernel: grid (m_blocks, units); CTA (mb, u) is m-block mb of work unit u (the partition above).

template <class Kv, int BM_>
__global__ void __launch_bounds__(NTHREADS, 1) verify_attn_kernel(const kdtree_verify_args a) {
  using L = Layout<BM_>;
  constexpr int BN = L::BN;
  extern __shared__ __align__(128) unsigned char smem[];
  const int mb = blockIdx.x;
  const int tid = threadIdx.x;
  // ABI 4: one count per launch (CTA (0,0), thread 0), before any early return of the CTA.
  if (a.call_counter != nullptr && mb == 0 && blockIdx.y == 0 && tid == 0)
    atomicAdd(reinterpret_cast<unsigned long long*>(a.call_counter), 1ull);

  // ---- the plan: total cost, this unit's first position, the request that holds it ----
  // Scratch in the Q tile's shared memory (the first segment loads Q after the last read of it):
  // NTHREADS scan entries, then the found request and the cost before it.
  int64_t* scan = reinterpret_cast<int64_t*>(smem + L::SQ_OFF);
  static_assert((NTHREADS + 2) * 8 <= BM_ * SROW * 2, "plan scratch fits in the Q tile");
  const int B = a.batch_size;
  const int64_t units = gridDim.y;
  const int64_t u = blockIdx.y;
  const int chunks = (B + NTHREADS - 1) / NTHREADS;
  // CTA (0, 0) of a launch with several units writes the plan for the combine: C_0..C_B, then the used
  // units (after the partials).
  int64_t* plan = reinterpret_cast<int64_t*>(static_cast<float*>(a.workspace) +
                                             workspace_slots(gridDim.y) * gridDim.x * L::BM * (DV + 1));
  const bool writes_plan = units > 1 && mb == 0 && u == 0;
  int64_t carry = 0;
  for (int c = 0; c < chunks; ++c) {
    const int r = c * NTHREADS + tid;
    const int64_t incl = carry + block_scan(scan, r < B ? request_cost(tiles_of_request(a, r, BN)) : 0);
    if (writes_plan && r < B) plan[r + 1] = incl;
    carry += scan[NTHREADS - 1];
    __syncthreads();  // every thread read the chunk's total before the next scan overwrites it
  }
  const int64_t total = carry;
  const int64_t used = used_units(total, units, min_tiles_of_layout(KDTREE_MIN_SPLIT_TILES, BN));
  if (writes_plan && tid == 0) {
    plan[0] = 0;
    plan[B + 1] = used;
  }
  if (u >= used || total == 0) return;  // an idle unit (uniform): nothing of the batch is left for it
  const int64_t start = unit_start(u, total, used);
  const int64_t end = unit_start(u + 1, total, used);
  // The request holding position `start`: again the scan (kept from above when the batch fits one chunk).
  carry = 0;
  for (int c = 0; c < chunks; ++c) {
    const int r = c * NTHREADS + tid;
    const int64_t v = r < B ? request_cost(tiles_of_request(a, r, BN)) : 0;
    const int64_t incl = carry + (chunks == 1 ? scan[tid] : block_scan(scan, v));
    if (v > 0 && incl - v <= start && start < incl) {  // exactly one thread of one chunk
      scan[NTHREADS] = r;
      scan[NTHREADS + 1] = incl - v;
    }
    carry += scan[NTHREADS - 1];
    __syncthreads();
  }
  int r = static_cast<int>(scan[NTHREADS]);
  // The unit's positions relative to the current request's first one (32-bit state: the kernel is at its
  // register limit): [s, e), both move down by each request's cost.
  int s = static_cast<int>(start - scan[NTHREADS + 1]);
  int e = static_cast<int>(end - scan[NTHREADS + 1]);
  const int unit = static_cast<int>(u);
  int segments = 0;
  __syncthreads();  // the scratch is read: the segments may load Q over it

  // ---- the unit's segments, request after request ----
#pragma unroll 1
  for (; e > 0 && r < B; ++r) {  // uniform: every thread walks the same requests
    const Request q = load_request(a, r);
    const int n_tiles = static_cast<int>(request_tiles(q.prefix_len, q.n, BN));
    const int lo = static_cast<int>(tile_at(s, n_tiles));
    const int hi = static_cast<int>(tile_at(e, n_tiles));
    s -= static_cast<int>(request_cost(n_tiles));
    e -= static_cast<int>(request_cost(n_tiles));
    if (hi <= lo) continue;  // an empty request (n = 0), or only its segment cost falls in this unit
    // A request the unit holds whole is written to `out` at once (no partial, the combine skips it);
    // else its first segment goes to slot 2u, its last to 2u + 1 (segment_slot).
    const int64_t slot = lo == 0 && hi == n_tiles ? -1 : 2 * static_cast<int64_t>(unit) + (segments > 0);
    ++segments;
#if KDTREE_FAULT == 1
    attend<Kv, BM_>(a, smem, q, mb, lo, hi == n_tiles ? hi - 1 : hi, slot);  // FAULT: last tile lost
#elif KDTREE_FAULT == 2
    attend<Kv, BM_>(a, smem, q, mb, lo, unit == 1 ? lo : hi, slot);  // FAULT: unit 1 reports empty
#else
    attend<Kv, BM_>(a, smem, q, mb, lo, hi, slot);
#endif
  }
  grid_dependents_launch();  // this CTA's partials are written: the combine may be scheduled (PDL)
}

// ---------------------------------------------------------------------------------------------
// Combine (ABI 6): grid (m_blocks * BM, batch), one CTA of COMBINE_WARPS warps per (request, row). Merges
// the partials of the units that covered the request (the plan CTA (0, 0) of the main kernel wrote: C_r,
// C_{r+1}, C_batch and the used units), slot segment_slot(u, C_r, ...) for unit u, in three steps with
// no load behind a branch on a value just loaded:
//   1. thread i loads the lse of the request's unit i (all at once); warp shuffles and one shared-memory
//      exchange give the max and the weights 2^(lse - max) (a unit without keys: lse -inf, weight 0);
//   2. warp w takes the units i = w, w + COMBINE_WARPS, ..., COMBINE_UNROLL of them at a time, lane l
//      the dims 16 l .. 16 l + 15 (4 float4 loads per unit): weight x partial, a zero weight multiplies;
//   3. the warps' sums meet in shared memory and 128 threads write 4 dims each.
// Launched with programmatic dependent launch (launch_pdl): it may start while the main kernel runs and
// waits (grid_dependency_wait) before it reads the workspace.

constexpr int COMBINE_WARPS = 16;
constexpr int COMBINE_THREADS = COMBINE_WARPS * 32;
constexpr int COMBINE_UNROLL = 4;          // units whose partials a lane has in flight at once
constexpr int COMBINE_LANE_DIMS = DV / 32;  // 16 dims = 4 float4 per lane and unit
constexpr int COMBINE_SMEM_BYTES = (COMBINE_THREADS + 2 * COMBINE_WARPS + COMBINE_WARPS * DV) * 4;
static_assert(KDTREE_MAX_SPLITS <= COMBINE_THREADS, "combine: one unit's lse per thread");
static_assert(COMBINE_LANE_DIMS == 16 && DV / 4 <= COMBINE_THREADS, "combine: lane and output dims");
static_assert(COMBINE_SMEM_BYTES <= 48 * 1024, "combine: within the default dynamic shared memory");

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <int BM>
__global__ void __launch_bounds__(COMBINE_THREADS) combine_kernel(const kdtree_verify_args a) {
  extern __shared__ __align__(128) unsigned char smem[];
  float* sW = reinterpret_cast<float*>(smem);          // [COMBINE_THREADS] unit weights
  float* sRed = sW + COMBINE_THREADS;                   // [2][COMBINE_WARPS] per-warp max, then sum
  float* sAcc = sRed + 2 * COMBINE_WARPS;               // [COMBINE_WARPS][DV] per-warp partial sums
  const int H = a.num_heads;
  const int m_blocks = gridDim.x / BM;
  const int mb = blockIdx.x / BM;
  const int lrow = blockIdx.x % BM;
  const int r = blockIdx.y;
  const int B = a.batch_size;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t qo0 = load_index(a.qo_indptr, a.qo_indptr_i64, r);
  const int n = static_cast<int>(load_index(a.qo_indptr, a.qo_indptr_i64, r + 1) - qo0);
  const int grow = mb * BM + lrow;
  if (n <= 0 || grow >= n * H) return;
  const int64_t t = qo0 + grow / H;
  const int h = grow % H;
  if (t >= a.num_tokens) return;
  const int64_t prefix_len = load_index(a.kv_indptr, a.kv_indptr_i64, r + 1) - load_index(a.kv_indptr, a.kv_indptr_i64, r);
  if (prefix_len < 0) return;  // the main kernel skipped this request too

  grid_dependency_wait();  // the main kernel's partials and plan are complete and visible
  const int64_t ws_rows = workspace_slots(a.num_splits) * m_blocks * BM;
  const float* ws_o = static_cast<const float*>(a.workspace);
  const float* ws_lse = ws_o + ws_rows * DV;
  const int64_t* plan = reinterpret_cast<const int64_t*>(ws_lse + ws_rows);
  const int64_t c_r = plan[r], c_next = plan[r + 1], total = plan[B], used = plan[B + 1];
  // c_next > c_r + SEGMENT_COST: n > 0, prefix_len >= 0, so the request has a tile
  const int64_t u0 = unit_of(c_r + SEGMENT_COST, total, used), u1 = unit_of(c_next - 1, total, used);
  if (u0 == u1) return;  // one unit held the request whole and wrote `out` itself
  const int k = static_cast<int>(u1 - u0 + 1);  // <= used <= KDTREE_MAX_SPLITS
  // Row of unit u0 + i: (segment_slot(u0 + i, c_r, total, used) * m_blocks + mb) * BM + lrow.
  // Only the first unit can hold the request as its last segment: every later unit u holds it first, 2u.
  const int64_t slot_stride = static_cast<int64_t>(m_blocks) * BM;
  const int64_t R0 = static_cast<int64_t>(mb) * BM + lrow;
  const int64_t slot0 = segment_slot(u0, c_r, total, used);

  // ---- 1. every unit's lse at once; max and weights ----
  float lse = -INFINITY;
  if (tid < k) lse = ws_lse[R0 + (tid == 0 ? slot0 : 2 * (u0 + tid)) * slot_stride];
  const float wmax = warp_max(lse);
  if (lane == 0) sRed[warp] = wmax;
  __syncthreads();
  float mx = sRed[0];
#pragma unroll
  for (int w = 1; w < COMBINE_WARPS; ++w) mx = fmaxf(mx, sRed[w]);
  const float weight = lse == -INFINITY ? 0.f : exp2f(lse - mx);  // empty partials (-inf) add nothing
  const float wsum_warp = warp_sum(weight);
  if (tid < k) sW[tid] = weight;
  if (lane == 0) sRed[COMBINE_WARPS + warp] = wsum_warp;
  __syncthreads();

  // ---- 2. weight x partial: warp w's units, COMBINE_UNROLL at a time, 4 float4 per lane each ----
  float4 acc[4];
#pragma unroll
  for (int d = 0; d < 4; ++d) acc[d] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int i0 = warp; i0 < k; i0 += COMBINE_WARPS * COMBINE_UNROLL) {
    float4 v[COMBINE_UNROLL][4];
    float wt[COMBINE_UNROLL];
#pragma unroll
    for (int j = 0; j < COMBINE_UNROLL; ++j) {
      const int i = i0 + j * COMBINE_WARPS;
      const int ii = i < k ? i : 0;  // past the units: unit 0 again, with weight 0
      wt[j] = i < k ? sW[ii] : 0.f;
      const int64_t R = R0 + (ii == 0 ? slot0 : 2 * (u0 + ii)) * slot_stride;
      const float4* src = reinterpret_cast<const float4*>(ws_o + R * DV) + lane * (COMBINE_LANE_DIMS / 4);
#pragma unroll
      for (int d = 0; d < 4; ++d) v[j][d] = src[d];
    }
#pragma unroll
    for (int j = 0; j < COMBINE_UNROLL; ++j) {
#pragma unroll
      for (int d = 0; d < 4; ++d) {
        acc[d].x += wt[j] * v[j][d].x;
        acc[d].y += wt[j] * v[j][d].y;
        acc[d].z += wt[j] * v[j][d].z;
        acc[d].w += wt[j] * v[j][d].w;
      }
    }
  }
#pragma unroll
  for (int d = 0; d < 4; ++d)
    reinterpret_cast<float4*>(sAcc + warp * DV + lane * COMBINE_LANE_DIMS)[d] = acc[d];
  __syncthreads();

  // ---- 3. the warps' sums, 4 dims per thread ----
  if (tid < DV / 4) {
    float wsum = 0.f;
#pragma unroll
    for (int w = 0; w < COMBINE_WARPS; ++w) wsum += sRed[COMBINE_WARPS + w];
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < COMBINE_WARPS; ++w) {
      const float4 p = reinterpret_cast<const float4*>(sAcc + w * DV)[tid];
      o.x += p.x;
      o.y += p.y;
      o.z += p.z;
      o.w += p.w;
    }
    const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
    __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.out) + t * a.out_stride_t + h * a.out_stride_h;
    const uint2 packed = make_uint2(pack_bf16x2(o.x * inv, o.y * inv), pack_bf16x2(o.z * inv, o.w * inv));
    reinterpret_cast<uint2*>(out)[tid] = packed;
  }
}

#ifndef KDTREE_CPU_EMULATION
// cudaLaunchKernelEx with programmatic stream serialization (KDTREE_LAUNCH_PDL).
template <class... P, class... A>
cudaError_t launch_pdl(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, void (*kernel)(P...), A&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}
#endif

}  // namespace kdtree


// ---------------------------------------------------------------------------------------------
// C ABI.

KDTREE_EXPORT int kdtree_verify_abi_version(void) { return KDTREE_VERIFY_ABI_VERSION; }

KDTREE_EXPORT const char* kdtree_verify_build_info(void) {
  return "archs=" KDTREE_ARCHS " nvcc=" KDTREE_STR(__CUDACC_VER_MAJOR__) "." KDTREE_STR(
      __CUDACC_VER_MINOR__) " abi=" KDTREE_STR(KDTREE_VERIFY_ABI_VERSION) " block_m=" KDTREE_STR(KDTREE_BLOCK_M)
      " block_n=" KDTREE_STR(KDTREE_BLOCK_N) " block_m_small=" KDTREE_STR(KDTREE_BLOCK_M_SMALL) " fault=" KDTREE_STR(KDTREE_FAULT);
}

KDTREE_EXPORT int kdtree_verify_capabilities(uint32_t* io_dtypes, uint32_t* kv_dtypes, uint32_t* devices) {
  if (io_dtypes == nullptr || kv_dtypes == nullptr || devices == nullptr) return KDTREE_ERR_ARG;
  *io_dtypes = 1u << KDTREE_DTYPE_BF16;
  *kv_dtypes = (1u << KDTREE_DTYPE_BF16) | (1u << KDTREE_DTYPE_FP8_E4M3);
  *devices = KDTREE_DEVICE_CUDA;
  return KDTREE_OK;
}

KDTREE_EXPORT int kdtree_verify_prepare(int device) {
  using kdtree::KvBf16;
  using kdtree::KvFp8;
  using kdtree::Layout32;
  using kdtree::Layout64;
  int optin = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    cudaGetLastError();
    return KDTREE_ERR_LAUNCH;
  }
  if (optin < Layout64::SMEM_BYTES || optin < Layout32::SMEM_BYTES) return KDTREE_ERR_SMEM;
  const auto attr = cudaFuncAttributeMaxDynamicSharedMemorySize;
  if (cudaFuncSetAttribute(kdtree::verify_attn_kernel<KvBf16, Layout64::BM>, attr, Layout64::SMEM_BYTES) != cudaSuccess ||
      cudaFuncSetAttribute(kdtree::verify_attn_kernel<KvFp8, Layout64::BM>, attr, Layout64::SMEM_BYTES) != cudaSuccess ||
      cudaFuncSetAttribute(kdtree::verify_attn_kernel<KvBf16, Layout32::BM>, attr, Layout32::SMEM_BYTES) != cudaSuccess ||
      cudaFuncSetAttribute(kdtree::verify_attn_kernel<KvFp8, Layout32::BM>, attr, Layout32::SMEM_BYTES) != cudaSuccess) {
    cudaGetLastError();
    return KDTREE_ERR_LAUNCH;
  }
  // With lazy module loading (the default) a kernel is loaded at its first launch. The combine
  // kernels run only when a call splits the prefix, which may first happen inside a CUDA-graph
  // capture; querying their attributes here loads them now, outside any capture.
  cudaFuncAttributes combine_attr;
  if (cudaFuncGetAttributes(&combine_attr, kdtree::combine_kernel<Layout64::BM>) != cudaSuccess ||
      cudaFuncGetAttributes(&combine_attr, kdtree::combine_kernel<Layout32::BM>) != cudaSuccess) {
    cudaGetLastError();
    return KDTREE_ERR_LAUNCH;
  }
  return KDTREE_OK;
}

KDTREE_EXPORT int kdtree_verify_block_m(int num_heads, int max_extend_len, int hint) {
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

static int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int64_t m_blocks_of(int num_heads, int max_extend_len) {
  return ceil_div64(static_cast<int64_t>(max_extend_len) * num_heads, KDTREE_BLOCK_M);
}

KDTREE_EXPORT int kdtree_verify_min_split_tiles(int num_heads, int max_extend_len, int kv_dtype) {
  // ABI 6: no partial-bytes floor. The fp32 partials of at most 2 x SMs unit segments (<= 2 x 132 x 64 x
  // 513 x 4 B = 35 MB on 132 SMs, written and read once) stay in L2 on the cards this library targets;
  // pricing them as HBM traffic left most SMs idle below 8k keys.
  (void)num_heads;
  (void)max_extend_len;
  (void)kv_dtype;
  return KDTREE_MIN_SPLIT_TILES;
}

KDTREE_EXPORT int kdtree_verify_num_splits(int num_sms, int batch_size, int num_heads, int max_extend_len,
                                           int64_t max_kv_len, int kv_dtype) {
  // One CTA per SM (~98 KB of shared memory, 256 threads x <= 255 registers): floor(SMs / m_blocks)
  // units of m_blocks CTAs fill one wave exactly, whatever the batch (the plan shares the batch's tiles
  // among them); a ceiling would start a second, partial wave.
  (void)batch_size;
  (void)max_kv_len;
  (void)kv_dtype;
  if (num_sms < 1) num_sms = 1;
  const int64_t m_blocks = m_blocks_of(num_heads > 0 ? num_heads : 1, max_extend_len > 0 ? max_extend_len : 1);
  int64_t units = num_sms / m_blocks;
  if (units > KDTREE_MAX_SPLITS) units = KDTREE_MAX_SPLITS;
  if (units < 1) units = 1;
  return static_cast<int>(units);
}

// The largest batch kdtree_verify_run accepts (its plan has batch + 2 int64 in the workspace).
static constexpr int64_t kMaxBatch = 65535;

KDTREE_EXPORT int64_t kdtree_verify_workspace_bytes(int batch_size, int num_heads, int max_extend_len,
                                                    int num_splits) {
  if (num_splits <= 1 || batch_size <= 0 || num_heads <= 0 || max_extend_len <= 0) return 0;
  // Partial rows: 2 slots per unit x m_blocks x BM (the kernel's BM is 64, or 32 with one m-block),
  // 512 + 1 fp32 each; then the plan: batch + 2 int64 (C_0..C_batch, the used units).
  const int64_t rows = kdtree::workspace_slots(num_splits) * m_blocks_of(num_heads, max_extend_len) * KDTREE_BLOCK_M;
  return rows * (KDTREE_V_DIM + 1) * static_cast<int64_t>(sizeof(float)) +
         (static_cast<int64_t>(batch_size) + 2) * static_cast<int64_t>(sizeof(int64_t));
}

KDTREE_EXPORT int64_t kdtree_verify_max_workspace_bytes(int num_sms) {
  // kdtree_verify_num_splits returns units > 1 only with units * m_blocks <= num_sms, so the slots' rows
  // 2 * units * m_blocks * BM stay within 2 * num_sms m-blocks of rows, whatever the batch; the plan has
  // batch + 2 <= kMaxBatch + 2 entries.
  if (num_sms < 1) num_sms = 1;
  const int64_t sms = num_sms;
  return 2 * sms * KDTREE_BLOCK_M * (KDTREE_V_DIM + 1) * static_cast<int64_t>(sizeof(float)) +
         (kMaxBatch + 2) * static_cast<int64_t>(sizeof(int64_t));
}

KDTREE_EXPORT int64_t kdtree_verify_partition(int batch_size, int num_heads, int max_extend_len, int num_splits,
                                              int kv_dtype, int block_m, const int64_t* prefix_lens,
                                              const int32_t* draft_lens, int64_t* unit_tiles,
                                              int32_t* unit_segments, int64_t* min_unit_tiles) {
  if (batch_size < 1 || num_heads < 1 || max_extend_len < 1 || num_splits < 1 || num_splits > KDTREE_MAX_SPLITS ||
      prefix_lens == nullptr || draft_lens == nullptr || unit_tiles == nullptr || unit_segments == nullptr ||
      min_unit_tiles == nullptr)
    return -1;
  const int bm = kdtree_verify_block_m(num_heads, max_extend_len, block_m);
  if (bm < 0) return -1;
  const int bn = kdtree_verify_block_n(bm);
  const int64_t min_tiles =
      kdtree::min_tiles_of_layout(kdtree_verify_min_split_tiles(num_heads, max_extend_len, kv_dtype), bn);
  *min_unit_tiles = min_tiles;
  const int64_t units = num_splits;
  for (int64_t u = 0; u < units; ++u) unit_tiles[u] = unit_segments[u] = 0;
  int64_t total = 0, total_cost = 0;
  for (int r = 0; r < batch_size; ++r) {
    const int64_t n = kdtree::request_tiles(prefix_lens[r], draft_lens[r], bn);
    total += n;
    total_cost += kdtree::request_cost(n);
  }
  if (total_cost == 0) return 0;
  const int64_t used = kdtree::used_units(total_cost, units, min_tiles);
  int64_t c_r = 0;
  for (int r = 0; r < batch_size; ++r) {  // request r's tiles go to the units whose positions hold them
    const int64_t n = kdtree::request_tiles(prefix_lens[r], draft_lens[r], bn);
    const int64_t c_next = c_r + kdtree::request_cost(n);
    for (int64_t u = n > 0 ? kdtree::unit_of(c_r + kdtree::SEGMENT_COST, total_cost, used) : used;
         u < used && kdtree::unit_start(u, total_cost, used) < c_next; ++u) {
      const int64_t lo = kdtree::tile_at(kdtree::unit_start(u, total_cost, used) - c_r, n);
      const int64_t hi = kdtree::tile_at(kdtree::unit_start(u + 1, total_cost, used) - c_r, n);
      if (hi <= lo) continue;
      unit_tiles[u] += hi - lo;
      unit_segments[u] += 1;
    }
    c_r += kdtree::request_cost(n);
  }
  return total;
}

KDTREE_EXPORT int kdtree_verify_run(const kdtree_verify_args* a, void* stream) {
  if (a == nullptr) return KDTREE_ERR_ARG;
  if (a->struct_size != static_cast<int32_t>(sizeof(kdtree_verify_args))) return KDTREE_ERR_STRUCT;
  if (a->io_dtype != KDTREE_DTYPE_BF16) return KDTREE_ERR_ARG;
  if (a->kv_dtype != KDTREE_KV_BF16 && a->kv_dtype != KDTREE_KV_FP8_E4M3) return KDTREE_ERR_ARG;
  if (a->mask_mode != KDTREE_MASK_TREE && a->mask_mode != KDTREE_MASK_CAUSAL) return KDTREE_ERR_ARG;
  if (a->num_heads < 1 || a->batch_size < 0 || a->batch_size > kMaxBatch || a->max_extend_len < 0 ||
      a->num_tokens < 0 || a->num_splits < 1 || a->num_splits > KDTREE_MAX_SPLITS)
    return KDTREE_ERR_ARG;
  if (a->batch_size == 0 || a->num_tokens == 0 || a->max_extend_len == 0) return KDTREE_OK;
  if (!a->q || !a->k_extend || !a->v_extend || !a->kv_buffer || !a->qo_indptr || !a->kv_indptr ||
      !a->kv_indices || !a->out)
    return KDTREE_ERR_ARG;
  if (a->mask_mode == KDTREE_MASK_TREE && (!a->mask_indptr || !a->custom_mask)) return KDTREE_ERR_ARG;
  if (a->num_splits > 1) {
    const int64_t need =
        kdtree_verify_workspace_bytes(a->batch_size, a->num_heads, a->max_extend_len, a->num_splits);
    if (a->workspace == nullptr || a->workspace_bytes < need) return KDTREE_ERR_WORKSPACE;
  }
  const int bm = kdtree_verify_block_m(a->num_heads, a->max_extend_len, a->block_m);
  if (bm < 0) return KDTREE_ERR_ARG;
  // With bm = 32 (only when H * max_extend_len <= 32) there is one m-block, as with 64: the split
  // count and the workspace bound computed for 64-row blocks hold.
  const int64_t m_blocks = ceil_div64(static_cast<int64_t>(a->max_extend_len) * a->num_heads, bm);
  if (m_blocks * bm > 0x7fffffff) return KDTREE_ERR_ARG;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const dim3 grid(static_cast<unsigned>(m_blocks), static_cast<unsigned>(a->num_splits));
  constexpr int T = kdtree::NTHREADS;
  constexpr int M64 = kdtree::Layout64::BM, M32 = kdtree::Layout32::BM;
  constexpr int S64 = kdtree::Layout64::SMEM_BYTES, S32 = kdtree::Layout32::SMEM_BYTES;
  const bool bf16 = a->kv_dtype == KDTREE_KV_BF16;
  if (bm == M64 && bf16)
    KDTREE_LAUNCH(grid, T, S64, s, kdtree::verify_attn_kernel<kdtree::KvBf16, M64>)(*a);
  else if (bm == M64)
    KDTREE_LAUNCH(grid, T, S64, s, kdtree::verify_attn_kernel<kdtree::KvFp8, M64>)(*a);
  else if (bf16)
    KDTREE_LAUNCH(grid, T, S32, s, kdtree::verify_attn_kernel<kdtree::KvBf16, M32>)(*a);
  else
    KDTREE_LAUNCH(grid, T, S32, s, kdtree::verify_attn_kernel<kdtree::KvFp8, M32>)(*a);
  cudaError_t combined = cudaSuccess;
  if (a->num_splits > 1) {
    const dim3 cgrid(static_cast<unsigned>(m_blocks * bm), static_cast<unsigned>(a->batch_size));
    constexpr int CT = kdtree::COMBINE_THREADS, CS = kdtree::COMBINE_SMEM_BYTES;
    if (bm == M64)
      combined = KDTREE_LAUNCH_PDL(cgrid, CT, CS, s, kdtree::combine_kernel<M64>, *a);
    else
      combined = KDTREE_LAUNCH_PDL(cgrid, CT, CS, s, kdtree::combine_kernel<M32>, *a);
  }
  return cudaGetLastError() == cudaSuccess && combined == cudaSuccess ? KDTREE_OK : KDTREE_ERR_LAUNCH;
}
