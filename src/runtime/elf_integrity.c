/* Whether a shared object is whole before dlopen maps it: ELF structure and kiln's seal.
 *
 * The same rules as kiln/runtime/integrity.py (docs/security.md): dlopen dies of SIGBUS or
 * SIGSEGV on a truncated library or one with damaged program headers or dynamic section, so
 * every part the loader reads is checked against the file's size, and a library written by
 * export_library carries a 48-byte seal ("KILNSEAL", version, HMAC-SHA256 with a fixed public
 * key over everything before it) that is recomputed here; a build id starting with "kilnseal"
 * says the seal must be there, so cutting it off is refused too.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "rpc/rpc.h" /* hmac_sha256 */

#define SEAL_BYTES 48
#define SEAL_VERSION 1
static const char SEAL_KEY[] = "kiln export_library seal v1";

enum { PT_LOAD_ = 1, PT_DYNAMIC_ = 2, PT_NOTE_ = 4, SHT_NOBITS_ = 8, NT_GNU_BUILD_ID_ = 3 };
enum { MAX_DYNAMIC = 1 << 16 };

typedef struct {
  const unsigned char* p;
  size_t size;
  int is64, little;
  const char* name;
  uint64_t phoff;
  unsigned phnum, phentsize;
} Elf;

static uint64_t rd(const Elf* e, uint64_t off, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)e->p[off + (e->little ? i : n - 1 - i)] << (8 * i);
  return v;
}

static int damaged(const Elf* e, const char* problem) {
  return kiln_error("%s is damaged: %s; export it again with export_library, or copy it again from where it "
                    "was built", e->name, problem);
}

/* [off, off + n) inside the file; updates *end. */
static int within(const Elf* e, uint64_t off, uint64_t n, const char* what, uint64_t* end) {
  if (off > e->size || n > e->size - off) {
    char msg[300];
    snprintf(msg, sizeof(msg), "%s covers bytes %llu..%llu but the file has %zu (truncated, or a damaged offset)",
             what, (unsigned long long)off, (unsigned long long)(off + n), e->size);
    return damaged(e, msg);
  }
  if (off + n > *end) *end = off + n;
  return 0;
}

typedef struct { uint64_t type, offset, vaddr, filesz, memsz, align; } Phdr;

static Phdr phdr(const Elf* e, unsigned i) {
  uint64_t at = e->phoff + (uint64_t)i * e->phentsize;
  Phdr h;
  if (e->is64) {
    h = (Phdr){rd(e, at, 4), rd(e, at + 8, 8), rd(e, at + 16, 8), rd(e, at + 32, 8), rd(e, at + 40, 8), rd(e, at + 48, 8)};
  } else {
    h = (Phdr){rd(e, at, 4), rd(e, at + 4, 4), rd(e, at + 8, 4), rd(e, at + 16, 4), rd(e, at + 20, 4), rd(e, at + 28, 4)};
  }
  return h;
}

/* Whether [addr, addr + n) lies in a loaded segment (its file bytes when file_backed). */
static int mapped(const Elf* e, uint64_t addr, uint64_t n, int file_backed) {
  for (unsigned i = 0; i < e->phnum; i++) {
    Phdr h = phdr(e, i);
    uint64_t limit = file_backed ? h.filesz : h.memsz;
    if (h.type == PT_LOAD_ && addr >= h.vaddr && addr - h.vaddr <= limit && n <= limit - (addr - h.vaddr)) return 1;
  }
  return 0;
}

static int check_dynamic(const Elf* e, uint64_t off, uint64_t filesz) {
  unsigned entsize = e->is64 ? 16 : 8;
  int inside = 0;
  for (unsigned i = 0; i < e->phnum && !inside; i++) {
    Phdr h = phdr(e, i);
    inside = h.type == PT_LOAD_ && off >= h.offset && off - h.offset <= h.filesz && filesz <= h.filesz - (off - h.offset);
  }
  if (filesz < entsize || !inside) return damaged(e, "its dynamic section is not inside a loaded segment");
  uint64_t count = filesz / entsize, strsz = 0;
  if (count > MAX_DYNAMIC) count = MAX_DYNAMIC;
  uint64_t n = 0;
  for (; n < count; n++) {
    uint64_t tag = rd(e, off + n * entsize, entsize / 2);
    if (tag == 0) break;
    if (tag == 10) strsz = rd(e, off + n * entsize + entsize / 2, entsize / 2);
  }
  if (n == count) return damaged(e, "its dynamic section has no terminating DT_NULL entry");
  for (uint64_t k = 0; k < n; k++) {
    uint64_t tag = rd(e, off + k * entsize, entsize / 2), value = rd(e, off + k * entsize + entsize / 2, entsize / 2);
    char msg[200];
    /* addresses the loader reads from, and the size tag of those it reads as whole tables */
    uint64_t size_tag = tag == 5 ? 10 : tag == 7 ? 8 : tag == 17 ? 18 : tag == 23 ? 2 : tag == 25 ? 27 : tag == 26 ? 28 : 0;
    int address = size_tag || tag == 3 || tag == 4 || tag == 6 || tag == 12 || tag == 13 || tag == 0x6FFFFEF5 ||
                  tag == 0x6FFFFFF0 || tag == 0x6FFFFFFC || tag == 0x6FFFFFFE;
    if (address) {
      uint64_t size = 0;
      for (uint64_t j = 0; size_tag && j < n; j++)
        if (rd(e, off + j * entsize, entsize / 2) == size_tag) size = rd(e, off + j * entsize + entsize / 2, entsize / 2);
      if (!mapped(e, value, size ? size : 1, size_tag != 0)) {
        snprintf(msg, sizeof(msg), "its dynamic entry with tag 0x%llx points to 0x%llx (%llu bytes), outside every "
                 "loaded segment", (unsigned long long)tag, (unsigned long long)value, (unsigned long long)size);
        return damaged(e, msg);
      }
    }
    if ((tag == 1 || tag == 14 || tag == 15 || tag == 29) && value >= strsz) {
      snprintf(msg, sizeof(msg), "its dynamic entry with tag %llu names string %llu, past the end of its string "
               "table (%llu bytes)", (unsigned long long)tag, (unsigned long long)value, (unsigned long long)strsz);
      return damaged(e, msg);
    }
  }
  return 0;
}

static int seal_build_id(const Elf* e) {
  for (unsigned i = 0; i < e->phnum; i++) {
    Phdr h = phdr(e, i);
    if (h.type != PT_NOTE_) continue;
    uint64_t at = h.offset, stop = h.offset + h.filesz; /* inside the file: checked before */
    while (stop - at >= 12) {
      uint64_t namesz = rd(e, at, 4), descsz = rd(e, at + 4, 4), type = rd(e, at + 8, 4);
      uint64_t name_at = at + 12, desc_at = name_at + (namesz + 3) / 4 * 4;
      if (desc_at > stop || (descsz + 3) / 4 * 4 > stop - desc_at) break;
      if (type == NT_GNU_BUILD_ID_ && namesz == 4 && memcmp(e->p + name_at, "GNU", 4) == 0)
        return descsz >= 8 && memcmp(e->p + desc_at, "kilnseal", 8) == 0;
      at = desc_at + (descsz + 3) / 4 * 4;
    }
  }
  return 0;
}

int kiln_elf_check_intact(const unsigned char* p, size_t size, const char* name) {
  Elf e = {p, size, 0, 0, name, 0, 0, 0};
  if (size >= 4 && size < 52 && memcmp(p, "\x7f" "ELF", 4) == 0)
    return damaged(&e, "it is shorter than an ELF header (the file was cut short)");
  if (size < 52 || memcmp(p, "\x7f" "ELF", 4) != 0)
    return kiln_error("%s is not an ELF shared object; load a .so made by export_library or a .tar", name);
  if ((p[4] != 1 && p[4] != 2) || (p[5] != 1 && p[5] != 2) || p[6] != 1)
    return damaged(&e, "its ELF identification bytes (class, data, version) are invalid");
  e.is64 = p[4] == 2;
  e.little = p[5] == 1;
  if (e.is64 && size < 64) return damaged(&e, "it is shorter than a 64-bit ELF header");
  uint64_t type = rd(&e, 16, 2), version = rd(&e, 20, 4);
  uint64_t shoff = e.is64 ? rd(&e, 40, 8) : rd(&e, 32, 4);
  unsigned base = e.is64 ? 52 : 40;
  e.phoff = e.is64 ? rd(&e, 32, 8) : rd(&e, 28, 4);
  unsigned ehsize = (unsigned)rd(&e, base, 2);
  e.phentsize = (unsigned)rd(&e, base + 2, 2);
  e.phnum = (unsigned)rd(&e, base + 4, 2);
  unsigned shentsize = (unsigned)rd(&e, base + 6, 2), shnum = (unsigned)rd(&e, base + 8, 2),
           shstrndx = (unsigned)rd(&e, base + 10, 2);
  if (type != 3) return damaged(&e, "its ELF type is not a shared object (3)");
  if (version != 1 || ehsize != (e.is64 ? 64u : 52u)) return damaged(&e, "its ELF header has a bad version or size");
  if (e.phentsize != (e.is64 ? 56u : 32u) || e.phnum == 0) return damaged(&e, "its program header table is malformed");
  uint64_t end = ehsize;
  if (within(&e, e.phoff, (uint64_t)e.phnum * e.phentsize, "the program header table", &end)) return -1;
  int loads = 0;
  uint64_t dyn_off = 0, dyn_size = 0;
  int have_dynamic = 0;
  for (unsigned i = 0; i < e.phnum; i++) {
    Phdr h = phdr(&e, i);
    char what[64];
    snprintf(what, sizeof(what), "program header %u (type %llu)", i, (unsigned long long)h.type);
    if (h.filesz && within(&e, h.offset, h.filesz, what, &end)) return -1;
    if (h.type == PT_LOAD_) {
      if (h.filesz > h.memsz || (h.align > 1 && ((h.align & (h.align - 1)) || (h.vaddr - h.offset) % h.align))) {
        char msg[160];
        snprintf(msg, sizeof(msg), "%s: its file size, memory size and alignment are inconsistent", what);
        return damaged(&e, msg);
      }
      loads++;
    } else if (h.type == PT_DYNAMIC_) {
      dyn_off = h.offset;
      dyn_size = h.filesz;
      have_dynamic = 1;
    }
  }
  if (!loads) return damaged(&e, "it has no loadable segment");
  if (!have_dynamic) return damaged(&e, "it has no dynamic section (PT_DYNAMIC)");
  if (check_dynamic(&e, dyn_off, dyn_size)) return -1;
  if (shnum || shoff) {
    if (shentsize != (e.is64 ? 64u : 40u) || shstrndx >= (shnum ? shnum : 1))
      return damaged(&e, "its section header table is malformed");
    if (within(&e, shoff, (uint64_t)shnum * shentsize, "the section header table", &end)) return -1;
    for (unsigned i = 0; i < shnum; i++) {
      uint64_t at = shoff + (uint64_t)i * shentsize;
      uint64_t stype = rd(&e, at + 4, 4);
      uint64_t off = e.is64 ? rd(&e, at + 24, 8) : rd(&e, at + 16, 4);
      uint64_t sz = e.is64 ? rd(&e, at + 32, 8) : rd(&e, at + 20, 4);
      char what[32];
      snprintf(what, sizeof(what), "section %u", i);
      if (stype != SHT_NOBITS_ && sz && within(&e, off, sz, what, &end)) return -1;
    }
  }

  uint64_t tail = size - end;
  if (tail == 0) {
    if (seal_build_id(&e))
      return damaged(&e, "its kiln seal (the last 48 bytes export_library wrote) is missing: the file was cut short");
    return 0;
  }
  if (tail != SEAL_BYTES || memcmp(p + end, "KILNSEAL", 8) != 0) {
    char msg[160];
    snprintf(msg, sizeof(msg), "it has %llu bytes after its ELF content that are not a kiln seal (the file was cut "
             "short or changed)", (unsigned long long)tail);
    return damaged(&e, msg);
  }
  Elf le = e;
  le.little = 1; /* the seal is little-endian whatever the ELF's byte order */
  if (rd(&le, end + 8, 4) != SEAL_VERSION) return damaged(&e, "its kiln seal has a version this runtime does not know");
  uint8_t digest[32];
  hmac_sha256((const uint8_t*)SEAL_KEY, sizeof(SEAL_KEY) - 1, p, (size_t)end, digest);
  if (memcmp(digest, p + end + 16, 32) != 0)
    return damaged(&e, "its content does not match its kiln seal (bytes changed after export_library wrote it)");
  return 0;
}

int kiln_elf_check_file_intact(const char* path, const char* name) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return kiln_error("cannot open module file %s", path);
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return kiln_error("%s is not a regular file; load a .so made by export_library or a .tar", name);
  }
  size_t size = (size_t)st.st_size;
  if (size < 64) {
    unsigned char head[64];
    ssize_t got = read(fd, head, sizeof(head));
    close(fd);
    return kiln_elf_check_intact(head, got > 0 ? (size_t)got : 0, name);
  }
  void* p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return kiln_error("cannot read module file %s", path);
  int rc = kiln_elf_check_intact(p, size, name);
  munmap(p, size);
  return rc;
}
