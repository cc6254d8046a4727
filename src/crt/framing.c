/* Frames: 0x7E, then escaped [session u8][length u16 LE][payload][CRC-16 LE over the three].
   0x7E and 0x7D inside a frame are sent as 0x7D, byte ^ 0x20; a bare 0x7E always starts a new
   frame, so a receiver resynchronises after any lost or corrupted byte. */
#include "crt.h"

uint16_t kiln_crc16(const uint8_t* data, size_t n, uint16_t crc) {
  for (size_t i = 0; i < n; ++i) {
    crc ^= (uint16_t)data[i] << 8;
    for (int b = 0; b < 8; ++b) crc = (crc & 0x8000u) ? (uint16_t)((crc << 1) ^ 0x1021u) : (uint16_t)(crc << 1);
  }
  return crc;
}

static void put_escaped(const uint8_t* data, size_t n) {
  uint8_t buf[64];
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    if (k + 2 > sizeof buf) {
      kiln_crt_write(buf, k);
      k = 0;
    }
    if (data[i] == 0x7E || data[i] == 0x7D) {
      buf[k++] = 0x7D;
      buf[k++] = data[i] ^ 0x20;
    } else {
      buf[k++] = data[i];
    }
  }
  if (k) kiln_crt_write(buf, k);
}

void kiln_frame_send(uint8_t session, const uint8_t* payload, size_t n) {
  uint8_t head[3] = {session, (uint8_t)(n & 0xFF), (uint8_t)(n >> 8)};
  uint16_t crc = kiln_crc16(payload, n, kiln_crc16(head, 3, 0xFFFF));
  uint8_t tail[2] = {(uint8_t)(crc & 0xFF), (uint8_t)(crc >> 8)};
  uint8_t start = 0x7E;
  kiln_crt_write(&start, 1);
  put_escaped(head, 3);
  put_escaped(payload, n);
  put_escaped(tail, 2);
}

int kiln_frame_recv(uint8_t* session, uint8_t* payload, size_t cap) {
  for (;;) {
    int c;
    do {
      c = kiln_crt_read_byte();
      if (c < 0) return -1;
    } while (c != 0x7E);
  restart:;
    uint8_t head[3];
    size_t got = 0, len = 0, total = 0;
    uint8_t tail[2];
    for (;;) {
      c = kiln_crt_read_byte();
      if (c < 0) return -1;
      if (c == 0x7E) goto restart;
      if (c == 0x7D) {
        c = kiln_crt_read_byte();
        if (c < 0) return -1;
        if (c == 0x7E) goto restart;
        c ^= 0x20;
      }
      if (got < 3) {
        head[got++] = (uint8_t)c;
        if (got == 3) {
          len = (size_t)head[1] | ((size_t)head[2] << 8);
          total = 3 + len + 2;
          if (len > cap) break;  /* too long for us: drop it */
        }
        continue;
      }
      if (got < 3 + len) {
        payload[got - 3] = (uint8_t)c;
      } else {
        tail[got - 3 - len] = (uint8_t)c;
      }
      if (++got == total) {
        uint16_t crc = kiln_crc16(payload, len, kiln_crc16(head, 3, 0xFFFF));
        if (crc == (uint16_t)(tail[0] | (tail[1] << 8))) {
          *session = head[0];
          return (int)len;
        }
        break;  /* corrupted: wait for the next start byte */
      }
    }
  }
}
