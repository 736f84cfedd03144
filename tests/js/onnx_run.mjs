// onnx_run.mjs - run an ONNX model in ONNX Runtime (onnxruntime-node, CPU) on raw float32
// inputs, for tests/onnx_export_test.sh.
//
//   node onnx_run.mjs MODEL.onnx --input X.f32 --shape N,28,28,1
//                    [--out Y.f32] [--expect Y.f32 [--atol 1e-4]]
//
// X.f32 holds the model's one input as little-endian float32, row-major in the given shape.
// Prints one JSON line: the model's input and output names, the output's dims and, with
// --expect (another little-endian float32 file of the output's size), the comparison:
// max_abs_diff over all values and argmax_mismatches over the rows (the first dimension is
// the batch). The first and the last sample are also run alone (a batch of 1) and must give
// the same rows as in the batch. --out writes the output as little-endian float32.
//
// Exit status: 0 ran (and, with --expect, max_abs_diff <= atol and every argmax agrees),
// 1 a mismatch, 2 bad arguments or a model ONNX Runtime refuses.
import { readFileSync, writeFileSync } from "node:fs";
import ort from "onnxruntime-node";

function usage(msg) {
    process.stderr.write(`onnx_run: ${msg}\nusage: node onnx_run.mjs MODEL.onnx --input X.f32 ` +
        `--shape N,... [--out Y.f32] [--expect Y.f32 [--atol 1e-4]]\n`);
    process.exit(2);
}

function readF32(path) {
    const b = readFileSync(path);
    if (b.length % 4 !== 0) usage(`${path}: ${b.length} bytes is not a whole number of floats`);
    const dv = new DataView(b.buffer, b.byteOffset, b.length);
    const v = new Float32Array(b.length / 4);
    for (let i = 0; i < v.length; i++) v[i] = dv.getFloat32(4 * i, true);
    return v;
}

function writeF32(path, v) {
    const b = Buffer.alloc(v.length * 4);
    for (let i = 0; i < v.length; i++) b.writeFloatLE(v[i], 4 * i);
    writeFileSync(path, b);
}

function argmax(v, off, k) {
    let best = 0;
    for (let j = 1; j < k; j++) if (v[off + j] > v[off + best]) best = j;
    return best;
}

const args = process.argv.slice(2);
const opt = { atol: 1e-4 };
let model = null;
for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a.startsWith("--")) {
        if (i + 1 >= args.length) usage(`${a} needs a value`);
        opt[a.slice(2)] = args[++i];
    } else if (model === null) {
        model = a;
    } else {
        usage(`unexpected argument ${a}`);
    }
}
if (!model || !opt.input || !opt.shape) usage("MODEL, --input and --shape are required");
const dims = opt.shape.split(",").map(Number);
if (dims.some((d) => !Number.isInteger(d) || d < 1)) usage(`bad --shape ${opt.shape}`);
const atol = Number(opt.atol);

const x = readF32(opt.input);
const rowIn = dims.slice(1).reduce((a, b) => a * b, 1);
if (x.length !== dims[0] * rowIn) usage(`${opt.input}: ${x.length} floats, --shape ${opt.shape} wants ${dims[0] * rowIn}`);

let session;
try {
    session = await ort.InferenceSession.create(model, { executionProviders: ["cpu"] });
} catch (e) {
    process.stderr.write(`onnx_run: ${model}: ONNX Runtime refuses it: ${e.message}\n`);
    process.exit(2);
}
if (session.inputNames.length !== 1 || session.outputNames.length !== 1)
    usage(`${model}: expected one input and one output, got ${session.inputNames} -> ${session.outputNames}`);
const inName = session.inputNames[0], outName = session.outputNames[0];

async function run(data, n) {
    const feeds = { [inName]: new ort.Tensor("float32", data, [n, ...dims.slice(1)]) };
    const r = await session.run(feeds);
    return r[outName];
}

const y = await run(x, dims[0]);
const n = dims[0], k = y.data.length / n;
const report = { input_name: inName, output_name: outName, output_dims: y.dims };

// the dynamic batch dimension: a sample alone gives its row of the batch
let batch1 = 0;
for (const s of new Set([0, n - 1])) {
    const one = await run(x.slice(s * rowIn, (s + 1) * rowIn), 1);
    for (let j = 0; j < k; j++) batch1 = Math.max(batch1, Math.abs(one.data[j] - y.data[s * k + j]));
}
report.batch1_max_abs_diff = batch1;
let ok = batch1 <= atol;

if (opt.out) writeF32(opt.out, y.data);
if (opt.expect) {
    const want = readF32(opt.expect);
    if (want.length !== y.data.length) usage(`${opt.expect}: ${want.length} floats, the model gave ${y.data.length}`);
    let maxDiff = 0, mismatches = 0, nan = false;
    for (let i = 0; i < want.length; i++) {
        const d = Math.abs(want[i] - y.data[i]);
        if (Number.isNaN(d)) nan = true;
        else if (d > maxDiff) maxDiff = d;
    }
    if (nan) maxDiff = "NaN"; // a NaN on either side fails
    for (let r = 0; r < n; r++) if (argmax(want, r * k, k) !== argmax(y.data, r * k, k)) mismatches++;
    Object.assign(report, { rows: n, max_abs_diff: maxDiff, argmax_mismatches: mismatches, atol });
    ok = ok && maxDiff <= atol && mismatches === 0;
}
console.log(JSON.stringify(report));
process.exit(ok ? 0 : 1);
