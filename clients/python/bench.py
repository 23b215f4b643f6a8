#!/usr/bin/python3
"""Latency and throughput of a reservation from one Python process:

  (i)   client.reserve(key, max_wait=...) through the agent's unix socket;
  (ii)  the Postgres pacer's upsert-and-return statement (bench/baseline/
        postgres.go, pgCreate and pgReserve) with psycopg2;
  (iii) a GCRA Lua script in EVALSHA (bench/baseline/redis.go, redisGCRA)
        with redis-py against a redis-server this bench starts;

then the agent's throughput serving socket reservations to N processes
(raftpace.Client), and again with minimal raw-socket clients (a prebuilt
request, the answer read to its Content-Length) to tell the Python
client's cost from the agent's.

    RAFTPACE_BINARY=/tmp/raftpace /usr/bin/python3 clients/python/bench.py [--n 5000] [--procs 4] [--secs 5]
        [--postgres URL] [--redis HOST:PORT] [--json]

Needs Debian's python3-psycopg2 and python3-redis, a PostgreSQL at --postgres
(default RAFTPACE_TEST_POSTGRES, else
postgres://postgres@127.0.0.1:5432/postgres), and a Redis server at --redis
or else redis-server to start one. The agent is raftpace.testing's (one
node, --raft-timing fast); the Postgres statement and the Redis script are
the Go bench's, from ``raftpace bench --print-baselines``.

--json prints one JSON document of the figures on stdout and the table on
stderr: raftpace bench (its "python" approach, bench/python.go) runs this
script that way and parses the document (bench/report/python.go).
"""

import argparse
import json
import multiprocessing
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import raftpace  # noqa: E402
from raftpace.testing import Agent  # noqa: E402

KEY = "bench-py"
RATE, BURST = 1000000.0, 1000  # far above what is asked: nothing waits

T_US = 1e6 / RATE
TAU_US = (BURST - 1) * T_US
MAX_WAIT = 1.0


def server_statements(binary):
    """The Postgres statement and the Redis script the Go bench's baselines
    run (bench/baseline), from ``raftpace bench --print-baselines``: one
    text for both benches. The statement's $1..$4 (key, T, tau, max wait in
    microseconds) become psycopg2's named parameters."""
    r = subprocess.run([binary, "bench", "--print-baselines"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise SystemExit("%s bench --print-baselines: exit %d: %s" % (binary, r.returncode, r.stderr.strip()))
    st = json.loads(r.stdout)
    names = {"1": "key", "2": "t", "3": "tau", "4": "maxwait"}
    st["postgres_reserve"] = re.sub(r"\$([1-4])", lambda m: "%%(%s)s" % names[m.group(1)],
                                    st["postgres_reserve"].replace("%", "%%"))
    return st


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_redis(tmp):
    exe = shutil.which("redis-server")
    if not exe:
        raise SystemExit("redis-server is not installed")
    port = free_port()
    p = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp, "--save", "",
                          "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)
    import redis
    r = redis.Redis(host="127.0.0.1", port=port)
    end = time.monotonic() + 20
    while True:
        try:
            r.ping()
            return p, r
        except redis.ConnectionError:
            if time.monotonic() > end or p.poll() is not None:
                raise SystemExit("redis-server did not start")
            time.sleep(0.1)


def connect_redis(addr):
    import redis
    host, _, port = addr.rpartition(":")
    r = redis.Redis(host=host.strip("[]") or "127.0.0.1", port=int(port))
    r.ping()
    return r


def measure(fn, n, warm=200):
    for _ in range(warm):
        fn()
    lat = []
    pc = time.perf_counter
    t0 = pc()
    for _ in range(n):
        a = pc()
        fn()
        lat.append(pc() - a)
    total = pc() - t0
    lat.sort()
    return {"p50": lat[len(lat) // 2], "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))], "ops": n / total}


def hammer(sock, secs, start_at, q):
    c = raftpace.Client(socket=sock, timeout=10)
    while time.time() < start_at:
        time.sleep(0.001)
    end = start_at + secs
    n = 0
    cpu0 = time.process_time()
    while time.time() < end:
        c.reserve(KEY, max_wait=MAX_WAIT)
        n += 1
    q.put((n, time.process_time() - cpu0))


def hammer_raw(sock, secs, start_at, q):
    """The least a client can do: one prebuilt request per reservation on a
    keep-alive socket, the answer read up to its Content-Length. Measures
    what the agent serves when the Python client's own work is taken out."""
    body = json.dumps({"n": 1, "max_wait": MAX_WAIT}).encode()
    req = (b"POST /v1/reserve/" + KEY.encode() + b" HTTP/1.1\r\nHost: localhost\r\n"
           b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock)
    while time.time() < start_at:
        time.sleep(0.001)
    end = start_at + secs
    n = 0
    cpu0 = time.process_time()
    buf = b""
    while time.time() < end:
        s.sendall(req)
        while True:
            i = buf.find(b"\r\n\r\n")
            if i >= 0:
                head = buf[:i]
                j = head.lower().find(b"content-length:")
                ln = int(head[j + 15:head.find(b"\r\n", j) if head.find(b"\r\n", j) > 0 else len(head)])
                if len(buf) >= i + 4 + ln:
                    if not head.startswith(b"HTTP/1.1 200"):
                        raise SystemExit("raw reserve: %r" % buf[:200])
                    buf = buf[i + 4 + ln:]
                    break
            chunk = s.recv(65536)
            if not chunk:
                raise SystemExit("raw reserve: the agent closed the connection")
            buf += chunk
        n += 1
    s.close()
    q.put((n, time.process_time() - cpu0))


def throughput(agent, sock, procs, secs, target=hammer, perf_out=None):
    q = multiprocessing.Queue()
    start_at = time.time() + 1.0
    ps = [multiprocessing.Process(target=target, args=(sock, secs, start_at, q)) for _ in range(procs)]
    for p in ps:
        p.start()
    while time.time() < start_at:
        time.sleep(0.01)
    a0 = cpu_seconds(agent.pid)
    if perf_out:  # sample the agent's stacks meanwhile (perf report -i FILE)
        subprocess.run(["perf", "record", "-q", "-F", "499", "-g", "-p", str(agent.pid), "-o", perf_out,
                        "--", "sleep", str(secs)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    else:
        time.sleep(secs)
    a1 = cpu_seconds(agent.pid)
    res = [q.get(timeout=60) for _ in ps]
    for p in ps:
        p.join()
    n = sum(r[0] for r in res)
    return n / secs, a1 - a0, sum(r[1] for r in res)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5000, help="reservations per latency measurement")
    ap.add_argument("--procs", type=int, default=4, help="processes of the throughput measurement")
    ap.add_argument("--secs", type=float, default=5.0, help="seconds of the throughput measurement")
    ap.add_argument("--binary", default=os.environ.get("RAFTPACE_BINARY", ""))
    ap.add_argument("--perf", default="", help="perf record the agent during the client throughput run into this file")
    ap.add_argument("--postgres", default=os.environ.get("RAFTPACE_TEST_POSTGRES") or
                    "postgres://postgres@127.0.0.1:5432/postgres", help="PostgreSQL URL of the Postgres pacer's table")
    ap.add_argument("--redis", default="", help="HOST:PORT of a Redis server to use (default: start a redis-server)")
    ap.add_argument("--json", action="store_true", help="print one JSON document of the figures; the table goes to stderr")
    args = ap.parse_args()
    if not args.binary:
        raise SystemExit("set RAFTPACE_BINARY (or --binary) to a raftpace binary")
    import psycopg2
    pg_url = args.postgres
    out = sys.stderr if args.json else sys.stdout
    doc = {"python": sys.version.split()[0], "cpus": os.cpu_count(),
           "loadavg": [float(x) for x in open("/proc/loadavg").read().split()[:3]],
           "n": args.n, "latency": [], "throughput": [], "target_per_s": 20000}

    def p(*a):
        print(*a, file=out)

    tmp = tempfile.mkdtemp(prefix="rp-py-bench-")
    agent = redis_proc = None
    try:
        statements = server_statements(args.binary)
        agent = Agent(args.binary, tmp=os.path.join(tmp, "agent")).start()
        agent.set_limit(KEY, RATE, BURST)
        sock = agent.socket
        if args.redis:
            r = connect_redis(args.redis)
        else:
            redis_proc, r = start_redis(tmp)
        rows = []

        c = raftpace.Client(socket=sock, timeout=10)
        rows.append(("agent socket: client.reserve", measure(lambda: c.reserve(KEY, max_wait=MAX_WAIT), args.n)))

        pg = psycopg2.connect(pg_url)
        pg.autocommit = True
        cur = pg.cursor()
        cur.execute(statements["postgres_create"])
        params = {"key": KEY, "t": T_US, "tau": TAU_US, "maxwait": MAX_WAIT * 1e6}

        def pg_reserve():
            cur.execute(statements["postgres_reserve"], params)
            cur.fetchone()
        rows.append(("postgres: upsert-and-return", measure(pg_reserve, args.n)))
        cur.execute("DELETE FROM %s WHERE key = %%s" % statements["postgres_table"], (KEY,))
        pg.close()

        sha = r.script_load(statements["redis_gcra"])
        rkey = "raftpace-bench:" + KEY
        rows.append(("redis: GCRA EVALSHA", measure(lambda: r.evalsha(sha, 1, rkey, T_US, TAU_US, MAX_WAIT * 1e6),
                                                    args.n)))

        for rid, (name, m) in zip(("socket", "postgres", "redis"), rows):
            doc["latency"].append({"id": rid, "label": name, "p50_s": m["p50"], "p99_s": m["p99"], "ops_per_s": m["ops"]})
        base = rows[1][1]
        p("one Python process, %d reservations each (%s, load average %s)"
              % (args.n, sys.version.split()[0], " ".join(open("/proc/loadavg").read().split()[:3])))
        p("%-30s %9s %9s %10s %13s" % ("path", "p50 us", "p99 us", "ops/s", "p50 vs pg"))
        for name, m in rows:
            p("%-30s %9.0f %9.0f %10.0f %12.2fx" % (name, m["p50"] * 1e6, m["p99"] * 1e6, m["ops"],
                                                      m["p50"] / base["p50"]))
        sp = rows[0][1]["p50"] / base["p50"]
        p("target: socket p50 <= 0.5x the Postgres statement's: %s (%.2fx)" % ("met" if sp <= 0.5 else "NOT met", sp))

        rate, agent_cpu, py_cpu = throughput(agent, sock, args.procs, args.secs, perf_out=args.perf)
        doc["throughput"].append({"id": "client", "label": "raftpace.Client", "procs": args.procs, "secs": args.secs,
                                  "per_s": rate, "agent_cpu_s": agent_cpu, "client_cpu_s": py_cpu})
        p()
        p("agent throughput: %d processes x %.0fs of reserve(max_wait=%g): %.0f reservations/s" %
              (args.procs, args.secs, MAX_WAIT, rate, ))
        p("  CPU over the run: agent %.2fs (%.0f%% of a core), Python clients %.2fs (%.0f%%), %d cores;"
              % (agent_cpu, 100 * agent_cpu / args.secs, py_cpu, 100 * py_cpu / args.secs, os.cpu_count()))
        n = rate * args.secs
        if n:
            p("  per reservation: agent %.0f us CPU, Python client %.0f us CPU" % (agent_cpu / n * 1e6, py_cpu / n * 1e6))
        p("target: >= 20000/s on 2 cores: %s" % ("met" if rate >= 20000 else "NOT met"))

        rate, agent_cpu, py_cpu = throughput(agent, sock, args.procs, args.secs, target=hammer_raw)
        doc["throughput"].append({"id": "raw", "label": "raw socket", "procs": args.procs, "secs": args.secs,
                                  "per_s": rate, "agent_cpu_s": agent_cpu, "client_cpu_s": py_cpu})
        p()
        p("agent ceiling, minimal raw-socket clients (no raftpace.Client): %d processes x %.0fs: %.0f reservations/s"
              % (args.procs, args.secs, rate))
        p("  CPU over the run: agent %.2fs (%.0f%% of a core), raw clients %.2fs (%.0f%%)"
              % (agent_cpu, 100 * agent_cpu / args.secs, py_cpu, 100 * py_cpu / args.secs))
        n = rate * args.secs
        if n:
            p("  per reservation: agent %.0f us CPU, raw client %.0f us CPU" % (agent_cpu / n * 1e6, py_cpu / n * 1e6))
        if args.json:
            json.dump(doc, sys.stdout, indent=1)
            print()
    finally:
        if agent is not None:
            agent.stop()
        for proc in (redis_proc,):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
