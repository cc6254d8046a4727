/* Instruction decoding: the field layout of kiln/vta/isa.py layout(), least significant first. */
#include <string.h>

#include "vta_sim.h"

typedef struct {
  const uint64_t *w;
  int shift;
} bitreader;

static uint32_t take(bitreader *r, int bits) {
  uint64_t v = 0;
  for (int got = 0; got < bits;) {
    int word = r->shift / 64, off = r->shift % 64, n = 64 - off;
    if (n > bits - got) n = bits - got;
    uint64_t part = (r->w[word] >> off) & (n == 64 ? ~0ULL : ((1ULL << n) - 1));
    v |= part << got;
    got += n;
    r->shift += n;
  }
  return (uint32_t)v;
}

int vta_decode_insn(const vta_config *cfg, const uint64_t *word, vta_insn *o) {
  bitreader r = {word, 0};
  memset(o, 0, sizeof(*o));
  o->opcode = (int)take(&r, 3);
  o->pop_prev = (int)take(&r, 1);
  o->pop_next = (int)take(&r, 1);
  o->push_prev = (int)take(&r, 1);
  o->push_next = (int)take(&r, 1);
  switch (o->opcode) {
  case VTA_LOAD:
  case VTA_STORE:
    o->memory_type = (int)take(&r, 2);
    o->sram_base = take(&r, 16);
    o->dram_seg = (int)take(&r, 4);
    o->dram_base = take(&r, 32);
    o->y_size = take(&r, 16);
    o->x_size = take(&r, 16);
    o->x_stride = take(&r, 16);
    o->y_pad_0 = take(&r, 4);
    o->y_pad_1 = take(&r, 4);
    o->x_pad_0 = take(&r, 4);
    o->x_pad_1 = take(&r, 4);
    return 0;
  case VTA_GEMM:
  case VTA_ALU:
    o->reset = (int)take(&r, 1);
    o->uop_bgn = take(&r, cfg->uop_bits);
    o->uop_end = take(&r, cfg->uop_bits);
    o->iter_out = take(&r, VTA_ITER_BITS);
    o->iter_in = take(&r, VTA_ITER_BITS);
    o->dst_factor_out = take(&r, cfg->acc_bits);
    o->dst_factor_in = take(&r, cfg->acc_bits);
    if (o->opcode == VTA_GEMM) {
      o->src_factor_out = take(&r, cfg->inp_bits);
      o->src_factor_in = take(&r, cfg->inp_bits);
      o->wgt_factor_out = take(&r, cfg->wgt_bits);
      o->wgt_factor_in = take(&r, cfg->wgt_bits);
    } else {
      o->src_factor_out = take(&r, cfg->acc_bits);
      o->src_factor_in = take(&r, cfg->acc_bits);
      o->alu_opcode = (int)take(&r, 3);
      o->use_imm = (int)take(&r, 1);
      uint32_t imm = take(&r, 16);
      o->imm = imm >= 0x8000 ? (int)imm - 0x10000 : (int)imm;
    }
    return 0;
  case VTA_FINISH:
    return 0;
  default:
    return -1;
  }
}

int vta_module_of(const vta_insn *in) {
  if (in->opcode == VTA_LOAD)
    return (in->memory_type == VTA_MEM_INP || in->memory_type == VTA_MEM_WGT) ? 0 : 1;
  if (in->opcode == VTA_STORE) return 2;
  return 1;
}

/* Every field as int64, in the order of vta_insn (for the encode/decode round-trip test). */
VTA_EXPORT int vta_decode(const vta_config *cfg, const uint64_t *word, int64_t *f) {
  vta_insn o;
  if (vta_decode_insn(cfg, word, &o)) return -1;
  int64_t v[] = {o.opcode, o.pop_prev, o.pop_next, o.push_prev, o.push_next, o.memory_type, o.dram_seg,
                 o.sram_base, o.dram_base, o.y_size, o.x_size, o.x_stride, o.y_pad_0, o.y_pad_1, o.x_pad_0,
                 o.x_pad_1, o.reset, o.alu_opcode, o.use_imm, o.imm, o.uop_bgn, o.uop_end, o.iter_out,
                 o.iter_in, o.dst_factor_out, o.dst_factor_in, o.src_factor_out, o.src_factor_in,
                 o.wgt_factor_out, o.wgt_factor_in};
  memcpy(f, v, sizeof(v));
  return (int)(sizeof(v) / sizeof(v[0]));
}
