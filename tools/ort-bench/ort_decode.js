// ONNX Runtime's side of tools/decode_bench.cc: the same greedy decode loop with a key/value cache
// (input_ids, position_ids, past_* -> logits, present_*), the same seeded initial past, one JSON line with
// the session-creation time, each step's time (ms) and the generated tokens.
// usage: node ort_decode.js MODEL [--steps N] [--past P0] [--threads T]
const ort = require('onnxruntime-node');

async function main() {
  const args = process.argv.slice(2);
  const opt = { steps: 64, past: 8, threads: 1 };
  const model = args[0];
  for (let i = 1; i + 1 < args.length; i += 2) opt[args[i].slice(2)] = Number(args[i + 1]);
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(model, {
    graphOptimizationLevel: 'all', intraOpNumThreads: opt.threads, interOpNumThreads: 1, executionMode: 'sequential',
  });
  const load_ms = Number(process.hrtime.bigint() - t0) / 1e6;
  const names = session.inputNames;
  // The same linear congruential sequence as decode_bench.cc (float32 arithmetic on both sides).
  let state = 12345;
  const next = () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return Math.fround(Math.fround((state >>> 8) / 16777216) - 0.5);
  };
  const feeds = {};
  feeds.input_ids = new ort.Tensor('int64', BigInt64Array.from([1n]), [1, 1]);
  // Past shapes from the model's metadata are not exposed by onnxruntime-node: [1, H, P, D] with H, D
  // given by the environment or the make_gpt.py defaults (4, 64).
  const H = Number(process.env.HEADS || 4), D = Number(process.env.HEAD_DIM || 64);
  for (const n of names.slice(2)) {
    const a = new Float32Array(H * opt.past * D);
    for (let e = 0; e < a.length; ++e) a[e] = next();
    feeds[n] = new ort.Tensor('float32', a, [1, H, opt.past, D]);
  }
  const step_ms = [], tokens = [];
  for (let s = 0; s < opt.steps; ++s) {
    feeds.position_ids = new ort.Tensor('int64', BigInt64Array.from([BigInt(opt.past + s)]), [1, 1]);
    const r0 = process.hrtime.bigint();
    const out = await session.run(feeds);
    step_ms.push(Number(process.hrtime.bigint() - r0) / 1e6);
    const outs = session.outputNames.map((n) => out[n]);
    const logits = outs[0].data;
    let best = 0;
    for (let v = 1; v < logits.length; ++v) if (logits[v] > logits[best]) best = v;
    tokens.push(best);
    feeds.input_ids = new ort.Tensor('int64', BigInt64Array.from([BigInt(best)]), [1, 1]);
    names.slice(2).forEach((n, k) => { feeds[n] = outs[k + 1]; });
  }
  const total_ms = load_ms + step_ms.reduce((a, b) => a + b, 0);
  console.log(JSON.stringify({ model, threads: opt.threads, load_ms, total_ms, step_ms, tokens }));
}
main().catch((e) => { console.error(e); process.exit(1); });
