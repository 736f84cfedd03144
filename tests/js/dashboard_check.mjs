// dashboard_check.mjs - load a running job's dashboard in headless Chromium (Debian's, driven
// by playwright-core) and check what it shows against the job's status API.
//
//   node tests/js/dashboard_check.mjs URL_WITH_TOKEN STATUS_URL TOKEN SCREENSHOT.png LOG_LINE
//
// Prints "ok   ..." / "FAIL: ..." lines (tests/lib.sh's style); exit 1 when a check failed.
import { chromium } from "playwright-core";

const [url, statusUrl, token, shot, logLine] = process.argv.slice(2);
let failed = 0;
const ok = (m) => console.log("ok   " + m);
const fail = (m) => { console.log("FAIL: " + m); failed++; };

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/lib/chromium/chromium",
  args: ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1600 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  await page.goto(url);

  // the token left the address bar
  (new URL(page.url())).hash === "" ? ok("the token is taken out of the address bar") :
    fail("the address still holds the token: " + page.url());

  // the replica table shows what the status API says
  await page.waitForSelector("#replicas tbody tr", { timeout: 20000 });
  const status = await (await fetch(statusUrl, { headers: { Authorization: "Bearer " + token } })).json();
  await page.waitForFunction((n) => document.querySelectorAll("#replicas tbody tr").length === n,
    status.replicas.length, { timeout: 20000 });
  const rows = await page.$$eval("#replicas tbody tr", (trs) => trs.map((tr) =>
    ({ name: tr.dataset.replica, state: tr.dataset.state, cells: [...tr.cells].map((c) => c.textContent) })));
  const want = status.replicas.map((r) => r.name + ":" + r.state).join(",");
  const got = rows.map((r) => r.name + ":" + r.state).join(",");
  got === want ? ok("replica table = status API (" + got + ")") : fail("replica table " + got + " != " + want);
  const phase = await page.textContent("#phase");
  phase === status.phase ? ok("phase " + phase) : fail("phase " + phase + " != " + status.phase);

  // a chart with points: the trainers' loss and the evaluator's accuracy
  await page.waitForFunction(() => {
    const c = window.dtrain && window.dtrain.charts["loss-chart"];
    return c && c.data.datasets.some((d) => d.data.length >= 2);
  }, null, { timeout: 30000 }).then(() => ok("the loss chart has points"), () => fail("the loss chart has no points"));
  const pts = await page.evaluate(() => {
    const c = window.dtrain.charts["loss-chart"], e = window.dtrain.charts["eval-chart"];
    return { loss: c.data.datasets.map((d) => d.label + ":" + d.data.length),
             evalPoints: e ? e.data.datasets.reduce((n, d) => n + d.data.length, 0) : 0 };
  });
  console.log("     loss series " + pts.loss.join(", ") + "; eval points " + pts.evalPoints);
  pts.evalPoints >= 1 ? ok("the eval chart has points") : fail("the eval chart has no points");

  // a log line of the replica picked
  await page.selectOption("#log-replica", "worker-0");
  await page.waitForFunction((line) => document.getElementById("log").textContent.includes(line),
    logLine, { timeout: 20000 }).then(() => ok("worker-0's log shows '" + logLine + "'"),
    async () => fail("the log pane lacks '" + logLine + "': " + (await page.textContent("#log")).slice(-300)));

  // the time line and the data
  await page.waitForSelector("#events li[data-ev='launch']", { timeout: 20000 })
    .then(() => ok("the events time line shows launches"), () => fail("no launch event in the time line"));
  const ds = await page.$$eval("#datasets [data-dataset]", (d) => d.map((x) => x.textContent));
  ds.length ? ok("shard progress: " + ds[0].slice(0, 80)) : fail("no dataset shown");
  const ev = await page.textContent("#events");
  ev.includes(token) ? fail("the token appears in the page") : ok("the token is nowhere in the page");

  await page.screenshot({ path: shot, fullPage: true });
  ok("screenshot " + shot);
  errors.length ? fail("page errors: " + errors.join(" | ")) : ok("no script errors");

  // another origin gets no way in: no CORS headers on the API
  const r = await fetch(statusUrl, { headers: { Authorization: "Bearer " + token, Origin: "http://evil.example" } });
  r.headers.get("access-control-allow-origin") === null ? ok("no Access-Control-Allow-Origin for other origins") :
    fail("the API allows origin " + r.headers.get("access-control-allow-origin"));
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
