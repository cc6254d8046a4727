/* kiln's bare-metal C runtime (docs/microtvm.md "CRT"): no malloc, no OS.
   A page allocator over a static arena, a registry of the module's packed functions, and an
   RPC server that speaks framed requests over any byte transport the board provides. */
#ifndef KILN_CRT_H_
#define KILN_CRT_H_
#include <stddef.h>
#include <stdint.h>

#ifndef KILN_CRT_ARENA_BYTES
#define KILN_CRT_ARENA_BYTES (256 * 1024)
#endif
#define KILN_CRT_PAGE_BYTES 64u
#define KILN_CRT_MAX_PAYLOAD 1024u

#ifndef KILN_ABI_TYPES_DEFINED
#define KILN_ABI_TYPES_DEFINED
typedef union { int64_t v_int64; double v_float64; void* v_handle; } KilnValue;
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
  void* data; DLDevice device; int32_t ndim; DLDataType dtype;
  int64_t* shape; int64_t* strides; uint64_t byte_offset;
} DLTensor;
#endif

typedef int32_t (*KilnPackedFunc)(const KilnValue* args, const int32_t* type_codes, int32_t num_args);
typedef struct { const char* name; KilnPackedFunc fn; } KilnCrtFunc;

/* Page allocator */
void* kiln_crt_alloc(size_t nbytes);
void kiln_crt_free(void* ptr);
/* The size of the allocated block that starts at ptr, or 0 when ptr starts no allocated block. */
size_t kiln_crt_block_bytes(const void* ptr);
size_t kiln_crt_pages_free(void);
uint8_t* kiln_crt_arena_base(void);

/* The board provides these */
int kiln_crt_read_byte(void);              /* blocks; -1 when the transport is closed */
void kiln_crt_write(const uint8_t* data, size_t n);
uint64_t kiln_crt_ticks(void);             /* board clock ticks */
uint32_t kiln_crt_ticks_hz(void);

/* The generated system library provides the function table */
extern const KilnCrtFunc kiln_crt_system_lib[];
extern const int32_t kiln_crt_system_lib_size;

/* Framing (CRC-16/CCITT-FALSE, start byte 0x7E, escape 0x7D) */
uint16_t kiln_crc16(const uint8_t* data, size_t n, uint16_t crc);
void kiln_frame_send(uint8_t session, const uint8_t* payload, size_t n);
/* Reads until a whole frame with a good CRC arrives; returns its payload length, -1 at end of input. */
int kiln_frame_recv(uint8_t* session, uint8_t* payload, size_t cap);

/* One request payload in (from session sid): the reply to send (*reply, its length), or 0 for
   none (a stale frame or a late duplicate). Used by kiln_crt_serve; exposed for tests and fuzzing. */
size_t kiln_crt_handle(uint8_t sid, const uint8_t* payload, size_t n, const uint8_t** reply);
/* Serves requests until the transport closes. */
int kiln_crt_serve(void);
#endif
