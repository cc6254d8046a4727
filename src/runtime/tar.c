/* Reading module archives (.tar from export_library): only what a loader needs, safely.
 *
 * Archives arrive over RPC from other machines, so nothing in a header is trusted: sizes are
 * parsed with bounds, checksums are verified, and only regular members named libN.o or
 * metadata.json are written, by their base name, into the target directory (no path from the
 * archive is ever used as a path here).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define BLOCK 512
#define MAX_MEMBER (256u << 20) /* objects of one module stay far below this */
#define MAX_OBJECTS 4096

static int parse_octal(const unsigned char* p, size_t n, unsigned long long* out) {
  unsigned long long v = 0;
  size_t i = 0;
  while (i < n && p[i] == ' ') i++;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; i++) {
    if (v > (~0ULL >> 3)) return -1;
    v = v * 8 + (unsigned)(p[i] - '0');
  }
  for (; i < n; i++) if (p[i] != ' ' && p[i] != '\0') return -1;
  *out = v;
  return 0;
}

static int checksum_ok(const unsigned char* h) {
  unsigned long long want;
  if (parse_octal(h + 148, 8, &want)) return 0;
  unsigned long long sum = 0;
  for (int i = 0; i < BLOCK; i++) sum += (i >= 148 && i < 156) ? ' ' : h[i];
  return sum == want;
}

/* The member's name without a leading "./"; ustar splits long names into prefix + name. */
static void member_name(const unsigned char* h, char* out, size_t size) {
  char name[101], prefix[156];
  memcpy(name, h, 100);
  name[100] = '\0';
  memcpy(prefix, h + 345, 155);
  prefix[155] = '\0';
  if (memcmp(h + 257, "ustar", 5) == 0 && prefix[0]) snprintf(out, size, "%s/%s", prefix, name);
  else snprintf(out, size, "%s", name);
  while (out[0] == '.' && out[1] == '/') memmove(out, out + 2, strlen(out + 2) + 1);
}

/* Index N when name is "libN.o", else -1. */
static int object_index(const char* name) {
  if (strncmp(name, "lib", 3) != 0) return -1;
  const char* p = name + 3;
  int v = 0, digits = 0;
  while (*p >= '0' && *p <= '9' && digits < 5) v = v * 10 + (*p++ - '0'), digits++;
  return digits && strcmp(p, ".o") == 0 && v < MAX_OBJECTS ? v : -1;
}

/* Whether the member's declared size lies inside the file: checked before anything is allocated,
 * written or skipped (a seek past the end succeeds silently). */
static int member_in_file(FILE* in, unsigned long long size) {
  struct stat st;
  long pos = ftell(in);
  if (pos < 0 || fstat(fileno(in), &st) != 0 || (unsigned long long)st.st_size < (unsigned long long)pos) return 0;
  return size <= (unsigned long long)st.st_size - (unsigned long long)pos;
}

static int copy_member(FILE* in, unsigned long long size, const char* dir, const char* name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char* path = malloc(n);
  if (!path) return kiln_error("out of memory");
  snprintf(path, n, "%s/%s", dir, name);
  unlink(path); /* never write through a link someone left there */
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
  free(path);
  if (fd < 0) return kiln_error("cannot write %s into %s", name, dir);
  unsigned char buf[BLOCK * 16];
  unsigned long long left = (size + BLOCK - 1) / BLOCK * BLOCK, data = size;
  int rc = 0;
  while (left) {
    size_t chunk = left < sizeof(buf) ? (size_t)left : sizeof(buf);
    if (fread(buf, 1, chunk, in) != chunk) { rc = kiln_error("archive ends inside member %s", name); break; }
    size_t keep = data < chunk ? (size_t)data : chunk;
    if (keep && write(fd, buf, keep) != (ssize_t)keep) { rc = kiln_error("cannot write %s (disk full?)", name); break; }
    data -= keep;
    left -= chunk;
  }
  close(fd);
  return rc;
}

int kiln_untar_module(const char* tar_path, const char* dir, int* num_objects) {
  const char* base = strrchr(tar_path, '/');
  base = base ? base + 1 : tar_path;
  FILE* in = fopen(tar_path, "rb");
  if (!in) return kiln_error("cannot open %s", tar_path);
  unsigned char h[BLOCK];
  char name[300];
  unsigned char seen[MAX_OBJECTS] = {0};
  int rc = 0, max_index = -1, members = 0;
  while (fread(h, 1, BLOCK, in) == BLOCK) {
    int zero = 1;
    for (int i = 0; i < BLOCK && zero; i++) zero = h[i] == 0;
    if (zero) break; /* end-of-archive marker */
    unsigned long long size;
    if (!checksum_ok(h) || parse_octal(h + 124, 12, &size) || size > MAX_MEMBER) {
      rc = kiln_error("%s is not a valid tar archive (bad header after %d members); re-export it", base, members);
      break;
    }
    if (!member_in_file(in, size)) {
      rc = kiln_error("%s: member %d declares %llu bytes, past the end of the file (truncated archive); re-export it",
                      base, members + 1, size);
      break;
    }
    members++;
    char type = (char)h[156];
    member_name(h, name, sizeof(name));
    int index = object_index(name);
    int wanted = index >= 0 || strcmp(name, "metadata.json") == 0;
    if (wanted && type != '0' && type != '\0') {
      rc = kiln_error("%s: member %s is a link or special file; module archives hold regular files", base, name);
      break;
    }
    if (wanted) {
      if (copy_member(in, size, dir, name)) { rc = -1; break; }
      if (index >= 0) {
        seen[index] = 1;
        if (index > max_index) max_index = index;
      }
    } else if (fseek(in, (long)((size + BLOCK - 1) / BLOCK * BLOCK), SEEK_CUR) != 0) {
      /* pax headers ('x', 'g'), directories and other files are skipped, never extracted */
      rc = kiln_error("%s: truncated archive", base);
      break;
    }
  }
  fclose(in);
  if (rc) return rc;
  int n = 0;
  while (n <= max_index && seen[n]) n++;
  if (n != max_index + 1) return kiln_error("%s: objects are not numbered lib0.o .. libN.o without gaps", base);
  *num_objects = n;
  return 0;
}

static int read_member(FILE* in, unsigned long long size, const char* name, char** out) {
  char* buf = malloc((size_t)size + 1);
  if (!buf) return kiln_error("out of memory reading %s", name);
  if (fread(buf, 1, (size_t)size, in) != size ||
      fseek(in, (long)((BLOCK - size % BLOCK) % BLOCK), SEEK_CUR) != 0) {
    free(buf);
    return kiln_error("archive ends inside member %s", name);
  }
  buf[size] = '\0';
  *out = buf;
  return 0;
}

int kiln_untar_named(const char* tar_path, const char* dir, const char* const* names, int n, int* found,
                     char** data, size_t* lens) {
  const char* base = strrchr(tar_path, '/');
  base = base ? base + 1 : tar_path;
  FILE* in = fopen(tar_path, "rb");
  if (!in) return kiln_error("cannot open %s", tar_path);
  unsigned char h[BLOCK];
  char name[300];
  int rc = 0, members = 0;
  for (int i = 0; i < n; i++) found[i] = 0;
  while (fread(h, 1, BLOCK, in) == BLOCK) {
    int zero = 1;
    for (int i = 0; i < BLOCK && zero; i++) zero = h[i] == 0;
    if (zero) break;
    unsigned long long size;
    if (!checksum_ok(h) || parse_octal(h + 124, 12, &size) || size > MAX_MEMBER) {
      rc = kiln_error("%s is not a valid tar archive (bad header after %d members)", base, members);
      break;
    }
    if (!member_in_file(in, size)) {
      rc = kiln_error("%s: member %d declares %llu bytes, past the end of the file (truncated archive)", base,
                      members + 1, size);
      break;
    }
    members++;
    member_name(h, name, sizeof(name));
    int which = -1;
    for (int i = 0; i < n && which < 0; i++)
      if (strcmp(name, names[i]) == 0) which = i;
    if (which >= 0 && found[which]) {
      rc = kiln_error("%s holds %s twice", base, name);
      break;
    }
    if (which >= 0) {
      char type = (char)h[156];
      if (type != '0' && type != '\0') {
        rc = kiln_error("%s: member %s is a link or special file; expected a regular file", base, name);
        break;
      }
      if (data && data[which]) {
        if (read_member(in, size, name, &data[which])) { data[which] = NULL; rc = -1; break; }
        lens[which] = (size_t)size;
      } else if (copy_member(in, size, dir, name)) {
        rc = -1;
        break;
      }
      found[which] = 1;
    } else if (fseek(in, (long)((size + BLOCK - 1) / BLOCK * BLOCK), SEEK_CUR) != 0) {
      rc = kiln_error("%s: truncated archive", base);
      break;
    }
  }
  if (!rc && members == 0) rc = kiln_error("%s is not a tar archive (no members)", base);
  fclose(in);
  return rc;
}
