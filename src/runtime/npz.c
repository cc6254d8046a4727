/* .npz = a zip archive with one NumPy .npy file per array (npz.h). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "npz.h"

#define MAX_FILE (1ull << 32)
#define NPY_HEADER_MAX 65536u

/* ---- little-endian fields and CRC-32 ---------------------------------------------------------- */
static uint64_t le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static void put(unsigned char* p, uint64_t v, int n) {
  for (int i = 0; i < n; i++, v >>= 8) p[i] = (unsigned char)v;
}

static uint32_t crc32_update(uint32_t crc, const unsigned char* p, size_t n) {
  static uint32_t table[256];
  if (!table[1])
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
  crc = ~crc;
  for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

/* ---- .npy ------------------------------------------------------------------------------------- */
static int parse_descr(const char* d, DLDataType* t) {
  if ((d[0] != '<' && d[0] != '|' && d[0] != '=') || !d[1]) return -1;
  int size = atoi(d + 2);
  char kind = d[1];
  if (d[0] == '=' && size > 1) return -1; /* native order: only meaningful when it cannot matter */
  if (kind == 'f' && (size == 2 || size == 4 || size == 8)) *t = (DLDataType){KILN_DL_FLOAT, (uint8_t)(size * 8), 1};
  else if (kind == 'i' && (size == 1 || size == 2 || size == 4 || size == 8)) *t = (DLDataType){KILN_DL_INT, (uint8_t)(size * 8), 1};
  else if (kind == 'u' && (size == 1 || size == 2 || size == 4 || size == 8)) *t = (DLDataType){KILN_DL_UINT, (uint8_t)(size * 8), 1};
  else if (kind == 'b' && size == 1) *t = (DLDataType){KILN_DL_BOOL, 8, 1};
  else return -1;
  return 0;
}

/* The value text after 'key': in the header dict, or NULL. */
static const char* dict_value(const char* header, const char* key) {
  char quoted[32];
  snprintf(quoted, sizeof(quoted), "'%s'", key);
  const char* p = strstr(header, quoted);
  if (!p) return NULL;
  p = strchr(p + strlen(quoted), ':');
  if (!p) return NULL;
  p++;
  while (*p == ' ') p++;
  return p;
}

/* The .npy header at the start of a member (buf holds at least its first len bytes): dtype, shape
 * and data size into `a`, the offset of the data into *data_start. */
static int parse_npy_header(const unsigned char* buf, size_t len, NpyArray* a, size_t* data_start) {
  if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
    return kiln_error("'%s' is not a .npy array (bad magic)", a->name);
  int major = buf[6];
  size_t hlen, start;
  if (major == 1) { hlen = (size_t)le(buf + 8, 2); start = 10; }
  else if ((major == 2 || major == 3) && len >= 12) { hlen = (size_t)le(buf + 8, 4); start = 12; }
  else return kiln_error("'%s': .npy format version %d is not supported", a->name, major);
  if (hlen > len - start || hlen > NPY_HEADER_MAX) return kiln_error("'%s': truncated .npy header", a->name);
  char header[NPY_HEADER_MAX + 1];
  memcpy(header, buf + start, hlen);
  header[hlen] = '\0';
  const char *descr = dict_value(header, "descr"), *fortran = dict_value(header, "fortran_order"),
             *shape = dict_value(header, "shape");
  if (!descr || !fortran || !shape || *descr != '\'' || *shape != '(')
    return kiln_error("'%s': the .npy header lacks descr, fortran_order or shape", a->name);
  char d[16] = "";
  const char* end = strchr(descr + 1, '\'');
  if (!end || end - descr - 1 >= (long)sizeof(d)) return kiln_error("'%s': bad descr in the .npy header", a->name);
  memcpy(d, descr + 1, (size_t)(end - descr - 1));
  if (parse_descr(d, &a->dtype))
    return kiln_error("array '%s' has dtype '%s'; kiln_run takes little-endian float16/32/64, int8..64, "
                      "uint8..64 or bool", a->name, d);
  if (strncmp(fortran, "False", 5) != 0)
    return kiln_error("array '%s' is in Fortran order; save np.ascontiguousarray(x) instead", a->name);
  const char* p = shape + 1;
  a->ndim = 0;
  for (;;) {
    while (*p == ' ' || *p == ',') p++;
    if (*p == ')') break;
    char* stop;
    long long v = strtoll(p, &stop, 10);
    if (stop == p || v < 0 || a->ndim >= 32) return kiln_error("'%s': bad shape in the .npy header", a->name);
    a->shape[a->ndim++] = v;
    p = stop;
  }
  DLTensor t = {0};
  t.ndim = a->ndim;
  t.shape = a->shape;
  t.dtype = a->dtype;
  a->nbytes = kiln_ndarray_nbytes(&t);
  if (a->nbytes == (size_t)-1) return kiln_error("array '%s': its shape is too large", a->name);
  *data_start = start + hlen;
  return 0;
}

/* ---- reading ---------------------------------------------------------------------------------- */
/* The file mapped read-only: its pages cost memory only where the parser looks, so a large
 * file costs no more than the members that are read out of it. */
static int map_whole(const char* path, const unsigned char** data, size_t* len) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return kiln_error("cannot open %s", path);
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return kiln_error("cannot read %s (not a regular file)", path);
  }
  if ((unsigned long long)st.st_size >= MAX_FILE || (unsigned long long)st.st_size > (size_t)-1 / 2) {
    close(fd);
    return kiln_error("%s is %lld bytes, larger than an .npz of model inputs can be (4 GiB)", path,
                      (long long)st.st_size);
  }
  *len = (size_t)st.st_size;
  *data = NULL;
  if (*len) {
    void* p = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      close(fd);
      return kiln_error("cannot read %s", path);
    }
    *data = p;
  }
  close(fd);
  return 0;
}

/* Zip64 sizes/offset for the fields that are 0xFFFFFFFF, from the central entry's extra field. */
static void zip64_fields(const unsigned char* extra, size_t n, uint64_t* usize, uint64_t* csize, uint64_t* offset) {
  size_t i = 0;
  while (i + 4 <= n) {
    unsigned tag = (unsigned)le(extra + i, 2), size = (unsigned)le(extra + i + 2, 2);
    if (i + 4 + size > n) return;
    if (tag == 1) {
      const unsigned char* p = extra + i + 4;
      size_t left = size;
      uint64_t* fields[3] = {usize, csize, offset};
      for (int k = 0; k < 3; k++)
        if (*fields[k] == 0xFFFFFFFFu && left >= 8) { *fields[k] = le(p, 8); p += 8; left -= 8; }
      return;
    }
    i += 4 + size;
  }
}

static int read_member(const char* path, const unsigned char* zip, size_t zlen, const unsigned char* cd,
                       NpzCheck check, void* ctx, NpyArray* a) {
  unsigned method = (unsigned)le(cd + 10, 2), flags = (unsigned)le(cd + 8, 2);
  uint32_t crc = (uint32_t)le(cd + 16, 4);
  uint64_t csize = le(cd + 20, 4), usize = le(cd + 24, 4), offset = le(cd + 42, 4);
  size_t name_len = (size_t)le(cd + 28, 2), extra_len = (size_t)le(cd + 30, 2);
  zip64_fields(cd + 46 + name_len, extra_len, &usize, &csize, &offset);
  if (flags & 1) return kiln_error("%s: array '%s' is encrypted", path, a->name);
  if (method != 0 && method != 8)
    return kiln_error("%s: array '%s' uses zip compression method %u; write the file with numpy.savez or "
                      "numpy.savez_compressed", path, a->name, method);
  if (offset > zlen || zlen - offset < 30 || le(zip + offset, 4) != 0x04034b50)
    return kiln_error("%s: bad local header for '%s'", path, a->name);
  uint64_t start = offset + 30 + le(zip + offset + 26, 2) + le(zip + offset + 28, 2);
  if (start > zlen || csize > zlen - start)
    return kiln_error("%s: array '%s' runs past the end of the file", path, a->name);
  if (method == 0 && csize != usize) return kiln_error("%s: stored member '%s' has two sizes", path, a->name);

  /* The .npy header first (inflating only its bytes), then every declared size is checked before
   * the data is allocated or inflated: a DEFLATE bomb or a directory claiming gigabytes is refused
   * from the numbers alone, and the caller sees the array's shape before it costs memory. */
  size_t head_len = usize < 12 + NPY_HEADER_MAX ? (size_t)usize : 12 + NPY_HEADER_MAX, data_start = 0;
  const unsigned char* head = zip + start;
  unsigned char* prefix = NULL;
  if (method == 8) {
    if (!(prefix = malloc(head_len + 1))) return kiln_error("out of memory");
    if (npz_inflate(zip + start, (size_t)csize, prefix, head_len, &head_len)) {
      free(prefix);
      return kiln_error("%s: array '%s' is not valid deflate data", path, a->name);
    }
    head = prefix;
  }
  int rc = parse_npy_header(head, head_len, a, &data_start);
  free(prefix);
  if (rc) {
    char why[600];
    snprintf(why, sizeof(why), "%s", kiln_last_error());
    return kiln_error("%s: %s", path, why);
  }
  if (usize - data_start != a->nbytes)
    return kiln_error("%s: array '%s': its data is %llu bytes, its header says %zu", path, a->name,
                      (unsigned long long)(usize - data_start), a->nbytes);
  size_t limit = kiln_load_limit();
  if (a->nbytes > limit)
    return kiln_error("%s: array '%s' declares %zu bytes, above the limit of %zu (KILN_LOAD_LIMIT); if the file "
                      "is genuine, raise KILN_LOAD_LIMIT", path, a->name, a->nbytes, limit);
  if (check && check(ctx, a)) return -1;

  unsigned char* raw = malloc((size_t)usize + 1);
  if (!raw) return kiln_error("%s: out of memory reading array '%s' (%zu bytes)", path, a->name, a->nbytes);
  if (method == 0) {
    memcpy(raw, zip + start, (size_t)usize);
  } else if (npz_inflate(zip + start, (size_t)csize, raw, (size_t)usize, NULL)) {
    free(raw);
    return kiln_error("%s: array '%s' is not valid deflate data", path, a->name);
  }
  if (crc32_update(0, raw, (size_t)usize) != crc) {
    free(raw);
    return kiln_error("%s: array '%s' fails its CRC check", path, a->name);
  }
  /* The data moves to the front of the member's buffer, which becomes the array: one copy of an
   * input in memory, not two. */
  memmove(raw, raw + data_start, a->nbytes);
  unsigned char* data = realloc(raw, a->nbytes ? a->nbytes : 1);
  a->data = data ? data : raw;
  return 0;
}

int npz_read(const char* path, NpzCheck check, void* ctx, NpyArray** arrays, int* count) {
  const unsigned char* zip = NULL;
  size_t len = 0;
  *arrays = NULL;
  *count = 0;
  if (map_whole(path, &zip, &len)) return -1;
  int rc = npz_read_bytes(zip, len, path, check, ctx, arrays, count);
  if (zip) munmap((void*)zip, len);
  return rc;
}

int npz_read_bytes(const unsigned char* zip, size_t len, const char* path, NpzCheck check, void* ctx,
                   NpyArray** arrays, int* count) {
  *arrays = NULL;
  *count = 0;
  int rc = -1;
  size_t eocd = (size_t)-1;
  for (size_t i = len >= 22 ? len - 22 : 0; len >= 22; i--) {
    if (le(zip + i, 4) == 0x06054b50) { eocd = i; break; }
    if (i == 0 || len - i > 65557) break;
  }
  if (eocd == (size_t)-1) {
    kiln_error("%s is not an .npz file (no zip directory); write it with numpy.savez", path);
    goto done;
  }
  uint64_t entries = le(zip + eocd + 10, 2), cd_size = le(zip + eocd + 12, 4), cd_off = le(zip + eocd + 16, 4);
  if ((entries == 0xFFFF || cd_off == 0xFFFFFFFFu) && eocd >= 20 && le(zip + eocd - 20, 4) == 0x07064b50) {
    uint64_t z = le(zip + eocd - 12, 8);
    if (len >= 56 && z <= len - 56 && le(zip + z, 4) == 0x06064b50) {
      entries = le(zip + z + 32, 8);
      cd_size = le(zip + z + 40, 8);
      cd_off = le(zip + z + 48, 8);
    }
  }
  if (cd_off > len || cd_size > len - cd_off || entries > cd_size / 46) {
    kiln_error("%s: its zip directory is damaged", path);
    goto done;
  }
  *arrays = calloc((size_t)entries + 1, sizeof(NpyArray));
  if (!*arrays) { kiln_error("out of memory"); goto done; }
  size_t pos = (size_t)cd_off, end = (size_t)(cd_off + cd_size);
  for (uint64_t e = 0; e < entries; e++) {
    if (end - pos < 46 || le(zip + pos, 4) != 0x02014b50) { kiln_error("%s: its zip directory is damaged", path); goto done; }
    size_t name_len = (size_t)le(zip + pos + 28, 2), extra = (size_t)le(zip + pos + 30, 2),
           comment = (size_t)le(zip + pos + 32, 2);
    if (end - pos - 46 < name_len + extra + comment) { kiln_error("%s: its zip directory is damaged", path); goto done; }
    NpyArray* a = &(*arrays)[(*count)++];
    if (!(a->name = malloc(name_len + 1))) { kiln_error("out of memory"); goto done; }
    memcpy(a->name, zip + pos + 46, name_len);
    a->name[name_len] = '\0';
    if (name_len > 4 && strcmp(a->name + name_len - 4, ".npy") == 0) a->name[name_len - 4] = '\0';
    if (read_member(path, zip, len, zip + pos, check, ctx, a)) goto done;
    pos += 46 + name_len + extra + comment;
  }
  rc = 0;
done:
  if (rc) {
    npz_free(*arrays, *count);
    *arrays = NULL;
    *count = 0;
  }
  return rc;
}

void npz_free(NpyArray* arrays, int count) {
  for (int i = 0; arrays && i < count; i++) {
    free(arrays[i].name);
    free(arrays[i].data);
  }
  free(arrays);
}

/* ---- writing ---------------------------------------------------------------------------------- */
/* A version 1.0 header, padded with spaces so the data starts 64-byte aligned, as numpy does. */
static size_t npy_header(const NpyArray* a, unsigned char* out, size_t size) {
  char descr[8], shape[800];
  int bytes = (a->dtype.bits + 7) / 8;
  char kind = a->dtype.code == KILN_DL_FLOAT ? 'f' : a->dtype.code == KILN_DL_INT ? 'i'
              : a->dtype.code == KILN_DL_UINT ? 'u' : 'b';
  snprintf(descr, sizeof(descr), "%c%c%d", bytes == 1 ? '|' : '<', kind, bytes);
  size_t used = (size_t)snprintf(shape, sizeof(shape), "(");
  for (int i = 0; i < a->ndim && used < sizeof(shape); i++)
    used += (size_t)snprintf(shape + used, sizeof(shape) - used, "%s%lld", i ? ", " : "", (long long)a->shape[i]);
  if (used < sizeof(shape)) snprintf(shape + used, sizeof(shape) - used, a->ndim == 1 ? ",)" : ")");
  char dict[1000];
  int n = snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
  size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;
  if (total > size) return 0;
  memcpy(out, "\x93NUMPY\x01\x00", 8);
  put(out + 8, total - 10, 2);
  memcpy(out + 10, dict, (size_t)n);
  memset(out + 10 + n, ' ', total - 10 - (size_t)n - 1);
  out[total - 1] = '\n';
  return total;
}

int npz_write(const char* path, const NpyArray* arrays, int count) {
  size_t plen = strlen(path);
  char* tmp = malloc(plen + 16);
  if (!tmp) return kiln_error("out of memory");
  snprintf(tmp, plen + 16, "%s.tmp-XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) { free(tmp); return kiln_error("cannot write %s (is its directory there and writable?)", path); }
  FILE* f = fdopen(fd, "wb");
  unsigned char* central = calloc((size_t)count + 1, 46 + 300);
  size_t central_len = 0;
  uint64_t offset = 0;
  int rc = -1;
  if (!f || !central) { kiln_error("out of memory"); goto done; }
  for (int i = 0; i < count; i++) {
    const NpyArray* a = &arrays[i];
    unsigned char header[1024], local[30];
    char name[260];
    int name_len = snprintf(name, sizeof(name), "%s.npy", a->name);
    size_t hlen = npy_header(a, header, sizeof(header));
    if (name_len >= (int)sizeof(name) || !hlen) { kiln_error("array name or shape of '%s' is too long", a->name); goto done; }
    uint64_t size = hlen + a->nbytes;
    if (offset + size + 30 + (uint64_t)name_len >= 0xFFFFFFFFu) { kiln_error("%s would exceed 4 GiB", path); goto done; }
    uint32_t crc = crc32_update(crc32_update(0, header, hlen), a->data, a->nbytes);
    memset(local, 0, sizeof(local));
    put(local, 0x04034b50, 4);
    put(local + 4, 20, 2);
    put(local + 14, crc, 4);
    put(local + 18, size, 4);
    put(local + 22, size, 4);
    put(local + 26, (uint64_t)name_len, 2);
    unsigned char* c = central + central_len;
    memset(c, 0, 46);
    put(c, 0x02014b50, 4);
    put(c + 4, 20, 2);
    put(c + 6, 20, 2);
    put(c + 16, crc, 4);
    put(c + 20, size, 4);
    put(c + 24, size, 4);
    put(c + 28, (uint64_t)name_len, 2);
    put(c + 42, offset, 4);
    memcpy(c + 46, name, (size_t)name_len);
    central_len += 46 + (size_t)name_len;
    if (fwrite(local, 1, 30, f) != 30 || fwrite(name, 1, (size_t)name_len, f) != (size_t)name_len ||
        fwrite(header, 1, hlen, f) != hlen || fwrite(a->data, 1, a->nbytes, f) != a->nbytes) {
      kiln_error("cannot write %s (disk full?)", path);
      goto done;
    }
    offset += 30 + (uint64_t)name_len + size;
  }
  unsigned char eocd[22] = {0};
  put(eocd, 0x06054b50, 4);
  put(eocd + 8, (uint64_t)count, 2);
  put(eocd + 10, (uint64_t)count, 2);
  put(eocd + 12, central_len, 4);
  put(eocd + 16, offset, 4);
  if (fwrite(central, 1, central_len, f) != central_len || fwrite(eocd, 1, 22, f) != 22) {
    kiln_error("cannot write %s (disk full?)", path);
    goto done;
  }
  rc = 0;
done:
  free(central);
  if (f) { if (fclose(f) != 0 && !rc) rc = kiln_error("cannot write %s (disk full?)", path); }
  else close(fd);
  if (!rc && rename(tmp, path) != 0) rc = kiln_error("cannot write %s", path);
  if (rc) unlink(tmp);
  free(tmp);
  return rc;
}
