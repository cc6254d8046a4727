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

/* All arrays of `path`; free with npz_free. Errors go to kiln_last_error(). */
int npz_read(const char* path, NpyArray** arrays, int* count);
void npz_free(NpyArray* arrays, int count);
/* Write `arrays` to `path` (through a temporary file renamed into place: no partial file). */
int npz_write(const char* path, const NpyArray* arrays, int count);

/* inflate.c: decode raw DEFLATE data that expands to exactly out_len bytes. */
int npz_inflate(const unsigned char* in, size_t in_len, unsigned char* out, size_t out_len);

#endif
