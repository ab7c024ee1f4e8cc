// What a fresh process pays for N runs of one model in ONNX Runtime: session creation plus N runs.
// usage: node ort_fresh.js MODEL INPUT.pb... [--threads N] [--runs N] [--opt disabled|all]
// Prints one JSON line: {"model", "threads", "runs", "load_ms", "create_ms", "runs_ms", "total_ms"}, where
// total_ms = create_ms + runs_ms (InferenceSession.create, then the N runs; reading the input files between
// them is not counted) and load_ms (loading onnxruntime-node) is reported apart: Node's own start-up and
// load_ms are not in total_ms, which favours ORT. The process measures one cold start: run it once per
// sample.
const t_start = process.hrtime.bigint();
const ort = require('onnxruntime-node');

const { readTensor } = require('./tensor_file');

const ms = (a, b) => Number(b - a) / 1e6;

async function main() {
  const args = process.argv.slice(2);
  const opt = { threads: 1, runs: 10, opt: 'all' };
  const files = [];
  for (let i = 0; i < args.length; ++i) {
    if (args[i].startsWith('--')) { opt[args[i].slice(2)] = isNaN(args[i + 1]) ? args[i + 1] : Number(args[i + 1]); ++i; }
    else files.push(args[i]);
  }
  const model = files.shift();
  const t_create = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(model, {
    graphOptimizationLevel: opt.opt, intraOpNumThreads: opt.threads, interOpNumThreads: 1, executionMode: 'sequential',
  });
  const t_created = process.hrtime.bigint();
  const feeds = {};
  files.forEach((f, k) => { const [name, t] = readTensor(f); feeds[name || session.inputNames[k]] = t; });
  const t_runs = process.hrtime.bigint();
  for (let i = 0; i < opt.runs; ++i) await session.run(feeds);
  const t_end = process.hrtime.bigint();
  console.log(JSON.stringify({
    model, threads: opt.threads, runs: opt.runs, load_ms: ms(t_start, t_create), create_ms: ms(t_create, t_created),
    runs_ms: ms(t_runs, t_end), total_ms: ms(t_create, t_created) + ms(t_runs, t_end),
  }));
}
main().catch((e) => { console.error(e); process.exit(1); });
