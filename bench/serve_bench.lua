-- serve_bench.lua - wrk script for bench/serve_bench.sh: every request is a POST of the JSON
-- body in $BODY_FILE (TF Serving's {"instances": [...]}, one Fashion-MNIST test image); at the
-- end one machine-readable line:
--   RESULT <requests/s> <p50 ms> <p99 ms> <requests> <socket errors> <non-2xx/3xx responses>
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local path = os.getenv("BODY_FILE")
local f = assert(io.open(path, "rb"), "BODY_FILE: cannot open " .. tostring(path))
wrk.body = f:read("*a")
f:close()

function done(summary, latency, requests)
    local e = summary.errors
    io.write(string.format("RESULT %.1f %.3f %.3f %d %d %d\n",
        summary.requests / (summary.duration / 1e6),
        latency:percentile(50) / 1000, latency:percentile(99) / 1000,
        summary.requests, e.connect + e.read + e.write + e.timeout, e.status))
end
