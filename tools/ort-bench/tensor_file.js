// Reads ONNX TensorProto files (.pb) into onnxruntime-node tensors; shared by ort_bench.js and ort_stream.js.
const ort = require('onnxruntime-node');
const fs = require('fs');

// Minimal TensorProto reader: dims(1), data_type(2), float_data(4), int32_data(5), string_data(6),
// int64_data(7), name(8), raw_data(9), double_data(10).
function readVarint(buf, pos) {
  let result = 0n, shift = 0n;
  for (;;) {
    const b = buf[pos++];
    result |= BigInt(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
    shift += 7n;
  }
  return [result, pos];
}
function readTensor(path) {
  const buf = fs.readFileSync(path);
  let pos = 0, dims = [], type = 0, name = '', raw = null, floats = [], ints64 = [], ints32 = [], doubles = [];
  const strings = [];
  while (pos < buf.length) {
    let key; [key, pos] = readVarint(buf, pos);
    const field = Number(key >> 3n), wire = Number(key & 7n);
    if (wire === 0) {
      let v; [v, pos] = readVarint(buf, pos);
      if (field === 1) dims.push(Number(v)); else if (field === 2) type = Number(v);
      else if (field === 7) ints64.push(BigInt.asIntN(64, v)); else if (field === 5) ints32.push(Number(BigInt.asIntN(32, v)));
    } else if (wire === 2) {
      let len; [len, pos] = readVarint(buf, pos); len = Number(len);
      const bytes = buf.subarray(pos, pos + len); pos += len;
      if (field === 8) name = bytes.toString();
      else if (field === 6) strings.push(bytes.toString('utf8'));
      else if (field === 9) raw = bytes;
      else if (field === 1 || field === 7 || field === 5) {
        let p = 0; while (p < bytes.length) { let v; [v, p] = readVarint(bytes, p);
          if (field === 1) dims.push(Number(v)); else if (field === 7) ints64.push(BigInt.asIntN(64, v)); else ints32.push(Number(v)); }
      } else if (field === 4) { for (let i = 0; i < len; i += 4) floats.push(bytes.readFloatLE(i)); }
      else if (field === 10) { for (let i = 0; i < len; i += 8) doubles.push(bytes.readDoubleLE(i)); }
    } else if (wire === 5) { if (field === 4) floats.push(buf.readFloatLE(pos)); pos += 4; }
    else if (wire === 1) { if (field === 10) doubles.push(buf.readDoubleLE(pos)); pos += 8; }
    else throw new Error('unsupported wire type ' + wire + ' in ' + path);
  }
  const copy = (Ctor, size) => new Ctor(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.length), 0, raw.length / size);
  let t;
  if (type === 1) t = new ort.Tensor('float32', raw ? copy(Float32Array, 4) : Float32Array.from(floats), dims);
  else if (type === 7) t = new ort.Tensor('int64', raw ? copy(BigInt64Array, 8) : BigInt64Array.from(ints64), dims);
  else if (type === 6) t = new ort.Tensor('int32', raw ? copy(Int32Array, 4) : Int32Array.from(ints32), dims);
  else if (type === 11) t = new ort.Tensor('float64', raw ? copy(Float64Array, 8) : Float64Array.from(doubles), dims);
  else if (type === 9) t = new ort.Tensor('bool', raw ? copy(Uint8Array, 1) : Uint8Array.from(ints32), dims);
  else if (type === 2) t = new ort.Tensor('uint8', raw ? copy(Uint8Array, 1) : Uint8Array.from(ints32), dims);
  else if (type === 3) t = new ort.Tensor('int8', raw ? copy(Int8Array, 1) : Int8Array.from(ints32), dims);
  else if (type === 10) t = new ort.Tensor('float16', raw ? copy(Uint16Array, 2) : Uint16Array.from(ints32), dims);
  else if (type === 8) t = new ort.Tensor('string', strings, dims);
  else throw new Error('unsupported data type ' + type + ' in ' + path);
  return [name, t];
}

// TensorProto writer (dims, data_type, name, raw_data) for the types above.
const kTypeIds = { float32: 1, uint8: 2, int8: 3, int32: 6, int64: 7, bool: 9, float16: 10, float64: 11 };
function varint(n) {
  const out = [];
  let v = BigInt(n);
  do { let b = Number(v & 0x7fn); v >>= 7n; if (v) b |= 0x80; out.push(b); } while (v);
  return Buffer.from(out);
}
function writeTensor(path, name, tensor) {
  const type = kTypeIds[tensor.type];
  if (!type) throw new Error('cannot write tensors of type ' + tensor.type);
  const d = tensor.data;
  const raw = Buffer.from(d.buffer, d.byteOffset, d.byteLength);
  const parts = [];
  for (const dim of tensor.dims) parts.push(varint(1 << 3), varint(dim));
  parts.push(varint(2 << 3), varint(type));
  const nb = Buffer.from(name);
  parts.push(varint((8 << 3) | 2), varint(nb.length), nb);
  parts.push(varint((9 << 3) | 2), varint(raw.length), raw);
  fs.writeFileSync(path, Buffer.concat(parts));
}

module.exports = { readTensor, writeTensor };
