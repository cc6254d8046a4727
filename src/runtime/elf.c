/* Which machine a shared object or a target triple is for, compared with this device.
 *
 * dlopen of a library for another architecture fails with "wrong ELF class" or "cannot open
 * shared object file", which does not say what to do. Reading the ELF header first lets the
 * runtime say "built for aarch64; this device is armv7" and name the target to rebuild with.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

enum { EM_386_ = 3, EM_ARM_ = 40, EM_X86_64_ = 62, EM_AARCH64_ = 183, EM_RISCV_ = 243 };

#if defined(__aarch64__)
#define HERE_MACHINE EM_AARCH64_
#define HERE_NAME "aarch64"
#define HERE_TRIPLE "aarch64-linux-gnu"
#elif defined(__arm__)
#define HERE_MACHINE EM_ARM_
#if defined(__ARM_ARCH) && __ARM_ARCH >= 7
#define HERE_NAME "armv7"
#else
#define HERE_NAME "arm"
#endif
#if defined(__ARM_PCS_VFP)
#define HERE_TRIPLE "armv7l-linux-gnueabihf"
#else
#define HERE_TRIPLE "armv7l-linux-gnueabi"
#endif
#elif defined(__x86_64__)
#define HERE_MACHINE EM_X86_64_
#define HERE_NAME "x86_64"
#define HERE_TRIPLE "x86_64-linux-gnu"
#elif defined(__i386__)
#define HERE_MACHINE EM_386_
#define HERE_NAME "i386"
#define HERE_TRIPLE "i386-linux-gnu"
#elif defined(__riscv)
#define HERE_MACHINE EM_RISCV_
#define HERE_NAME "riscv"
#define HERE_TRIPLE "riscv64-linux-gnu"
#else
#define HERE_MACHINE 0
#define HERE_NAME "unknown"
#define HERE_TRIPLE "unknown"
#endif

const char* kiln_device_arch(void) { return HERE_NAME; }

static const char* machine_name(unsigned machine, int bits) {
  switch (machine) {
    case EM_AARCH64_: return "aarch64";
    case EM_ARM_: return "arm (32-bit)";
    case EM_X86_64_: return "x86_64";
    case EM_386_: return "i386";
    case EM_RISCV_: return bits == 32 ? "riscv32" : "riscv64";
    default: return NULL;
  }
}

static const char* base_name(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

static int wrong_machine(const char* path, const char* built) {
  return kiln_error("%s was built for %s; this device is %s. Rebuild it with target "
                    "'llvm -mtriple=%s' (or load it on a matching device)",
                    base_name(path), built, HERE_NAME, HERE_TRIPLE);
}

int kiln_elf_check(const char* path) {
  unsigned char h[40];
  FILE* f = fopen(path, "rb");
  if (!f) return kiln_error("cannot open module file %s", path);
  size_t got = fread(h, 1, sizeof(h), f);
  fclose(f);
  if (got < 20 || memcmp(h, "\x7f" "ELF", 4) != 0)
    return kiln_error("%s is not an ELF shared object; load a .so made by export_library or a .tar",
                      base_name(path));
  int bits = h[4] == 1 ? 32 : h[4] == 2 ? 64 : 0;
  int little = h[5] == 1;
  unsigned machine = little ? (unsigned)(h[18] | h[19] << 8) : (unsigned)(h[18] << 8 | h[19]);
  /* An invalid class for this machine is damage, reported by the integrity check below. */
  if (machine != HERE_MACHINE || (bits && bits != (int)(8 * sizeof(void*)))) {
    const char* name = machine_name(machine, bits);
    char described[48];
    if (!name) {
      snprintf(described, sizeof(described), "e_machine=%u", machine);
    } else {
      /* The machine's own ELF class goes unsaid; another one is said, or a 32-bit file for
       * x86_64 would read "built for x86_64; this device is x86_64". */
      int natural = machine == EM_X86_64_ || machine == EM_AARCH64_ ? 64 : machine == EM_386_ || machine == EM_ARM_ ? 32 : bits;
      snprintf(described, sizeof(described), natural == bits || !bits ? "%s" : "%s (%d-bit ELF)", name, bits);
    }
    return wrong_machine(path, described);
  }
#if defined(__arm__) && defined(__ARM_PCS_VFP)
  /* A hard-float loader treats a soft-float library as "not found" (ELF e_flags at offset 36
   * of a 32-bit header, EF_ARM_ABI_FLOAT_SOFT = 0x200), which is impossible to act on. */
  unsigned flags = got >= 40 ? (unsigned)(h[36] | h[37] << 8 | h[38] << 16 | (unsigned)h[39] << 24) : 0;
  if (flags & 0x200u) return wrong_machine(path, "arm soft-float (gnueabi)");
#endif
  return kiln_elf_check_file_intact(path, base_name(path));
}

/* kiln's names for the architecture part of a triple. */
static const char* triple_arch(const char* triple, char* buf, size_t size) {
  size_t n = strcspn(triple, "-");
  if (n >= size) n = size - 1;
  memcpy(buf, triple, n);
  buf[n] = '\0';
  if (!strcmp(buf, "aarch64") || !strcmp(buf, "arm64") || !strcmp(buf, "aarch64_be")) return "aarch64";
  if (!strncmp(buf, "arm", 3) || !strncmp(buf, "thumb", 5)) return "arm";
  if (!strcmp(buf, "x86_64") || !strcmp(buf, "amd64")) return "x86_64";
  if (buf[0] == 'i' && !strcmp(buf + 2, "86")) return "i386";
  if (!strncmp(buf, "riscv", 5)) return "riscv";
  return buf;
}

int kiln_triple_check(const char* triple, const char* file_label) {
  char buf[64];
  const char* built = triple_arch(triple ? triple : "", buf, sizeof(buf));
  const char* here = HERE_MACHINE == EM_ARM_ ? "arm" : HERE_NAME;
#if defined(__ANDROID__)
  int libc_ok = 1; /* plain linux-gnu kernels need only libc symbols bionic also has */
#else
  int libc_ok = strstr(triple, "android") == NULL; /* bionic-only symbols would not resolve */
#endif
  if (strcmp(built, here) == 0 && libc_ok) return 0;
  return kiln_error("%s was built for %s; this device is %s. Rebuild it with target "
                    "'llvm -mtriple=%s' (or load it on a matching device)",
                    file_label, triple && *triple ? triple : "an unknown triple", HERE_NAME, HERE_TRIPLE);
}
