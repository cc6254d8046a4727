/* vta_run: decode a stream and run it on the functional simulator (mode 0) or the cycle model (mode 1).
 *
 * Dependency queues: load->compute (l2c), compute->load (c2l), compute->store (c2s) and
 * store->compute (s2c). An instruction pops a token from each queue its pop flags name before it
 * starts and pushes one into each queue its push flags name when it ends; the k-th pop of a queue
 * takes the k-th push. Load has no "prev" and store no "next" module.
 *
 * Cycle model: fetch reads 16-byte instructions in program order over the DMA port (one latency,
 * then ceil(16 / DMA_BYTES_PER_CYCLE) cycles each) into one command queue per module, stalling
 * while the target queue holds CMD_QUEUE_DEPTH instructions that have not started. A module
 * starts its next instruction when it is free, fetched and its tokens are pushed. LOAD/STORE take
 * the shared DMA port for ceil(bytes / DMA_BYTES_PER_CYCLE) cycles and end DMA_LATENCY later;
 * GEMM takes one cycle per micro-op iteration (one BATCH x BLOCK_IN x BLOCK_OUT block) plus a
 * pipeline fill of GEMM_FILL cycles; ALU one cycle per block with an immediate, two with two
 * accumulator operands. The earliest startable instruction of the three modules goes first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vta_sim.h"

#define GEMM_FILL 4
#define ALU_FILL 4
#define INSN_BYTES 16

enum { Q_L2C, Q_C2L, Q_C2S, Q_S2C, NQ };

/* The queues an instruction of module m pops from / pushes to; -1 where none or invalid (-2). */
static void token_queues(int m, const vta_insn *in, int pops[2], int pushes[2]) {
  pops[0] = pops[1] = pushes[0] = pushes[1] = -1;
  if (m == 0) {
    if (in->pop_prev || in->push_prev) pops[0] = -2;
    if (in->pop_next) pops[1] = Q_C2L;
    if (in->push_next) pushes[1] = Q_L2C;
  } else if (m == 1) {
    if (in->pop_prev) pops[0] = Q_L2C;
    if (in->pop_next) pops[1] = Q_S2C;
    if (in->push_prev) pushes[0] = Q_C2L;
    if (in->push_next) pushes[1] = Q_C2S;
  } else {
    if (in->pop_next || in->push_next) pops[1] = -2;
    if (in->pop_prev) pops[0] = Q_C2S;
    if (in->push_prev) pushes[0] = Q_S2C;
  }
}

typedef struct {
  int64_t *idx[3]; /* program-order indices of each module's instructions */
  int64_t cnt[3];
  vta_insn *insn;
  int64_t n;
} program;

static int load_program(const vta_config *cfg, const uint64_t *words, int64_t n, program *p, char *err, int errlen) {
  memset(p, 0, sizeof(*p));
  p->n = n;
  p->insn = calloc((size_t)(n ? n : 1), sizeof(vta_insn));
  for (int m = 0; m < 3; m++) p->idx[m] = calloc((size_t)(n ? n : 1), sizeof(int64_t));
  if (!p->insn || !p->idx[0] || !p->idx[1] || !p->idx[2]) {
    snprintf(err, (size_t)errlen, "out of memory decoding %lld instructions", (long long)n);
    return -1;
  }
  for (int64_t i = 0; i < n; i++) {
    if (vta_decode_insn(cfg, words + 2 * i, &p->insn[i])) {
      snprintf(err, (size_t)errlen, "instruction %lld: undefined opcode %d", (long long)i, (int)(words[2 * i] & 7));
      return -1;
    }
    int m = vta_module_of(&p->insn[i]), pops[2], pushes[2];
    token_queues(m, &p->insn[i], pops, pushes);
    if (pops[0] == -2 || pops[1] == -2) {
      snprintf(err, (size_t)errlen, "instruction %lld: a %s-module instruction has a dependency flag toward a "
               "module it has no queue with", (long long)i, m == 0 ? "load" : "store");
      return -1;
    }
    p->idx[m][p->cnt[m]++] = i;
  }
  return 0;
}

static void free_program(program *p) {
  free(p->insn);
  for (int m = 0; m < 3; m++) free(p->idx[m]);
}

static int run_functional(vta_state *s, program *p, vta_stats *st, char *err, int errlen) {
  int64_t ptr[3] = {0, 0, 0}, tokens[NQ] = {0, 0, 0, 0};
  for (;;) {
    int progress = 0, left = 0;
    for (int m = 0; m < 3; m++) {
      while (ptr[m] < p->cnt[m]) {
        const vta_insn *in = &p->insn[p->idx[m][ptr[m]]];
        int pops[2], pushes[2];
        token_queues(m, in, pops, pushes);
        if ((pops[0] >= 0 && tokens[pops[0]] == 0) || (pops[1] >= 0 && tokens[pops[1]] == 0)) break;
        for (int k = 0; k < 2; k++)
          if (pops[k] >= 0) tokens[pops[k]]--;
        if (vta_exec(s, in, st, err, errlen)) return -1;
        for (int k = 0; k < 2; k++)
          if (pushes[k] >= 0) tokens[pushes[k]]++;
        ptr[m]++;
        progress = 1;
      }
      left |= ptr[m] < p->cnt[m];
    }
    if (!left) return 0;
    if (!progress) {
      snprintf(err, (size_t)errlen, "deadlock: load/compute/store wait for tokens at instructions %lld/%lld/%lld "
               "of %lld/%lld/%lld", (long long)ptr[0], (long long)ptr[1], (long long)ptr[2],
               (long long)p->cnt[0], (long long)p->cnt[1], (long long)p->cnt[2]);
      return -1;
    }
  }
}

static uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

static int run_cycles(vta_state *s, program *p, const vta_config *cfg, vta_stats *st, char *err, int errlen) {
  int64_t n = p->n;
  uint64_t *fetch_done = calloc((size_t)(n ? n : 1), sizeof(uint64_t));
  uint64_t *start = calloc((size_t)(n ? n : 1), sizeof(uint64_t));
  int64_t *pos_in_module = calloc((size_t)(n ? n : 1), sizeof(int64_t));
  uint64_t *push_time[NQ];
  int64_t pushed[NQ] = {0}, popped[NQ] = {0};
  for (int q = 0; q < NQ; q++) push_time[q] = calloc((size_t)(n ? n : 1), sizeof(uint64_t));
  int rc = 0;
  for (int m = 0; m < 3; m++)
    for (int64_t k = 0; k < p->cnt[m]; k++) pos_in_module[p->idx[m][k]] = k;
  int64_t ptr[3] = {0, 0, 0}, fetched = 0;
  uint64_t mod_free[3] = {0, 0, 0}, dma_free = 0, fetch_t = (uint64_t)cfg->dma_latency;
  uint64_t fetch_cost = ceil_div(INSN_BYTES, (uint64_t)cfg->dma_bytes_per_cycle);
  uint64_t bw = (uint64_t)cfg->dma_bytes_per_cycle, lat = (uint64_t)cfg->dma_latency;
  int64_t depth = cfg->cmd_queue_depth;
  for (int64_t done = 0; done < n; done++) {
    /* fetch as far as the command queues allow */
    while (fetched < n) {
      const vta_insn *in = &p->insn[fetched];
      int m = vta_module_of(in);
      int64_t k = pos_in_module[fetched];
      uint64_t t = fetch_t;
      if (k >= depth) {
        int64_t older = p->idx[m][k - depth];
        if (ptr[m] <= k - depth) break; /* that one has not started: the queue is full */
        if (start[older] > t) t = start[older];
      }
      fetch_t = t + fetch_cost;
      st->busy_fetch += fetch_cost;
      fetch_done[fetched++] = fetch_t;
    }
    int best = -1;
    uint64_t best_ready = 0, best_wait = 0;
    for (int m = 0; m < 3; m++) {
      if (ptr[m] >= p->cnt[m]) continue;
      int64_t i = p->idx[m][ptr[m]];
      if (i >= fetched) continue;
      const vta_insn *in = &p->insn[i];
      int pops[2], pushes[2];
      token_queues(m, in, pops, pushes);
      uint64_t ready = mod_free[m] > fetch_done[i] ? mod_free[m] : fetch_done[i], base = ready;
      int blocked = 0;
      for (int k = 0; k < 2; k++) {
        int q = pops[k];
        if (q < 0) continue;
        if (popped[q] >= pushed[q]) { blocked = 1; break; }
        if (push_time[q][popped[q]] > ready) ready = push_time[q][popped[q]];
      }
      if (blocked) continue;
      if (best < 0 || ready < best_ready) {
        best = m;
        best_ready = ready;
        best_wait = ready - base;
      }
    }
    if (best < 0) {
      snprintf(err, (size_t)errlen, "deadlock in the cycle model: load/compute/store wait at instructions "
               "%lld/%lld/%lld of %lld/%lld/%lld", (long long)ptr[0], (long long)ptr[1], (long long)ptr[2],
               (long long)p->cnt[0], (long long)p->cnt[1], (long long)p->cnt[2]);
      rc = -1;
      break;
    }
    int m = best;
    int64_t i = p->idx[m][ptr[m]];
    const vta_insn *in = &p->insn[i];
    int pops[2], pushes[2];
    token_queues(m, in, pops, pushes);
    for (int k = 0; k < 2; k++)
      if (pops[k] >= 0) popped[pops[k]]++;
    uint64_t t0 = best_ready, end;
    if (in->opcode == VTA_LOAD || in->opcode == VTA_STORE) {
      uint64_t beats = ceil_div(vta_insn_bytes(cfg, in), bw);
      uint64_t xs = t0 > dma_free ? t0 : dma_free;
      dma_free = xs + beats;
      end = xs + lat + beats;
      st->busy_dma += beats;
    } else if (in->opcode == VTA_GEMM) {
      uint64_t ops = vta_insn_ops(in);
      end = t0 + ops + GEMM_FILL;
      if (!in->reset) st->gemm_cycles += ops;
    } else if (in->opcode == VTA_ALU) {
      uint64_t ops = vta_insn_ops(in) * (in->use_imm ? 1 : 2);
      end = t0 + ops + ALU_FILL;
      st->alu_cycles += ops;
    } else {
      end = t0 + 1;
    }
    start[i] = t0;
    if (vta_exec(s, in, st, err, errlen)) { rc = -1; break; }
    for (int k = 0; k < 2; k++)
      if (pushes[k] >= 0) push_time[pushes[k]][pushed[pushes[k]]++] = end;
    uint64_t busy = end - t0;
    if (m == 0) { st->busy_load += busy; st->stall_load += best_wait; }
    else if (m == 1) { st->busy_compute += busy; st->stall_compute += best_wait; }
    else { st->busy_store += busy; st->stall_store += best_wait; }
    mod_free[m] = end;
    if (end > st->cycles) st->cycles = end;
    ptr[m]++;
  }
  free(fetch_done);
  free(start);
  free(pos_in_module);
  for (int q = 0; q < NQ; q++) free(push_time[q]);
  return rc;
}

VTA_EXPORT int vta_run(const vta_config *cfg, const uint64_t *insns, int64_t n, const uint32_t *uops,
                       int64_t nuops, void **segs, const int64_t *seg_bytes, int nsegs, int mode,
                       vta_stats *stats, char *err, int errlen) {
  memset(stats, 0, sizeof(*stats));
  err[0] = 0;
  program p;
  if (load_program(cfg, insns, n, &p, err, errlen)) {
    free_program(&p);
    return -1;
  }
  vta_state *s = vta_state_new(cfg, segs, seg_bytes, nsegs, uops, nuops);
  if (!s) {
    free_program(&p);
    snprintf(err, (size_t)errlen, "out of memory allocating the simulated SRAMs");
    return -1;
  }
  int rc = mode == 1 ? run_cycles(s, &p, cfg, stats, err, errlen) : run_functional(s, &p, stats, err, errlen);
  vta_state_free(s);
  free_program(&p);
  return rc;
}
