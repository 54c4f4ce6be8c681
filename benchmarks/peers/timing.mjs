// What both Node.js peer drivers share: loading a package from bin/bench's
// node_modules, the database's state before timing, and the timing itself,
// so the two are timed alike and as bin/bench times motir-supervisor: from
// starting the worker processes to the first check that finds the queue
// empty, checked every 10 ms (timing.py says why).

import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import path from "node:path";

// The package `name` as installed under `nodeModules` (never this repository).
export async function load(nodeModules, name) {
  const require = createRequire(path.join(nodeModules, "noop.js"));
  return import(pathToFileURL(require.resolve(name)).href);
}

export function installedVersion(nodeModules, name) {
  return JSON.parse(readFileSync(path.join(nodeModules, name, "package.json"), "utf8")).version;
}

// As bin/bench prepares its own table: statistics current, a fresh checkpoint.
export async function settle(pg, url) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query("VACUUM ANALYZE");
  await client.query("CHECKPOINT");
  await client.end();
}

const EMPTY_QUEUE_CHECK_MS = 10;

// A job's wait on a network, without CPU.
export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function exited(child) {
  return new Promise((resolve) => {
    if (child.exitCode !== null) resolve(child.exitCode);
    else child.on("exit", (code) => resolve(code ?? 1));
  });
}

// Starts `processes` copies of `node args...`; `queueHasWork` is an async
// check. With `stopWhenEmpty`, the workers (which would wait for more work)
// get SIGTERM once the queue is empty, after the clock has stopped.
export async function timeWorkers({ args, processes, queueHasWork, stopWhenEmpty = false }) {
  const started = performance.now();
  const children = Array.from({ length: processes },
                              () => spawn(process.execPath, args, { stdio: ["ignore", 2, 2] }));
  const codes = children.map(exited);
  let running = processes;
  codes.forEach((code) => code.then(() => { running -= 1; }));
  while (await queueHasWork() && running > 0) {
    await sleep(EMPTY_QUEUE_CHECK_MS);
  }
  const seconds = (performance.now() - started) / 1000;
  if (stopWhenEmpty) children.forEach((child) => child.kill("SIGTERM"));
  return { seconds, exitCodes: await Promise.all(codes) };
}
