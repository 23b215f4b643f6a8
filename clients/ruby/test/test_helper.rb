# frozen_string_literal: true

require "minitest/autorun"
require "raftpace"
require_relative "fake_agent"

# A test against a fresh fake agent and a client of it.
# ForkCheck reserves once in a forked child through a client the parent
# already used; the child exits 0 when that left it exactly one idle
# connection of its own (2 otherwise, 3 on an exception).
module ForkCheck
  def reserve_in_child(client, key)
    pid = Process.fork do
      code = 1
      begin
        client.reserve(key)
        code = client.instance_variable_get(:@pool).idle_count == 1 ? 0 : 2
      rescue Exception # rubocop:disable Lint/RescueException
        code = 3
      ensure
        exit!(code)
      end
    end
    [pid, Process.wait2(pid)[1]]
  end
end

class AgentCase < Minitest::Test
  include ForkCheck
  def tcp?
    false
  end

  def token
    nil
  end

  def grace
    0.5 # generous: a loaded machine must not make grants late
  end

  def setup
    @agent = FakeAgent.new(tcp: tcp?, token: token, grace: grace)
    @client = if tcp?
                Raftpace::Client.new(url: @agent.url, token: token, timeout: 5)
              else
                Raftpace::Client.new(socket: @agent.socket_path, timeout: 5)
              end
  end

  def teardown
    @client&.close
    @agent&.close
  end

  def mono
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  def with_env(env)
    saved = {}
    %w[RAFTPACE_SOCKET RAFTPACE_ADDR RAFTPACE_TOKEN].each { |k| saved[k] = ENV.delete(k) }
    env.each { |k, v| ENV[k] = v }
    yield
  ensure
    saved.each { |k, v| v.nil? ? ENV.delete(k) : ENV[k] = v }
  end
end
