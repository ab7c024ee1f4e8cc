// Makes ONNX test-data directories (test_data_set_K/input_N.pb, output_N.pb) for a model with ONNX
// Runtime as the reference, as ../shared/models has them: deterministic inputs (uniform [-1, 1) from a
// seeded generator, or the given constants), outputs computed by ORT (graph optimizations disabled,
// 1 thread). Used by tools/fetch-models --with-test-data where ../shared is absent.
// usage: node make_test_data.js MODEL_DIR SPEC_JSON
//   SPEC_JSON: [[{"dims":[1,3,48,320],"type":"float32"}, ...inputs of set 0], [...set 1], ...];
//   an input may give "value": N (every element N) instead of random data, or for int64 / int32 "max": N
//   (uniform integers in [0, N): token ids).
const ort = require('onnxruntime-node');
const fs = require('fs');
const path = require('path');

function varint(n) {
  const out = [];
  let v = BigInt.asUintN(64, BigInt(n));
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v) b |= 0x80;
    out.push(b);
  } while (v);
  return Buffer.from(out);
}
function field(num, wire) { return varint((num << 3) | wire); }
function lengthDelimited(num, buf) { return Buffer.concat([field(num, 2), varint(buf.length), buf]); }

const TYPE = { float32: 1, int64: 7, int32: 6, float64: 11 };
function tensorProto(name, t) {
  const parts = [];
  for (const d of t.dims) parts.push(field(1, 0), varint(d));
  parts.push(field(2, 0), varint(TYPE[t.type]));
  parts.push(lengthDelimited(8, Buffer.from(name)));
  const data = Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
  parts.push(lengthDelimited(9, data));
  return Buffer.concat(parts);
}

function mulberry32(seed) {
  return function () {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

async function main() {
  const [dir, specText] = process.argv.slice(2);
  const spec = JSON.parse(specText);
  const session = await ort.InferenceSession.create(path.join(dir, 'model.onnx'), {
    graphOptimizationLevel: 'disabled', intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential',
  });
  for (let k = 0; k < spec.length; ++k) {
    const rng = mulberry32(1234 + k);
    const setDir = path.join(dir, `test_data_set_${k}`);
    fs.mkdirSync(setDir, { recursive: true });
    const feeds = {};
    spec[k].forEach((s, i) => {
      const n = s.dims.reduce((a, b) => a * b, 1);
      let data;
      if (s.type === 'int64' && s.max !== undefined) {
        data = BigInt64Array.from({ length: n }, () => BigInt(Math.floor(rng() * s.max)));
      } else if (s.type === 'int64') data = BigInt64Array.from({ length: n }, () => BigInt(s.value ?? 0));
      else if (s.type === 'int32') {
        data = Int32Array.from({ length: n }, () => (s.max !== undefined ? Math.floor(rng() * s.max) : (s.value ?? 0)));
      }
      else data = Float32Array.from({ length: n }, () => (s.value !== undefined ? s.value : rng() * 2 - 1));
      const name = session.inputNames[i];
      feeds[name] = new ort.Tensor(s.type, data, s.dims);
      fs.writeFileSync(path.join(setDir, `input_${i}.pb`), tensorProto(name, { dims: s.dims, type: s.type, data }));
    });
    const out = await session.run(feeds);
    session.outputNames.forEach((name, i) => {
      const t = out[name];
      fs.writeFileSync(path.join(setDir, `output_${i}.pb`),
                       tensorProto(name, { dims: t.dims, type: t.type, data: t.data }));
    });
  }
  console.log(`${dir}: ${spec.length} data sets`);
}
main().catch((e) => { console.error(e); process.exit(1); });
