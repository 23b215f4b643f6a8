"""A Python worker for the e2e tests (e2e/workers_test.go).

It admits events of one key in a closed loop and appends each admitted event
to its own timeline file in the format of internal/timeline:

    unix_nanos node_id key\\n

one os.write(2) per line on an O_APPEND descriptor (as timeline.Writer
does), the time taken on the wall clock (time.time_ns, like the agent's
time.Now().UnixNano()) right after the event was admitted, so that the
timelines of processes on one host merge on one clock.

Modes:

  agent  (default) client.wait(key) through the agent's --socket: the real
         client, use-by rule and all.
  solo   no agent: each process paces alone at --rate/--burst with a local
         GCRA (the non-vacuity twin: N workers admit ~N x R).
  naive  a client that IGNORES the use-by rule: reserve_grant, sleep to
         go_at, go, never checking Grant.late (what the SIGSTOP test must
         catch).

Every grant the agent gives (agent and naive modes) is printed on stdout as

    GRANT recv_ns go_at_ns use_by_ns wait_s

(times on the wall clock: the grant's monotonic times plus the wall clock's
offset at that moment). With --hold-wait S the first grant whose wait is at
least S is printed as "HOLD ..." instead and the worker then blocks reading
one line from stdin before it goes on: the test SIGSTOPs it meanwhile, so
the grant goes stale exactly as if the stop had come right after receipt.

The worker prints READY once it can start (its agent knows the key's
limit). The run starts at --start-at (unix seconds, wall clock; -1: read
it from a line of stdin after READY) and ends after --duration seconds or
--events events, whichever comes first, or with the first event after the
held grant. SIGTERM ends it too.
"""

import argparse
import os
import signal
import sys
import time

import raftpace


def wall_offset_ns():
    # the wall clock minus the monotonic clock, now
    return time.time_ns() - time.monotonic_ns()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--socket", default="")
    p.add_argument("--key", required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--timeline", required=True)
    p.add_argument("--mode", choices=("agent", "solo", "naive"), default="agent")
    p.add_argument("--rate", type=float, default=0.0)
    p.add_argument("--burst", type=int, default=1)
    p.add_argument("--start-at", type=float, default=0.0)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--events", type=int, default=0)
    p.add_argument("--hold-wait", type=float, default=0.0)
    a = p.parse_args()

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    fd = os.open(a.timeline, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    suffix = (" %s %s\n" % (a.node, a.key)).encode("utf-8")

    def record():
        os.write(fd, b"%d" % time.time_ns() + suffix)

    client = None
    held = [False]
    if a.mode != "solo":
        client = raftpace.Client(socket=a.socket, timeout=10)
        end = time.monotonic() + 20
        while True:  # the agent beside us may learn of the limit a little later
            try:
                client.get_limit(a.key)
                break
            except raftpace.UnknownKey:
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)
        reserve = client.reserve_grant

        def hooked(key, n=1, max_wait=0.0):
            g = reserve(key, n, max_wait)
            off = wall_offset_ns()
            hold = a.hold_wait > 0 and not held[0] and g.wait >= a.hold_wait
            print("%s %d %d %d %.6f" % ("HOLD" if hold else "GRANT", int(g.recv * 1e9) + off,
                                        int(g.go_at * 1e9) + off, int(g.use_by * 1e9) + off, g.wait), flush=True)
            if hold:
                held[0] = True
                sys.stdin.readline()  # the test stops us here, then lets us go
            return g

        # Client._usable_grant calls self.reserve_grant: the instance
        # attribute shadows the method.
        client.reserve_grant = hooked
    print("READY", flush=True)

    if a.start_at < 0:
        a.start_at = float(sys.stdin.readline())  # --start-at -1: the test says when
    if a.start_at > 0:
        d = a.start_at - time.time()
        if d > 0:
            time.sleep(d)
    stop = time.monotonic() + a.duration
    tat = time.monotonic()  # solo: the GCRA's theoretical arrival time
    count = 0
    while time.monotonic() < stop and (a.events <= 0 or count < a.events):
        if a.mode == "agent":
            client.wait(a.key, timeout=max(0.0, stop - time.monotonic()) + 5)
        elif a.mode == "naive":
            g = client.reserve_grant(a.key, 1, 30.0)
            d = g.go_at - time.monotonic()
            if d > 0:
                time.sleep(d)
            # no `if g.late(time.monotonic()): forfeit` here: that is the bug.
        else:
            # GCRA: an event may go when now >= tat - (burst-1)/rate.
            now = time.monotonic()
            tat = max(tat, now)
            go = tat - (a.burst - 1) / a.rate
            if go > now:
                time.sleep(go - now)
            tat += 1.0 / a.rate
        record()
        count += 1
        if client is not None and held[0]:
            break  # the event after the held grant is what the test looks at
    os.close(fd)
    print("DONE %d" % count, flush=True)


if __name__ == "__main__":
    main()
