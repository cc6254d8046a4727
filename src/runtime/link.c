/* Relinking a .tar module's objects with the device's C compiler. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"

#define MAX_WORDS 32

static char* compiler;

void kiln_set_compiler(const char* cc) {
  free(compiler);
  compiler = cc && *cc ? strdup(cc) : NULL;
}

static int on_path(const char* prog) {
  if (strchr(prog, '/')) return access(prog, X_OK) == 0;
  const char* path = getenv("PATH");
  if (!path) path = "/usr/local/bin:/usr/bin:/bin";
  char buf[4096];
  while (*path) {
    size_t n = strcspn(path, ":");
    if (n && n + strlen(prog) + 2 < sizeof(buf)) {
      snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, path, prog);
      if (access(buf, X_OK) == 0) return 1;
    }
    path += n + (path[n] == ':');
  }
  return 0;
}

/* The compiler command: kiln_set_compiler, $KILN_CC, $CC, then cc or gcc if installed. */
static const char* find_compiler(void) {
  if (compiler) return compiler;
  const char* env = getenv("KILN_CC");
  if (env && *env) return env;
  env = getenv("CC");
  if (env && *env) return env;
  if (on_path("cc")) return "cc";
  if (on_path("gcc")) return "gcc";
  return NULL;
}

int kiln_link_objects(const char* dir, int num_objects, const char* output) {
  const char* cc = find_compiler();
  if (!cc)
    return kiln_error("this device has no C compiler to relink a .tar module: export the module "
                      "as .so on the host (export_library('lib.so') links with ld.lld), or install "
                      "gcc here, or name a compiler with kiln_rpc --cc / KILN_CC");
  /* Split "gcc -march=..." into words; no shell, so nothing in a name is interpreted. */
  char* words = strdup(cc);
  char** argv = calloc((size_t)num_objects + MAX_WORDS + 8, sizeof(char*));
  char** objs = calloc((size_t)num_objects + 1, sizeof(char*));
  int argc = 0, rc = -1;
  if (!words || !argv || !objs) { kiln_error("out of memory"); goto done; }
  for (char* w = strtok(words, " \t"); w && argc < MAX_WORDS; w = strtok(NULL, " \t")) argv[argc++] = w;
  argv[argc++] = "-shared";
  argv[argc++] = "-fPIC";
  argv[argc++] = "-o";
  argv[argc++] = (char*)output;
  for (int i = 0; i < num_objects; i++) {
    size_t n = strlen(dir) + 32;
    if (!(objs[i] = malloc(n))) { kiln_error("out of memory"); goto done; }
    snprintf(objs[i], n, "%s/lib%d.o", dir, i);
    argv[argc++] = objs[i];
  }
  /* Modules need only libc, libm and pthread (docs/abi.md). */
  argv[argc++] = "-lm";
  argv[argc++] = "-lpthread";
  argv[argc] = NULL;

  int err[2];
  if (pipe(err) != 0) { kiln_error("pipe: %s", strerror(errno)); goto done; }
  pid_t pid = fork();
  if (pid < 0) { close(err[0]); close(err[1]); kiln_error("fork: %s", strerror(errno)); goto done; }
  if (pid == 0) {
    dup2(err[1], 1);
    dup2(err[1], 2);
    close(err[0]);
    close(err[1]);
    execvp(argv[0], argv);
    fprintf(stderr, "cannot run %s: %s", argv[0], strerror(errno));
    _exit(127);
  }
  close(err[1]);
  char out[1024];
  size_t got = 0;
  ssize_t r;
  char sink[4096];
  while ((r = read(err[0], got < sizeof(out) - 1 ? out + got : sink,
                   got < sizeof(out) - 1 ? sizeof(out) - 1 - got : sizeof(sink))) > 0 || (r < 0 && errno == EINTR))
    if (r > 0 && got < sizeof(out) - 1) got += (size_t)r;
  out[got] = '\0';
  close(err[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    kiln_error("relinking the .tar module with '%s' failed (exit %d): %.700s", cc,
               WIFEXITED(status) ? WEXITSTATUS(status) : -1, out);
    goto done;
  }
  rc = 0;
done:
  for (int i = 0; objs && i < num_objects; i++) free(objs[i]);
  free(objs);
  free(argv);
  free(words);
  return rc;
}
