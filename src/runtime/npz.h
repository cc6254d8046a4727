/* Reading and writing NumPy .npz files (zip archives of .npy arrays) for kiln_run.
 *
 * Reads what numpy.savez (stored) and numpy.savez_compressed (deflate) write, zip64 included;
 * writes stored (uncompressed) archives that numpy.load reads. Little-endian C-order arrays of
 * kiln's dtypes only (float16/32/64, int8..64, uint8..64, bool); anything else is refused with a
 * message naming the array. Not part of libkiln_runtime.
 */
#ifndef KILN_NPZ_H_
#define KILN_NPZ_H_

#include <stddef.h>
#include <stdint.h>

#include "kiln_runtime.h"

typedef struct {
  char* name;          /* without the .npy suffix */
  DLDataType dtype;
  int32_t ndim;
  int64_t shape[32];
  void* data;          /* C order */
  size_t nbytes;
} NpyArray;

/* Called with each array's name, dtype and shape (data still NULL), before its data is allocated
 * or inflated: 0 to read it, or -1 after kiln_error() to refuse the file. */
typedef int (*NpzCheck)(void* ctx, const NpyArray* header);

/* All arrays of `path`; free with npz_free. Errors go to kiln_last_error(). Every size the file
 * declares is checked (against the file, `check` when given, and kiln_load_limit()) before
 * anything is allocated for it. */
int npz_read(const char* path, NpzCheck check, void* ctx, NpyArray** arrays, int* count);
/* The same for a file already in memory (`path` only names it in messages). */
int npz_read_bytes(const unsigned char* zip, size_t len, const char* path, NpzCheck check, void* ctx,
                   NpyArray** arrays, int* count);
void npz_free(NpyArray* arrays, int count);
/* Write `arrays` to `path` (through a temporary file renamed into place: no partial file). */
int npz_write(const char* path, const NpyArray* arrays, int count);

/* inflate.c: decode raw DEFLATE data that expands to exactly out_len bytes or, given `prefix`, only
 * its first bytes, at most out_len (their count goes to *prefix; the rest is not looked at). */
int npz_inflate(const unsigned char* in, size_t in_len, unsigned char* out, size_t out_len, size_t* prefix);

#endif
