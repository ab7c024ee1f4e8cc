// Writes ONNX Runtime's outputs for a test-data directory's inputs: MODEL_DIR/test_data_set_0/input_*.pb ->
// output_K.pb (graph optimizations disabled, 1 thread), the reference `cjit check` compares with.
// usage: node ort_outputs.js MODEL_DIR
const ort = require('onnxruntime-node');
const fs = require('fs');
const path = require('path');
const { readTensor, writeTensor } = require('./tensor_file');

async function main() {
  const dir = process.argv[2];
  const set = path.join(dir, 'test_data_set_0');
  const session = await ort.InferenceSession.create(path.join(dir, 'model.onnx'), {
    graphOptimizationLevel: 'disabled', intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential',
  });
  const feeds = {};
  fs.readdirSync(set).filter((f) => /^input_\d+\.pb$/.test(f)).sort().forEach((f, k) => {
    const [name, t] = readTensor(path.join(set, f));
    feeds[name || session.inputNames[k]] = t;
  });
  const out = await session.run(feeds);
  session.outputNames.forEach((n, k) => writeTensor(path.join(set, `output_${k}.pb`), n, out[n]));
}
main().catch((e) => { console.error(e); process.exit(1); });
