# frozen_string_literal: true

require_relative "test_helper"

class ConfigTest < AgentCase
  def setup; end

  def test_neither_set
    e = assert_raises(Raftpace::ConfigError) { with_env({}) { Raftpace::Client.new } }
    assert_kind_of Raftpace::Error, e
    assert_includes e.message, "RAFTPACE_SOCKET"
    assert_includes e.message, "RAFTPACE_ADDR"
  end

  def test_env_socket_wins_and_no_token_on_the_socket
    c = with_env("RAFTPACE_SOCKET" => "/tmp/x.sock", "RAFTPACE_ADDR" => "127.0.0.1:7402",
                 "RAFTPACE_TOKEN" => " t ") { Raftpace::Client.new }
    assert_equal "/tmp/x.sock", c.socket_path
    assert_nil c.address
    assert_nil c.token
    refute c.instance_variable_get(:@headers).key?("Authorization")
  end

  def test_explicit_socket_wins
    c = Raftpace::Client.new(socket: "/tmp/y.sock", url: "127.0.0.1:1")
    assert_equal "/tmp/y.sock", c.socket_path
  end

  def test_addr_forms
    c = with_env("RAFTPACE_ADDR" => "http://127.0.0.1:7402", "RAFTPACE_TOKEN" => "tok") { Raftpace::Client.new }
    assert_equal ["127.0.0.1", 7402], c.address
    assert_equal "Bearer tok", c.instance_variable_get(:@headers)["Authorization"]
    assert_equal ["::1", 9], Raftpace::Client.new(url: "[::1]:9").address
    assert_equal ["agent", 80], Raftpace::Client.new(url: "agent:80").address
    ["nope", "https://x:1", "x:y"].each do |bad|
      assert_raises(Raftpace::ConfigError) { Raftpace::Client.new(url: bad) }
    end
  end

  def test_escape_key
    assert_equal "a%2Fb%3Fc%25d%20%C3%A9", Raftpace.escape_key("a/b?c%d é")
    assert_equal "team:42@x=1&y+$", Raftpace.escape_key("team:42@x=1&y+$")
    assert_equal "a%2Cb%3B", Raftpace.escape_key("a,b;")
    e = assert_raises(Raftpace::InvalidRequest) { Raftpace.escape_key("") }
    assert_equal "key", e.field
    assert_raises(Raftpace::InvalidRequest) { Raftpace.escape_key(:sym) }
  end
end

class MethodsTest < AgentCase
  def test_reserve_and_limit
    @agent.set_limit("a/b é", 10, 2)
    assert_equal [10.0, 2], @client.limit("a/b é")
    assert_equal 0.0, @client.reserve("a/b é")
    assert_equal 0.0, @client.reserve("a/b é")
    d = @client.reserve("a/b é", max_wait: 1)
    assert_kind_of Float, d
    assert_operator d, :>, 0.05
    assert_operator d, :<=, 0.1
    assert(@agent.requests.any? { |r| r.path == "/v1/reserve/a%2Fb%20%C3%A9" })
    assert_equal({ "n" => 1, "max_wait" => 1.0 }, JSON.parse(@agent.requests.last.raw))
  end

  def test_reserve_grant
    @agent.set_limit("k", 100, 1)
    g = @client.reserve_grant("k", max_wait: 1)
    assert g.usable?
    assert_operator g.use_by, :>=, g.go_at
    assert_equal 1, g.n
  end

  def test_reserve_limit_exceeded_consumes_nothing
    @agent.set_limit("k", 1, 1)
    @client.reserve("k")
    tat = @agent.sync { @agent.tat["k"] }
    e = assert_raises(Raftpace::LimitExceeded) { @client.reserve("k", max_wait: 0.1) }
    assert_equal "limit_exceeded", e.code
    assert_equal 429, e.status
    assert_operator e.wait, :>, 0.5
    assert_includes e.message, "exceeds max_wait"
    assert_equal tat, @agent.sync { @agent.tat["k"] }
  end

  def test_reserve_n_too_big_is_invalid
    @agent.set_limit("k", 10, 2)
    e = assert_raises(Raftpace::InvalidRequest) { @client.reserve("k", n: 3) }
    assert_equal "n", e.field
    assert_equal "invalid", e.code
  end

  def test_unknown_key
    e = assert_raises(Raftpace::UnknownKey) { @client.reserve("nope") }
    assert_equal "unknown_key", e.code
    assert_equal 404, e.status
    assert_raises(Raftpace::UnknownKey) { @client.limit("nope") }
  end

  def test_wait_goes_after_the_delay
    @agent.set_limit("k", 10, 1)
    @client.wait("k", timeout: 1)
    t0 = mono
    @client.wait("k", timeout: 1)
    assert_operator mono - t0, :>=, 0.09
    assert_equal 2, @agent.count("POST", "/v1/reserve/k")
    req = JSON.parse(@agent.requests.last.raw)
    assert_operator req["max_wait"], :<=, 1.0
    assert_operator req["max_wait"], :>, 0.5
  end

  def test_wait_too_short_raises_at_once
    @agent.set_limit("k", 1, 1)
    @client.wait("k", timeout: 1)
    t0 = mono
    e = assert_raises(Raftpace::LimitExceeded) { @client.wait("k", timeout: 0.2) }
    assert_operator mono - t0, :<, 0.15
    assert_operator e.wait, :>, 0.5
    assert_equal 1, @agent.sync { @agent.grants.size }
  end

  def test_wait_unbounded_steps
    @agent.set_limit("k", 20, 1)
    3.times { @client.wait("k") }
    assert_equal 3, @agent.sync { @agent.grants.size }
    assert_equal Raftpace::UNBOUNDED_STEP, JSON.parse(@agent.requests.last.raw)["max_wait"]
  end

  def test_within_limit
    @agent.set_limit("k", 1, 1)
    assert_equal :ran, @client.within_limit("k") { :ran }
    ran = false
    e = assert_raises(Raftpace::LimitExceeded) { @client.within_limit("k", wait_timeout: 0.1) { ran = true } }
    refute ran
    assert_equal "limit_exceeded", e.code
    assert_raises(ArgumentError) { @client.within_limit("k") }
  end

  def test_pause_and_paused_for
    @agent.set_limit("k", 100, 1)
    assert_equal 0.0, @client.paused_for("k")
    assert_in_delta 20, @client.pause("k", 20), 0.5
    assert_in_delta 20, @client.pause("k", 5), 0.5 # a longer pause in force stays
    assert_in_delta 20, @client.paused_for("k"), 0.5
    e = assert_raises(Raftpace::Paused) { @client.reserve("k", max_wait: 1) }
    assert_kind_of Raftpace::LimitExceeded, e
    assert_operator e.remaining, :>, 15
    assert_equal e.remaining, e.wait
    assert_equal "paused", e.code
    e = assert_raises(Raftpace::Paused) { @client.wait("k", timeout: 0.2) }
    assert_operator e.remaining, :>, 15
    ran = false
    assert_raises(Raftpace::Paused) { @client.within_limit("k", wait_timeout: 0.2) { ran = true } }
    refute ran
    # any valid key may be paused, limit or not
    assert_in_delta 3, @client.pause("no-limit", 3), 0.5
  end

  def test_pause_invalid
    e = assert_raises(Raftpace::InvalidRequest) { @client.pause("k", 0) }
    assert_equal "seconds", e.field
    assert_includes e.message, "(0, 86400]"
  end

  def test_short_pause_is_waited_out
    @agent.set_limit("k", 100, 1)
    @client.pause("k", 0.2)
    t0 = mono
    @client.wait("k", timeout: 2)
    assert_operator mono - t0, :>=, 0.15
  end

  def test_forfeit
    @agent.set_limit("k", 100, 1)
    assert_nil @client.forfeit("k", n: 1)
    assert_equal [["k", 1]], @agent.sync { @agent.forfeits.dup }
    assert_nil @client.forfeit("nope") # best effort: never raises
  end

  def test_slot_block_releases
    @agent.set_cap("global", 1)
    @agent.set_cap("team:42", 2)
    v = @client.slot(["global", "team:42"], ttl: 10) do |s|
      assert_equal ["global", "team:42"], s.keys
      assert_operator s.remaining, :>, 9
      assert_operator s.remaining, :<=, 10
      e = assert_raises(Raftpace::ConcurrencyLimit) { @client.slot("global") { flunk "ran" } }
      assert_equal ["global"], e.full
      assert_equal "concurrency_limit", e.code
      :value
    end
    assert_equal :value, v
    assert_empty @agent.sync { @agent.slots.dup }
    assert_equal 1, @agent.count("DELETE", "/v1/slots/s-")
    body = JSON.parse(@agent.requests.find { |r| r.method == "POST" && r.path == "/v1/slots" }.raw)
    assert_equal({ "keys" => ["global", "team:42"], "ttl" => 10.0, "max_wait" => 0.0 }, body)
  end

  def test_slot_released_on_exception
    @agent.set_cap("c", 1)
    assert_raises(RuntimeError) { @client.slot("c") { raise "boom" } }
    assert_empty @agent.sync { @agent.slots.dup }
    @client.slot("c") { nil }
  end

  def test_slot_max_wait_waits_for_room
    @agent.set_cap("c", 1)
    s = @client.slot("c") # no block: the Slot
    assert_kind_of Raftpace::Slot, s
    t = Thread.new { sleep 0.2; s.release }
    t0 = mono
    @client.slot("c", max_wait: 3) { nil }
    assert_operator mono - t0, :>=, 0.15
    t.join
    assert s.released?
    s.release # idempotent
    assert_equal 2, @agent.count("DELETE", "/v1/slots/")
  end

  def test_slot_unknown_cap_and_gone_slot
    assert_raises(Raftpace::UnknownKey) { @client.slot("nocap") { flunk "ran" } }
    gone = Raftpace::Slot.new(@client, "s-gone-1", ["x"], mono + 1)
    assert_nil gone.release # unknown_slot: it ends at its deadline
    e = assert_raises(Raftpace::InvalidRequest) { @client.slot("c", ttl: 31) { nil } }
    assert_equal "ttl", e.field
  end

  def test_slot_release_failure_does_not_mask_the_block
    @agent.set_cap("c", 1)
    v = @client.slot("c") do |_s|
      @agent.fail_next("/v1/slots/", 503, { "error" => "no leader", "code" => "no_leader" })
      :done
    end
    assert_equal :done, v
  end

  def test_connection_reused
    @agent.set_limit("k", 100, 5)
    3.times { @client.reserve("k") }
    assert_equal 1, @agent.sync { @agent.requests.map(&:conn_id).uniq.size }
    assert_equal 1, @client.instance_variable_get(:@pool).idle_count
  end

  def test_idle_close_is_retried_once_on_a_fresh_connection
    @agent.set_limit("k", 100, 5)
    @agent.close_idle = true
    3.times { assert_equal 0.0, @client.reserve("k") }
    assert_equal 3, @agent.sync { @agent.requests.map(&:conn_id).uniq.size }
  end
end

class QuotaWaitTest < AgentCase
  # A spent quota is never reserved ahead: wait sleeps the whole wait the
  # agent names (to the window's reset), once, and asks again; a reset past
  # the timeout raises at once.
  def test_wait_sleeps_to_a_quota_reset
    @agent.set_limit("k", 100, 1)
    spent = { "error" => "spent", "code" => "quota_exhausted", "key" => "k", "wait" => 0.3, "reset" => "2026-12-07T00:00:00Z" }
    @agent.fail_next("/v1/reserve/k", 429, spent, "Retry-After" => "1")
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    @client.wait("k", timeout: 5)
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0, :>=, 0.29
    assert_equal 2, @agent.count("POST", "/v1/reserve/")
    @agent.fail_next("/v1/reserve/k", 429, spent.merge("wait" => 30.0), "Retry-After" => "30")
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    e = assert_raises(Raftpace::QuotaExhausted) { @client.wait("k", timeout: 2) }
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0, :<, 1.0
    assert_equal ["k", "2026-12-07T00:00:00Z"], [e.key, e.reset]
  end
end

class ErrorsTest < AgentCase
  def answer(status, body, headers = {})
    @agent.fail_next("/v1/reserve/k", status, body, headers)
    assert_raises(Raftpace::Error) { @client.reserve("k", max_wait: 1) }
  end

  def test_every_code
    @agent.set_limit("k", 100, 1)
    e = answer(429, { "error" => "too long", "code" => "limit_exceeded", "wait" => 1.5 }, "Retry-After" => "2")
    assert_instance_of Raftpace::LimitExceeded, e
    assert_equal 1.5, e.wait
    assert_equal "too long", e.message
    e = answer(429, { "error" => "paused", "code" => "paused", "remaining" => 12.0 })
    assert_instance_of Raftpace::Paused, e
    assert_equal 12.0, e.remaining
    e = answer(429, { "error" => "full", "code" => "concurrency_limit", "full" => ["a"] })
    assert_instance_of Raftpace::ConcurrencyLimit, e
    assert_equal ["a"], e.full
    e = answer(404, { "error" => "no limit", "code" => "unknown_key" })
    assert_instance_of Raftpace::UnknownKey, e
    e = answer(404, { "error" => "no slot", "code" => "unknown_slot" })
    assert_instance_of Raftpace::UnknownSlot, e
    %w[no_leader stopped overloaded closed].each do |code|
      e = answer(503, { "error" => "agent says #{code}", "code" => code }, "Retry-After" => "3")
      assert_instance_of Raftpace::Unavailable, e
      assert_equal code, e.code
      assert_equal 503, e.status
      assert_equal 3.0, e.retry_after
      assert_equal "agent says #{code}", e.message
    end
    e = answer(400, { "error" => "bad n", "code" => "invalid", "field" => "n" })
    assert_instance_of Raftpace::InvalidRequest, e
    assert_equal "n", e.field
    e = answer(401, { "error" => "no token", "code" => "unauthorized" })
    assert_instance_of Raftpace::Unauthorized, e
    e = answer(500, { "error" => "a bug", "code" => "internal" })
    assert_instance_of Raftpace::Error, e
    assert_equal "internal", e.code
    e = answer(404, { "error" => "no route", "code" => "not_found" })
    assert_instance_of Raftpace::Error, e
    e = answer(405, { "error" => "wrong method", "code" => "method_not_allowed" })
    assert_equal "method_not_allowed", e.code
    # without a code: by status
    e = answer(502, "<html>bad gateway</html>")
    assert_instance_of Raftpace::Unavailable, e
    assert_nil e.code
    assert_equal 1.0, e.retry_after
    assert_includes e.message, "bad gateway"
    e = answer(429, "slow down", "Retry-After" => "4")
    assert_instance_of Raftpace::LimitExceeded, e
    assert_equal 4.0, e.wait
    e = answer(400, "")
    assert_instance_of Raftpace::InvalidRequest, e
    assert_equal "HTTP 400", e.message
    e = answer(403, "")
    assert_instance_of Raftpace::Unauthorized, e
    assert_equal 0, @agent.sync { @agent.grants.size } # none of these was an admission
  end

  def test_hierarchy
    [Raftpace::ConfigError, Raftpace::LimitExceeded, Raftpace::ConcurrencyLimit, Raftpace::UnknownKey,
     Raftpace::UnknownSlot, Raftpace::Unavailable, Raftpace::InvalidRequest, Raftpace::Unauthorized].each do |k|
      assert_operator k, :<, Raftpace::Error
    end
    assert_operator Raftpace::Paused, :<, Raftpace::LimitExceeded
    assert_operator Raftpace::Error, :<, StandardError
  end

  def test_5xx_is_never_an_admission
    @agent.set_limit("k", 100, 1)
    @agent.fail_next("/v1/reserve/k", 500, { "error" => "a bug", "code" => "internal" })
    assert_raises(Raftpace::Error) { @client.reserve("k") }
    @agent.fail_next("/v1/reserve/k", 503, { "error" => "no leader", "code" => "no_leader" }, "Retry-After" => "1")
    assert_raises(Raftpace::Unavailable) { @client.wait("k", timeout: 0.5) }
    assert_equal 0, @agent.sync { @agent.grants.size }
  end

  def test_broken_connection_is_never_an_admission
    @agent.set_limit("k", 100, 1)
    @agent.drop_next = 1
    e = assert_raises(Raftpace::Unavailable) { @client.reserve("k") } # a fresh connection: not repeated
    assert_equal "unreachable", e.code
    assert_equal 1, @agent.count("POST", "/v1/reserve/k")
    @client.reserve("k") # the client recovers
  end

  def test_dead_agent
    @agent.close
    e = assert_raises(Raftpace::Unavailable) { @client.reserve("k") }
    assert_equal "unreachable", e.code
    e = assert_raises(Raftpace::Unavailable) { @client.wait("k", timeout: 0.2) }
    assert_equal "unreachable", e.code
  end

  def test_timeout_is_unavailable
    @agent.set_limit("k", 100, 1)
    c = Raftpace::Client.new(socket: @agent.socket_path, timeout: 0.2)
    @agent.slow_answer = ->(_m, _p) { 0.5 }
    e = assert_raises(Raftpace::Unavailable) { c.reserve("k") }
    assert_equal "unreachable", e.code
    assert_includes e.message, "did not answer"
  ensure
    c&.close
  end

  def test_wait_retries_unavailable
    @agent.set_limit("k", 100, 1)
    @agent.fail_next("/v1/reserve/k", 503, { "error" => "overloaded", "code" => "overloaded" }, "Retry-After" => "1")
    t0 = mono
    @client.wait("k", timeout: 5)
    assert_operator mono - t0, :>=, 0.9 # honoured Retry-After
    assert_equal 2, @agent.count("POST", "/v1/reserve/k")
    assert_equal 1, @agent.sync { @agent.grants.size }
  end
end

class TokenTest < AgentCase
  def tcp?
    true
  end

  def token
    "sekret"
  end

  def test_token_is_sent_on_tcp
    @agent.set_limit("k", 100, 1)
    assert_equal 0.0, @client.reserve("k")
    assert_equal "Bearer sekret", @agent.requests.last.headers["authorization"]
    bad = Raftpace::Client.new(url: "http://#{@agent.url}", token: "wrong")
    e = assert_raises(Raftpace::Unauthorized) { bad.reserve("k") }
    assert_equal "unauthorized", e.code
    assert_equal 401, e.status
    assert_equal "missing or wrong token", e.message
  end
end

class TimingTest < AgentCase
  def grace
    0.05
  end

  def test_slow_answer_is_forfeited_and_reserved_again
    @agent.set_limit("k", 100, 1)
    slow = [0.3]
    @agent.slow_answer = ->(m, p) { m == "POST" && p.start_with?("/v1/reserve/") ? slow.shift.to_f : 0.0 }
    assert_equal 0.0, @client.reserve("k", max_wait: 1)
    assert_equal 2, @agent.count("POST", "/v1/reserve/k")
    assert_equal [["k", 1]], @agent.sync { @agent.forfeits.dup }
  end

  def test_wait_forfeits_when_stopped_past_use_by
    @agent.set_limit("k", 10, 1)
    @client.reserve("k")
    stalls = [0.4] # the first sleep overshoots like a SIGSTOP
    @client.instance_variable_set(:@sleeper, ->(d) { sleep(d + stalls.shift.to_f) })
    @client.wait("k", timeout: 5)
    assert_equal 1, @agent.sync { @agent.forfeits.size }
    assert_equal 3, @agent.count("POST", "/v1/reserve/k")
  end

  def test_always_late_gives_up
    @agent.set_limit("k", 1000, 1)
    @agent.slow_answer = ->(m, _p) { m == "POST" ? 0.1 : 0.0 }
    e = assert_raises(Raftpace::Unavailable) { @client.reserve("k", max_wait: 1) }
    assert_equal "late", e.code
    assert_equal Raftpace::MAX_LATE, @agent.count("POST", "/v1/reserve/k")
  end

  def test_go_no_earlier_than_recv_plus_wait
    @agent.set_limit("k", 5, 1)
    @agent.grace = 0.5
    @client.reserve("k")
    g = @client.reserve_grant("k", max_wait: 1)
    assert_in_delta 0.2, g.wait, 0.05
    assert_in_delta g.recv + g.wait, g.go_at, 1e-9
    assert_in_delta g.sent + g.held + g.use_by_s, g.use_by, 1e-9
    assert_operator g.delay(g.recv), :>, 0.1
    refute g.late?(g.go_at)
    assert g.late?(g.use_by + 0.001)
  end
end

class ThreadsTest < AgentCase
  def test_threads_share_a_client
    rate = 50
    burst = 2
    @agent.set_limit("k", rate, burst)
    times = Queue.new
    ts = Array.new(4) do
      Thread.new do
        10.times do
          @client.wait("k", timeout: 10)
          times << mono
        end
      end
    end
    ts.each(&:join)
    all = Array.new(times.size) { times.pop }.sort
    assert_equal 40, all.size
    assert_equal 40, @agent.sync { @agent.grants.size }
    assert_operator all.last - all.first, :>=, (40 - burst) / rate.to_f * 0.9
    w = 0.2
    all.each_with_index do |t0, i|
      n = all[i..-1].count { |t| t - t0 <= w }
      assert_operator n, :<=, rate * w + burst + 1
    end
    pool = @client.instance_variable_get(:@pool)
    assert_operator pool.idle_count, :<=, 4
    assert_operator pool.idle_count, :>=, 1
  end
end

class ForkTest < AgentCase
  def test_child_uses_its_own_connection
    skip "no fork on this platform" unless Process.respond_to?(:fork)
    @agent.set_limit("k", 1000, 10)
    @client.reserve("k")
    parent_conn = @agent.requests.last.conn_id
    pid, status = reserve_in_child(@client, "k")
    assert_equal 0, status.exitstatus
    child = @agent.requests.last
    refute_equal parent_conn, child.conn_id
    assert_equal pid, child.peer_pid if child.peer_pid
    @client.reserve("k") # the parent's connection is untouched
    assert_equal parent_conn, @agent.requests.last.conn_id
    assert_equal Process.pid, @agent.requests.last.peer_pid if @agent.requests.last.peer_pid
  end
end
