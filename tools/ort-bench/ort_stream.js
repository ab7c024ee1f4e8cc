// ONNX Runtime over a stream of data sets, the counterpart of `cjit bench --stream DIR`: creates one
// session for DIR/model.onnx, runs every DIR/test_data_set_K once in order (K ascending), and prints one
// JSON line with the session-creation time, each run's time and the total (ms). Files are read before the
// clock starts, as cjit does.
// usage: node ort_stream.js DIR [--threads N] [--opt all|disabled] [--passes N]
const ort = require('onnxruntime-node');
const fs = require('fs');
const path = require('path');
const { readTensor } = require('./tensor_file');

async function main() {
  const args = process.argv.slice(2);
  const opt = { threads: 1, opt: 'all', passes: 1 };
  const dirs = [];
  for (let i = 0; i < args.length; ++i) {
    if (args[i].startsWith('--')) { opt[args[i].slice(2)] = isNaN(args[i + 1]) ? args[i + 1] : Number(args[i + 1]); ++i; }
    else dirs.push(args[i]);
  }
  const dir = dirs[0];
  const sets = fs.readdirSync(dir).filter((d) => /^test_data_set_\d+$/.test(d))
    .sort((a, b) => Number(a.split('_').pop()) - Number(b.split('_').pop()));
  const data = sets.map((s) => {
    const files = fs.readdirSync(path.join(dir, s)).filter((f) => /^input_\d+\.pb$/.test(f))
      .sort((a, b) => Number(a.match(/\d+/)[0]) - Number(b.match(/\d+/)[0]));
    return files.map((f) => readTensor(path.join(dir, s, f)));
  });
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(path.join(dir, 'model.onnx'), {
    graphOptimizationLevel: opt.opt, intraOpNumThreads: opt.threads, interOpNumThreads: 1, executionMode: 'sequential',
  });
  const load_ms = Number(process.hrtime.bigint() - t0) / 1e6;
  const run_ms = [];
  for (let p = 0; p < opt.passes; ++p) {
    for (const inputs of data) {
      const feeds = {};
      inputs.forEach(([name, t], k) => { feeds[name || session.inputNames[k]] = t; });
      const r0 = process.hrtime.bigint();
      await session.run(feeds);
      run_ms.push(Number(process.hrtime.bigint() - r0) / 1e6);
    }
  }
  const runs = run_ms.reduce((a, b) => a + b, 0);
  console.log(JSON.stringify({ dir, threads: opt.threads, opt: opt.opt, load_ms, runs_ms: runs, total_ms: load_ms + runs, run_ms }));
}
main().catch((e) => { console.error(e); process.exit(1); });
