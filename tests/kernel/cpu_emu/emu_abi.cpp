// What the emulated build of libkdtree_verify.so says about itself. build.sh renames the CUDA
// library's kdtree_verify_capabilities / kdtree_verify_build_info (the source's own, which say CUDA)
// so that these are the exported ones: host memory, bf16 q/k/v/out, a bf16 or fp8-e4m3 KV cache (as the
// CUDA library), and `emulator=cpu` with no arch. The binding accepts a host-memory library only with
// `double=host` in its build info, so it refuses this one for every device: only the tests drive it.
#include <stdint.h>

#include "kdtree_verify.h"

#define KDTREE_EMU_EXPORT extern "C" __attribute__((visibility("default")))
#define KDTREE_EMU_STR2(x) #x
#define KDTREE_EMU_STR(x) KDTREE_EMU_STR2(x)
#ifndef KDTREE_FAULT
#define KDTREE_FAULT 0
#endif

KDTREE_EMU_EXPORT const char* kdtree_verify_build_info(void) {
  return "archs= emulator=cpu abi=" KDTREE_EMU_STR(KDTREE_VERIFY_ABI_VERSION) " block_m=" KDTREE_EMU_STR(
      KDTREE_BLOCK_M) " block_n=" KDTREE_EMU_STR(KDTREE_BLOCK_N) " block_m_small=" KDTREE_EMU_STR(KDTREE_BLOCK_M_SMALL)
      " fault=" KDTREE_EMU_STR(KDTREE_FAULT);
}

KDTREE_EMU_EXPORT int kdtree_verify_capabilities(uint32_t* io_dtypes, uint32_t* kv_dtypes, uint32_t* devices) {
  if (io_dtypes == nullptr || kv_dtypes == nullptr || devices == nullptr) return KDTREE_ERR_ARG;
  *io_dtypes = 1u << KDTREE_DTYPE_BF16;
  *kv_dtypes = (1u << KDTREE_DTYPE_BF16) | (1u << KDTREE_DTYPE_FP8_E4M3);
  *devices = KDTREE_DEVICE_HOST;
  return KDTREE_OK;
}
