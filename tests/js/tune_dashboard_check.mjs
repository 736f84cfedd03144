// tune_dashboard_check.mjs - a job server's dashboard showing a `dtrain tune` experiment, in
// headless Chromium (Debian's, driven by playwright-core), checked against the server's API:
// the experiments table on the server's page, and the experiment's page: its trials table
// (every trial with state, parameters and objective, the best marked), a chart of the
// objective by epoch with one line a trial and every observation, and one of each trial's
// objective.
//
//   node tests/js/tune_dashboard_check.mjs SERVER_URL TOKEN EXPERIMENT SCREENSHOT.png
//
// Prints "ok   ..." / "FAIL: ..." lines (tests/lib.sh's style); exit 1 when a check failed.
import { chromium } from "playwright-core";

const [serverUrl, token, name, shot] = process.argv.slice(2);
let failed = 0;
const ok = (m) => console.log("ok   " + m);
const fail = (m) => { console.log("FAIL: " + m); failed++; };
const get = async (p) => (await fetch(serverUrl + p, { headers: { Authorization: "Bearer " + token } })).json();

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/lib/chromium/chromium",
  args: ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  const x = await get("/v1/experiments/" + name);

  // the server's page lists the experiment
  await page.goto(serverUrl + "/#token=" + token);
  await page.waitForSelector(`#experiments-table tr[data-experiment="${name}"]`, { timeout: 20000 })
    .then(() => ok("the server's page lists experiment " + name),
      async () => fail("no row for " + name + "; the page says: " + await page.textContent("#error")));
  const status = await page.$eval(`#experiments-table tr[data-experiment="${name}"]`, (tr) => tr.cells[1].textContent)
    .catch(() => "");
  status.startsWith(x.status) ? ok("its status: " + status) : fail("status '" + status + "' != " + x.status);

  // the experiment's page
  await page.click(`#experiments-table tr[data-experiment="${name}"] a`);
  await page.waitForFunction((n) => document.querySelectorAll("#trials tbody tr").length === n,
    x.trials.length, { timeout: 20000 }).catch(() => {});
  const rows = await page.$$eval("#trials tbody tr", (trs) => trs.map((tr) =>
    [tr.dataset.trial, tr.dataset.state, tr.cells[2].textContent, tr.cells[3].textContent, tr.className]));
  const want = x.trials.map((t) => [t.name, t.state,
    Object.entries(t.parameters).map(([k, v]) => k + "=" + v).join(" "),
    typeof t.objective === "number" ? t.objective.toFixed(4) : "", x.best && x.best.trial === t.name ? "best" : ""]);
  JSON.stringify(rows) === JSON.stringify(want) ?
    ok("trials table = GET /v1/experiments/" + name + " (" + rows.length + " trials, best " + x.best.trial + " marked)") :
    fail("trials table " + JSON.stringify(rows) + " != " + JSON.stringify(want));
  const phase = await page.textContent("#phase");
  phase === x.status ? ok("the experiment's status in the header: " + phase) : fail("phase " + phase);

  // the charts: what Chart.js holds
  const charts = await page.evaluate(() => {
    const out = {};
    for (const id of ["objective-chart", "final-chart"]) {
      const c = window.Chart && window.Chart.getChart(document.getElementById(id));
      out[id] = c ? c.data.datasets.map((d) => ({ label: d.label, n: d.data.length })) : null;
    }
    return out;
  });
  const wantLines = x.trials.filter((t) => t.observations.length).map((t) => ({ label: t.name, n: t.observations.length }));
  JSON.stringify(charts["objective-chart"]) === JSON.stringify(wantLines) ?
    ok("objective chart: a line a trial with every epoch's value (" + wantLines.map((l) => l.n).join(",") + " points)") :
    fail("objective chart " + JSON.stringify(charts["objective-chart"]) + " != " + JSON.stringify(wantLines));
  const nObj = x.trials.filter((t) => typeof t.objective === "number").length;
  charts["final-chart"] && charts["final-chart"][0].n === nObj ?
    ok("objective-by-trial chart: " + nObj + " points") : fail("final chart " + JSON.stringify(charts["final-chart"]));
  (await page.$("#all-jobs")) ? ok("a link back to the server's page") : fail("no link back");
  const hidden = await page.$$eval("section.job", (s) => s.every((e) => e.hidden));
  hidden ? ok("the job sections are hidden on the experiment's page") : fail("job sections shown");
  await page.screenshot({ path: shot, fullPage: true });
  ok("screenshot " + shot);
  errors.length ? fail("page errors: " + errors.join(" | ")) : ok("no script errors");
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
