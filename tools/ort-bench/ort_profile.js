// ONNX Runtime's own per-node profile of one model, for side-by-side comparisons with `cjit bench --profile`
// or a cjit trace (--trace_to): runs MODEL with the given inputs ITERATIONS times (graph optimizations all,
// sequential execution) with ORT's profiler on, then prints, from the profile's kernel events, the median
// time of every node (ms, in execution order, with its op and input / output shapes) and the total per op
// type. ORT's node names are its fused ones (e.g. relu_16_nchwc); match nodes by their shapes.
// usage: node ort_profile.js MODEL INPUT.pb... [--threads N] [--iterations N]
const ort = require('onnxruntime-node');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { readTensor } = require('./tensor_file');

async function main() {
  const args = process.argv.slice(2);
  const opt = { threads: 1, iterations: 20 };
  const files = [];
  for (let i = 0; i < args.length; ++i) {
    if (args[i].startsWith('--')) { opt[args[i].slice(2)] = Number(args[i + 1]); ++i; } else files.push(args[i]);
  }
  const [model, ...inputs] = files;
  const prefix = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'ortprof-')), 'profile');
  const session = await ort.InferenceSession.create(model, {
    graphOptimizationLevel: 'all', intraOpNumThreads: opt.threads, interOpNumThreads: 1, executionMode: 'sequential',
    enableProfiling: true, profileFilePrefix: prefix,
  });
  const feeds = {};
  inputs.forEach((f, k) => { const [name, t] = readTensor(f); feeds[name || session.inputNames[k]] = t; });
  for (let i = 0; i < opt.iterations; ++i) await session.run(feeds);
  session.endProfiling();
  const dir = path.dirname(prefix);
  const file = fs.readdirSync(dir).map((f) => path.join(dir, f)).find((f) => f.endsWith('.json'));
  const events = JSON.parse(fs.readFileSync(file, 'utf8'));
  const median = (v) => { const s = [...v].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
  const nodes = new Map();
  for (const e of events) {
    if (e.cat !== 'Node' || !e.name.endsWith('_kernel_time')) continue;
    const name = e.name.slice(0, -'_kernel_time'.length);
    if (!nodes.has(name)) nodes.set(name, { op: e.args.op_name, shapes: e.args, times: [] });
    nodes.get(name).times.push(e.dur / 1000);
  }
  const perType = new Map();
  let total = 0;
  for (const [name, n] of nodes) {
    const ms = median(n.times);
    total += ms;
    perType.set(n.op, (perType.get(n.op) || 0) + ms);
    const shape = (v) => JSON.stringify((v || []).map((t) => Object.values(t)[0]));
    console.log(`${ms.toFixed(3).padStart(9)}  ${n.op.padEnd(20)} ${name.padEnd(28)} ${shape(n.shapes.input_type_shape)} -> ${shape(n.shapes.output_type_shape)}`);
  }
  console.log(`\nper op type (ms, sum of node medians; total ${total.toFixed(3)}):`);
  for (const [op, ms] of [...perType].sort((a, b) => b[1] - a[1])) console.log(`${ms.toFixed(3).padStart(9)}  ${op}`);
  fs.rmSync(dir, { recursive: true, force: true });
}
main().catch((e) => { console.error(e); process.exit(1); });
