# frozen_string_literal: true

require "minitest/autorun"
require "raftpace"
require_relative "fake_agent"

# A test against a fresh fake agent and a client of it.
class AgentCase < Minitest::Test
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
