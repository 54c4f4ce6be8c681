// pg-boss on bin/bench's no-op jobs: run by node, never imported.
//
// pg_boss_run.mjs URL --jobs N --node-modules DIR [--processes P] [--workers W]
//     [--batch-size B] [--wait-ms W]
//
// Starts pg-boss once on the (empty) database at URL (which installs its
// schema), creates the queue and inserts N no-op jobs with its bulk API
// (PgBoss.insert), then starts P worker processes, each PgBoss.work() with
// localConcurrency W, batchSize B and burstWhenBatchFull (fetch again at once
// while batches come back full: the options its WorkOptions document for
// throughput). pg-boss has no mode that exits on an empty queue, so the
// workers are stopped gracefully once the queue is empty. It prints one JSON
// line: the seconds from starting the workers to an empty queue, timed the
// way bin/bench times motir-supervisor (worker start up included, the queue
// checked every 10 ms), and how many jobs completed. A job does nothing, or
// with --wait-ms awaits a timer that long (bin/bench's IO-bound runs; each
// job of a batch its own timer, all at once).
//
// The packages come from DIR (bin/bench's .bench/npm/node_modules), so
// nothing of them lives in this repository. Only pg-boss's public API runs
// the jobs; the SQL here only observes.

import { parseArgs } from "node:util";
import path from "node:path";

import { installedVersion, load, settle, sleep, timeWorkers } from "./timing.mjs";

const INSERT_SLICE = 5000;
const QUEUE = "noop";
const QUEUE_HAS_WORK = "SELECT EXISTS (SELECT FROM pgboss.job"
  + " WHERE name = $1 AND state IN ('created', 'retry', 'active'))";
const COMPLETED = "SELECT count(*)::int AS n FROM pgboss.job"
  + " WHERE name = $1 AND state = 'completed'";

const { values: opts, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    jobs: { type: "string", default: "20000" },
    "node-modules": { type: "string" },
    processes: { type: "string", default: "1" },
    workers: { type: "string", default: "4" },
    "batch-size": { type: "string", default: "100" },
    "wait-ms": { type: "string", default: "0" },
    work: { type: "boolean", default: false },
  },
});
const url = positionals[0];
const nodeModules = path.resolve(opts["node-modules"]);
const jobs = Number(opts.jobs);
const processes = Number(opts.processes);
const workers = Number(opts.workers);
const batchSize = Number(opts["batch-size"]);
const waitMs = Number(opts["wait-ms"]);

const { PgBoss } = await load(nodeModules, "pg-boss");
const pg = (await load(nodeModules, "pg")).default;

function makeBoss() {
  const boss = new PgBoss({ connectionString: url });
  boss.on("error", (error) => console.error(`[error] ${error}`));
  return boss;
}

async function prepare() {
  const boss = makeBoss();
  await boss.start();
  await boss.createQueue(QUEUE);
  for (let start = 0; start < jobs; start += INSERT_SLICE) {
    const size = Math.min(INSERT_SLICE, jobs - start);
    await boss.insert(QUEUE, Array.from({ length: size }, () => ({ data: {} })));
  }
  await boss.stop({ graceful: true });
  await settle(pg, url);
}

async function work() {
  const boss = makeBoss();
  await boss.start();
  await boss.work(QUEUE, { localConcurrency: workers, batchSize, burstWhenBatchFull: true },
                  async (batch) => {
                    if (waitMs) await Promise.all(batch.map(() => sleep(waitMs)));
                  });
  await new Promise((resolve) => process.once("SIGTERM", resolve));
  await boss.stop({ graceful: true });
}

async function measure() {
  await prepare();
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const args = [process.argv[1], url, "--work", "--node-modules", nodeModules,
                "--workers", String(workers), "--batch-size", String(batchSize),
                "--wait-ms", String(waitMs)];
  const { seconds, exitCodes } = await timeWorkers({
    args, processes, stopWhenEmpty: true,
    queueHasWork: async () => (await client.query(QUEUE_HAS_WORK, [QUEUE])).rows[0].exists,
  });
  const completed = (await client.query(COMPLETED, [QUEUE])).rows[0].n;
  await client.end();
  const version = installedVersion(nodeModules, "pg-boss");
  console.log(JSON.stringify({
    peer: "pg-boss", version,
    configuration: `${processes} process(es) x ${workers} workers, batch ${batchSize}`,
    jobs, succeeded: completed, seconds, worker_exit_codes: exitCodes,
  }));
}

if (opts.work) await work();
else await measure();
