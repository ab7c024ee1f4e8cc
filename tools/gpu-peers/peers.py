#!/usr/bin/env python3
"""clusterjit beside PyTorch eager and torch.compile on one GPU, one process (docs/gpu-validation.md).

Runs on the lent GPU machine (its python3 has torch, torchvision, transformers, onnx); clusterjit runs as the
`cjit` binary of tools/gpu-bundle.sh, in a subprocess whose environment comes from `gpu-validate.sh env`
(our bundled libraries never enter this Python process). For each model of models.py it:
  1. exports the float32 model with torch.onnx.export (opset 18, dynamic batch / sequence axes);
  2. per (batch, precision) cell, in the order of --cells (work is skipped, and said so, once --deadline-s is
     near, so the most important cells come first):
       torch eager            the reference: float32 with TF32 off, outputs kept for every check;
       torch.compile MODE     for each --modes entry (fresh Dynamo state, dynamic=False, cold Inductor cache
                              on first use: the first call's time is the compile time);
       clusterjit             `cjit run` of the ONNX model with the cell's inputs (--device=cuda, CUDA graphs
                              on), a fresh --persistent_cache_dir: first-run time (compile + autotune), steady
                              median, GPU memory peak, placement; outputs compared with the reference;
  3. with --warm-start: a second process of each on its filled cache (Inductor's FX graph / Triton caches vs
     clusterjit's persistent cache), time to the first result.
Precisions: fp32 (TF32 off on both sides), tf32 (torch allow_tf32 for matmul and cuDNN; cjit
--matmul_precision=high --conv_precision=high), bf16 (torch.autocast(bfloat16) around the float32 model; cjit
--auto_mixed_precision=bfloat16). Latency is host wall clock per call, median over --iters runs after warm-up:
  dev   torch with inputs already on the GPU and outputs left there (then synchronized);
  host  inputs from numpy and outputs back to numpy, as a Session::Run (and ORT's session.run) does — the
        comparable figure for cjit, which always takes host tensors.
Outputs agree when ||out - ref|| / ||ref|| (float64) is within 1e-4 (fp32), 1e-2 (tf32), 5e-2 (bf16).
Writes OUT/results.jsonl (one object per measurement, as it goes), OUT/table.md, and with --strip
OUT/stripped_models.tar.gz (the exported graphs with large initializers replaced by their statistics, for
reproducing placement on a machine without the GPU: tools/gpu-peers/restore.py).
"""
import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time

import numpy as np

START = time.time()
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

TOL = {"fp32": 1e-4, "tf32": 1e-2, "bf16": 5e-2}
CJIT_PRECISION_FLAGS = {"fp32": "", "tf32": "--matmul_precision=high --conv_precision=high",
                        "bf16": "--auto_mixed_precision=bfloat16"}


def log(*a):
    print(f"[{time.time() - START:7.1f}s]", *a, flush=True)


class Budget:
    def __init__(self, deadline_s):
        self.deadline = START + deadline_s

    def left(self):
        return self.deadline - time.time()

    def allows(self, seconds, what):
        if self.left() >= seconds:
            return True
        log(f"SKIPPED (deadline: {self.left():.0f} s left, ~{seconds} s needed): {what}")
        return False


class Results:
    def __init__(self, out):
        self.path = os.path.join(out, "results.jsonl")
        self.rows = []

    def add(self, **row):
        row["t"] = round(time.time() - START, 1)
        self.rows.append(row)
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
        brief = {k: v for k, v in row.items() if k not in ("placement", "stderr", "ops")}
        log("RESULT", json.dumps(brief))


def rel_l2(out, ref):
    out = np.asarray(out, np.float64)
    ref = np.asarray(ref, np.float64)
    if out.shape != ref.shape:
        return float("inf")
    if not np.all(np.isfinite(out)):
        return float("inf")
    den = np.linalg.norm(ref)
    return float(np.linalg.norm(out - ref) / (den if den > 0 else 1.0))


def worst_err(outs, refs):
    return max(rel_l2(o, r) for o, r in zip(outs, refs))


# ----------------------------------------------------------------------------------------------------------
# torch side


def set_precision(torch, precision):
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


def make_call(torch, model, precision):
    if precision == "bf16":
        def call(*args):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return model(*args)
    else:
        def call(*args):
            return model(*args)
    return call


def as_tuple(o):
    return tuple(o) if isinstance(o, (tuple, list)) else (o,)


def time_torch(torch, fn, feeds, iters, warmup, cudagraphs):
    """(dev median ms, host median ms, host outputs as float32 numpy)."""
    names = list(feeds)
    dev = [torch.from_numpy(feeds[n]).cuda() for n in names]

    def step(args):
        if cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
        return as_tuple(fn(*args))

    with torch.no_grad():
        for _ in range(warmup):
            out = step(dev)
        torch.cuda.synchronize()
        ts = []
        for _ in range(iters):
            t0 = time.perf_counter()
            out = step(dev)
            torch.cuda.synchronize()
            ts.append((time.perf_counter() - t0) * 1e3)
        del out
        th = []
        host_out = None
        for _ in range(iters):
            t0 = time.perf_counter()
            args = [torch.from_numpy(feeds[n]).cuda() for n in names]
            host_out = [o.float().cpu().numpy() for o in step(args)]
            th.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(ts)), float(np.median(th)), host_out


def torch_eager(torch, res, name, model, feeds, batch, precision, iters, warmup, refs):
    """Eager torch for one cell (the reference when refs is None); returns its outputs."""
    set_precision(torch, precision)
    call = make_call(torch, model, precision)
    torch.cuda.reset_peak_memory_stats()
    med, med_host, outs = time_torch(torch, call, feeds, iters, warmup, False)
    peak = torch.cuda.max_memory_allocated() / 2**20
    err = worst_err(outs, refs) if refs is not None else 0.0
    res.add(model=name, batch=batch, precision=precision, runner="torch-eager", median_ms=med, host_median_ms=med_host,
            peak_mib=peak, err=err, ok=err <= TOL[precision])
    return outs


def torch_compiled(torch, res, budget, name, model, feeds, batch, precision, modes, iters, warmup, refs):
    """torch.compile in each mode for one cell, from a fresh Dynamo state."""
    set_precision(torch, precision)
    call = make_call(torch, model, precision)
    for mode in modes:
        if not budget.allows(90 if mode != "max-autotune" else 240, f"{name} b{batch} {precision} torch.compile {mode}"):
            continue
        try:
            torch._dynamo.reset()
            torch.cuda.reset_peak_memory_stats()
            kw = {"dynamic": False}
            if mode != "default":
                kw["mode"] = mode
            compiled = torch.compile(call, **kw)
            args = [torch.from_numpy(feeds[n]).cuda() for n in feeds]
            cg = mode in ("reduce-overhead", "max-autotune")
            t0 = time.perf_counter()
            with torch.no_grad():
                if cg:
                    torch.compiler.cudagraph_mark_step_begin()
                o = compiled(*args)
                torch.cuda.synchronize()
            first = (time.perf_counter() - t0) * 1e3
            del o
            cmed, cmed_host, couts = time_torch(torch, compiled, feeds, iters, warmup, cg)
            cpeak = torch.cuda.max_memory_allocated() / 2**20
            cerr = worst_err(couts, refs)
            res.add(model=name, batch=batch, precision=precision, runner=f"torch.compile:{mode}", first_ms=first,
                    median_ms=cmed, host_median_ms=cmed_host, peak_mib=cpeak, err=cerr, ok=cerr <= TOL[precision])
            del compiled
        except Exception as e:  # a compile failure is a result too
            res.add(model=name, batch=batch, precision=precision, runner=f"torch.compile:{mode}", error=repr(e)[:2000])
        torch._dynamo.reset()
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------------------------------------
# export


def export(torch, name, spec, feeds, path):
    """Exports `name`'s float32 model (on the CPU) to `path`; returns how."""
    from models import build
    model = build(name).cpu()
    args = tuple(torch.from_numpy(feeds[n]) for n in feeds)
    tries = [("dynamo", dict(dynamo=True, dynamic_axes=spec.dynamic, external_data=False)),
             ("torchscript", dict(dynamo=False, dynamic_axes=spec.dynamic))]
    errors = []
    for how, kw in tries:
        try:
            with torch.no_grad():
                torch.onnx.export(model, args, path, input_names=list(feeds), output_names=spec.outputs,
                                  opset_version=18, **kw)
            return how, errors
        except Exception as e:
            errors.append(f"{how}: {repr(e)[:1500]}")
            log(f"export {name} with {how} failed: {repr(e)[:300]}")
    raise RuntimeError("; ".join(errors))


def op_histogram(path):
    import onnx
    m = onnx.load(path, load_external_data=False)
    hist = {}
    for n in m.graph.node:
        key = (n.domain + "::" if n.domain else "") + n.op_type
        hist[key] = hist.get(key, 0) + 1
    opsets = {imp.domain or "ai.onnx": imp.version for imp in m.opset_import}
    return hist, opsets


def strip(path, name, tar):
    """Adds `name`.onnx to `tar` with initializers of more than 64 elements emptied; their dims, type and
    (mean, std, min, max) go to `name`.stats.json."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(path)
    stats = {}
    for t in m.graph.initializer:
        n = int(np.prod(t.dims)) if len(t.dims) else 1
        if n <= 64:
            continue
        a = numpy_helper.to_array(t).astype(np.float64)
        stats[t.name] = [list(t.dims), int(t.data_type), float(a.mean()), float(a.std()), float(a.min()), float(a.max())]
        t.ClearField("raw_data")
        t.ClearField("float_data")
        t.ClearField("int64_data")
        t.ClearField("int32_data")
        t.ClearField("double_data")
    for fname, blob in ((f"{name}.onnx", m.SerializeToString()), (f"{name}.stats.json", json.dumps(stats).encode())):
        info = tarfile.TarInfo(fname)
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))


# ----------------------------------------------------------------------------------------------------------
# clusterjit side


def cjit_env(repo):
    """PATH, LD_LIBRARY_PATH and the libdevice directory gpu-validate.sh sets up, for the cjit subprocesses."""
    out = subprocess.run(["bash", os.path.join(repo, "tools/gpu-validate.sh"), "env"], capture_output=True, text=True,
                         cwd=repo)
    env = dict(os.environ)
    cuda_dir = "/usr/local/cuda"
    for line in out.stdout.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            if k in ("PATH", "LD_LIBRARY_PATH"):
                env[k] = v
            if k == "cuda_dir":
                cuda_dir = v
    if out.returncode != 0:
        raise RuntimeError(f"gpu-validate.sh env failed: {out.stdout}{out.stderr}")
    return env, cuda_dir


def write_inputs(feeds, d):
    from onnx import numpy_helper
    os.makedirs(d, exist_ok=True)
    files = []
    for i, (n, a) in enumerate(feeds.items()):
        p = os.path.join(d, f"input_{i}.pb")
        with open(p, "wb") as f:
            f.write(numpy_helper.from_array(a, n).SerializeToString())
        files.append((n, p))
    return files


def read_outputs(d, count):
    from onnx import numpy_helper, TensorProto
    outs = []
    for k in range(count):
        t = TensorProto()
        with open(os.path.join(d, f"output_{k}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        outs.append(numpy_helper.to_array(t).astype(np.float32))
    return outs


def run_cjit(env, cuda_dir, device, model_path, files, flags, iters, warmup, work, tag, timeout):
    out_dir = os.path.join(work, f"out_{tag}")
    stats = os.path.join(work, f"stats_{tag}.json")
    shutil.rmtree(out_dir, ignore_errors=True)
    cmd = ["cjit", "run", model_path]
    for n, p in files:
        cmd += ["--input", f"{n}={p}"]
    cmd += ["--iterations", str(iters), "--warmup", str(warmup), "--output-dir", out_dir, "--stats-json", stats]
    e = dict(env)
    e["CJIT_FLAGS"] = f"--device={device} --cuda_data_dir={cuda_dir} {flags}"
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}, None
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout)[-3000:], "wall_s": wall}, None
    j = json.load(open(stats))
    peak = None
    for line in j.get("gpu_placement", []):
        if "peak" in line:
            try:
                peak = float(line.split("peak")[1].split("MiB")[0])
            except ValueError:
                pass
    r = {"first_ms": j["latency_ms"]["first"], "median_ms": j["latency_ms"]["median"],
         "host_median_ms": j["latency_ms"]["median"], "p90_ms": j["latency_ms"]["p90"], "wall_s": wall,
         "peak_mib": peak, "placement": j.get("gpu_placement"), "autotune": j.get("autotune"),
         "stderr": p.stderr[-1500:]}
    return r, out_dir


# ----------------------------------------------------------------------------------------------------------


def warm_probe(name, batch, precision, mode):
    """In a fresh process (--warm-probe): time from torch.compile to the first result on a filled cache."""
    import torch
    from models import build, make_inputs
    t_import = time.time() - START
    set_precision(torch, precision)
    model = build(name).cuda()
    call = make_call(torch, model, precision)
    feeds = make_inputs(name, batch)
    args = [torch.from_numpy(feeds[n]).cuda() for n in feeds]
    t0 = time.perf_counter()
    compiled = torch.compile(call, mode=mode, dynamic=False)
    with torch.no_grad():
        torch.compiler.cudagraph_mark_step_begin()
        compiled(*args)
        torch.cuda.synchronize()
    first = (time.perf_counter() - t0) * 1e3
    print(json.dumps({"first_ms": first, "import_s": t_import, "process_s": time.time() - START}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "peers-out"))
    ap.add_argument("--work", default="/tmp/gpu-peers")
    ap.add_argument("--repo", default=os.path.dirname(os.path.dirname(HERE)))
    ap.add_argument("--models", default="resnet50,mobilenetv3,vit,bert,gpt2,unet")
    ap.add_argument("--cells", default="1:fp32,1:bf16,1:tf32,32:fp32,32:bf16,32:tf32",
                    help="batch:precision, in priority order")
    ap.add_argument("--modes", default="reduce-overhead", help="torch.compile modes (default, reduce-overhead, "
                    "max-autotune, max-autotune-no-cudagraphs); empty for none")
    ap.add_argument("--runners", default="torch,cjit")
    ap.add_argument("--cjit-flags", default="", help="extra CJIT_FLAGS for every cjit run")
    ap.add_argument("--cjit-device", default="cuda", help="cjit's --device (cpu: a dry run without a GPU)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--deadline-s", type=float, default=480)
    ap.add_argument("--strip", action="store_true", help="write OUT/stripped_models.tar.gz")
    ap.add_argument("--warm-start", action="store_true")
    ap.add_argument("--warm-probe", nargs=4, metavar=("MODEL", "BATCH", "PRECISION", "MODE"))
    a = ap.parse_args()
    if a.warm_probe:
        warm_probe(a.warm_probe[0], int(a.warm_probe[1]), a.warm_probe[2], a.warm_probe[3])
        return
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.work, exist_ok=True)
    inductor_cache = os.path.join(a.work, "inductor-cache")
    shutil.rmtree(inductor_cache, ignore_errors=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache
    os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(inductor_cache, "triton"))
    import torch
    from models import MODELS, build, make_inputs
    budget = Budget(a.deadline_s)
    res = Results(a.out)
    runners = set(filter(None, a.runners.split(",")))
    modes = [m for m in a.modes.split(",") if m]
    names = [m for m in a.models.split(",") if m]
    log(f"torch {torch.__version__}, GPU {torch.cuda.get_device_name()}, "
        f"{torch.cuda.get_device_properties(0).multi_processor_count} SMs")
    env = cuda_dir = None
    if "cjit" in runners:
        env, cuda_dir = cjit_env(a.repo)
        v = subprocess.run(["cjit", "flags"], env=env, capture_output=True, text=True)
        log("cjit starts" if v.returncode == 0 else f"cjit does not start: {v.stderr[-500:]}")
    # 1. exports (float32, on the CPU)
    paths = {}
    tar = tarfile.open(os.path.join(a.out, "stripped_models.tar.gz"), "w:gz") if a.strip else None
    for name in names:
        path = os.path.join(a.work, f"{name}.onnx")
        if not budget.allows(60, f"export {name}"):
            continue
        t0 = time.perf_counter()
        try:
            how, errs = export(torch, name, MODELS[name], make_inputs(name, 2), path)
            hist, opsets = op_histogram(path)
            paths[name] = path
            res.add(model=name, runner="export", how=how, export_s=time.perf_counter() - t0, opsets=opsets, ops=hist,
                    mib=os.path.getsize(path) / 2**20, errors=errs)
            if tar is not None:
                strip(path, name, tar)
        except Exception as e:
            res.add(model=name, runner="export", error=repr(e)[:3000])
    if tar is not None:
        tar.close()
    # 2. cells
    torch_models = {}
    refs = {}
    for cell in a.cells.split(","):
        b, precision = cell.split(":")
        batch = int(b)
        for name in names:
            if not budget.allows(30, f"{name} b{batch} {precision}"):
                continue
            feeds = make_inputs(name, batch)
            key = (name, batch)
            iters = a.iters if batch == 1 else max(10, a.iters // 3)
            if name not in torch_models:
                torch_models[name] = build(name).cuda()
            try:
                if key not in refs:  # the float32 reference, TF32 off
                    refs[key] = torch_eager(torch, res, name, torch_models[name], feeds, batch, "fp32", iters,
                                            a.warmup, None)
                if "torch" in runners and precision != "fp32":
                    torch_eager(torch, res, name, torch_models[name], feeds, batch, precision, iters, a.warmup,
                                refs[key])
            except Exception as e:
                res.add(model=name, batch=batch, precision=precision, runner="torch-eager", error=repr(e)[:2000])
            if "cjit" in runners and name in paths:
                files = write_inputs(feeds, os.path.join(a.work, f"in_{name}_{batch}"))
                tag = f"{name}_{batch}_{precision}"
                cache = os.path.join(a.work, f"cache_{tag}")
                shutil.rmtree(cache, ignore_errors=True)
                flags = f"{CJIT_PRECISION_FLAGS[precision]} --persistent_cache_dir={cache} {a.cjit_flags}"
                r, out_dir = run_cjit(env, cuda_dir, a.cjit_device, paths[name], files, flags, iters, a.warmup,
                                      a.work, tag, max(30, min(240, budget.left() - 5)))
                if out_dir is not None and key in refs:
                    try:
                        r["err"] = worst_err(read_outputs(out_dir, len(refs[key])), refs[key])
                        r["ok"] = r["err"] <= TOL[precision]
                    except Exception as e:
                        r["err"], r["ok"], r["compare_error"] = float("inf"), False, repr(e)[:500]
                res.add(model=name, batch=batch, precision=precision, runner="cjit", **r)
                if a.warm_start and out_dir is not None and budget.allows(30, f"{tag} cjit warm start"):
                    w, _ = run_cjit(env, cuda_dir, a.cjit_device, paths[name], files, flags, 5, 1, a.work,
                                    tag + "_warm", 120)
                    res.add(model=name, batch=batch, precision=precision, runner="cjit-warm", **w)
            if "torch" in runners and modes and key in refs:
                torch_compiled(torch, res, budget, name, torch_models[name], feeds, batch, precision, modes, iters,
                               a.warmup, refs[key])
    # 3. torch warm starts (a second process on the filled Inductor cache)
    if a.warm_start and "torch" in runners:
        for name in names:
            for mode in modes:
                if not budget.allows(60, f"{name} torch warm start {mode}"):
                    continue
                p = subprocess.run([sys.executable, os.path.abspath(__file__), "--warm-probe", name, "1", "fp32", mode],
                                   capture_output=True, text=True, timeout=max(30, budget.left() - 5))
                try:
                    w = json.loads(p.stdout.strip().splitlines()[-1])
                    res.add(model=name, batch=1, precision="fp32", runner=f"torch-warm:{mode}", **w)
                except Exception:
                    res.add(model=name, batch=1, precision="fp32", runner=f"torch-warm:{mode}",
                            error=(p.stderr or p.stdout)[-1500:])
    table(res.rows, os.path.join(a.out, "table.md"))
    log("done")


def table(rows, path):
    """Markdown: one line per (model, batch, precision), the host-I/O median of each runner, its first-run
    time, errors; then the warm starts."""
    cells = {}
    for r in rows:
        if "batch" in r and "precision" in r:
            cells.setdefault((r["model"], r["batch"], r["precision"]), []).append(r)
    lines = ["| model | batch | precision | runner | median ms (dev / host I/O) | first ms | peak MiB | rel. error | ok |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (m, b, p), rs in cells.items():
        for r in rs:
            if r["runner"].startswith("torch-warm"):
                continue
            if "error" in r:
                lines.append(f"| {m} | {b} | {p} | {r['runner']} | error: {r['error'][:120]!r} | | | | no |")
                continue
            med = r.get("median_ms")
            host = r.get("host_median_ms")
            dev = "—" if r["runner"].startswith("cjit") else f"{med:.3f}"
            lines.append(f"| {m} | {b} | {p} | {r['runner']} | {dev} / {host:.3f} | {r.get('first_ms', 0):.0f} | "
                         f"{r.get('peak_mib') or 0:.0f} | {r.get('err', float('nan')):.2e} | {r.get('ok', '')} |")
    lines += ["", "| model | warm start: runner | first result ms | process s |", "|---|---|---|---|"]
    for r in rows:
        if r.get("runner", "").startswith(("torch-warm", "cjit-warm")) and "error" not in r:
            lines.append(f"| {r['model']} b{r['batch']} {r['precision']} | {r['runner']} | {r['first_ms']:.0f} | "
                         f"{r.get('process_s', r.get('wall_s', 0)):.1f} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
