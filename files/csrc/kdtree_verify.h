// kdtree_verify: C ABI of the verify-attention kernel (absorbed MLA, draft tree mask or causal draft block).
// Plain pointers, strides (in elements), sizes and a cudaStream_t: no torch, no C++ ABI.
// The Python binding (files/sglang_ext/kdtree_verify/kernel/binding.py) mirrors kdtree_verify_args with
// ctypes; bump KDTREE_VERIFY_ABI_VERSION whenever this struct or a signature changes.
#ifndef KDTREE_VERIFY_H_
#define KDTREE_VERIFY_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KDTREE_VERIFY_ABI_VERSION 6

#define KDTREE_HEAD_DIM 576 /* 512 latent + 64 rope */
#define KDTREE_V_DIM 512
#define KDTREE_BLOCK_M 64   /* rows (draft token x head) per CTA */
#define KDTREE_BLOCK_N 16   /* KV tokens per tile */
/* The small layout, chosen when num_heads * max_extend_len <= KDTREE_BLOCK_M_SMALL (H=8, n=4): */
#define KDTREE_BLOCK_M_SMALL 32
#define KDTREE_BLOCK_N_SMALL 32
/* The wave-filling partition (ABI 6): a work unit's chunk of the batch is at least this many tiles of the
   layout (no partial-bytes floor: the fp32 partials of at most 2 x SMs units stay in L2). */
#define KDTREE_MIN_SPLIT_TILES 1
/* The plan's per-segment cost, in tiles of the layout: a unit that visits a request pays its prologue (Q load,
   index ring, first gather) about as much as one tile, so each request costs its tiles + this. */
#define KDTREE_SEGMENT_COST_TILES 1
#define KDTREE_MAX_SPLITS 256

enum kdtree_verify_status {
  KDTREE_OK = 0,
  KDTREE_ERR_ARG = 1,
  KDTREE_ERR_WORKSPACE = 2,
  KDTREE_ERR_LAUNCH = 3,
  KDTREE_ERR_SMEM = 4,
  KDTREE_ERR_STRUCT = 5,
};

/* Element types (ABI 3): the values of kdtree_verify_args.io_dtype / .kv_dtype, and bit (1u << value)
   of the masks kdtree_verify_capabilities reports. */
enum kdtree_dtype { KDTREE_DTYPE_BF16 = 0, KDTREE_DTYPE_FP8_E4M3 = 1, KDTREE_DTYPE_FP16 = 2, KDTREE_DTYPE_FP32 = 3 };
/* The ABI 2 names of the kv_dtype values (the CUDA kernels read bf16 or fp8-e4m3 caches). */
enum kdtree_kv_dtype { KDTREE_KV_BF16 = KDTREE_DTYPE_BF16, KDTREE_KV_FP8_E4M3 = KDTREE_DTYPE_FP8_E4M3 };
/* Where the data pointers of kdtree_verify_run live (bits of the capabilities' device mask). */
enum kdtree_device_kind {
  KDTREE_DEVICE_CUDA = 1, /* CUDA device memory; stream is a cudaStream_t (the real library) */
  KDTREE_DEVICE_HOST = 2, /* host memory, computed on the calling thread; workspace and stream ignored
                             (only the host test double, tests/doubles/hostlib, which also says
                             double=host in its build_info) */
};
/* Draft x draft visibility: a tree mask in custom_mask, or causal (draft row t sees draft keys c <= t;
   custom_mask and mask_indptr are not read and may be NULL). The prefix is always fully visible. */
enum kdtree_mask_mode { KDTREE_MASK_TREE = 0, KDTREE_MASK_CAUSAL = 1 };

typedef struct kdtree_verify_args {
  int32_t struct_size;     /* sizeof(kdtree_verify_args), checked */
  int32_t kv_dtype;        /* enum kdtree_dtype of kv_buffer */
  int32_t qo_indptr_i64;   /* 1: int64 array, 0: int32 array */
  int32_t kv_indptr_i64;
  int32_t kv_indices_i64;
  int32_t mask_indptr_i64;
  const void* q;           /* io_dtype [T, H, 576] (the CUDA library: bf16) */
  int64_t q_stride_t, q_stride_h;
  const void* k_extend;    /* io_dtype [T, 1, 576] */
  int64_t k_extend_stride_t;
  const void* v_extend;    /* io_dtype [T, 1, 512] */
  int64_t v_extend_stride_t;
  const void* kv_buffer;   /* kv_dtype [P, 1, 576]; V = [..., :512] (CUDA: bf16 or fp8-e4m3) */
  int64_t kv_stride_t;
  const void* qo_indptr;   /* [B+1] */
  const void* kv_indptr;   /* [B+1] */
  const void* kv_indices;  /* pool slots */
  const void* mask_indptr; /* [B+1] (KDTREE_MASK_TREE only) */
  const void* custom_mask; /* bool / uint8 bytes, != 0 means visible (KDTREE_MASK_TREE only) */
  void* out;               /* io_dtype [T, H, 512] */
  int64_t out_stride_t, out_stride_h;
  void* workspace;         /* >= kdtree_verify_workspace_bytes(batch, H, max_extend_len, splits) */
  int64_t workspace_bytes;
  int32_t batch_size;
  int32_t num_heads;
  int32_t max_extend_len;  /* host-known upper bound of any request's draft length */
  int32_t num_tokens;      /* T = q.shape[0] (capacity; valid rows come from qo_indptr) */
  int32_t num_splits;      /* work units, from kdtree_verify_num_splits (ABI 6: floor(SMs / m_blocks) for
                              every batch): the batch's key tiles are shared evenly by num_splits units
                              (kdtree_verify_partition); 1: one unit runs every request whole */
  int32_t mask_mode;       /* enum kdtree_mask_mode */
  float sm_scale;
  float k_scale;           /* prefix scores q.k are multiplied by it (SGLang's k_descale; 1.0 = none) */
  float v_scale;           /* prefix P.V terms are multiplied by it (SGLang's v_descale; 1.0 = none) */
  int32_t block_m;         /* 0: the library chooses (kdtree_verify_block_m); 64 or 32 to force one
                              layout (32 only when num_heads * max_extend_len <= 32) */
  int32_t io_dtype;        /* enum kdtree_dtype of q, k_extend, v_extend and out (ABI 3) */
  uint64_t* call_counter;  /* ABI 4: NULL = not counted; else one uint64 in the data pointers' memory
                              (CUDA: device memory) that every run which launches work bumps by one
                              (one atomicAdd by one thread, enqueued on `stream`: a run captured in a
                              CUDA graph bumps it on every replay). A run that returns early (an error,
                              or KDTREE_OK with nothing to do: batch_size, num_tokens or
                              max_extend_len 0) does not count. */
} kdtree_verify_args;

int kdtree_verify_abi_version(void);
const char* kdtree_verify_build_info(void);
/* What kdtree_verify_run serves (ABI 3): *io_dtypes and *kv_dtypes are masks of (1u << enum kdtree_dtype)
   for q/k_extend/v_extend/out and for kv_buffer, *devices a mask of enum kdtree_device_kind. A call
   outside them is KDTREE_ERR_ARG. Returns KDTREE_OK, or KDTREE_ERR_ARG for a NULL pointer. */
int kdtree_verify_capabilities(uint32_t* io_dtypes, uint32_t* kv_dtypes, uint32_t* devices);
/* Set the kernels' dynamic shared-memory attribute on `device` (call once, outside graph capture). */
int kdtree_verify_prepare(int device);
/* Work units from host-known maxima only (never reads device memory), ABI 6: floor(num_sms / m_blocks)
   for every batch size (one wave of (m_blocks, units) CTAs), at most KDTREE_MAX_SPLITS, at least 1.
   The kernel shares the whole batch's key tiles among them, planned on the device from kv_indptr /
   qo_indptr at every run (kdtree_verify_partition shows the plan). max_kv_len and kv_dtype are not
   read (kept for the signature). */
int kdtree_verify_num_splits(int num_sms, int batch_size, int num_heads, int max_extend_len,
                             int64_t max_kv_len, int kv_dtype);
/* Rows per CTA the library launches for this shape: KDTREE_BLOCK_M_SMALL when
   num_heads * max_extend_len <= KDTREE_BLOCK_M_SMALL (and hint is 0 or 32), else KDTREE_BLOCK_M;
   -1 for a hint it cannot honour. Its key tile is kdtree_verify_block_n(block_m) keys. */
int kdtree_verify_block_m(int num_heads, int max_extend_len, int hint);
int kdtree_verify_block_n(int block_m);
/* Fewest key tiles of a unit's chunk, in KDTREE_BLOCK_N-key tiles: KDTREE_MIN_SPLIT_TILES whatever the
   shape (ABI 6; the arguments are not read). */
int kdtree_verify_min_split_tiles(int num_heads, int max_extend_len, int kv_dtype);
/* Workspace bytes for the combine step (0 when num_splits == 1); independent of the token count:
   2 slots per unit (its first and last segment) x m_blocks x 64 rows of 512 + 1 fp32 (partial outputs
   and log-sum-exps), then batch + 2 int64 (the plan the combine reads). */
int64_t kdtree_verify_workspace_bytes(int batch_size, int num_heads, int max_extend_len, int num_splits);
/* Upper bound of kdtree_verify_workspace_bytes over every shape on a GPU with num_sms SMs, when
   num_splits comes from kdtree_verify_num_splits (units x m_blocks <= num_sms) and batch_size <= 65535:
   2 * num_sms * 64 rows of 513 fp32 plus 65537 int64. Allocate it once, never grow (graph-safe). */
int64_t kdtree_verify_max_workspace_bytes(int num_sms);
/* The work plan kdtree_verify_run launches for these lengths (ABI 6), computed on the host by the same
   functions the kernel plans with; reads host memory only. prefix_lens / draft_lens: batch_size
   entries; unit_tiles / unit_segments: num_splits entries, set to the key tiles (of the layout's
   kdtree_verify_block_n keys) work unit u = blockIdx.y processes in each of its m-blocks, and the
   requests it visits; *min_unit_tiles to the fewest tiles of a unit's chunk (kdtree_verify_min_split_tiles
   in the layout's tiles). Returns the batch's total tiles, -1 for bad arguments. */
int64_t kdtree_verify_partition(int batch_size, int num_heads, int max_extend_len, int num_splits, int kv_dtype,
                                int block_m, const int64_t* prefix_lens, const int32_t* draft_lens,
                                int64_t* unit_tiles, int32_t* unit_segments, int64_t* min_unit_tiles);
/* Enqueue the computation on `stream` (a cudaStream_t). Never synchronises, never allocates. */
int kdtree_verify_run(const kdtree_verify_args* args, void* stream);

#ifdef __cplusplus
}
#endif
#endif /* KDTREE_VERIFY_H_ */
