// Times ONNX Runtime on one model with inputs from ONNX TensorProto files.
// usage: node ort_bench.js MODEL INPUT.pb... [--threads N] [--iterations N] [--warmup N] [--opt disabled|all]
// Prints one JSON line: {"model", "threads", "opt", "median_ms", "min_ms", "p90_ms"}.
const ort = require('onnxruntime-node');

const { readTensor } = require('./tensor_file');

async function main() {
  const args = process.argv.slice(2);
  const opt = { threads: 1, iterations: 40, warmup: 5, opt: 'disabled' };
  const files = [];
  for (let i = 0; i < args.length; ++i) {
    if (args[i].startsWith('--')) { opt[args[i].slice(2)] = isNaN(args[i + 1]) ? args[i + 1] : Number(args[i + 1]); ++i; }
    else files.push(args[i]);
  }
  const model = files.shift();
  const session = await ort.InferenceSession.create(model, {
    graphOptimizationLevel: opt.opt, intraOpNumThreads: opt.threads, interOpNumThreads: 1, executionMode: 'sequential',
  });
  const feeds = {};
  files.forEach((f, k) => { const [name, t] = readTensor(f); feeds[name || session.inputNames[k]] = t; });
  for (let i = 0; i < opt.warmup; ++i) await session.run(feeds);
  const times = [];
  for (let i = 0; i < opt.iterations; ++i) {
    const t0 = process.hrtime.bigint(); await session.run(feeds); times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  times.sort((a, b) => a - b);
  const q = (p) => times[Math.min(times.length - 1, Math.ceil(p * times.length) - 1)];
  console.log(JSON.stringify({ model, threads: opt.threads, opt: opt.opt, median_ms: q(0.5), p90_ms: q(0.9), min_ms: times[0] }));
}
main().catch((e) => { console.error(e); process.exit(1); });
