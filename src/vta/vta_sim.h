/* The VTA-class accelerator's simulators: a functional one (bit-exact) and a cycle model.
 *
 * Both execute the same stream of 128-bit instructions and 32-bit micro-ops (kiln/vta/isa.py
 * describes the encoding; the field layout below must match isa.layout()). The functional
 * simulator runs the load, compute and store modules as far as their dependency tokens allow
 * (load first, so a missing token shows up as a wrong result); the cycle model list-schedules
 * them in time (instruction fetch, a shared DMA port of fixed bandwidth and latency, GEMM one
 * block per cycle) and executes each instruction when it is scheduled. Built as a shared
 * library by kiln/vta/simulator.py and called through ctypes. */
#ifndef KILN_VTA_SIM_H
#define KILN_VTA_SIM_H

#include <stdint.h>

#define VTA_LOAD 0
#define VTA_STORE 1
#define VTA_GEMM 2
#define VTA_FINISH 3
#define VTA_ALU 4

#define VTA_MEM_UOP 0
#define VTA_MEM_WGT 1
#define VTA_MEM_INP 2
#define VTA_MEM_ACC 3

#define VTA_ALU_MIN 0
#define VTA_ALU_MAX 1
#define VTA_ALU_ADD 2
#define VTA_ALU_SHR 3

#define VTA_ITER_BITS 14
#define VTA_UOP_SEGMENT 15

typedef struct {
  int32_t log_batch, log_block_in, log_block_out;
  int32_t inp_depth, wgt_depth, acc_depth, uop_depth;
  int32_t uop_bits, acc_bits, inp_bits, wgt_bits; /* index field widths */
  int32_t dma_bytes_per_cycle, dma_latency, cmd_queue_depth;
} vta_config;

typedef struct {
  uint64_t cycles;          /* cycle model: the last instruction's end */
  uint64_t busy_load, busy_compute, busy_store, busy_fetch, busy_dma;
  uint64_t gemm_cycles, alu_cycles; /* cycles the GEMM core / ALU did work */
  uint64_t gemm_blocks;     /* BATCH x BLOCK_IN x BLOCK_OUT products done */
  uint64_t alu_blocks;
  uint64_t load_bytes, store_bytes, uop_bytes;
  uint64_t stall_load, stall_compute, stall_store; /* cycles waiting for a token */
  uint64_t insn_count[5];
} vta_stats;

typedef struct {
  int opcode, pop_prev, pop_next, push_prev, push_next;
  /* LOAD/STORE */
  int memory_type, dram_seg;
  uint32_t sram_base, dram_base, y_size, x_size, x_stride, y_pad_0, y_pad_1, x_pad_0, x_pad_1;
  /* GEMM/ALU */
  int reset, alu_opcode, use_imm, imm;
  uint32_t uop_bgn, uop_end, iter_out, iter_in;
  uint32_t dst_factor_out, dst_factor_in, src_factor_out, src_factor_in, wgt_factor_out, wgt_factor_in;
} vta_insn;

typedef struct vta_state vta_state;

/* decode.c */
int vta_decode_insn(const vta_config *cfg, const uint64_t *word, vta_insn *out);
int vta_module_of(const vta_insn *in); /* 0 load, 1 compute, 2 store */

/* exec.c */
vta_state *vta_state_new(const vta_config *cfg, void **segs, const int64_t *seg_bytes, int nsegs,
                         const uint32_t *uops, int64_t nuops);
void vta_state_free(vta_state *s);
int vta_exec(vta_state *s, const vta_insn *in, vta_stats *st, char *err, int errlen);
uint64_t vta_insn_bytes(const vta_config *cfg, const vta_insn *in); /* DRAM bytes moved */
uint64_t vta_insn_ops(const vta_insn *in); /* micro-op iterations of a GEMM/ALU */

#ifdef __GNUC__
#define VTA_EXPORT __attribute__((visibility("default")))
#else
#define VTA_EXPORT
#endif

VTA_EXPORT int vta_run(const vta_config *cfg, const uint64_t *insns, int64_t n, const uint32_t *uops,
                       int64_t nuops, void **segs, const int64_t *seg_bytes, int nsegs, int mode,
                       vta_stats *stats, char *err, int errlen);
VTA_EXPORT int vta_decode(const vta_config *cfg, const uint64_t *word, int64_t *fields);

#endif
