/* Raw DEFLATE decoding (RFC 1951), for .npz files written by numpy.savez_compressed.
 *
 * A plain canonical-Huffman decoder, bit by bit: inputs are model inputs (megabytes at most),
 * so clarity beats speed. Every read is bounds-checked against both buffers.
 */
#include <string.h>

#include "npz.h"

typedef struct {
  const unsigned char* in;
  size_t in_len, in_pos;
  unsigned bitbuf, bitcnt;
  unsigned char* out;
  size_t out_len, out_pos;
  int prefix; /* stop (successfully) once out is full */
} State;

typedef struct {
  short count[16];   /* codes of each length */
  short symbol[320]; /* symbols ordered by code */
} Huffman;

static int bits(State* s, int need, unsigned* v) {
  unsigned long val = s->bitbuf;
  while (s->bitcnt < (unsigned)need) {
    if (s->in_pos >= s->in_len) return -1;
    val |= (unsigned long)s->in[s->in_pos++] << s->bitcnt;
    s->bitcnt += 8;
  }
  s->bitbuf = (unsigned)(val >> need);
  s->bitcnt -= (unsigned)need;
  *v = (unsigned)(val & ((1UL << need) - 1));
  return 0;
}

static int decode(State* s, const Huffman* h) {
  int code = 0, first = 0, index = 0;
  for (int len = 1; len < 16; len++) {
    unsigned b;
    if (bits(s, 1, &b)) return -1;
    code |= (int)b;
    int count = h->count[len];
    if (code - count < first) return h->symbol[index + (code - first)];
    index += count;
    first += count;
    first <<= 1;
    code <<= 1;
  }
  return -1;
}

/* Returns 0, or -1 for an over-subscribed set of lengths (incomplete sets are allowed). */
static int build(Huffman* h, const short* length, int n) {
  short offs[16];
  memset(h->count, 0, sizeof(h->count));
  for (int i = 0; i < n; i++) h->count[length[i]]++;
  if (h->count[0] == n) return 0;
  int left = 1;
  for (int len = 1; len < 16; len++) {
    left <<= 1;
    left -= h->count[len];
    if (left < 0) return -1;
  }
  offs[1] = 0;
  for (int len = 1; len < 15; len++) offs[len + 1] = (short)(offs[len] + h->count[len]);
  for (int i = 0; i < n; i++)
    if (length[i]) h->symbol[offs[length[i]]++] = (short)i;
  return 0;
}

static const short LBASE[29] = {3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31,
                                35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
static const short LEXT[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const short DBASE[30] = {1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769,
                                1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
static const short DEXT[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

/* 0 at the end of the block, 1 when a prefix is complete, -1 for bad data. */
static int codes(State* s, const Huffman* lit, const Huffman* dist) {
  for (;;) {
    if (s->prefix && s->out_pos == s->out_len) return 1;
    int sym = decode(s, lit);
    if (sym < 0) return -1;
    if (sym < 256) {
      if (s->out_pos >= s->out_len) return -1;
      s->out[s->out_pos++] = (unsigned char)sym;
    } else if (sym == 256) {
      return 0;
    } else {
      sym -= 257;
      if (sym >= 29) return -1;
      unsigned e, d;
      if (bits(s, LEXT[sym], &e)) return -1;
      size_t len = (size_t)LBASE[sym] + e;
      int ds = decode(s, dist);
      if (ds < 0 || ds >= 30 || bits(s, DEXT[ds], &d)) return -1;
      size_t back = (size_t)DBASE[ds] + d;
      if (s->prefix && len > s->out_len - s->out_pos) len = s->out_len - s->out_pos;
      if (back > s->out_pos || len > s->out_len - s->out_pos) return -1;
      for (size_t i = 0; i < len; i++, s->out_pos++) s->out[s->out_pos] = s->out[s->out_pos - back];
    }
  }
}

static int fixed(State* s) {
  static Huffman lit, dist;
  static int ready;
  if (!ready) {
    short len[288];
    int i = 0;
    for (; i < 144; i++) len[i] = 8;
    for (; i < 256; i++) len[i] = 9;
    for (; i < 280; i++) len[i] = 7;
    for (; i < 288; i++) len[i] = 8;
    build(&lit, len, 288);
    for (i = 0; i < 30; i++) len[i] = 5;
    build(&dist, len, 30);
    ready = 1;
  }
  return codes(s, &lit, &dist);
}

static int dynamic(State* s) {
  static const short order[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
  short lengths[320];
  unsigned nlen, ndist, ncode, v;
  if (bits(s, 5, &nlen) || bits(s, 5, &ndist) || bits(s, 4, &ncode)) return -1;
  nlen += 257;
  ndist += 1;
  ncode += 4;
  if (nlen > 286 || ndist > 30) return -1;
  int i = 0;
  for (; i < (int)ncode; i++) {
    if (bits(s, 3, &v)) return -1;
    lengths[order[i]] = (short)v;
  }
  for (; i < 19; i++) lengths[order[i]] = 0;
  Huffman lencode, lit, dist;
  if (build(&lencode, lengths, 19)) return -1;
  int index = 0;
  while (index < (int)(nlen + ndist)) {
    int sym = decode(s, &lencode);
    if (sym < 0) return -1;
    if (sym < 16) {
      lengths[index++] = (short)sym;
      continue;
    }
    short len = 0;
    unsigned rep;
    if (sym == 16) {
      if (index == 0) return -1;
      len = lengths[index - 1];
      if (bits(s, 2, &rep)) return -1;
      rep += 3;
    } else if (sym == 17) {
      if (bits(s, 3, &rep)) return -1;
      rep += 3;
    } else {
      if (bits(s, 7, &rep)) return -1;
      rep += 11;
    }
    if (index + (int)rep > (int)(nlen + ndist)) return -1;
    while (rep--) lengths[index++] = len;
  }
  if (lengths[256] == 0) return -1;
  if (build(&lit, lengths, (int)nlen) || build(&dist, lengths + nlen, (int)ndist)) return -1;
  return codes(s, &lit, &dist);
}

int npz_inflate(const unsigned char* in, size_t in_len, unsigned char* out, size_t out_len, size_t* prefix) {
  State s = {in, in_len, 0, 0, 0, out, out_len, 0, prefix != NULL};
  if (prefix) *prefix = 0;
  unsigned last, type;
  do {
    if (prefix && s.out_pos == out_len) break;
    if (bits(&s, 1, &last) || bits(&s, 2, &type)) return -1;
    if (type == 0) {
      s.bitbuf = s.bitcnt = 0; /* stored blocks start on a byte boundary */
      if (s.in_len - s.in_pos < 4) return -1;
      unsigned len = s.in[s.in_pos] | (unsigned)s.in[s.in_pos + 1] << 8;
      unsigned nlen = s.in[s.in_pos + 2] | (unsigned)s.in[s.in_pos + 3] << 8;
      s.in_pos += 4;
      if ((len ^ 0xFFFFu) != nlen || len > s.in_len - s.in_pos) return -1;
      if (prefix && len > s.out_len - s.out_pos) len = (unsigned)(s.out_len - s.out_pos);
      if (len > s.out_len - s.out_pos) return -1;
      memcpy(s.out + s.out_pos, s.in + s.in_pos, len);
      s.in_pos += len;
      s.out_pos += len;
    } else if (type == 1 || type == 2) {
      int rc = type == 1 ? fixed(&s) : dynamic(&s);
      if (rc < 0) return -1;
      if (rc > 0) break;
    } else {
      return -1;
    }
  } while (!last);
  if (prefix) *prefix = s.out_pos;
  return prefix || s.out_pos == out_len ? 0 : -1;
}
