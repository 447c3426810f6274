// kdtree_cpu_emu.h: a warp-synchronous CPU emulator of exactly the CUDA constructs that
// files/csrc/verify_attn_flash_paged.cu uses, so that g++ compiles the kernel's unchanged source
// (with -DKDTREE_CPU_EMULATION, its one switch) and runs it on the CPU. Force-included by
// tests/kernel/cpu_emu/build.sh (g++ -include), never by the CUDA build.
//
// What it proves: the source's logic (indexing, masks, scales, tiling, split-KV, barriers, the
// fragment maps it assumes) under the PTX ISA's semantics. What it does not: code generation, timing,
// register pressure, or the tensor cores' rounding (the emulated MMA sums in fp32 in k order).
//
// Model: one OS thread per CUDA thread, the CTAs of a launch one after another.
//   - __syncthreads: a CTA barrier. All threads of the CTA must reach the same __syncthreads (same
//     source line); a thread that exits, or arrives at another line, while others wait is a hard error.
//   - __shfl_xor_sync, ldmatrix, mma.sync: warp collectives that need all 32 lanes at the same
//     instruction (the kernel's mask is 0xffffffff); a lane that exited, or waits at a __syncthreads,
//     while its warp waits at a collective is a hard error, as is any other member mask.
//   - ldmatrix rows must be 16-byte aligned and lie inside the launch's dynamic shared memory.
//   - Shared memory is filled with 0xFF bytes (bf16 / fp32 NaN) before every CTA; under
//     AddressSanitizer the bytes past the launch's dynamic size are poisoned.
// A hard error prints "kdtree_cpu_emu: ..." to stderr, stops the launch and makes kdtree_verify_run
// return KDTREE_ERR_LAUNCH; kdtree_cpu_emu_last_error() returns the message. With
// KDTREE_EMU_ABORT=1 in the environment it aborts the process instead.
//
// Fragment layouts, from the PTX ISA (sections "Matrix Fragments for mma.m16n8k16 with floating point
// type" and "Warp-level matrix load instruction: ldmatrix"); groupID g = lane >> 2,
// threadID_in_group q = lane % 4, each .b32 register holds two 16-bit elements, the first in the low half:
//   A (16x16 .row, .bf16): a0 = A[g][2q..2q+1], a1 = A[g+8][2q..], a2 = A[g][2q+8..], a3 = A[g+8][2q+8..]
//   B (16x8 .col, .bf16):  b0 = B[2q..2q+1][g], b1 = B[2q+8..2q+9][g]
//   C, D (16x8 .f32):      c0 = C[g][2q], c1 = C[g][2q+1], c2 = C[g+8][2q], c3 = C[g+8][2q+1]
//   ldmatrix .m8n8.x4.b16: lanes 8i..8i+7 give the row addresses of matrix i (8 x 16 bytes);
//     register i of lane L = M_i[L/4][2(L%4)..2(L%4)+1]; with .trans M_i[2(L%4)..2(L%4)+1][L/4].
#ifndef KDTREE_CPU_EMU_H_
#define KDTREE_CPU_EMU_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

namespace kdtree_emu {

constexpr size_t kSmemCapacity = 227 * 1024;  // the largest per-block opt-in of the supported arches

extern thread_local uint3 tl_thread_idx;
extern thread_local uint3 tl_block_idx;
extern dim3 g_grid_dim;
extern dim3 g_block_dim;

void syncthreads(int line);
float shfl_xor(unsigned mask, float v, int lane_mask);
void ldmatrix_x4(uint32_t (&r)[4], const void* p, bool trans);
void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
size_t generic_to_shared(const void* p);

// Runs `body` once per CUDA thread of every CTA of the grid (one OS thread each), the CTAs in order.
void run_grid(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()>& body);

// kernel<<<grid, block, smem, stream>>>(args...) is launch(grid, block, smem, kernel)(args...): the
// arguments are converted to the kernel's parameter types once, every thread gets its own copy.
template <class... P>
struct Launch {
  dim3 grid, block;
  size_t smem;
  void (*kernel)(P...);
  template <class... A>
  void operator()(A&&... args) const {
    const std::tuple<std::decay_t<P>...> params(std::forward<A>(args)...);
    auto* k = kernel;
    run_grid(grid, block, smem, [&params, k] { std::apply(k, params); });
  }
};
template <class... P>
Launch<P...> launch(dim3 grid, dim3 block, size_t smem, void (*kernel)(P...)) {
  return Launch<P...>{grid, block, smem, kernel};
}

}  // namespace kdtree_emu

// The CUDA built-ins the kernel uses, on the emulator.
#define threadIdx (::kdtree_emu::tl_thread_idx)
#define blockIdx (::kdtree_emu::tl_block_idx)
#define gridDim (::kdtree_emu::g_grid_dim)
#define blockDim (::kdtree_emu::g_block_dim)
#define __syncthreads() ::kdtree_emu::syncthreads(__LINE__)
#define __launch_bounds__(...)

inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
  return kdtree_emu::shfl_xor(mask, v, lane_mask);
}
template <class T>
inline T __ldg(const T* p) {
  return *p;
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
inline size_t __cvta_generic_to_shared(const void* p) { return kdtree_emu::generic_to_shared(p); }
// cuda_runtime.h's templated overloads of these two are nvcc-only.
template <class... P>
inline cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), enum cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}
template <class... P>
inline cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, void (*kernel)(P...)) {
  return cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(kernel));
}
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

#endif  // KDTREE_CPU_EMU_H_
