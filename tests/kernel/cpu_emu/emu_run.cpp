// emu_run <dir>: one kdtree_verify_run of the CPU-emulated library on a case written by
// tests/kernel/cpu_emu/emu_driver.py, with every buffer allocated at exactly its file's size (so that
// AddressSanitizer reports a read past a tensor's end) and the workspace at exactly workspace_bytes,
// filled with NaN bytes. <dir>/args.txt holds "name value" lines (the scalar fields of
// kdtree_verify_args), <dir>/<pointer field>.bin the buffers. Writes <dir>/out.bin (the out buffer after
// the call); prints "status <kdtree_verify_run's code> calls <call counter>"; exit status 0 when the
// call returned KDTREE_OK.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <map>
#include <string>
#include <vector>

#include "kdtree_verify.h"

namespace {

std::vector<unsigned char*> g_buffers;

unsigned char* load(const std::string& dir, const char* name, size_t* size_out) {
  const std::string path = dir + "/" + name + ".bin";
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return nullptr;
  fseek(f, 0, SEEK_END);
  const long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char* buf = new unsigned char[static_cast<size_t>(size)];  // exactly the tensor's bytes
  if (size > 0 && fread(buf, 1, static_cast<size_t>(size), f) != static_cast<size_t>(size)) {
    fprintf(stderr, "emu_run: short read of %s\n", path.c_str());
    exit(2);
  }
  fclose(f);
  g_buffers.push_back(buf);
  if (size_out != nullptr) *size_out = static_cast<size_t>(size);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: emu_run <case dir>\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::map<std::string, double> v;
  FILE* f = fopen((dir + "/args.txt").c_str(), "r");
  if (f == nullptr) {
    fprintf(stderr, "emu_run: no %s/args.txt\n", dir.c_str());
    return 2;
  }
  char name[64];
  double value;
  while (fscanf(f, "%63s %lf", name, &value) == 2) v[name] = value;
  fclose(f);
  auto i32 = [&](const char* k) { return static_cast<int32_t>(v.at(k)); };
  auto i64 = [&](const char* k) { return static_cast<int64_t>(v.at(k)); };

  kdtree_verify_args a;
  memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.kv_dtype = i32("kv_dtype");
  a.qo_indptr_i64 = i32("qo_indptr_i64");
  a.kv_indptr_i64 = i32("kv_indptr_i64");
  a.kv_indices_i64 = i32("kv_indices_i64");
  a.mask_indptr_i64 = i32("mask_indptr_i64");
  a.q = load(dir, "q", nullptr);
  a.q_stride_t = i64("q_stride_t");
  a.q_stride_h = i64("q_stride_h");
  a.k_extend = load(dir, "k_extend", nullptr);
  a.k_extend_stride_t = i64("k_extend_stride_t");
  a.v_extend = load(dir, "v_extend", nullptr);
  a.v_extend_stride_t = i64("v_extend_stride_t");
  a.kv_buffer = load(dir, "kv_buffer", nullptr);
  a.kv_stride_t = i64("kv_stride_t");
  a.qo_indptr = load(dir, "qo_indptr", nullptr);
  a.kv_indptr = load(dir, "kv_indptr", nullptr);
  a.kv_indices = load(dir, "kv_indices", nullptr);
  a.mask_indptr = load(dir, "mask_indptr", nullptr);
  a.custom_mask = load(dir, "custom_mask", nullptr);
  size_t out_bytes = 0;
  unsigned char* out = load(dir, "out", &out_bytes);
  a.out = out;
  a.out_stride_t = i64("out_stride_t");
  a.out_stride_h = i64("out_stride_h");
  a.workspace_bytes = i64("workspace_bytes");
  unsigned char* ws = nullptr;
  if (a.workspace_bytes > 0) {
    ws = new unsigned char[static_cast<size_t>(a.workspace_bytes)];
    memset(ws, 0xff, static_cast<size_t>(a.workspace_bytes));  // NaN: a read of an unwritten row shows
  }
  a.workspace = ws;
  a.batch_size = i32("batch_size");
  a.num_heads = i32("num_heads");
  a.max_extend_len = i32("max_extend_len");
  a.num_tokens = i32("num_tokens");
  a.num_splits = i32("num_splits");
  a.mask_mode = i32("mask_mode");
  a.sm_scale = static_cast<float>(v.at("sm_scale"));
  a.k_scale = static_cast<float>(v.at("k_scale"));
  a.v_scale = static_cast<float>(v.at("v_scale"));
  a.block_m = i32("block_m");
  a.io_dtype = i32("io_dtype");
  uint64_t* counter = new uint64_t(0);
  a.call_counter = counter;

  const int status = kdtree_verify_run(&a, nullptr);
  if (out != nullptr) {
    FILE* o = fopen((dir + "/out.bin").c_str(), "wb");
    if (o == nullptr || fwrite(out, 1, out_bytes, o) != out_bytes) {
      fprintf(stderr, "emu_run: cannot write out.bin\n");
      return 2;
    }
    fclose(o);
  }
  printf("status %d calls %llu\n", status, static_cast<unsigned long long>(*counter));
  for (unsigned char* b : g_buffers) delete[] b;
  delete[] ws;
  delete counter;
  return status == KDTREE_OK ? 0 : 1;
}
