// serve_peer.mjs - the benchmark's peer for `dtrain serve`: the same exported model.onnx in
// ONNX Runtime (onnxruntime-node, CPU, default session options) behind Node's http server,
// answering TF Serving's REST predict the way a user would write it: one process, parse the
// JSON, build one Float32 tensor of the batch, run, reply.
//
//   node bench/serve_peer.mjs --model JOB_DIR/export/<version>/model.onnx --name NAME \
//        --port PORT [--host 127.0.0.1]
//
//   POST /v1/models/NAME[/versions/N]:predict  {"instances": [sample, ...]}
//        -> {"predictions": [[p0, ..., p9], ...]}  (each sample nested lists of one shape,
//           e.g. 28 x 28 x 1; the tensor is [n, 28, 28, 1])
//   GET  /v1/models/NAME[/versions/N]  -> a model_version_status, AVAILABLE (for readiness)
//
// Errors are {"error": "..."}: 400 for a bad body, 404 for another path or model. Prints
// "serve_peer: REST API on http://HOST:PORT" once listening. onnxruntime-node is the one
// installed under tests/js/node_modules (scripts/setup.sh).
import { createRequire } from "node:module";
import http from "node:http";

const require = createRequire(new URL("../tests/js/package.json", import.meta.url));
const ort = require("onnxruntime-node");

function usage(msg) {
    process.stderr.write(`serve_peer: ${msg}\nusage: node bench/serve_peer.mjs --model MODEL.onnx ` +
        `--name NAME --port PORT [--host 127.0.0.1]\n`);
    process.exit(2);
}

const opt = { host: "127.0.0.1" };
const args = process.argv.slice(2);
for (let i = 0; i < args.length; i++) {
    const m = /^--([a-z_]+)(?:=(.*))?$/.exec(args[i]);
    if (!m) usage(`unexpected argument ${args[i]}`);
    if (m[2] !== undefined) opt[m[1]] = m[2];
    else if (i + 1 < args.length) opt[m[1]] = args[++i];
    else usage(`--${m[1]} needs a value`);
}
if (!opt.model || !opt.name || !opt.port) usage("--model, --name and --port are required");

const session = await ort.InferenceSession.create(opt.model);
const inputName = session.inputNames[0];
const outputName = session.outputNames[0];
const MAX_BODY = 64 << 20;

// The shape of one sample (nested lists), from its first elements.
function shapeOf(v) {
    const dims = [];
    while (Array.isArray(v)) {
        dims.push(v.length);
        v = v[0];
    }
    return dims;
}

// Copy sample v (nested lists of the given shape) into out from offset; returns the new offset.
function fill(v, dims, d, out, off) {
    if (!Array.isArray(v) || v.length !== dims[d]) throw new Error("instances are not all of one shape");
    if (d === dims.length - 1) {
        for (let i = 0; i < v.length; i++) {
            if (typeof v[i] !== "number") throw new Error("an instance value is not of expected type: float");
            out[off++] = v[i];
        }
        return off;
    }
    for (let i = 0; i < v.length; i++) off = fill(v[i], dims, d + 1, out, off);
    return off;
}

function reply(res, code, obj) {
    const body = JSON.stringify(obj);
    res.writeHead(code, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) });
    res.end(body);
}

const route = /^\/v1\/models\/([^/:]+)(?:\/versions\/(\d+))?(:predict)?$/i;

async function predict(req, res, text) {
    let body;
    try {
        body = JSON.parse(text);
    } catch (e) {
        return reply(res, 400, { error: `JSON Parse error: ${e.message}` });
    }
    const inst = body && body.instances;
    if (!Array.isArray(inst) || inst.length === 0)
        return reply(res, 400, { error: "Missing 'inputs' or 'instances' key" });
    const dims = shapeOf(inst[0]);
    const per = dims.reduce((a, b) => a * b, 1);
    const data = new Float32Array(inst.length * per);
    try {
        let off = 0;
        for (const s of inst) off = fill(s, dims, 0, data, off);
    } catch (e) {
        return reply(res, 400, { error: e.message });
    }
    let out;
    try {
        const r = await session.run({ [inputName]: new ort.Tensor("float32", data, [inst.length, ...dims]) });
        out = r[outputName];
    } catch (e) {
        return reply(res, 400, { error: String(e.message || e) });
    }
    const k = out.dims[1];
    const predictions = new Array(inst.length);
    for (let i = 0; i < inst.length; i++) predictions[i] = Array.from(out.data.subarray(i * k, (i + 1) * k));
    reply(res, 200, { predictions });
}

const server = http.createServer((req, res) => {
    const m = route.exec(req.url);
    if (!m || decodeURIComponent(m[1]) !== opt.name)
        return reply(res, 404, { error: `Servable not found for request: ${req.url}` });
    if (req.method === "GET" && !m[3])
        return reply(res, 200, { model_version_status: [{ version: m[2] || "1", state: "AVAILABLE",
            status: { error_code: "OK", error_message: "" } }] });
    if (req.method !== "POST" || !m[3]) return reply(res, 405, { error: "Method not allowed" });
    const chunks = [];
    let len = 0;
    req.on("data", (c) => {
        len += c.length;
        if (len > MAX_BODY) {
            reply(res, 413, { error: "request body too large" });
            req.destroy();
        } else {
            chunks.push(c);
        }
    });
    req.on("end", () => {
        if (len <= MAX_BODY) predict(req, res, Buffer.concat(chunks).toString("utf8"));
    });
});
server.keepAliveTimeout = 60000;
server.listen(Number(opt.port), opt.host, () => {
    const a = server.address();
    process.stdout.write(`serve_peer: REST API on http://${opt.host}:${a.port}\n`);
});
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => server.close(() => process.exit(0)));
