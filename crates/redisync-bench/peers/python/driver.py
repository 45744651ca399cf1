"""The benchmark's driver for python-redis-lock's Lock (over redis-py).

    python3 driver.py SCENARIO --url URL --key KEY
                      [--clients N] [--tasks N] [--hold-us N] [--warmup N] [--expire S]

redis-py and python-redis-lock come from PYTHONPATH (the directory scripts/bench-peers.sh
installed, at the versions pinned in requirements.txt beside this file). --expire is the
lock's lease in seconds (the library's default is none). python-redis-lock is synchronous, so
every task is a thread of this one process; each of the --clients clients is one redis.Redis
(one connection pool), shared by its --tasks threads, each with a Lock of its own.

The driver connects, prints one JSON line {"ready": true, ...}, then runs one turn for each
line it reads on stdin and answers each with one JSON line:

  uncontended  "cycles N"     {"samples_us": [...]}: each lock + unlock cycle, timed
  contended    "run SECONDS"  {"counts": [...], "handoffs_us": [...], "violations": n,
                               "failures": n, "elapsed_s": s}
  handoff      "handoff"      {"handoff_us": x} | {"early": true} | {"failed": true}
  many         "run SECONDS"  {"counts": [...], "failures": n, "elapsed_s": s}

The benchmark runs its contenders in turns within a round, so the driver stays up for a round
and keeps its connections between turns, as the contenders in the benchmark's own process do.
At the end of stdin it disconnects and exits; on an error it prints {"error": "..."} and exits
with status 1.
"""

import json
import sys
import threading
import time
from importlib.metadata import version


def parse_args(argv):
    if not argv:
        raise ValueError("usage: driver.py SCENARIO --url URL --key KEY [options]")
    args = {"scenario": argv[0], "clients": 1, "tasks": 1, "hold_us": 0, "warmup": 50, "expire": None}
    numbers = {"--clients": "clients", "--tasks": "tasks", "--hold-us": "hold_us", "--warmup": "warmup", "--expire": "expire"}
    rest = argv[1:]
    if len(rest) % 2:
        raise ValueError(f"{rest[-1]} needs a value")
    for flag, value in zip(rest[::2], rest[1::2]):
        if flag == "--url":
            args["url"] = value
        elif flag == "--key":
            args["key"] = value
        elif flag in numbers:
            n = int(value)
            if n < 0:
                raise ValueError(f"{flag}: negative: {value}")
            args[numbers[flag]] = n
        else:
            raise ValueError(f"unknown argument {flag}")
    for needed in ("url", "key"):
        if needed not in args:
            raise ValueError(f"--{needed} is required")
    return args


def emit(value):
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


def now():
    return time.perf_counter_ns()


def turn_argument(line, verb):
    words = line.split()
    if len(words) != 2 or words[0] != verb or float(words[1]) <= 0:
        raise ValueError(f'expected "{verb} N", got {line!r}')
    return float(words[1])


MASK = (1 << 64) - 1


class XorShift:
    """The benchmark's pseudo-random sequence (xorshift64, the same seed as its own holders),
    so that a hold lasts as long here as in the benchmark's process."""

    def __init__(self):
        self.seed = 0x9E3779B97F4A7C15

    def next(self):
        s = self.seed
        s ^= (s << 13) & MASK
        s ^= s >> 7
        s ^= (s << 17) & MASK
        self.seed = s
        return s


def hold_until(deadline_ns):
    # time.sleep is timed by the OS to tens of microseconds: no need to spin.
    left = deadline_ns - now()
    if left > 0:
        time.sleep(left / 1e9)


def run_threads(locks, seconds, body):
    """Runs body(i, lock, stop) in a thread per lock for `seconds`; returns the elapsed
    seconds, from the start until every thread has finished its last cycle."""
    stop = threading.Event()
    threads = [threading.Thread(target=body, args=(i, lock, stop), daemon=True) for i, lock in enumerate(locks)]
    start = now()
    for thread in threads:
        thread.start()
    stop.wait(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    return (now() - start) / 1e9


def main():
    args = parse_args(sys.argv[1:])
    import redis
    import redis_lock

    clients = []

    def connect():
        client = redis.Redis.from_url(args["url"])
        client.ping()
        clients.append(client)
        return client

    def new_lock(client, name):
        return redis_lock.Lock(client, name, expire=args["expire"])

    def open_connections(client, n):
        """Opens n connections in the client's pool now, as the benchmark's own contenders
        connect before they are timed (redis-py opens them as threads first need them)."""
        pool = client.connection_pool
        connections = [pool.get_connection() for _ in range(n)]
        for connection in connections:
            pool.release(connection)

    def uncontended():
        lock = new_lock(connect(), args["key"])

        def cycle():
            lock.acquire()
            lock.release()

        for _ in range(args["warmup"]):
            cycle()

        def turn(line):
            n = int(turn_argument(line, "cycles"))
            samples = []
            for _ in range(n):
                start = now()
                cycle()
                samples.append((now() - start) / 1e3)
            return {"samples_us": samples}

        return turn

    def contended():
        locks = []
        for _ in range(args["clients"]):
            client = connect()
            open_connections(client, args["tasks"])
            locks += [new_lock(client, args["key"]) for _ in range(args["tasks"])]

        def turn(line):
            seconds = turn_argument(line, "run")
            counts = [0] * len(locks)
            handoffs = []
            state = {"held": False, "violations": 0, "failures": 0, "last_release": 0}
            # Guards the shared figures: the holder's look at "held" and its write must not
            # interleave with another thread's.
            guard = threading.Lock()

            def body(i, lock, stop):
                while not stop.is_set():
                    try:
                        lock.acquire()
                    except Exception:
                        with guard:
                            state["failures"] += 1
                        continue
                    taken = now()
                    with guard:
                        if state["held"]:
                            state["violations"] += 1
                        state["held"] = True
                        last = state["last_release"]
                        if last and taken > last:
                            handoffs.append((taken - last) / 1e3)
                    hold_until(taken + args["hold_us"] * 1000)
                    with guard:
                        state["held"] = False
                        state["last_release"] = now()
                    try:
                        lock.release()
                        counts[i] += 1
                    except Exception:
                        with guard:
                            state["failures"] += 1

            elapsed = run_threads(locks, seconds, body)
            return {
                "counts": counts,
                "handoffs_us": handoffs,
                "violations": state["violations"],
                "failures": state["failures"],
                "elapsed_s": elapsed,
            }

        return turn

    def handoff():
        holder = new_lock(connect(), args["key"])
        waiter = new_lock(connect(), args["key"])
        xorshift = XorShift()

        def turn(line):
            if line != "handoff":
                raise ValueError(f'expected "handoff", got {line!r}')
            # A blocking acquire returns only once it holds the lock.
            holder.acquire()
            hold_start = now()
            hold_us = args["hold_us"] + xorshift.next() % 1000
            acquired = []

            def wait():
                for _ in range(100):
                    try:
                        lock_taken = waiter.acquire()
                    except Exception:
                        continue
                    if lock_taken:
                        acquired.append(now())
                        waiter.release()
                        return

            thread = threading.Thread(target=wait, daemon=True)
            thread.start()
            hold_until(hold_start + hold_us * 1000)
            released = now()
            holder.release()
            thread.join()
            if not acquired:
                return {"failed": True}
            if acquired[0] < released:
                return {"early": True}
            return {"handoff_us": (acquired[0] - released) / 1e3}

        return turn

    def many():
        client = connect()
        open_connections(client, args["tasks"])
        locks = [new_lock(client, f"{args['key']}:{i}") for i in range(args["tasks"])]

        def turn(line):
            seconds = turn_argument(line, "run")
            counts = [0] * len(locks)
            failures = [0] * len(locks)

            def body(i, lock, stop):
                while not stop.is_set():
                    try:
                        lock.acquire()
                        lock.release()
                        counts[i] += 1
                    except Exception:
                        failures[i] += 1

            elapsed = run_threads(locks, seconds, body)
            return {"counts": counts, "failures": sum(failures), "elapsed_s": elapsed}

        return turn

    scenarios = {"uncontended": uncontended, "contended": contended, "handoff": handoff, "many": many}
    if args["scenario"] not in scenarios:
        raise ValueError(f"unknown scenario {args['scenario']!r}")
    turn = scenarios[args["scenario"]]()
    emit(
        {
            "ready": True,
            "library": f"python-redis-lock {version('python-redis-lock')}",
            "client": f"redis-py {version('redis')}",
            "runtime": f"python {sys.version.split()[0]}",
        }
    )
    for line in iter(sys.stdin.readline, ""):
        if line.strip():
            emit(turn(line.strip()))
    for client in clients:
        client.close()


if __name__ == "__main__":
    try:
        main()
    except Exception as error:  # any failure is the driver's answer, not a traceback
        emit({"error": f"{type(error).__name__}: {error}"})
        sys.exit(1)
