/* A small JSON reader for the __kiln_metadata string (and metadata.json in .tar modules).
 *
 * Metadata comes from files a client uploaded, so the reader treats its input as hostile:
 * every read is bounds-checked against `len`, nesting is limited, and numbers that do not fit
 * are rejected instead of wrapping.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_DEPTH 64

typedef struct {
  const char* p;
  const char* end;
  const char* start;
} Parser;

static JsonNode* parse_value(Parser* ps, int depth);

static int fail(Parser* ps, const char* what) {
  return kiln_error("metadata JSON: %s at byte %ld", what, (long)(ps->p - ps->start));
}

static void skip_ws(Parser* ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
    ps->p++;
}

static JsonNode* new_node(JsonType type) {
  JsonNode* n = calloc(1, sizeof(JsonNode));
  if (n) n->type = type;
  return n;
}

static int literal(Parser* ps, const char* word) {
  size_t n = strlen(word);
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) return 0;
  ps->p += n;
  return 1;
}

static int hex4(Parser* ps, unsigned* out) {
  if (ps->end - ps->p < 4) return 0;
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = ps->p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return 0;
  }
  ps->p += 4;
  *out = v;
  return 1;
}

static size_t put_utf8(char* out, unsigned cp) {
  if (cp < 0x80) { out[0] = (char)cp; return 1; }
  if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F)); return 3;
  }
  out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* The decoded string is never longer than its escaped form (\uXXXX is 6 bytes for at most 4
 * of UTF-8, a surrogate pair 12 for 4), so one allocation of the raw length suffices. */
static char* parse_string(Parser* ps) {
  ps->p++; /* opening quote */
  const char* q = ps->p;
  while (q < ps->end && *q != '"') q += (*q == '\\' && q + 1 < ps->end) ? 2 : 1;
  if (q >= ps->end) { fail(ps, "unterminated string"); return NULL; }
  char* out = malloc((size_t)(q - ps->p) + 1);
  if (!out) { kiln_error("out of memory reading metadata"); return NULL; }
  size_t n = 0;
  while (ps->p < q) {
    char c = *ps->p++;
    if ((unsigned char)c < 0x20) { fail(ps, "control character in string"); free(out); return NULL; }
    if (c != '\\') { out[n++] = c; continue; }
    c = *ps->p++;
    switch (c) {
      case '"': out[n++] = '"'; break;
      case '\\': out[n++] = '\\'; break;
      case '/': out[n++] = '/'; break;
      case 'b': out[n++] = '\b'; break;
      case 'f': out[n++] = '\f'; break;
      case 'n': out[n++] = '\n'; break;
      case 'r': out[n++] = '\r'; break;
      case 't': out[n++] = '\t'; break;
      case 'u': {
        unsigned cp, lo;
        if (!hex4(ps, &cp)) { fail(ps, "bad \\u escape"); free(out); return NULL; }
        if (cp >= 0xD800 && cp < 0xDC00) {
          if (ps->p + 6 > q || ps->p[0] != '\\' || ps->p[1] != 'u') { fail(ps, "lone surrogate"); free(out); return NULL; }
          ps->p += 2;
          if (!hex4(ps, &lo) || lo < 0xDC00 || lo >= 0xE000) { fail(ps, "bad surrogate pair"); free(out); return NULL; }
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
          fail(ps, "lone surrogate"); free(out); return NULL;
        }
        n += put_utf8(out + n, cp);
        break;
      }
      default: fail(ps, "unknown escape"); free(out); return NULL;
    }
  }
  out[n] = '\0';
  ps->p = q + 1;
  return out;
}

static JsonNode* parse_number(Parser* ps) {
  const char* s = ps->p;
  const char* q = s;
  if (q < ps->end && *q == '-') q++;
  int digits = 0, integral = 1;
  while (q < ps->end && *q >= '0' && *q <= '9') { q++; digits++; }
  if (q < ps->end && *q == '.') { integral = 0; q++; while (q < ps->end && *q >= '0' && *q <= '9') q++; }
  if (q < ps->end && (*q == 'e' || *q == 'E')) {
    integral = 0; q++;
    if (q < ps->end && (*q == '+' || *q == '-')) q++;
    while (q < ps->end && *q >= '0' && *q <= '9') q++;
  }
  if (!digits || q - s > 64) { fail(ps, "bad number"); return NULL; }
  char buf[80];
  memcpy(buf, s, (size_t)(q - s));
  buf[q - s] = '\0';
  JsonNode* n = new_node(JSON_NUMBER);
  if (!n) { kiln_error("out of memory reading metadata"); return NULL; }
  char* endp;
  n->number = strtod(buf, &endp);
  if (integral) {
    errno = 0;
    long long v = strtoll(buf, &endp, 10);
    if (errno == ERANGE) { fail(ps, "integer out of range"); free(n); return NULL; }
    n->is_integer = 1;
    n->integer = v;
  }
  ps->p = q;
  return n;
}

static JsonNode* parse_container(Parser* ps, int depth, int object) {
  char close = object ? '}' : ']';
  JsonNode* node = new_node(object ? JSON_OBJECT : JSON_ARRAY);
  if (!node) { kiln_error("out of memory reading metadata"); return NULL; }
  JsonNode** tail = &node->child;
  ps->p++;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == close) { ps->p++; return node; }
  for (;;) {
    char* key = NULL;
    skip_ws(ps);
    if (object) {
      if (ps->p >= ps->end || *ps->p != '"') { fail(ps, "expected a member name"); goto bad; }
      if (!(key = parse_string(ps))) goto bad;
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != ':') { free(key); fail(ps, "expected ':'"); goto bad; }
      ps->p++;
    }
    JsonNode* item = parse_value(ps, depth + 1);
    if (!item) { free(key); goto bad; }
    item->key = key;
    *tail = item;
    tail = &item->next;
    node->count++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ',') { ps->p++; continue; }
    if (ps->p < ps->end && *ps->p == close) { ps->p++; return node; }
    fail(ps, object ? "expected ',' or '}'" : "expected ',' or ']'");
    goto bad;
  }
bad:
  json_free(node);
  return NULL;
}

static JsonNode* parse_value(Parser* ps, int depth) {
  if (depth > MAX_DEPTH) { fail(ps, "nested too deeply"); return NULL; }
  skip_ws(ps);
  if (ps->p >= ps->end) { fail(ps, "unexpected end"); return NULL; }
  char c = *ps->p;
  if (c == '{' || c == '[') return parse_container(ps, depth, c == '{');
  if (c == '"') {
    char* s = parse_string(ps);
    if (!s) return NULL;
    JsonNode* n = new_node(JSON_STRING);
    if (!n) { free(s); kiln_error("out of memory reading metadata"); return NULL; }
    n->string = s;
    return n;
  }
  if (c == '-' || (c >= '0' && c <= '9')) return parse_number(ps);
  JsonNode* n = NULL;
  if (literal(ps, "null")) n = new_node(JSON_NULL);
  else if (literal(ps, "true")) { n = new_node(JSON_BOOL); if (n) n->number = 1; }
  else if (literal(ps, "false")) n = new_node(JSON_BOOL);
  else { fail(ps, "unexpected character"); return NULL; }
  if (!n) kiln_error("out of memory reading metadata");
  return n;
}

JsonNode* json_parse(const char* text, size_t len) {
  Parser ps = {text, text + len, text};
  JsonNode* root = parse_value(&ps, 0);
  if (!root) return NULL;
  skip_ws(&ps);
  if (ps.p != ps.end) { fail(&ps, "trailing characters"); json_free(root); return NULL; }
  return root;
}

void json_free(JsonNode* node) {
  while (node) {
    JsonNode* next = node->next;
    json_free(node->child);
    free(node->string);
    free(node->key);
    free(node);
    node = next;
  }
}

const JsonNode* json_get(const JsonNode* object, const char* key) {
  if (!object || object->type != JSON_OBJECT) return NULL;
  for (const JsonNode* c = object->child; c; c = c->next)
    if (c->key && strcmp(c->key, key) == 0) return c;
  return NULL;
}

const char* json_string(const JsonNode* node) {
  return node && node->type == JSON_STRING ? node->string : NULL;
}
