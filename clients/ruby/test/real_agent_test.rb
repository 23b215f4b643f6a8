# frozen_string_literal: true

# The client against the REAL agent: set RAFTPACE_BINARY to the raftpace
# binary (go build -o /tmp/raftpace ./cmd/raftpace).
#
# Skipped only when RAFTPACE_BINARY is unset. When it is set, an agent that
# does not start (or does not serve its --socket) FAILS these tests.

require_relative "test_helper"
require "open3"
require "tmpdir"
require "fileutils"
require "net/http"

# One real agent for the whole run, started by the first test that needs it.
module RealAgent
  BINARY = ENV.fetch("RAFTPACE_BINARY", "")
  START_TIMEOUT = Float(ENV.fetch("RAFTPACE_START_TIMEOUT", "30"))

  class << self
    attr_reader :sock, :http, :client

    def start!
      return if @started
      raise @failure if @failure

      @started = true
      @dir = Dir.mktmpdir("rp-rb-agent-")
      @sock = File.join(@dir, "s.sock")
      @ready = File.join(@dir, "ready.json")
      @log_path = File.join(@dir, "agent.log")
      args = [BINARY, "agent", "--node-id", "a", "--bootstrap-expect", "1",
              "--data-dir", File.join(@dir, "data"), "--socket", @sock,
              "--http", "127.0.0.1:0", "--bind", "127.0.0.1:0", "--gossip-bind", "127.0.0.1:0",
              "--raft-timing", "fast", "--ready-file", @ready, "--leave-on-terminate=false"]
      begin
        @pid = Process.spawn(*args, out: @log_path, err: %i[child out], in: File::NULL)
      rescue SystemCallError => e
        fail!("RAFTPACE_BINARY=#{BINARY} does not run: #{e.message}")
      end
      @http = wait_ready
      @client = Raftpace::Client.new(socket: @sock, timeout: 10)
    rescue StandardError, Minitest::Assertion => e
      @failure = e
      stop
      raise
    end

    def fail!(msg)
      raise Minitest::Assertion, msg
    end

    def agent_log
      File.exist?(@log_path) ? File.binread(@log_path)[-4000..-1] || File.binread(@log_path) : ""
    rescue SystemCallError
      ""
    end

    def wait_ready
      finish = Process.clock_gettime(Process::CLOCK_MONOTONIC) + START_TIMEOUT
      while Process.clock_gettime(Process::CLOCK_MONOTONIC) < finish
        _, status = Process.wait2(@pid, Process::WNOHANG)
        if status
          @pid = nil
          fail!("the agent exited with #{status.exitstatus.inspect} before it was ready:\n#{agent_log}")
        end
        if File.exist?(@ready) && File.exist?(@sock)
          doc = begin
            JSON.parse(File.read(@ready))
          rescue JSON::ParserError
            nil
          end
          # The ready file says the agent listens; /readyz that its node
          # has a leader and holds its share (before that a reservation is
          # a retryable 503 no_leader, not an answer about the key).
          return doc["http_addr"] if doc.is_a?(Hash) && doc["http_addr"] && agent_ready?(doc["http_addr"])
        end
        sleep 0.1
      end
      fail!("the agent was not ready (ready file with http_addr and socket #{@sock}) within " \
            "#{START_TIMEOUT}s:\n#{agent_log}")
    end

    def agent_ready?(addr)
      host, port = addr.split(":")
      Net::HTTP.start(host, port.to_i, open_timeout: 1, read_timeout: 1) { |h| h.get("/readyz").code == "200" }
    rescue StandardError
      false
    end

    def stop
      @client&.close
      if @pid
        begin
          Process.kill("TERM", @pid)
          finish = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
          until Process.wait2(@pid, Process::WNOHANG)
            if Process.clock_gettime(Process::CLOCK_MONOTONIC) > finish
              Process.kill("KILL", @pid)
              Process.wait2(@pid)
              break
            end
            sleep 0.05
          end
        rescue SystemCallError
          nil
        end
        @pid = nil
      end
      FileUtils.rm_rf(@dir) if @dir
      @dir = nil
    end
  end
end

Minitest.after_run { RealAgent.stop }

class RealAgentTest < Minitest::Test
  include ForkCheck
  def setup
    skip "RAFTPACE_BINARY is unset: set it to a raftpace binary to test against the real agent" if RealAgent::BINARY.empty?
    RealAgent.start!
    @client = RealAgent.client
  end

  def mono
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  def cli(*args)
    env = { "RAFTPACE_TOKEN" => nil }
    out, err, status = Open3.capture3(env, RealAgent::BINARY, *args, "--addr", RealAgent.http)
    assert status.success?, "raftpace #{args.join(' ')}: #{out}#{err}"
    out
  end

  def eventually
    finish = mono + 10
    begin
      yield
    rescue Raftpace::UnknownKey
      raise if mono > finish

      sleep 0.1 # the agent beside us may learn of it a little later
      retry
    end
  end

  def set_limit(key, rate, burst, *extra)
    cli("limit", "set", key, "--rate", rate.to_s, "--burst", burst.to_s, *extra)
    eventually { @client.limit(key) }
  end

  def test_quota
    set_limit("rb-quota", 100, 3, "--quota", "3/day")
    r = @client.remaining("rb-quota")
    assert_equal ["3/day", 3, 0, 3], [r["quota"], r["left"], r["used"], r["tokens"]]
    assert_equal 0.0, @client.reserve("rb-quota", n: 3, max_wait: 1)
    e = assert_raises(Raftpace::QuotaExhausted) { @client.reserve("rb-quota", max_wait: 600) }
    assert_kind_of Raftpace::LimitExceeded, e
    assert_equal ["quota_exhausted", "rb-quota"], [e.code, e.key]
    assert_match(/T00:00:00Z\z/, e.reset)
    assert_operator e.wait, :>, 0
    assert_raises(Raftpace::QuotaExhausted) { @client.wait("rb-quota", timeout: 1) }
    assert_equal 0, @client.remaining("rb-quota")["left"]
    set_limit("rb-quota-none", 10, 2)
    refute @client.remaining("rb-quota-none").key?("quota")
  end

  def test_limit_and_reserve
    assert_equal [10.0, 2], set_limit("rb/limit-é", 10, 2)
    assert_equal 0.0, @client.reserve("rb/limit-é", max_wait: 1)
    g = @client.reserve_grant("rb/limit-é", max_wait: 1)
    assert_operator g.use_by, :>=, g.go_at
    e = assert_raises(Raftpace::LimitExceeded) { @client.reserve("rb/limit-é", n: 2, max_wait: 0) }
    assert_equal "limit_exceeded", e.code
    e = assert_raises(Raftpace::InvalidRequest) { @client.reserve("rb/limit-é", n: 3) }
    assert_equal "n", e.field
  end

  def test_several_keys_one_event
    set_limit("rb-all-tenant", 10, 1)
    set_limit("rb-all-global", 2, 1)
    both = ["rb-all-tenant", ["rb-all-global", 1]]
    assert_equal 0.0, @client.reserve_all(both, max_wait: 1)
    e = assert_raises(Raftpace::LimitExceeded) { @client.reserve_all(both, max_wait: 0) }
    assert_equal "rb-all-global", e.key
    assert_operator e.wait, :>, 0.3
    # The refusal consumed nothing of the tenant.
    assert_operator @client.reserve("rb-all-tenant", max_wait: 1), :<=, 0.15
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    @client.wait_all(both, timeout: 5)
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0, :>, 0.2
    assert_raises(Raftpace::UnknownKey) { @client.reserve_all(["rb-all-tenant", "rb-no-such-key"], max_wait: 1) }
    e = assert_raises(Raftpace::InvalidRequest) { @client.reserve_all(["rb-all-tenant", "rb-all-tenant"]) }
    assert_equal "keys", e.field
  end

  def test_unknown_key
    assert_raises(Raftpace::UnknownKey) { @client.reserve("rb-no-such-key") }
    e = assert_raises(Raftpace::UnknownKey) { @client.limit("rb-no-such-key") }
    assert_equal "unknown_key", e.code
  end

  def test_wait_holds_the_rate
    rate = 20
    burst = 2
    set_limit("rb-rate", rate, burst)
    times = Queue.new
    ts = Array.new(4) do
      Thread.new do
        10.times do
          @client.wait("rb-rate", timeout: 10)
          times << mono
        end
      end
    end
    ts.each(&:join)
    all = Array.new(times.size) { times.pop }.sort
    assert_equal 40, all.size
    # the ceiling R*W + B (+ R*delta: allow 1 for the grace) in every window
    w = 0.5
    all.each_with_index do |t0, i|
      assert_operator all[i..-1].count { |t| t - t0 <= w }, :<=, rate * w + burst + 1
    end
    assert_operator all.last - all.first, :>=, (40 - burst) / rate.to_f * 0.9
  end

  def test_within_limit
    set_limit("rb-within", 1, 1)
    assert_equal :ran, @client.within_limit("rb-within", wait_timeout: 2) { :ran }
    ran = false
    assert_raises(Raftpace::LimitExceeded) { @client.within_limit("rb-within", wait_timeout: 0.1) { ran = true } }
    refute ran
  end

  def test_pause
    set_limit("rb-pause", 100, 1)
    assert_equal 0.0, @client.paused_for("rb-pause")
    assert_in_delta 20, @client.pause("rb-pause", 20), 1
    assert_in_delta 20, @client.paused_for("rb-pause"), 1
    e = assert_raises(Raftpace::Paused) { @client.wait("rb-pause", timeout: 0.5) }
    assert_operator e.remaining, :>, 15
    e = assert_raises(Raftpace::InvalidRequest) { @client.pause("rb-pause", 0) }
    assert_equal "seconds", e.field
  end

  def test_slots
    cli("slots", "set", "rb-cap", "--max", "1")
    s = eventually { @client.slot("rb-cap", ttl: 30) }
    begin
      assert_operator s.remaining, :>, 25
      e = assert_raises(Raftpace::ConcurrencyLimit) { @client.slot("rb-cap") { flunk "ran" } }
      assert_equal ["rb-cap"], e.full
    ensure
      s.release
    end
    assert_equal :ok, @client.slot(["rb-cap"], max_wait: 1) { :ok }
    e = assert_raises(Raftpace::UnknownKey) { @client.slot("rb-no-cap") { flunk "ran" } }
    assert_equal "unknown_key", e.code
  end

  def test_fork
    set_limit("rb-fork", 1000, 10)
    @client.reserve("rb-fork")
    _, status = reserve_in_child(@client, "rb-fork")
    assert_equal 0, status.exitstatus
    @client.reserve("rb-fork")
  end
end
