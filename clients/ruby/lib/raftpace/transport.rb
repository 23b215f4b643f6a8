# frozen_string_literal: true

require "net/http"
require "socket"

module Raftpace
  # Net::HTTP over the agent's unix socket (`raftpace agent --socket`).
  # @api private
  class UnixHTTP < Net::HTTP
    attr_accessor :unix_path

    def proxy?
      false
    end

    private

    def connect
      sock = UNIXSocket.new(@unix_path)
      @socket = Net::BufferedIO.new(sock, read_timeout: @read_timeout, write_timeout: @write_timeout,
                                          continue_timeout: @continue_timeout, debug_output: @debug_output)
      on_connect
    end
  end

  # One keep-alive connection and the process that opened it.
  # @api private
  Conn = Struct.new(:http, :pid)

  # Idle keep-alive connections of one process, shared by its threads.
  #
  # A connection is checked out by one thread at a time, so any number of
  # threads may share a Client. A connection opened in one process is never
  # used in another: after a fork (Unicorn, Sidekiq, Delayed::Job workers)
  # the first checkout in the child sees a new Process.pid, drops the
  # inherited idle connections (closing only the child's copies of the
  # descriptors: the parent's connections are untouched) and opens its own.
  # @api private
  class Pool
    def initialize(max_idle: 16, &factory)
      @factory = factory
      @max_idle = max_idle
      @lock = Mutex.new
      @idle = []
      @pid = Process.pid
    end

    # Returns [conn, reused].
    def checkout
      check_pid
      conn = @lock.synchronize { @idle.pop }
      return [conn, true] if conn

      [Conn.new(@factory.call, Process.pid), false]
    end

    def checkin(conn)
      check_pid
      if conn.pid != Process.pid
        Pool.discard(conn)
        return
      end
      kept = @lock.synchronize do
        if @idle.size < @max_idle
          @idle.push(conn)
          true
        else
          false
        end
      end
      Pool.discard(conn) unless kept
    end

    def idle_count
      check_pid
      @lock.synchronize { @idle.size }
    end

    def close
      idle = @lock.synchronize { @idle.slice!(0, @idle.size) }
      idle.each { |c| Pool.discard(c) }
    end

    def self.discard(conn)
      conn.http.finish if conn.http.started?
    rescue StandardError
      nil
    end

    private

    def check_pid
      return if @pid == Process.pid

      # In a forked child: the lock may have been held by a thread that does
      # not exist here, and the idle connections are the parent's.
      @lock = Mutex.new
      idle = @idle
      @idle = []
      @pid = Process.pid
      idle.each { |c| Pool.discard(c) }
    end
  end
end
