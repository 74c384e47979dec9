// Loads the drover dashboard in Debian's headless Chromium (driven by playwright-core,
// which never downloads a browser here) against a live 2-node cluster that
// tests/dashboard_browser_test.cc started, and checks what a person would see:
//   - without logging in, the page and its JSON API are refused (401);
//   - the one-time login link logs in (a cookie), and works only once;
//   - the cluster page lists both nodes; the jobs page the running and the failed job;
//   - the failed job's page shows the failing rank, its root cause with the stderr
//     tail, and the log tail; the running job's page updates by itself when it ends;
//   - the tasks page lists the failure.
// Screenshots go to $SCREENSHOT_DIR. Exits 0 when every check passes.
'use strict';

const fs = require('fs');
const path = require('path');
const os = require('os');

let chromium;
try {
  ({chromium} = require('playwright-core'));
} catch (e) {
  console.error('browser_test: playwright-core is not installed next to this script; ' +
                'run scripts/setup.sh (it runs npm ci in tests/dashboard)');
  process.exit(2);
}

const env = name => {
  const v = process.env[name];
  if (!v) { console.error('browser_test: ' + name + ' is not set'); process.exit(2); }
  return v;
};
const BASE = env('DASHBOARD_BASE');          // http://host:port
const LOGIN = env('DASHBOARD_LOGIN');        // one-time link
const NODES = env('NODES').split(',');
const RUNNING = env('RUNNING_JOB');
const FAILED = env('FAILED_JOB');
const GO_FILE = env('GO_FILE');              // creating it lets the running job end
const SHOTS = process.env.SCREENSHOT_DIR || os.tmpdir();

let failures = 0;
function check(ok, what) {
  console.log((ok ? 'ok   ' : 'FAIL ') + what);
  if (!ok) failures++;
}

async function waitText(page, selector, text, timeout = 15000) {
  try {
    await page.waitForFunction(([s, t]) => {
      return [...document.querySelectorAll(s)].some(el => el.innerText.includes(t));
    }, [selector, text], {timeout, polling: 100});
    return true;
  } catch (e) {
    return false;
  }
}

(async () => {
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: {width: 1400, height: 900},
  });
  const page = context.pages()[0] || await context.newPage();
  page.on('pageerror', e => { console.log('page error: ' + e.message); failures++; });
  try {
    // Not logged in: refused.
    let res = await page.goto(BASE + '/');
    check(res.status() === 401, 'the page without a session is refused (' + res.status() + ')');
    check(!(await page.content()).includes('app.js'), 'the refused page holds no dashboard');
    res = await page.goto(BASE + '/api/cluster');
    check(res.status() === 401, 'the JSON API without a session is refused (' + res.status() + ')');

    // The one-time link.
    const t0 = Date.now();
    res = await page.goto(LOGIN);
    check(res.status() === 200 && page.url() === BASE + '/', 'the login link leads to the dashboard');
    const shown = await waitText(page, '#nodes', NODES[NODES.length - 1], 5000);
    const loadMs = Date.now() - t0;
    const nav = await page.evaluate(() => performance.getEntriesByType('navigation')[0].toJSON());
    console.log('dashboard: login to both nodes shown ' + loadMs + ' ms; DOMContentLoaded ' +
                Math.round(nav.domContentLoadedEventEnd) + ' ms, load ' + Math.round(nav.loadEventEnd) + ' ms');
    check(shown, 'the cluster page shows the nodes');
    check(nav.loadEventEnd < 1000, 'the page loads in under a second (' + Math.round(nav.loadEventEnd) + ' ms)');
    for (const n of NODES) {
      check(await page.locator('#nodes tr[data-node="' + n + '"]').count() === 1, 'node ' + n + ' is listed');
      check(await waitText(page, '#nodes tr[data-node="' + n + '"]', 'ALIVE'), 'node ' + n + ' is ALIVE');
    }
    await page.screenshot({path: path.join(SHOTS, 'dashboard-cluster.png'), fullPage: true});

    // The link works once (asked again without the browser's cookie).
    const again = await fetch(LOGIN, {redirect: 'manual'});
    check(again.status === 401, 'the login link works only once (' + again.status + ')');

    // Jobs.
    await page.goto(BASE + '/#/jobs');
    check(await waitText(page, '#jobs', RUNNING), 'the jobs page lists the running job');
    check(await waitText(page, '#jobs tr[data-job="' + RUNNING + '"]', 'RUNNING'), 'it is RUNNING');
    check(await waitText(page, '#jobs tr[data-job="' + FAILED + '"]', 'FAILED'), 'the failed job is FAILED');
    await page.selectOption('#f-state', 'FAILED');
    check(await waitText(page, '#jobs', FAILED) &&
          await page.locator('#jobs tr[data-job="' + RUNNING + '"]').count() === 0,
          'the state filter keeps only failed jobs');
    await page.screenshot({path: path.join(SHOTS, 'dashboard-jobs.png'), fullPage: true});

    // The failed job: its failing rank, root cause and output.
    await page.goto(BASE + '/#/job/' + FAILED);
    check(await waitText(page, '#root-cause', 'exited with code 3'), 'the root cause names the exit');
    check(await waitText(page, '#root-cause', 'rank 1'), 'the root cause names the failing rank');
    check(await waitText(page, '#root-cause', 'disk on fire'), 'the root cause shows the stderr tail');
    check(await waitText(page, '#ranks', 'failed'), 'the ranks table marks the failing rank');
    check(await waitText(page, 'pre.log', 'hello from rank 0'), 'the log tail shows the output');
    check(await page.locator('#timeline .row').count() >= 3, 'the timeline has the job and its ranks');
    await page.screenshot({path: path.join(SHOTS, 'dashboard-failed-job.png'), fullPage: true});

    // The running job updates by itself when it ends.
    await page.goto(BASE + '/#/job/' + RUNNING);
    check(await waitText(page, 'h2', 'RUNNING'), 'the running job shows RUNNING');
    check(await waitText(page, '#ranks', 'running'), 'its ranks are running');
    fs.writeFileSync(GO_FILE, 'go');
    check(await waitText(page, 'h2', 'SUCCEEDED', 20000), 'the page shows SUCCEEDED without a reload');
    check(await waitText(page, 'pre.log', 'done-1'), 'the live log tail shows the last output');

    // Tasks and actors: the failure with its cause.
    await page.goto(BASE + '/#/tasks');
    check(await waitText(page, '#failures', FAILED), 'the tasks page lists the failure');
    check(await waitText(page, '#failures', 'exited with code 3'), 'with its cause');
  } catch (e) {
    console.log('FAIL ' + (e.stack || e));
    failures++;
  } finally {
    await page.screenshot({path: path.join(SHOTS, 'dashboard-last.png'), fullPage: true}).catch(() => {});
    await context.close();
    fs.rmSync(userDataDir, {recursive: true, force: true});
  }
  console.log(failures === 0 ? 'browser_test: all checks passed' : 'browser_test: ' + failures + ' failed');
  process.exit(failures === 0 ? 0 : 1);
})();
