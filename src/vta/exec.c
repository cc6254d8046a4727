/* What each instruction does to the SRAMs and DRAM: the bit-exact semantics both simulators share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vta_sim.h"

struct vta_state {
  vta_config cfg;
  int batch, bin, bout;
  int8_t *inp, *wgt;
  int32_t *acc;
  uint32_t *uop;
  void **segs;
  const int64_t *seg_bytes;
  int nsegs;
  const uint32_t *uops; /* the module's micro-op array: DRAM segment 15 */
  int64_t nuops;
};

vta_state *vta_state_new(const vta_config *cfg, void **segs, const int64_t *seg_bytes, int nsegs,
                         const uint32_t *uops, int64_t nuops) {
  vta_state *s = calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->cfg = *cfg;
  s->batch = 1 << cfg->log_batch;
  s->bin = 1 << cfg->log_block_in;
  s->bout = 1 << cfg->log_block_out;
  s->inp = calloc((size_t)cfg->inp_depth * s->batch * s->bin, 1);
  s->wgt = calloc((size_t)cfg->wgt_depth * s->bout * s->bin, 1);
  s->acc = calloc((size_t)cfg->acc_depth * s->batch * s->bout, 4);
  s->uop = calloc((size_t)cfg->uop_depth, 4);
  s->segs = segs;
  s->seg_bytes = seg_bytes;
  s->nsegs = nsegs;
  s->uops = uops;
  s->nuops = nuops;
  if (!s->inp || !s->wgt || !s->acc || !s->uop) {
    vta_state_free(s);
    return NULL;
  }
  return s;
}

void vta_state_free(vta_state *s) {
  if (!s) return;
  free(s->inp);
  free(s->wgt);
  free(s->acc);
  free(s->uop);
  free(s);
}

static int64_t elem_bytes(const vta_state *s, int mem, int store) {
  switch (mem) {
  case VTA_MEM_UOP: return 4;
  case VTA_MEM_WGT: return (int64_t)s->bout * s->bin;
  case VTA_MEM_INP: return (int64_t)s->batch * s->bin;
  default: return (int64_t)s->batch * s->bout * (store ? 1 : 4);
  }
}

static int64_t depth_of(const vta_state *s, int mem) {
  switch (mem) {
  case VTA_MEM_UOP: return s->cfg.uop_depth;
  case VTA_MEM_WGT: return s->cfg.wgt_depth;
  case VTA_MEM_INP: return s->cfg.inp_depth;
  default: return s->cfg.acc_depth;
  }
}

static uint8_t *sram_of(const vta_state *s, int mem) {
  switch (mem) {
  case VTA_MEM_UOP: return (uint8_t *)s->uop;
  case VTA_MEM_WGT: return (uint8_t *)s->wgt;
  case VTA_MEM_INP: return (uint8_t *)s->inp;
  default: return (uint8_t *)s->acc;
  }
}

static const char *MEM_NAME[] = {"uop", "wgt", "inp", "acc"};

uint64_t vta_insn_bytes(const vta_config *cfg, const vta_insn *in) {
  int64_t e;
  int batch = 1 << cfg->log_batch, bin = 1 << cfg->log_block_in, bout = 1 << cfg->log_block_out;
  switch (in->memory_type) {
  case VTA_MEM_UOP: e = 4; break;
  case VTA_MEM_WGT: e = (int64_t)bout * bin; break;
  case VTA_MEM_INP: e = (int64_t)batch * bin; break;
  default: e = (int64_t)batch * bout * (in->opcode == VTA_STORE ? 1 : 4);
  }
  return (uint64_t)in->y_size * in->x_size * e;
}

uint64_t vta_insn_ops(const vta_insn *in) {
  return (uint64_t)in->iter_out * in->iter_in * (in->uop_end > in->uop_bgn ? in->uop_end - in->uop_bgn : 0);
}

static int fail(char *err, int errlen, const char *msg) {
  snprintf(err, (size_t)errlen, "%s", msg);
  return -1;
}

static int dram_range(vta_state *s, const vta_insn *in, int64_t eb, uint8_t **base, char *err, int errlen) {
  int64_t nbytes;
  const void *p;
  if (in->dram_seg == VTA_UOP_SEGMENT) {
    p = s->uops;
    nbytes = s->nuops * 4;
  } else if (in->dram_seg < s->nsegs) {
    p = s->segs[in->dram_seg];
    nbytes = s->seg_bytes[in->dram_seg];
  } else {
    snprintf(err, (size_t)errlen, "DMA segment %d: the call passed only %d arrays", in->dram_seg, s->nsegs);
    return -1;
  }
  if (in->y_size && in->x_size) {
    int64_t last = ((int64_t)in->dram_base + (int64_t)(in->y_size - 1) * in->x_stride + in->x_size) * eb;
    if (last > nbytes) {
      snprintf(err, (size_t)errlen, "DMA reads/writes bytes up to %lld of segment %d, which holds %lld",
               (long long)last, in->dram_seg, (long long)nbytes);
      return -1;
    }
  }
  *base = (uint8_t *)p;
  return 0;
}

static int exec_load(vta_state *s, const vta_insn *in, vta_stats *st, char *err, int errlen) {
  int mem = in->memory_type;
  int64_t eb = elem_bytes(s, mem, 0);
  uint8_t *dram;
  if (dram_range(s, in, eb, &dram, err, errlen)) return -1;
  int64_t w = (int64_t)in->x_pad_0 + in->x_size + in->x_pad_1;
  int64_t h = (int64_t)in->y_pad_0 + in->y_size + in->y_pad_1;
  if ((int64_t)in->sram_base + w * h > depth_of(s, mem)) {
    snprintf(err, (size_t)errlen, "LOAD of %lld %s blocks at %u runs past the %lld-block %s SRAM",
             (long long)(w * h), MEM_NAME[mem], in->sram_base, (long long)depth_of(s, mem), MEM_NAME[mem]);
    return -1;
  }
  uint8_t *sram = sram_of(s, mem) + (int64_t)in->sram_base * eb;
  for (int64_t y = 0; y < h; y++) {
    uint8_t *row = sram + y * w * eb;
    int64_t sy = y - in->y_pad_0;
    if (sy < 0 || sy >= in->y_size) {
      memset(row, 0, (size_t)(w * eb));
      continue;
    }
    memset(row, 0, (size_t)(in->x_pad_0 * eb));
    memcpy(row + in->x_pad_0 * eb, dram + ((int64_t)in->dram_base + sy * in->x_stride) * eb, (size_t)(in->x_size * eb));
    memset(row + (in->x_pad_0 + in->x_size) * eb, 0, (size_t)(in->x_pad_1 * eb));
  }
  if (mem == VTA_MEM_UOP) st->uop_bytes += (uint64_t)(in->y_size * in->x_size * eb);
  else st->load_bytes += (uint64_t)(in->y_size * in->x_size * eb);
  return 0;
}

static int exec_store(vta_state *s, const vta_insn *in, vta_stats *st, char *err, int errlen) {
  if (in->memory_type != VTA_MEM_ACC)
    return fail(err, errlen, "STORE must read the accumulator SRAM (memory_type acc)");
  if (in->x_pad_0 || in->x_pad_1 || in->y_pad_0 || in->y_pad_1)
    return fail(err, errlen, "STORE takes no padding");
  int64_t n = (int64_t)s->batch * s->bout;
  uint8_t *dram;
  if (dram_range(s, in, n, &dram, err, errlen)) return -1;
  if ((int64_t)in->sram_base + (int64_t)in->y_size * in->x_size > s->cfg.acc_depth)
    return fail(err, errlen, "STORE reads past the accumulator SRAM");
  for (int64_t y = 0; y < in->y_size; y++)
    for (int64_t x = 0; x < in->x_size; x++) {
      const int32_t *src = s->acc + ((int64_t)in->sram_base + y * in->x_size + x) * n;
      int8_t *dst = (int8_t *)dram + ((int64_t)in->dram_base + y * in->x_stride + x) * n;
      for (int64_t e = 0; e < n; e++) dst[e] = (int8_t)(uint8_t)(uint32_t)src[e]; /* low 8 bits */
    }
  st->store_bytes += (uint64_t)(in->y_size * in->x_size * n);
  return 0;
}

static int exec_gemm(vta_state *s, const vta_insn *in, vta_stats *st, char *err, int errlen) {
  const vta_config *c = &s->cfg;
  uint32_t am = (1u << c->acc_bits) - 1, im = (1u << c->inp_bits) - 1, wm = (1u << c->wgt_bits) - 1;
  if (in->uop_end > (uint32_t)c->uop_depth || in->uop_bgn > in->uop_end)
    return fail(err, errlen, "GEMM micro-op range lies outside the micro-op SRAM");
  int B = s->batch, I = s->bin, O = s->bout;
  for (uint32_t i0 = 0; i0 < in->iter_out; i0++)
    for (uint32_t i1 = 0; i1 < in->iter_in; i1++)
      for (uint32_t u = in->uop_bgn; u < in->uop_end; u++) {
        uint32_t w = s->uop[u];
        int64_t a = (w & am) + i0 * in->dst_factor_out + i1 * in->dst_factor_in;
        int64_t x = ((w >> c->acc_bits) & im) + i0 * in->src_factor_out + i1 * in->src_factor_in;
        int64_t g = ((w >> (c->acc_bits + c->inp_bits)) & wm) + i0 * in->wgt_factor_out + i1 * in->wgt_factor_in;
        if (a >= c->acc_depth || x >= c->inp_depth || g >= c->wgt_depth) {
          snprintf(err, (size_t)errlen, "GEMM indexes acc %lld / inp %lld / wgt %lld past the SRAMs (%d/%d/%d blocks)",
                   (long long)a, (long long)x, (long long)g, c->acc_depth, c->inp_depth, c->wgt_depth);
          return -1;
        }
        int32_t *acc = s->acc + a * B * O;
        if (in->reset) {
          memset(acc, 0, (size_t)B * O * 4);
          continue;
        }
        const int8_t *inp = s->inp + x * B * I, *wgt = s->wgt + g * O * I;
        for (int b = 0; b < B; b++)
          for (int o = 0; o < O; o++) {
            int32_t sum = 0;
            for (int k = 0; k < I; k++) sum += (int32_t)inp[b * I + k] * (int32_t)wgt[o * I + k];
            acc[b * O + o] = (int32_t)((uint32_t)acc[b * O + o] + (uint32_t)sum);
          }
      }
  st->gemm_blocks += vta_insn_ops(in);
  return 0;
}

static int32_t alu(int op, int32_t a, int32_t b) {
  switch (op) {
  case VTA_ALU_MIN: return a < b ? a : b;
  case VTA_ALU_MAX: return a > b ? a : b;
  case VTA_ALU_ADD: return (int32_t)((uint32_t)a + (uint32_t)b);
  default: /* SHR: arithmetic right shift; a negative amount shifts left */
    if (b >= 0) return b >= 31 ? (a < 0 ? -1 : 0) : a >> b;
    return -b >= 32 ? 0 : (int32_t)((uint32_t)a << -b);
  }
}

static int exec_alu(vta_state *s, const vta_insn *in, vta_stats *st, char *err, int errlen) {
  const vta_config *c = &s->cfg;
  uint32_t am = (1u << c->acc_bits) - 1;
  if (in->uop_end > (uint32_t)c->uop_depth || in->uop_bgn > in->uop_end)
    return fail(err, errlen, "ALU micro-op range lies outside the micro-op SRAM");
  if (in->alu_opcode > VTA_ALU_SHR) return fail(err, errlen, "undefined ALU opcode");
  int n = s->batch * s->bout;
  for (uint32_t i0 = 0; i0 < in->iter_out; i0++)
    for (uint32_t i1 = 0; i1 < in->iter_in; i1++)
      for (uint32_t u = in->uop_bgn; u < in->uop_end; u++) {
        uint32_t w = s->uop[u];
        int64_t d = (w & am) + i0 * in->dst_factor_out + i1 * in->dst_factor_in;
        int64_t r = ((w >> c->acc_bits) & am) + i0 * in->src_factor_out + i1 * in->src_factor_in;
        if (d >= c->acc_depth || r >= c->acc_depth) return fail(err, errlen, "ALU indexes past the accumulator SRAM");
        int32_t *dst = s->acc + d * n;
        const int32_t *src = s->acc + r * n;
        if (in->use_imm) /* dst = op(src, imm) */
          for (int e = 0; e < n; e++) dst[e] = alu(in->alu_opcode, src[e], in->imm);
        else /* dst = op(dst, src) */
          for (int e = 0; e < n; e++) dst[e] = alu(in->alu_opcode, dst[e], src[e]);
      }
  st->alu_blocks += vta_insn_ops(in);
  return 0;
}

int vta_exec(vta_state *s, const vta_insn *in, vta_stats *st, char *err, int errlen) {
  if (in->opcode <= VTA_ALU) st->insn_count[in->opcode]++;
  switch (in->opcode) {
  case VTA_LOAD: return exec_load(s, in, st, err, errlen);
  case VTA_STORE: return exec_store(s, in, st, err, errlen);
  case VTA_GEMM: return exec_gemm(s, in, st, err, errlen);
  case VTA_ALU: return exec_alu(s, in, st, err, errlen);
  case VTA_FINISH: return 0;
  default: return fail(err, errlen, "undefined opcode");
  }
}
