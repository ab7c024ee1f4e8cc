// The ONNX Runtime side of the op-level benchmark (tools/op-bench/run.sh): every case of a manifest written
// by tools/op-bench/gen_cases.py through onnxruntime-node (graph optimizations "all", sequential execution,
// --threads intra-op threads), median of --iterations runs after --warmup; with --out-dir, each case's
// outputs are written as DIR/<case>/output_K.pb (cjit-op-bench --ref-dir compares against them).
// usage: node ort_ops.js CASES.json [--threads N] [--iterations N] [--warmup N] [--filter TEXT] [--out-dir DIR]
// Prints one JSON line per case: {"name", "threads", "ort_ms"} or {"name", "error"}.
const ort = require('onnxruntime-node');
const fs = require('fs');
const path = require('path');
const { readTensor, writeTensor } = require('./tensor_file');

async function main() {
  const args = process.argv.slice(2);
  const opt = { threads: 1, iterations: 20, warmup: 4, filter: '', 'out-dir': '' };
  const files = [];
  for (let i = 0; i < args.length; ++i) {
    if (args[i].startsWith('--')) { opt[args[i].slice(2)] = isNaN(args[i + 1]) ? args[i + 1] : Number(args[i + 1]); ++i; }
    else files.push(args[i]);
  }
  const cases = JSON.parse(fs.readFileSync(files[0])).cases;
  for (const c of cases) {
    if (opt.filter && !c.name.includes(opt.filter)) continue;
    try {
      const session = await ort.InferenceSession.create(c.model, {
        graphOptimizationLevel: 'all', intraOpNumThreads: opt.threads, interOpNumThreads: 1, executionMode: 'sequential',
      });
      const feeds = {};
      c.inputs.forEach((f, k) => { const [name, t] = readTensor(f); feeds[name || session.inputNames[k]] = t; });
      let out = null;
      for (let i = 0; i < opt.warmup; ++i) out = await session.run(feeds);
      const times = [];
      for (let i = 0; i < opt.iterations; ++i) {
        const t0 = process.hrtime.bigint(); out = await session.run(feeds); times.push(Number(process.hrtime.bigint() - t0) / 1e6);
      }
      times.sort((a, b) => a - b);
      if (opt['out-dir']) {
        const d = path.join(opt['out-dir'], c.name);
        fs.mkdirSync(d, { recursive: true });
        session.outputNames.forEach((n, k) => writeTensor(path.join(d, `output_${k}.pb`), n, out[n]));
      }
      console.log(JSON.stringify({ name: c.name, threads: opt.threads, ort_ms: times[Math.floor(times.length / 2)] }));
      await session.release();
    } catch (e) {
      console.log(JSON.stringify({ name: c.name, threads: opt.threads, error: String(e.message || e).slice(0, 300) }));
    }
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
