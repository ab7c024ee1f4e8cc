#include "tensor_pb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t tensor_pb_elem_size(int32_t t) {
  switch (t) {
    case 1: case 6: case 12: return 4;          /* float, int32, uint32 */
    case 2: case 3: case 9: return 1;           /* uint8, int8, bool */
    case 4: case 5: case 10: case 16: return 2; /* uint16, int16, float16, bfloat16 */
    case 7: case 11: case 13: return 8;         /* int64, double, uint64 */
    default: return 0;
  }
}

static int varint(const unsigned char* p, size_t n, size_t* pos, uint64_t* v) {
  int shift = 0;
  *v = 0;
  while (*pos < n && shift < 64) {
    unsigned char b = p[(*pos)++];
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return 0;
    shift += 7;
  }
  return -1;
}

int tensor_pb_read(const char* path, tensor_pb* t) {
  memset(t, 0, sizeof *t);
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    return -1;
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char* buf = (unsigned char*)malloc(size > 0 ? (size_t)size : 1);
  if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
    fclose(f);
    free(buf);
    fprintf(stderr, "cannot read %s\n", path);
    return -1;
  }
  fclose(f);
  size_t pos = 0, n = (size_t)size;
  const unsigned char* raw = NULL;
  size_t raw_len = 0;
  /* Packed repeated fields collected as (pointer, length, field). */
  const unsigned char* packed = NULL;
  size_t packed_len = 0;
  int packed_field = 0;
  while (pos < n) {
    uint64_t key, v;
    if (varint(buf, n, &pos, &key)) goto bad;
    int field = (int)(key >> 3), wire = (int)(key & 7);
    if (wire == 0) {
      if (varint(buf, n, &pos, &v)) goto bad;
      if (field == 1 && t->rank < 16) t->dims[t->rank++] = (int64_t)v;
      else if (field == 2) t->data_type = (int32_t)v;
    } else if (wire == 2) {
      if (varint(buf, n, &pos, &v) || v > n - pos) goto bad;
      const unsigned char* p = buf + pos;
      if (field == 8) {
        size_t len = v < sizeof t->name - 1 ? (size_t)v : sizeof t->name - 1;
        memcpy(t->name, p, len);
        t->name[len] = 0;
      } else if (field == 9) {
        raw = p;
        raw_len = (size_t)v;
      } else if (field == 1) {
        size_t q = 0;
        while (q < v && t->rank < 16) {
          uint64_t d;
          size_t qq = q;
          if (varint(p, (size_t)v, &qq, &d)) goto bad;
          q = qq;
          t->dims[t->rank++] = (int64_t)d;
        }
      } else if (field == 4 || field == 5 || field == 7 || field == 10) {
        packed = p;
        packed_len = (size_t)v;
        packed_field = field;
      }
      pos += (size_t)v;
    } else if (wire == 5) {
      pos += 4;
    } else if (wire == 1) {
      pos += 8;
    } else {
      goto bad;
    }
  }
  size_t es = tensor_pb_elem_size(t->data_type), count = 1;
  if (es == 0) goto bad;
  for (size_t i = 0; i < t->rank; ++i) count *= (size_t)t->dims[i];
  t->bytes = count * es;
  t->data = aligned_alloc(64, (t->bytes + 63) / 64 * 64 + 64);
  if (!t->data) goto bad;
  if (raw && raw_len == t->bytes) {
    memcpy(t->data, raw, t->bytes);
  } else if (packed && (packed_field == 4 || packed_field == 10) && packed_len == t->bytes) {
    memcpy(t->data, packed, t->bytes); /* float_data / double_data: little-endian fixed width */
  } else if (packed && (packed_field == 5 || packed_field == 7)) {
    size_t q = 0, i = 0;
    while (q < packed_len && i < count) {
      uint64_t d;
      if (varint(packed, packed_len, &q, &d)) goto bad;
      if (es == 8) ((int64_t*)t->data)[i++] = (int64_t)d;
      else if (es == 4) ((int32_t*)t->data)[i++] = (int32_t)d;
      else goto bad;
    }
  } else if (t->bytes != 0) {
    goto bad;
  }
  free(buf);
  return 0;
bad:
  free(buf);
  free(t->data);
  t->data = NULL;
  fprintf(stderr, "%s: not a TensorProto this reader understands\n", path);
  return -1;
}

void tensor_pb_free(tensor_pb* t) {
  free(t->data);
  t->data = NULL;
}
