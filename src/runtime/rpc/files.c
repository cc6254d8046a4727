/* The session directory: uploads, downloads, removal and listing stay inside it.
 *
 * Names come from the client. Absolute names, "~", ".." components and embedded NULs are
 * refused, no component may be a symlink (it could point anywhere), and files are opened with
 * O_NOFOLLOW, so a client cannot read or overwrite the server's other files.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rpc.h"

#define MAX_LISTED 100000

static int bad_name(const uint8_t* name, size_t len, const char* why) {
  return kiln_error("file name '%.*s' %s", (int)(len > 200 ? 200 : len), (const char*)name, why);
}

/* Check each component; with create, make missing parent directories. */
static int walk_components(const char* root, char* path, int create) {
  size_t root_len = strlen(root);
  for (char* p = path + root_len + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    struct stat st;
    int rc = lstat(path, &st);
    if (rc == 0 && S_ISLNK(st.st_mode)) {
      *p = '/';
      return kiln_error("a directory in the file name is a symlink; files stay inside the session directory");
    }
    if (rc != 0 && create && mkdir(path, 0755) != 0 && errno != EEXIST) {
      *p = '/';
      return kiln_error("cannot create directory for the upload: %s", strerror(errno));
    }
    *p = '/';
  }
  return 0;
}

int files_resolve(const char* root, const uint8_t* name, size_t len, char* out, int must_exist) {
  if (len == 0 || memchr(name, 0, len)) return bad_name(name, len, "is empty or holds a NUL byte; use a relative name like 'lib.tar'");
  if (name[0] == '/' || name[0] == '~') return bad_name(name, len, "is absolute; name files relative to the session directory");
  size_t start = 0;
  for (size_t i = 0; i <= len; i++) {
    if (i == len || name[i] == '/' || name[i] == '\\') {
      if (i - start == 2 && name[start] == '.' && name[start + 1] == '.')
        return bad_name(name, len, "contains '..'; files stay inside the session directory");
      start = i + 1;
    }
  }
  if (strlen(root) + len + 2 > PATH_MAX) return bad_name(name, len, "is too long");
  snprintf(out, PATH_MAX, "%s/%.*s", root, (int)len, (const char*)name);
  for (char* p = out + strlen(root); *p; p++) if (*p == '\\') *p = '/';
  if (walk_components(root, out, 0)) return -1;
  struct stat st;
  if (lstat(out, &st) == 0 && S_ISLNK(st.st_mode)) return bad_name(name, len, "is a symlink");
  if (must_exist && lstat(out, &st) != 0)
    return kiln_error("'%.*s' is not in the session directory; upload it first", (int)(len > 200 ? 200 : len), (const char*)name);
  return 0;
}

int files_write(const char* root, const KVal* name, int64_t offset, const uint8_t* data, size_t n) {
  char path[PATH_MAX];
  if (name->tag != T_STR) return kiln_error("upload: the file name must be a str");
  if (files_resolve(root, name->ptr, name->len, path, 0) || walk_components(root, path, 1)) return -1;
  /* Offset 0 starts the file over; later chunks must follow on exactly. */
  int fd = offset == 0 ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644)
                       : open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return kiln_error("upload: cannot open %.*s: %s", (int)name->len, name->ptr, strerror(errno));
  struct stat st;
  if (offset != 0 && (fstat(fd, &st) != 0 || st.st_size != offset)) {
    close(fd);
    return kiln_error("upload of '%.*s': chunk at offset %lld does not follow the bytes received so far; "
                      "restart the upload", (int)name->len, name->ptr, (long long)offset);
  }
  if (lseek(fd, (off_t)offset, SEEK_SET) < 0) { close(fd); return kiln_error("upload: seek failed"); }
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(fd, data + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) { close(fd); return kiln_error("upload: write failed: %s", strerror(errno)); }
    done += (size_t)w;
  }
  close(fd);
  return 0;
}

int files_read(const char* root, const KVal* name, int64_t offset, size_t max, uint8_t** data, size_t* n) {
  char path[PATH_MAX];
  if (name->tag != T_STR) return kiln_error("download: the file name must be a str");
  if (offset < 0) return kiln_error("download: negative offset");
  if (files_resolve(root, name->ptr, name->len, path, 1)) return -1;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return kiln_error("download: cannot open %.*s: %s", (int)name->len, name->ptr, strerror(errno));
  /* Clients ask for whole chunks (16 MiB); allocate only what the file still holds. */
  struct stat st;
  if (fstat(fd, &st) == 0) max = st.st_size <= offset ? 0 : (size_t)(st.st_size - offset) < max ? (size_t)(st.st_size - offset) : max;
  *data = malloc(max ? max : 1);
  if (!*data) { close(fd); return kiln_error("out of memory"); }
  size_t got = 0;
  while (got < max) {
    ssize_t r = pread(fd, *data + got, max - got, (off_t)offset + (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  *n = got;
  return 0;
}

static int remove_entry(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  return flag == FTW_DP ? rmdir(path) : unlink(path);
}

int files_remove_tree(const char* path) {
  /* FTW_PHYS: a symlink inside is removed itself, never followed. */
  return nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int files_remove(const char* root, const KVal* name) {
  char path[PATH_MAX];
  if (name->tag != T_STR) return kiln_error("remove: the file name must be a str");
  if (files_resolve(root, name->ptr, name->len, path, 1)) return -1;
  struct stat st;
  int rc = lstat(path, &st) == 0 && S_ISDIR(st.st_mode) ? files_remove_tree(path) : unlink(path);
  return rc == 0 ? 0 : kiln_error("remove: %s", strerror(errno));
}

typedef struct { char** names; size_t n, cap; } NameList;

static int list_dir(const char* dir, const char* rel, NameList* out) {
  DIR* d = opendir(dir);
  if (!d) return 0;
  struct dirent* e;
  while ((e = readdir(d)) && out->n < MAX_LISTED) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char path[PATH_MAX], name[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    if (*rel) snprintf(name, sizeof(name), "%s/%s", rel, e->d_name);
    else snprintf(name, sizeof(name), "%s", e->d_name);
    struct stat st;
    if (lstat(path, &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      list_dir(path, name, out);
      continue;
    }
    if (out->n == out->cap) {
      size_t cap = out->cap ? out->cap * 2 : 64;
      char** p = realloc(out->names, cap * sizeof(char*));
      if (!p) break;
      out->names = p;
      out->cap = cap;
    }
    if ((out->names[out->n] = strdup(name))) out->n++;
  }
  closedir(d);
  return 0;
}

static int by_name(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

int files_list(const char* root, WBuf* out) {
  NameList list = {0};
  list_dir(root, "", &list);
  if (list.n) qsort(list.names, list.n, sizeof(char*), by_name); /* qsort(NULL, 0) is UB */
  wb_list(out, (uint32_t)list.n);
  for (size_t i = 0; i < list.n; i++) {
    wb_str(out, list.names[i]);
    free(list.names[i]);
  }
  free(list.names);
  return 0;
}
