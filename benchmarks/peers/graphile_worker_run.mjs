// graphile-worker on bin/bench's no-op jobs: run by node, never imported.
//
// graphile_worker_run.mjs URL --jobs N --node-modules DIR [--processes P]
//     [--concurrency C] [--local-queue] [--wait-ms W]
//
// Migrates graphile-worker's schema into the (empty) database at URL, adds
// N no-op jobs with its bulk API (WorkerUtils.addJobs), then starts P worker
// processes, each runOnce() with concurrentJobs C: a worker that exits once
// no job is left. --local-queue adds the batching options its performance
// page documents for its fastest run (localQueue size 500, job completions
// and failures batched with a delay of 0). It prints one JSON line: the
// seconds from starting the workers to an empty queue, timed the way
// bin/bench times motir-supervisor (worker start up included, the queue
// checked every 10 ms), and how many jobs succeeded. A job does nothing, or
// with --wait-ms awaits a timer that long (bin/bench's IO-bound runs).
//
// The packages come from DIR (bin/bench's .bench/npm/node_modules), so
// nothing of them lives in this repository. Only graphile-worker's public
// API runs the jobs; the SQL here only observes.

import { parseArgs } from "node:util";
import path from "node:path";

import { installedVersion, load, settle, sleep, timeWorkers } from "./timing.mjs";

const ADD_SLICE = 5000;
// A completed job is deleted; one that failed for good stays with its attempts spent.
const QUEUE_HAS_WORK = "SELECT EXISTS (SELECT FROM graphile_worker._private_jobs)";
const LEFT_OVER = "SELECT count(*)::int AS n FROM graphile_worker._private_jobs";

const { values: opts, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    jobs: { type: "string", default: "20000" },
    "node-modules": { type: "string" },
    processes: { type: "string", default: "1" },
    concurrency: { type: "string", default: "4" },
    "local-queue": { type: "boolean", default: false },
    "wait-ms": { type: "string", default: "0" },
    work: { type: "boolean", default: false },
  },
});
const url = positionals[0];
const nodeModules = path.resolve(opts["node-modules"]);
const jobs = Number(opts.jobs);
const processes = Number(opts.processes);
const concurrency = Number(opts.concurrency);
const waitMs = Number(opts["wait-ms"]);

const worker = await load(nodeModules, "graphile-worker");
const pg = (await load(nodeModules, "pg")).default;

// Per-job messages at info level would time the console, not the queue.
const logger = new worker.Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`[${level}] ${message}`);
});

function preset() {
  const options = { connectionString: url, concurrentJobs: concurrency,
                    maxPoolSize: Math.max(10, concurrency + 2) };
  if (opts["local-queue"]) {
    Object.assign(options, { localQueue: { size: 500 }, completeJobBatchDelay: 0,
                             failJobBatchDelay: 0 });
  }
  return { worker: options };
}

async function prepare() {
  const utils = await worker.makeWorkerUtils({ connectionString: url, logger });
  try {
    await utils.migrate();
    for (let start = 0; start < jobs; start += ADD_SLICE) {
      const size = Math.min(ADD_SLICE, jobs - start);
      const specs = Array.from({ length: size }, () => ({ identifier: "noop", payload: {} }));
      await utils.addJobs(specs);
    }
  } finally {
    await utils.release();
  }
  await settle(pg, url);
}

async function work() {
  await worker.runOnce({ concurrency, noHandleSignals: false, logger, preset: preset(),
                         taskList: { noop: async () => { if (waitMs) await sleep(waitMs); } } });
}

async function measure() {
  await prepare();
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const args = [process.argv[1], url, "--work", "--node-modules", nodeModules,
                "--concurrency", String(concurrency), "--wait-ms", String(waitMs)];
  if (opts["local-queue"]) args.push("--local-queue");
  const { seconds, exitCodes } = await timeWorkers({
    args, processes, queueHasWork: async () => (await client.query(QUEUE_HAS_WORK)).rows[0].exists,
  });
  const leftOver = (await client.query(LEFT_OVER)).rows[0].n;
  await client.end();
  const version = installedVersion(nodeModules, "graphile-worker");
  const batching = opts["local-queue"] ? ", local queue 500, batched completion" : "";
  console.log(JSON.stringify({
    peer: "graphile-worker", version,
    configuration: `${processes} process(es) x concurrency ${concurrency}${batching}`,
    jobs, succeeded: jobs - leftOver, seconds, worker_exit_codes: exitCodes,
  }));
}

if (opts.work) await work();
else await measure();
