# frozen_string_literal: true

# A fake raftpace agent: the data plane of docs/dataplane.md, in memory,
# speaking just enough HTTP/1.1 (keep-alive, Content-Length bodies) on a
# UNIXServer (or a TCPServer) thread.
#
# One GCRA cursor per key (theoretical arrival time on the monotonic clock),
# pauses, caps with slots, and hooks to misbehave: scripted error answers
# (fail_next), slow answers (slow_answer), dropped requests (drop_next),
# connections closed after each answer (close_idle).

require "json"
require "monitor"
require "socket"
require "tmpdir"
require "fileutils"

class FakeAgent
  FIELDS = {
    "reserve" => %w[n max_wait],
    "forfeit" => %w[n],
    "pauses" => %w[seconds for],
    "slots" => %w[keys ttl max_wait]
  }.freeze
  REASONS = { 200 => "OK", 204 => "No Content", 400 => "Bad Request", 401 => "Unauthorized",
              404 => "Not Found", 405 => "Method Not Allowed", 429 => "Too Many Requests",
              500 => "Internal Server Error", 502 => "Bad Gateway", 503 => "Service Unavailable" }.freeze

  # An answer raised from the routes.
  class Answer < StandardError
    attr_reader :status, :body, :headers

    def initialize(status, body, headers = {})
      super("answer #{status}")
      @status = status
      @body = body
      @headers = headers
    end
  end

  Request = Struct.new(:conn_id, :peer_pid, :method, :path, :raw, :headers)

  attr_reader :socket_path, :url, :requests, :forfeits, :grants, :slots, :tat
  attr_accessor :grace, :slow_answer, :drop_next, :close_idle

  def initialize(tcp: false, token: nil, grace: 0.5)
    @grace = grace
    @token = token
    @lock = Monitor.new
    @cond = @lock.new_cond
    @limits = {}
    @caps = {}
    @tat = {}
    @pauses = {}
    @slots = {}
    @forfeits = []
    @grants = []
    @requests = []
    @fail_next = [] # [prefix, status, body, headers]
    @slow_answer = nil # ->(method, path) { seconds }
    @drop_next = 0
    @close_idle = false
    @conn_ids = 0
    @slot_ids = 0
    @conns = []
    if tcp
      @server = TCPServer.new("127.0.0.1", 0)
      @url = "127.0.0.1:#{@server.addr[1]}"
    else
      @dir = Dir.mktmpdir("rp-rb-fake-")
      @socket_path = File.join(@dir, "agent.sock")
      @server = UNIXServer.new(@socket_path)
    end
    @unix = !tcp
    @thread = Thread.new { accept_loop }
  end

  def close
    @server.close rescue nil # rubocop:disable Style/RescueModifier
    @thread.join(2)
    @lock.synchronize { @conns.dup }.each { |s| s.close rescue nil } # rubocop:disable Style/RescueModifier
    FileUtils.rm_rf(@dir) if @dir
  end

  def set_limit(key, rate, burst = 1)
    @lock.synchronize { @limits[key] = [Float(rate), Integer(burst)] }
  end

  def set_cap(key, cap)
    @lock.synchronize { @caps[key] = Integer(cap) }
  end

  def fail_next(prefix, status, body, headers = {})
    @lock.synchronize { @fail_next << [prefix, status, body, headers] }
  end

  def count(method, prefix)
    @lock.synchronize { @requests.count { |r| r.method == method && r.path.start_with?(prefix) } }
  end

  def sync(&blk)
    @lock.synchronize(&blk)
  end

  private

  def mono
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  def accept_loop
    loop do
      sock = begin
        @server.accept
      rescue IOError, SystemCallError
        break
      end
      id = @lock.synchronize do
        @conns << sock
        @conn_ids += 1
      end
      Thread.new { serve(sock, id) }
    end
  end

  def peer_pid(sock)
    return nil unless @unix

    sock.getsockopt(:SOCKET, :PEERCRED).data.unpack("i3")[0]
  rescue StandardError
    nil
  end

  def serve(sock, conn_id)
    pid = peer_pid(sock)
    loop do
      line = sock.gets("\r\n")
      break if line.nil?

      method, path, = line.split(" ", 3)
      headers = {}
      while (l = sock.gets("\r\n")) && l != "\r\n"
        k, v = l.split(":", 2)
        headers[k.strip.downcase] = v.to_s.strip
      end
      len = headers["content-length"].to_i
      raw = len.positive? ? sock.read(len) : ""
      start = mono
      drop = @lock.synchronize do
        @requests << Request.new(conn_id, pid, method, path, raw, headers)
        @drop_next -= 1 if @drop_next.positive?
      end
      if drop
        sock.close
        break
      end
      status = 200
      hdrs = {}
      begin
        body = route(method, path, raw, headers, start)
        status, body = body if body.is_a?(Array)
      rescue Answer => e
        status = e.status
        body = e.body
        hdrs = e.headers
      end
      delay = @slow_answer ? @slow_answer.call(method, path).to_f : 0.0
      body["held"] = mono - start if body.is_a?(Hash) && body.key?("held")
      sleep(delay) if delay.positive? # the answer's moment is before this: held excludes it
      data = body.nil? ? "" : (body.is_a?(String) ? body : JSON.generate(body))
      out = +"HTTP/1.1 #{status} #{REASONS.fetch(status, 'Status')}\r\n"
      hdrs.each { |k, v| out << "#{k}: #{v}\r\n" }
      out << "Content-Type: application/json\r\n" unless data.empty?
      out << "Content-Length: #{data.bytesize}\r\n\r\n" << data
      sock.write(out)
      # close without "Connection: close": the client finds out when it
      # next uses the connection, like an agent's idle timeout
      break if @close_idle
    end
  rescue IOError, SystemCallError
    nil
  ensure
    sock.close rescue nil # rubocop:disable Style/RescueModifier
    @lock.synchronize { @conns.delete(sock) }
  end

  def err(status, code, msg, extra = {})
    h = %w[no_leader stopped overloaded].include?(code) ? { "Retry-After" => "1" } : {}
    Answer.new(status, { "error" => msg, "code" => code }.merge(extra), h)
  end

  def unescape(seg)
    seg.gsub(/%([0-9A-Fa-f]{2})/) { Regexp.last_match(1).hex.chr }.force_encoding(Encoding::UTF_8)
  end

  def route(method, path, raw, headers, start)
    if @token && headers["authorization"] != "Bearer #{@token}"
      raise err(401, "unauthorized", "missing or wrong token")
    end

    @lock.synchronize do
      i = @fail_next.index { |f| path.start_with?(f[0]) }
      if i
        _, status, body, h = @fail_next.delete_at(i)
        raise Answer.new(status, body, h)
      end
    end
    parts = path.split("?")[0].split("/", -1)
    raise err(404, "not_found", "no such route") if parts.size < 3 || parts[1] != "v1"

    r = parts[2]
    arg = parts.size > 3 ? unescape(parts[3]) : nil
    body = {}
    unless raw.strip.empty?
      begin
        body = JSON.parse(raw)
      rescue JSON::ParserError
        raise err(400, "invalid", "body is not JSON", "field" => "body")
      end
      raise err(400, "invalid", "body is not an object", "field" => "body") unless body.is_a?(Hash)
    end
    body.each_key do |k|
      raise err(400, "invalid", "unknown field #{k.inspect}", "field" => k) unless FIELDS.fetch(r, []).include?(k)
    end
    case [r, method]
    when %w[reserve POST]
      reserve(arg, Integer(body.fetch("n", 1)), Float(body.fetch("max_wait", 0)))
    when %w[forfeit POST]
      limit_of(arg)
      @lock.synchronize { @forfeits << [arg, Integer(body.fetch("n", 1))] }
      { "key" => arg, "n" => Integer(body.fetch("n", 1)) }
    when %w[pauses POST], %w[pauses GET]
      pause(arg, method, body)
    when %w[limits GET]
      rate, burst = limit_of(arg)
      { "key" => arg, "rate" => rate, "burst" => burst }
    when %w[slots POST]
      take(body, start)
    when %w[slots DELETE]
      @lock.synchronize do
        unless @slots.key?(arg)
          raise err(404, "unknown_slot", "no slot #{arg}") if arg.start_with?("s-gone")

          return [204, nil]
        end
        @slots.delete(arg)
        @cond.broadcast
      end
      [204, nil]
    else
      raise Answer.new(405, { "error" => "method not allowed", "code" => "method_not_allowed" })
    end
  end

  def limit_of(key)
    @lock.synchronize do
      raise err(404, "unknown_key", "no limit for #{key.inspect}") unless @limits.key?(key)

      @limits[key]
    end
  end

  def reserve(key, n, max_wait)
    rate, burst = limit_of(key)
    raise err(400, "invalid", "n must be in [1, burst]", "field" => "n") if n < 1 || n > burst
    raise err(400, "invalid", "max_wait must be >= 0", "field" => "max_wait") if max_wait.negative?

    @lock.synchronize do
      now = mono
      paused = @pauses.fetch(key, 0.0) - now
      raise err(429, "paused", "paused", "remaining" => paused) if paused > max_wait

      t = 1.0 / rate
      tat = [@tat.fetch(key, now), now, @pauses.fetch(key, 0.0) - (burst - n) * t].max
      new_tat = tat + n * t
      go = [new_tat - burst * t, now].max
      wait = go - now
      if wait > max_wait + 1e-9
        raise err(429, "limit_exceeded", format("wait %.3fs exceeds max_wait", wait), "wait" => wait)
      end

      @tat[key] = new_tat
      @grants << [key, n, go]
      { "wait" => wait, "use_by" => wait + @grace, "held" => 0.0 }
    end
  end

  def pause(key, method, body)
    @lock.synchronize do
      now = mono
      if method == "POST"
        secs = body["seconds"]
        unless secs.is_a?(Numeric) && secs.positive? && secs <= 86_400
          raise err(400, "invalid", "seconds must be in (0, 86400]", "field" => "seconds")
        end

        @pauses[key] = [@pauses.fetch(key, 0.0), now + secs].max
      end
      rem = [0.0, @pauses.fetch(key, 0.0) - now].max
      { "key" => key, "remaining_s" => rem, "remaining" => "#{rem}s", "remaining_ns" => (rem * 1e9).to_i }
    end
  end

  def take(body, start)
    keys = body["keys"] || []
    ttl = Float(body.fetch("ttl", 30))
    max_wait = Float(body.fetch("max_wait", 0))
    raise err(400, "invalid", "ttl must be in (0, 30]", "field" => "ttl") if ttl <= 0 || ttl > 30

    @lock.synchronize do
      keys.each { |k| raise err(404, "unknown_key", "no cap for #{k.inspect}") unless @caps.key?(k) }
      finish = mono + max_wait
      now = nil
      loop do
        now = mono
        @slots.delete_if { |_, (_, until_t)| until_t <= now }
        full = keys.select { |k| @slots.values.count { |ks, _| ks.include?(k) } >= @caps[k] }
        break if full.empty?
        raise err(429, "concurrency_limit", "caps full", "full" => full) if now >= finish

        @cond.wait(finish - now)
      end
      @slot_ids += 1
      sid = "s-#{@slot_ids}"
      @slots[sid] = [keys.dup, now + ttl]
      { "id" => sid, "keys" => keys.dup, "deadline" => ttl - (mono - start), "held" => 0.0 }
    end
  end
end
