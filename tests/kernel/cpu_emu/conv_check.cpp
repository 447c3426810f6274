// conv_check: the kernel's own conversion helpers (kdtree::fp8x2_to_bf16x2, kdtree::pack_bf16x2), built
// from the kernel source as the emulated library is, print their results for the tests to compare with
// torch bit for bit:
//   every e4m3 byte b: "fp8 <b> <bf16 bits of fp8x2_to_bf16x2(b | b << 8), low half> <high half>"
//   every float32 bit pattern read from stdin (hex): "bf16 <bits> <bf16 bits of pack_bf16x2(f, -f), low> <high>"
#include "verify_attn_flash_paged.cu"

#include <stdio.h>
#include <string.h>

int main() {
  for (unsigned b = 0; b < 256; ++b) {
    const uint32_t r = kdtree::fp8x2_to_bf16x2(b | (b << 8));
    printf("fp8 %u %u %u\n", b, r & 0xffffu, r >> 16);
  }
  unsigned bits;
  while (scanf("%x", &bits) == 1) {
    float f;
    memcpy(&f, &bits, 4);
    const uint32_t r = kdtree::pack_bf16x2(f, -f);
    printf("bf16 %u %u %u\n", bits, r & 0xffffu, r >> 16);
  }
  return 0;
}
