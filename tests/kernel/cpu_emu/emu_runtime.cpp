// The CPU emulator's runtime (kdtree_cpu_emu.h): CTAs of OS threads, the CTA barrier, the warp
// collectives (shfl, ldmatrix, mma.sync m16n8k16 bf16) from the PTX ISA's fragment tables, and the few
// CUDA runtime calls of the library's host code.
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>

#include <atomic>
#include <memory>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kdtree_cpu_emu.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define KDTREE_EMU_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define KDTREE_EMU_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define KDTREE_EMU_POISON(p, n) ((void)(p), (void)(n))
#define KDTREE_EMU_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

// The kernel's `extern __shared__ unsigned char smem[]` (block scope, namespace kdtree): one buffer, the
// CTAs run one after another.
namespace kdtree {
alignas(128) unsigned char smem[kdtree_emu::kSmemCapacity];
}

namespace kdtree_emu {

thread_local uint3 tl_thread_idx;
thread_local uint3 tl_block_idx;
dim3 g_grid_dim;
dim3 g_block_dim;

namespace {

constexpr int kWarp = 32;
constexpr int kMaxWarps = 32;

enum Op { OP_NONE = 0, OP_SHFL_XOR, OP_LDMATRIX, OP_LDMATRIX_TRANS, OP_MMA };
const char* op_name(int op) {
  switch (op) {
    case OP_SHFL_XOR: return "__shfl_xor_sync";
    case OP_LDMATRIX: return "ldmatrix.x4";
    case OP_LDMATRIX_TRANS: return "ldmatrix.x4.trans";
    case OP_MMA: return "mma.sync.m16n8k16";
    default: return "?";
  }
}

struct Stop {};  // unwinds a CTA's threads after a hard error

// A waiting thread sleeps on its own semaphore: the thread that completes a collective or a barrier
// posts the waiters' semaphores (no lock to re-take on wake-up; ThreadSanitizer sees post -> wait).
struct Sem {
  sem_t s;
  Sem() { sem_init(&s, 0, 0); }
  ~Sem() { sem_destroy(&s); }
  void post() { sem_post(&s); }
  void wait() {
    while (sem_wait(&s) != 0) {
    }
  }
};

struct Warp {
  std::mutex m;     // this warp's collective state (taken after the CTA's lock when both are needed)
  int arrived = 0;  // lanes waiting at the current collective
  int op = OP_NONE;
  int arg = 0;
  int exited = 0;
  int at_barrier = 0;
  const unsigned char* addr[kWarp];
  float f_in[kWarp];
  float f_out[kWarp];
  uint32_t a[kWarp][4];
  uint32_t b[kWarp][2];
  float c[kWarp][4];
  uint32_t r[kWarp][4];
};

struct Cta {
  std::mutex m;  // the barrier and the exit count
  int nthreads = 0;
  int exited = 0;
  int bar_arrived = 0;
  int bar_line = -1;
  std::atomic<bool> failed{false};
  size_t smem_bytes = 0;
  Warp w[kMaxWarps];
  Sem wake[kWarp * kMaxWarps];  // one per thread
};

Cta* g_cta = nullptr;
std::mutex g_launch_mutex;  // one launch at a time (the smem buffer and the grid are global)
std::mutex g_error_mutex;
std::string g_last_error;
bool g_launch_failed = false;

int lane_id() { return static_cast<int>(tl_thread_idx.x) % kWarp; }
int warp_id() { return static_cast<int>(tl_thread_idx.x) / kWarp; }

std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// Record the error, wake every thread of the CTA and unwind this one.
[[noreturn]] void fail(const std::string& msg) {
  Cta& cta = *g_cta;
  if (!cta.failed.exchange(true)) {
    char where[96];
    snprintf(where, sizeof where, " (block %u,%u,%u thread %u)", tl_block_idx.x, tl_block_idx.y, tl_block_idx.z,
             tl_thread_idx.x);
    {
      std::lock_guard<std::mutex> g(g_error_mutex);
      g_last_error = msg + where;
      g_launch_failed = true;
      fprintf(stderr, "kdtree_cpu_emu: %s\n", g_last_error.c_str());
      fflush(stderr);
    }
    const char* abort_env = getenv("KDTREE_EMU_ABORT");
    if (abort_env != nullptr && abort_env[0] == '1') abort();
    for (int t = 0; t < cta.nthreads; ++t) cta.wake[t].post();
  }
  throw Stop{};
}

void check_running(const Cta& cta) {
  if (cta.failed.load()) throw Stop{};
}

// The warp collective protocol: each lane deposits its inputs, the last lane to arrive computes every
// lane's outputs and wakes the others. `deposit(w, lane)` runs under the warp's lock; `compute(w)` by
// the last lane under the lock; `collect(w, lane)` after it (a lane's outputs are not overwritten
// before that lane deposits for the next collective).
template <class Deposit, class Compute, class Collect>
void collective(int op, int arg, Deposit deposit, Compute compute, Collect collect) {
  Cta& cta = *g_cta;
  check_running(cta);
  const int warp = warp_id(), lane = lane_id();
  Warp& w = cta.w[warp];
  std::unique_lock<std::mutex> lk(w.m);
  const int lanes = std::min(kWarp, cta.nthreads - warp * kWarp);
  std::string problem;
  if (lanes != kWarp || w.exited > 0)
    problem = format("partial-warp collective: %s in warp %d with %d of 32 lanes live", op_name(op), warp,
                     lanes - w.exited);
  else if (w.at_barrier > 0)
    problem = format("partial-warp collective: %s in warp %d while %d of its lanes wait at a __syncthreads",
                     op_name(op), warp, w.at_barrier);
  else if (w.arrived > 0 && (w.op != op || w.arg != arg))
    problem = format("divergent warp collective in warp %d: lane %d at %s(%d), others at %s(%d)", warp, lane,
                     op_name(op), arg, op_name(w.op), w.arg);
  if (!problem.empty()) {
    lk.unlock();
    fail(problem);
  }
  if (w.arrived == 0) {
    w.op = op;
    w.arg = arg;
  }
  deposit(w, lane);
  if (++w.arrived == kWarp) {
    try {
      compute(w);
    } catch (const std::string& msg) {
      lk.unlock();
      fail(msg);
    }
    w.arrived = 0;
    w.op = OP_NONE;
    lk.unlock();
    for (int l = 0; l < kWarp; ++l)
      if (l != lane) cta.wake[warp * kWarp + l].post();
  } else {
    lk.unlock();
    cta.wake[warp * kWarp + lane].wait();
    check_running(cta);
  }
  collect(w, lane);
}

float bf16_lo(uint32_t v) {
  const uint32_t bits = v << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
float bf16_hi(uint32_t v) {
  const uint32_t bits = v & 0xffff0000u;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

void thread_exited() {
  Cta& cta = *g_cta;
  if (cta.failed.load()) return;
  std::string problem;
  {
    std::lock_guard<std::mutex> lk(cta.m);
    Warp& w = cta.w[warp_id()];
    std::lock_guard<std::mutex> wl(w.m);
    ++cta.exited;
    ++w.exited;
    if (w.arrived > 0)
      problem = format("partial-warp collective: a lane of warp %d exited while %d lanes wait at %s", warp_id(),
                       w.arrived, op_name(w.op));
    else if (cta.bar_arrived > 0)
      problem = format("divergent barrier: a thread exited while %d threads wait at the __syncthreads of line %d",
                       cta.bar_arrived, cta.bar_line);
  }
  if (!problem.empty()) fail(problem);
}

}  // namespace

void syncthreads(int line) {
  Cta& cta = *g_cta;
  check_running(cta);
  const int warp = warp_id();
  std::string problem;
  bool last = false;
  {
    std::lock_guard<std::mutex> lk(cta.m);
    Warp& w = cta.w[warp];
    std::lock_guard<std::mutex> wl(w.m);
    if (cta.exited > 0)
      problem = format("divergent barrier: __syncthreads at line %d after %d threads of the CTA exited", line,
                       cta.exited);
    else if (w.arrived > 0)
      problem = format("divergent barrier: __syncthreads at line %d while %d lanes of warp %d wait at %s", line,
                       w.arrived, warp, op_name(w.op));
    else if (cta.bar_arrived > 0 && cta.bar_line != line)
      problem = format("divergent barrier: __syncthreads at line %d while %d threads wait at line %d", line,
                       cta.bar_arrived, cta.bar_line);
    if (problem.empty()) {
      if (cta.bar_arrived == 0) cta.bar_line = line;
      ++w.at_barrier;
      if (++cta.bar_arrived == cta.nthreads) {
        last = true;
        cta.bar_arrived = 0;
        cta.bar_line = -1;
      }
    }
  }
  if (!problem.empty()) fail(problem);
  if (last) {
    for (int x = 0; x * kWarp < cta.nthreads; ++x) {
      std::lock_guard<std::mutex> wl(cta.w[x].m);
      cta.w[x].at_barrier = 0;
    }
    for (int t = 0; t < cta.nthreads; ++t)
      if (t != static_cast<int>(tl_thread_idx.x)) cta.wake[t].post();
  } else {
    cta.wake[tl_thread_idx.x].wait();
    check_running(cta);
  }
}

float shfl_xor(unsigned mask, float v, int lane_mask) {
  if (mask != 0xffffffffu)
    fail(format("__shfl_xor_sync with member mask 0x%08x (the emulator takes full warps only)", mask));
  if (lane_mask < 0 || lane_mask >= kWarp) fail(format("__shfl_xor_sync lane mask %d outside the warp", lane_mask));
  float out = 0.f;
  collective(
      OP_SHFL_XOR, lane_mask, [&](Warp& w, int lane) { w.f_in[lane] = v; },
      [&](Warp& w) {
        for (int l = 0; l < kWarp; ++l) w.f_out[l] = w.f_in[l ^ lane_mask];
      },
      [&](Warp& w, int lane) { out = w.f_out[lane]; });
  return out;
}

void ldmatrix_x4(uint32_t (&r)[4], const void* p, bool trans) {
  const unsigned char* row = static_cast<const unsigned char*>(p);
  collective(
      trans ? OP_LDMATRIX_TRANS : OP_LDMATRIX, 0, [&](Warp& w, int lane) { w.addr[lane] = row; },
      [&](Warp& w) {
        const Cta& cta = *g_cta;
        const unsigned char* base = kdtree::smem;
        for (int l = 0; l < kWarp; ++l) {
          const unsigned char* a = w.addr[l];
          if (a < base || a + 16 > base + cta.smem_bytes)
            throw format("ldmatrix: lane %d's row address is outside the CTA's %zu bytes of shared memory "
                         "(offset %td)",
                         l, cta.smem_bytes, a - base);
          if ((a - base) % 16 != 0)
            throw format("ldmatrix: lane %d's row address (shared offset %td) is not 16-byte aligned", l, a - base);
        }
        // element (row, col) of matrix i: 16 bits at addr[8i + row] + 2 col
        auto elem = [&](int i, int row_, int col) {
          uint16_t v;
          memcpy(&v, w.addr[8 * i + row_] + 2 * col, 2);
          return static_cast<uint32_t>(v);
        };
        for (int l = 0; l < kWarp; ++l) {
          for (int i = 0; i < 4; ++i) {
            if (!trans)
              w.r[l][i] = elem(i, l / 4, 2 * (l % 4)) | (elem(i, l / 4, 2 * (l % 4) + 1) << 16);
            else
              w.r[l][i] = elem(i, 2 * (l % 4), l / 4) | (elem(i, 2 * (l % 4) + 1, l / 4) << 16);
          }
        }
      },
      [&](Warp& w, int lane) {
        for (int i = 0; i < 4; ++i) r[i] = w.r[lane][i];
      });
}

void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  collective(
      OP_MMA, 0,
      [&](Warp& w, int lane) {
        for (int i = 0; i < 4; ++i) w.a[lane][i] = a[i];
        w.b[lane][0] = b0;
        w.b[lane][1] = b1;
        for (int i = 0; i < 4; ++i) w.c[lane][i] = d[i];
      },
      [&](Warp& w) {
        float A[16][16], B[16][8], C[16][8];
        for (int l = 0; l < kWarp; ++l) {
          const int g = l >> 2, q = l % 4;
          A[g][2 * q] = bf16_lo(w.a[l][0]);
          A[g][2 * q + 1] = bf16_hi(w.a[l][0]);
          A[g + 8][2 * q] = bf16_lo(w.a[l][1]);
          A[g + 8][2 * q + 1] = bf16_hi(w.a[l][1]);
          A[g][2 * q + 8] = bf16_lo(w.a[l][2]);
          A[g][2 * q + 9] = bf16_hi(w.a[l][2]);
          A[g + 8][2 * q + 8] = bf16_lo(w.a[l][3]);
          A[g + 8][2 * q + 9] = bf16_hi(w.a[l][3]);
          B[2 * q][g] = bf16_lo(w.b[l][0]);
          B[2 * q + 1][g] = bf16_hi(w.b[l][0]);
          B[2 * q + 8][g] = bf16_lo(w.b[l][1]);
          B[2 * q + 9][g] = bf16_hi(w.b[l][1]);
          C[g][2 * q] = w.c[l][0];
          C[g][2 * q + 1] = w.c[l][1];
          C[g + 8][2 * q] = w.c[l][2];
          C[g + 8][2 * q + 1] = w.c[l][3];
        }
        for (int m = 0; m < 16; ++m)
          for (int n = 0; n < 8; ++n) {
            float s = 0.f;  // bf16 x bf16 products are exact in fp32; summed in k order
            for (int k = 0; k < 16; ++k) s += A[m][k] * B[k][n];
            C[m][n] += s;
          }
        for (int l = 0; l < kWarp; ++l) {
          const int g = l >> 2, q = l % 4;
          w.c[l][0] = C[g][2 * q];
          w.c[l][1] = C[g][2 * q + 1];
          w.c[l][2] = C[g + 8][2 * q];
          w.c[l][3] = C[g + 8][2 * q + 1];
        }
      },
      [&](Warp& w, int lane) {
        for (int i = 0; i < 4; ++i) d[i] = w.c[lane][i];
      });
}

size_t generic_to_shared(const void* p) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  if (c < kdtree::smem || c >= kdtree::smem + g_cta->smem_bytes)
    fail("__cvta_generic_to_shared of an address outside the CTA's shared memory");
  return static_cast<size_t>(c - kdtree::smem);
}

namespace {
void launch_error(const char* msg) {
  std::lock_guard<std::mutex> g(g_error_mutex);
  g_last_error = msg;
  g_launch_failed = true;
  fprintf(stderr, "kdtree_cpu_emu: %s\n", msg);
}
}  // namespace

void run_grid(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()>& body) {
  std::lock_guard<std::mutex> launch_lock(g_launch_mutex);
  const int nthreads = static_cast<int>(block.x * block.y * block.z);
  if (block.y != 1 || block.z != 1 || nthreads < 1 || nthreads > kWarp * kMaxWarps || smem_bytes > kSmemCapacity) {
    launch_error("launch configuration outside the emulator (1-d blocks of <= 1024 threads, <= 227 KB smem)");
    return;
  }
  g_grid_dim = grid;
  g_block_dim = block;
  // One OS thread per CUDA thread, reused by the CTAs of this launch (run one after another).
  std::unique_ptr<Cta> cta;
  Sem start[kWarp * kMaxWarps];
  Sem done;
  bool quit = false;
  uint3 block_idx = make_uint3(0u, 0u, 0u);
  // All of them on the launching thread's CPU: the collectives hand over between threads thousands of
  // times per tile, and a hand-over on one CPU is cheaper than a cross-CPU wake-up.
  cpu_set_t one_cpu;
  CPU_ZERO(&one_cpu);
  const int cpu = sched_getcpu();
  if (cpu >= 0) CPU_SET(cpu, &one_cpu);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(nthreads));
  for (int t = 0; t < nthreads; ++t) {
    threads.emplace_back([&, t] {
      if (cpu >= 0) pthread_setaffinity_np(pthread_self(), sizeof one_cpu, &one_cpu);
      tl_thread_idx = make_uint3(static_cast<unsigned>(t), 0u, 0u);
      for (;;) {
        start[t].wait();
        if (quit) return;
        tl_block_idx = block_idx;
        try {
          body();
          thread_exited();
        } catch (const Stop&) {
        }
        done.post();
      }
    });
  }
  bool failed = false;
  for (unsigned z = 0; z < grid.z && !failed; ++z)
    for (unsigned y = 0; y < grid.y && !failed; ++y)
      for (unsigned x = 0; x < grid.x && !failed; ++x) {
        cta.reset(new Cta);
        cta->nthreads = nthreads;
        cta->smem_bytes = smem_bytes;
        KDTREE_EMU_UNPOISON(kdtree::smem, kSmemCapacity);
        memset(kdtree::smem, 0xff, kSmemCapacity);  // NaN in bf16 and fp32: unwritten data shows
        KDTREE_EMU_POISON(kdtree::smem + smem_bytes, kSmemCapacity - smem_bytes);
        g_cta = cta.get();
        block_idx = make_uint3(x, y, z);
        for (int t = 0; t < nthreads; ++t) start[t].post();
        for (int t = 0; t < nthreads; ++t) done.wait();
        failed = cta->failed.load();
      }
  quit = true;
  for (int t = 0; t < nthreads; ++t) start[t].post();
  for (std::thread& th : threads) th.join();
  g_cta = nullptr;
  KDTREE_EMU_UNPOISON(kdtree::smem, kSmemCapacity);
}

}  // namespace kdtree_emu

// ---- the CUDA runtime calls of the library's host code ----
extern "C" {

cudaError_t cudaGetLastError(void) {
  std::lock_guard<std::mutex> g(kdtree_emu::g_error_mutex);
  const bool failed = kdtree_emu::g_launch_failed;
  kdtree_emu::g_launch_failed = false;
  return failed ? cudaErrorLaunchFailure : cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int /*device*/) {
  *value = attr == cudaDevAttrMaxSharedMemoryPerBlockOptin ? static_cast<int>(kdtree_emu::kSmemCapacity) : 0;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* /*func*/, enum cudaFuncAttribute /*attr*/, int /*value*/) {
  return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* /*func*/) {
  memset(attr, 0, sizeof *attr);
  return cudaSuccess;
}

}  // extern "C"

// The message of the last hard error of the emulator ("" if none): kdtree_verify_run returned
// KDTREE_ERR_LAUNCH for it.
extern "C" __attribute__((visibility("default"))) const char* kdtree_cpu_emu_last_error(void) {
  std::lock_guard<std::mutex> g(kdtree_emu::g_error_mutex);
  return kdtree_emu::g_last_error.c_str();
}
