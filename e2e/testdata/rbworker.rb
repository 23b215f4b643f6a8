# frozen_string_literal: true

# A Ruby worker for the e2e tests (e2e/workers_test.go), the twin of
# pyworker.py: the same flags, modes and output.
#
# It admits events of one key in a closed loop and appends each admitted
# event to its own timeline file in the format of internal/timeline:
#
#     unix_nanos node_id key\n
#
# one write(2) per line (IO#syswrite) on an O_APPEND descriptor (as
# timeline.Writer does), the time taken on the wall clock (CLOCK_REALTIME,
# like the agent's time.Now().UnixNano()) right after the event was
# admitted, so that the timelines of processes on one host merge on one
# clock.
#
# Modes:
#
#   agent  (default) client.wait(key) through the agent's --socket: the real
#          client, use-by rule and all.
#   solo   no agent: each process paces alone at --rate/--burst with a local
#          GCRA (the non-vacuity twin: N workers admit ~N x R).
#   naive  a client that IGNORES the use-by rule: reserve_grant, sleep to
#          go_at, go, never checking Grant#late?.
#
# Every grant the agent gives (agent and naive modes) is printed on stdout as
#
#     GRANT recv_ns go_at_ns use_by_ns wait_s
#
# (times on the wall clock: the grant's monotonic times plus the wall
# clock's offset at that moment). With --hold-wait S the first grant whose
# wait is at least S is printed as "HOLD ..." instead and the worker then
# blocks reading one line from stdin before it goes on.
#
# The worker prints READY once it can start (its agent knows the key's
# limit). The run starts at --start-at (unix seconds, wall clock; -1: read
# it from a line of stdin after READY) and ends after --duration seconds or
# --events events, whichever comes first, or with the first event after the
# held grant. SIGTERM ends it too.

require "optparse"
require "raftpace"

def mono
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

def wall_ns
  Process.clock_gettime(Process::CLOCK_REALTIME, :nanosecond)
end

# the wall clock minus the monotonic clock, now
def wall_offset_ns
  wall_ns - Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
end

def main
  a = { socket: "", mode: "agent", rate: 0.0, burst: 1, start_at: 0.0, duration: 10.0, events: 0, hold_wait: 0.0 }
  OptionParser.new do |o|
    o.on("--socket PATH", String) { |v| a[:socket] = v }
    o.on("--key KEY", String) { |v| a[:key] = v }
    o.on("--node NODE", String) { |v| a[:node] = v }
    o.on("--timeline PATH", String) { |v| a[:timeline] = v }
    o.on("--mode MODE", %w[agent solo naive]) { |v| a[:mode] = v }
    o.on("--rate R", Float) { |v| a[:rate] = v }
    o.on("--burst B", Integer) { |v| a[:burst] = v }
    o.on("--start-at T", Float) { |v| a[:start_at] = v }
    o.on("--duration S", Float) { |v| a[:duration] = v }
    o.on("--events N", Integer) { |v| a[:events] = v }
    o.on("--hold-wait S", Float) { |v| a[:hold_wait] = v }
  end.parse!(ARGV)
  %i[key node timeline].each { |k| abort("rbworker: --#{k} is required") unless a[k] }
  if a[:mode] == "solo" && a[:rate] <= 0
    abort("rbworker: solo mode needs --rate")
  end

  $stdout.sync = true
  trap("TERM") { exit(0) }
  f = File.open(a[:timeline], File::WRONLY | File::APPEND | File::CREAT, 0o644)
  suffix = " #{a[:node]} #{a[:key]}\n".b
  record = -> { f.syswrite("#{wall_ns}".b + suffix) }

  client = nil
  held = false
  if a[:mode] != "solo"
    client = Raftpace::Client.new(socket: a[:socket], timeout: 10)
    deadline = mono + 20
    begin # the agent beside us may learn of the limit a little later
      client.limit(a[:key])
    rescue Raftpace::UnknownKey
      raise if mono > deadline

      sleep(0.05)
      retry
    end
    reserve = client.method(:reserve_grant)
    # Client#usable_grant calls self.reserve_grant: the singleton method
    # shadows the class's.
    client.define_singleton_method(:reserve_grant) do |key, n: 1, max_wait: 0|
      g = reserve.call(key, n: n, max_wait: max_wait)
      off = wall_offset_ns
      hold = a[:hold_wait] > 0 && !held && g.wait >= a[:hold_wait]
      puts format("%s %d %d %d %.6f", hold ? "HOLD" : "GRANT", (g.recv * 1e9).to_i + off,
                  (g.go_at * 1e9).to_i + off, (g.use_by * 1e9).to_i + off, g.wait)
      if hold
        held = true
        $stdin.gets # the test stops us here, then lets us go
      end
      g
    end
  end
  puts "READY"

  start_at = a[:start_at]
  start_at = Float($stdin.gets) if start_at.negative? # --start-at -1: the test says when
  if start_at.positive?
    d = start_at - wall_ns / 1e9
    sleep(d) if d.positive?
  end
  stop = mono + a[:duration]
  tat = mono # solo: the GCRA's theoretical arrival time
  count = 0
  while mono < stop && (a[:events] <= 0 || count < a[:events])
    case a[:mode]
    when "agent"
      client.wait(a[:key], timeout: [0.0, stop - mono].max + 5)
    when "naive"
      g = client.reserve_grant(a[:key], n: 1, max_wait: 30.0)
      d = g.go_at - mono
      sleep(d) if d.positive?
      # no `if g.late?(mono) then forfeit` here: that is the bug.
    else
      # GCRA: an event may go when now >= tat - (burst-1)/rate.
      now = mono
      tat = [tat, now].max
      go = tat - (a[:burst] - 1) / a[:rate]
      sleep(go - now) if go > now
      tat += 1.0 / a[:rate]
    end
    record.call
    count += 1
    break if client && held # the event after the held grant is what the test looks at
  end
  f.close
  puts "DONE #{count}"
end

main
