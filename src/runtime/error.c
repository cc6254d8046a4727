/* Per-thread error message: the runtime's only way of saying what went wrong. */
#include <stdarg.h>
#include <stdio.h>

#include "kiln_runtime.h"

/* Thread-local so concurrent callers (the thread pool, an embedding app) do not overwrite
 * each other's message between the failing call and kiln_last_error(). */
static __thread char last_error[1024];

const char* kiln_last_error(void) { return last_error; }

int kiln_error(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof(last_error), fmt, ap);
  va_end(ap);
  return -1;
}
