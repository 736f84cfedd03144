// server_dashboard_check.mjs - load a job server's dashboard in headless Chromium (Debian's,
// driven by playwright-core) and check it against the server's API: every job with its
// state, queue position and reason, the capacity used and free, and a job's own page
// through the server.
//
//   node tests/js/server_dashboard_check.mjs URL_WITH_TOKEN SERVER_URL TOKEN SCREENSHOT.png RUNNING_JOB
//
// Prints "ok   ..." / "FAIL: ..." lines (tests/lib.sh's style); exit 1 when a check failed.
import { chromium } from "playwright-core";

const [url, serverUrl, token, shot, runningJob] = process.argv.slice(2);
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
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  await page.goto(url);
  (new URL(page.url())).hash === "" ? ok("server page: the token is taken out of the address bar") :
    fail("the address still holds the token: " + page.url());

  // the jobs table = GET /v1/jobs
  const jobs = (await get("/v1/jobs")).jobs;
  const want = jobs.map((j) => j.name + ":" + j.state + ":" + (j.position || "")).join(",");
  const rows = () => page.$$eval("#jobs tbody tr", (trs) =>
    trs.map((tr) => tr.dataset.job + ":" + tr.dataset.state + ":" + tr.cells[3].textContent).join(","));
  await page.waitForFunction((n) => document.querySelectorAll("#jobs tbody tr").length === n, jobs.length,
    { timeout: 20000 }).catch(() => {});
  const got = await rows();
  got === want ? ok("jobs table = GET /v1/jobs (" + got + ")") : fail("jobs table " + got + " != " + want);
  const queued = jobs.find((j) => j.state === "Queued");
  if (queued) {
    const why = await page.$eval(`#jobs tr[data-job="${queued.name}"]`, (tr) => tr.cells[8].textContent);
    why === queued.message ? ok("a queued job's reason: " + why) : fail("reason " + why + " != " + queued.message);
  } else {
    fail("no queued job to check");
  }

  // capacity used and free
  const sv = await get("/v1/server");
  const cap = await page.textContent("#capacity-text");
  const wantCap = "cpus: " + sv.used.cpus + " used of " + sv.capacity.cpus + ", " +
    Math.max(0, sv.capacity.cpus - sv.used.cpus) + " free";
  cap.startsWith(wantCap) ? ok("capacity: " + cap) : fail("capacity '" + cap + "' lacks '" + wantCap + "'");
  const jobSectionsHidden = await page.$$eval("section.job", (s) => s.every((x) => x.hidden));
  jobSectionsHidden ? ok("the job's sections are hidden on the server's page") : fail("job sections shown");
  await page.screenshot({ path: shot, fullPage: true });
  ok("screenshot " + shot);

  // a job's own page, through the server
  await page.click(`#jobs tr[data-job="${runningJob}"] a`);
  await page.waitForSelector("#replicas tbody tr", { timeout: 20000 })
    .then(() => ok("the job's page through the server shows its replicas"), () => fail("no replicas on the job's page"));
  const st = await get("/v1/jobs/" + runningJob);
  const phase = await page.textContent("#phase");
  phase === st.phase ? ok("the job's page: phase " + phase) : fail("phase " + phase + " != " + st.phase);
  (await page.$("#all-jobs")) ? ok("a link back to all jobs") : fail("no link back to the server's page");
  errors.length ? fail("page errors: " + errors.join(" | ")) : ok("no script errors");
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
