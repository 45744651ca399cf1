// The benchmark's driver for redis-semaphore's Mutex (Node.js, over ioredis).
//
//   node driver.mjs SCENARIO --url URL --key KEY --modules DIR
//                   [--clients N] [--tasks N] [--hold-us N] [--warmup N] [--retry-ms N]
//
// DIR holds the node_modules that scripts/bench-peers.sh installed (the versions pinned in
// package.json beside this file). --retry-ms sets the Mutex's retryInterval; without it the
// Mutex keeps its defaults. Tasks are async functions of this one process; each of the
// --clients clients is one ioredis connection, shared by its --tasks tasks, each with a Mutex
// of its own.
//
// The driver connects, prints one JSON line {"ready": true, ...}, then runs one turn for each
// line it reads on stdin and answers each with one JSON line:
//
//   uncontended  "cycles N"     {"samples_us": [...]}: each lock + unlock cycle, timed
//   contended    "run SECONDS"  {"counts": [...], "handoffs_us": [...], "violations": n,
//                                "failures": n, "elapsed_s": s}
//   handoff      "handoff"      {"handoff_us": x} | {"early": true} | {"failed": true}
//   many         "run SECONDS"  {"counts": [...], "failures": n, "elapsed_s": s}
//
// The benchmark runs its contenders in turns within a round, so the driver stays up for a
// round and keeps its connections between turns, as the contenders in the benchmark's own
// process do. At the end of stdin it disconnects and exits; on an error it prints
// {"error": "..."} and exits with status 1.

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";

function parseArgs(argv) {
  const args = {
    scenario: argv[0],
    clients: 1,
    tasks: 1,
    holdUs: 0,
    warmup: 50,
    retryMs: undefined,
  };
  const numbers = {
    "--clients": "clients",
    "--tasks": "tasks",
    "--hold-us": "holdUs",
    "--warmup": "warmup",
    "--retry-ms": "retryMs",
  };
  for (let i = 1; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag === "--url") args.url = value;
    else if (flag === "--key") args.key = value;
    else if (flag === "--modules") args.modules = value;
    else if (flag in numbers) {
      const n = Number(value);
      if (!Number.isFinite(n) || n < 0) throw new Error(`${flag}: not a number: ${value}`);
      args[numbers[flag]] = n;
    } else throw new Error(`unknown argument ${flag}`);
  }
  for (const needed of ["url", "key", "modules"]) {
    if (!args[needed]) throw new Error(`--${needed} is required`);
  }
  return args;
}

function print(value) {
  process.stdout.write(JSON.stringify(value) + "\n");
}

const now = () => process.hrtime.bigint();
const micros = (ns) => Number(ns) / 1000;
const range = (n) => Array.from({ length: n }, (_, i) => i);

// Holds for `us` microseconds. Node's timers fire on whole milliseconds and late, and fire
// every timer due in one tick together: a 1 ms hold would last 1–2 ms, and a release would
// land on the very tick a polling waiter of this process wakes on. So the last stretch is
// timed by the clock, yielding to the event loop between looks (I/O and timers go on).
async function holdFor(us) {
  const deadline = now() + BigInt(Math.round(us * 1000));
  const coarseMs = Math.floor(us / 1000) - 2;
  if (coarseMs >= 1) await sleep(coarseMs);
  while (now() < deadline) await new Promise((resolve) => setImmediate(resolve));
}

// The benchmark's pseudo-random sequence (xorshift64, the same seed as its own holders), so
// that a hold lasts as long here as in the benchmark's process.
const MASK = (1n << 64n) - 1n;
let seed = 0x9e3779b97f4a7c15n;
function xorshift() {
  seed ^= (seed << 13n) & MASK;
  seed ^= seed >> 7n;
  seed ^= (seed << 17n) & MASK;
  return seed;
}

function turnArgument(line, verb) {
  const [word, value, ...rest] = line.split(/\s+/);
  const n = Number(value);
  if (word !== verb || rest.length > 0 || !Number.isFinite(n) || n <= 0) {
    throw new Error(`expected "${verb} N", got ${JSON.stringify(line)}`);
  }
  return n;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  // The modules live outside the repository; resolve them from there.
  const require = createRequire(join(args.modules, "package.json"));
  const ioredis = require("ioredis");
  const Redis = ioredis.Redis ?? ioredis.default ?? ioredis;
  const { Mutex } = require("redis-semaphore");
  const version = (name) =>
    JSON.parse(readFileSync(join(args.modules, "node_modules", name, "package.json"), "utf8"))
      .version;
  const options = args.retryMs === undefined ? {} : { retryInterval: args.retryMs };
  const clients = [];
  const connect = async () => {
    const client = new Redis(args.url, { lazyConnect: true });
    clients.push(client);
    await client.connect();
    return client;
  };

  const scenarios = {
    async uncontended() {
      const mutex = new Mutex(await connect(), args.key, options);
      const cycle = async () => {
        await mutex.acquire();
        await mutex.release();
      };
      for (let i = 0; i < args.warmup; i++) await cycle();
      return async (line) => {
        const n = turnArgument(line, "cycles");
        const samples = [];
        for (let i = 0; i < n; i++) {
          const start = now();
          await cycle();
          samples.push(micros(now() - start));
        }
        return { samples_us: samples };
      };
    },

    async contended() {
      const mutexes = [];
      for (const _ of range(args.clients)) {
        const client = await connect();
        for (const _ of range(args.tasks)) mutexes.push(new Mutex(client, args.key, options));
      }
      return async (line) => {
        const seconds = turnArgument(line, "run");
        const counts = mutexes.map(() => 0);
        const handoffs = [];
        let [held, violations, failures, lastRelease, stop] = [false, 0, 0, 0n, false];
        const start = now();
        const timer = setTimeout(() => (stop = true), seconds * 1000);
        await Promise.all(
          mutexes.map(async (mutex, i) => {
            while (!stop) {
              try {
                await mutex.acquire();
              } catch {
                failures += 1;
                continue;
              }
              const taken = now();
              if (held) violations += 1;
              held = true;
              if (lastRelease > 0n && taken > lastRelease) handoffs.push(micros(taken - lastRelease));
              await holdFor(args.holdUs);
              held = false;
              lastRelease = now();
              try {
                await mutex.release();
                counts[i] += 1;
              } catch {
                failures += 1;
              }
            }
          }),
        );
        clearTimeout(timer);
        const elapsed = Number(now() - start) / 1e9;
        return { counts, handoffs_us: handoffs, violations, failures, elapsed_s: elapsed };
      };
    },

    async handoff() {
      const holder = new Mutex(await connect(), args.key, options);
      const waiter = new Mutex(await connect(), args.key, options);
      return async (line) => {
        if (line !== "handoff") throw new Error(`expected "handoff", got ${JSON.stringify(line)}`);
        // A take that fails before holding (a wait that timed out) is tried again: the
        // waiter waits for this hold.
        for (;;) {
          try {
            await holder.acquire();
            break;
          } catch {
            // try again
          }
        }
        const hold = args.holdUs + Number(xorshift() % 1000n);
        const holdStart = now();
        const waiting = (async () => {
          for (let i = 0; i < 100; i++) {
            try {
              await waiter.acquire();
            } catch {
              continue;
            }
            const acquired = now();
            await waiter.release();
            return acquired;
          }
          return null;
        })();
        await holdFor(hold - micros(now() - holdStart));
        const released = now();
        await holder.release();
        const acquired = await waiting;
        if (acquired === null) return { failed: true };
        if (acquired < released) return { early: true };
        return { handoff_us: micros(acquired - released) };
      };
    },

    async many() {
      const client = await connect();
      const mutexes = range(args.tasks).map((i) => new Mutex(client, `${args.key}:${i}`, options));
      return async (line) => {
        const seconds = turnArgument(line, "run");
        const counts = mutexes.map(() => 0);
        let [failures, stop] = [0, false];
        const start = now();
        const timer = setTimeout(() => (stop = true), seconds * 1000);
        await Promise.all(
          mutexes.map(async (mutex, i) => {
            while (!stop) {
              try {
                await mutex.acquire();
                await mutex.release();
                counts[i] += 1;
              } catch {
                failures += 1;
              }
            }
          }),
        );
        clearTimeout(timer);
        return { counts, failures, elapsed_s: Number(now() - start) / 1e9 };
      };
    },
  };

  const setUp = scenarios[args.scenario];
  if (!setUp) throw new Error(`unknown scenario ${JSON.stringify(args.scenario)}`);
  const turn = await setUp();
  print({
    ready: true,
    library: `redis-semaphore ${version("redis-semaphore")}`,
    client: `ioredis ${version("ioredis")}`,
    runtime: `node ${process.version}`,
  });
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (line.trim()) print(await turn(line.trim()));
  }
  await Promise.all(clients.map((client) => client.quit()));
}

main().catch((error) => {
  print({ error: String(error?.message ?? error) });
  process.exit(1);
});
