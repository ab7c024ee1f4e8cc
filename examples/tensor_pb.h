/* A minimal reader of ONNX TensorProto files (the test_data_set_N/input_K.pb layout), for the examples:
 * dims, data_type, name, and the data from raw_data or float_data / int32_data / int64_data / double_data.
 * Not a general protobuf parser; enough for the ONNX test-data files. C99. */
#ifndef CLUSTERJIT_EXAMPLES_TENSOR_PB_H_
#define CLUSTERJIT_EXAMPLES_TENSOR_PB_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tensor_pb {
  char name[256];
  int32_t data_type; /* ONNX TensorProto.DataType (= cjit_dtype) */
  int64_t dims[16];
  size_t rank;
  void* data; /* malloc'ed, 64-byte aligned */
  size_t bytes;
} tensor_pb;

/* Reads `path`; returns 0 on success (free with tensor_pb_free), -1 with a message on stderr otherwise. */
int tensor_pb_read(const char* path, tensor_pb* out);
void tensor_pb_free(tensor_pb* t);
/* Bytes per element of an ONNX data type (0 when unsupported). */
size_t tensor_pb_elem_size(int32_t data_type);

#ifdef __cplusplus
}
#endif

#endif
