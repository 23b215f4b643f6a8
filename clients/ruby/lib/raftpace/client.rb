# frozen_string_literal: true

require "json"
require "net/http"
require "uri"

module Raftpace
  # #wait(timeout: nil) reserves at most this far ahead per request, then asks again.
  UNBOUNDED_STEP = 60.0
  # How many grants in a row may arrive too late before a reservation gives up.
  MAX_LATE = 5
  BACKOFF_MIN = 0.05
  BACKOFF_MAX = 2.0

  # KEY as one path segment, escaped like Go's url.PathEscape.
  def self.escape_key(key)
    unless key.is_a?(String)
      raise InvalidRequest.new("key must be a String, not #{key.class}", field: "key", status: nil)
    end
    raise InvalidRequest.new("key must not be empty", field: "key", status: nil) if key.empty?

    key.encode(Encoding::UTF_8).b.gsub(/[^A-Za-z0-9\-_.~$&+:=@]/n) { |c| format("%%%02X", c.ord) }
  end

  # Keys, or [key, n] pairs, as [key, n] pairs (a reservation's wants).
  def self.wants(wants)
    raise ArgumentError, "wants is a list of keys or [key, n] pairs, not one key: #{wants.inspect}" if wants.is_a?(String)

    ws = Array(wants).map { |w| w.is_a?(String) ? [w, 1] : [w[0], Integer(w[1])] }
    raise InvalidRequest.new("a reservation names at least one key", field: "keys", status: nil) if ws.empty?

    ws
  end

  # A granted reservation placed on this process's monotonic clock.
  #
  # #go_at = recv + wait: the events go no earlier. #use_by = sent + held +
  # use_by: they go no later (docs/dataplane.md, "Using a grant").
  class Grant
    attr_reader :key, :n, :wait, :use_by_s, :held, :sent, :recv, :go_at, :use_by

    def initialize(key, n, wait, use_by_s, held, sent, recv)
      @key = key
      @n = n
      @wait = wait
      @use_by_s = use_by_s
      @held = held
      @sent = sent
      @recv = recv
      @go_at = recv + wait
      @use_by = sent + held + use_by_s
    end

    # Seconds from now until the events may go.
    def delay(now)
      [0.0, @go_at - now].max
    end

    # false when the grace was eaten before the events could even go.
    def usable?
      @go_at <= @use_by
    end

    # true when going at now would be past the grant's use-by.
    def late?(now)
      now > @use_by
    end
  end

  # Concurrency slots taken with Client#acquire_slot or Client#slot.
  # #deadline is on the monotonic clock: the holder must be done by then
  # (the agent reclaims the slot at its ttl however its holder fares).
  class Slot
    attr_reader :id, :keys, :deadline

    def initialize(client, id, keys, deadline)
      @client = client
      @id = id
      @keys = keys
      @deadline = deadline
      @released = false
    end

    def released?
      @released
    end

    # Seconds left before the deadline.
    def remaining
      @deadline - @client.send(:now)
    end

    # Gives the slot back (idempotent). An agent that no longer knows it
    # (it restarted) is fine: the slot ends at its deadline.
    def release
      return if @released

      @released = true
      begin
        @client.send(:call, :delete, "/v1/slots/#{Raftpace.escape_key(@id)}")
      rescue UnknownSlot
        nil
      end
      nil
    end
  end

  # A connection to the raftpace agent beside this process
  # (docs/dataplane.md).
  #
  # +socket+: the agent's unix socket (--socket); +url+: its TCP address
  # (--http), "HOST:PORT" or "http://HOST:PORT". Without either,
  # RAFTPACE_SOCKET and RAFTPACE_ADDR are read; a socket wins when both are
  # given. +token+ (or RAFTPACE_TOKEN) is sent on TCP only. +timeout+ bounds
  # each request (plus any max_wait it asks the agent to spend). One Client
  # may be shared by threads and survives fork.
  class Client
    attr_reader :socket_path, :address, :timeout, :token
    attr_accessor :logger

    def initialize(socket: nil, url: nil, token: nil, timeout: 5, logger: nil)
      if socket.nil? && url.nil?
        socket = presence(ENV["RAFTPACE_SOCKET"])
        url = presence(ENV["RAFTPACE_ADDR"])
      end
      token = presence(ENV["RAFTPACE_TOKEN"].to_s.strip) if token.nil?
      @timeout = Float(timeout)
      @logger = logger
      @headers = { "Content-Type" => "application/json", "Accept" => "application/json",
                   "User-Agent" => "raftpace-ruby/#{VERSION}" }
      if presence(socket)
        @socket_path = socket
        @address = nil
        @token = nil
        path = socket
        @pool = Pool.new do
          h = UnixHTTP.new("localhost", 80, nil)
          h.unix_path = path
          h
        end
      elsif presence(url)
        @socket_path = nil
        @address = Client.parse_addr(url)
        @token = token
        host, port = @address
        @pool = Pool.new { Net::HTTP.new(host, port, nil) }
        @headers["Authorization"] = "Bearer #{token}" if token
      else
        raise ConfigError, "raftpace: no agent address: pass socket: or url:, or set RAFTPACE_SOCKET " \
                           "(the agent's --socket) or RAFTPACE_ADDR (its --http HOST:PORT)"
      end
      # Hooks for tests (and for callers that keep their own clocks).
      @clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
      @sleeper = ->(d) { sleep(d) }
    end

    def inspect
      where = @socket_path || @address.join(":")
      "#<Raftpace::Client #{where}>"
    end

    # Closes the idle connections (the client stays usable).
    def close
      @pool.close
      nil
    end

    # @api private
    def self.parse_addr(addr)
      a = addr.to_s.strip
      if a.include?("://")
        begin
          u = URI.parse(a)
        rescue URI::InvalidURIError
          raise ConfigError, "raftpace: address #{addr.inspect} is not HOST:PORT or http://HOST:PORT"
        end
        raise ConfigError, "raftpace: only http:// is served by the agent, not #{addr.inspect}" if u.scheme != "http"
        raise ConfigError, "raftpace: no host in #{addr.inspect}" if u.host.nil? || u.host.empty?

        host = u.host.sub(/\A\[(.*)\]\z/, '\1')
        return [host, u.port || 80]
      end
      host, sep, port = a.rpartition(":")
      if sep.empty? || host.empty? || port !~ /\A\d+\z/
        raise ConfigError, "raftpace: address #{addr.inspect} is not HOST:PORT or http://HOST:PORT"
      end

      host = host[1..-2] if host.start_with?("[") && host.end_with?("]")
      [host, Integer(port, 10)]
    end

    # ------------------------------------------------------------------
    # reservations

    # One reservation: a Grant, or LimitExceeded / Paused (nothing consumed).
    # The caller must go no earlier than grant.go_at and, if its clock is
    # past grant.use_by when it would go, must not go: forfeit and reserve
    # again (#wait and #reserve do this).
    def reserve_grant(key, n: 1, max_wait: 0)
      ans, sent, recv = call(:post, "/v1/reserve/#{Raftpace.escape_key(key)}",
                             { "n" => Integer(n), "max_wait" => Float(max_wait) })
      grant_from(ans, key, Integer(n), sent, recv)
    end

    # One reservation over several keys: a Grant for all, or none consumed.
    # +wants+ lists keys, or [key, n] pairs (1 to 16 keys, each once). The
    # events of every key are granted at one instant that each key's limit
    # allows; LimitExceeded / Paused name the key that refused (#key). The
    # grant's key is the array of keys.
    def reserve_all_grant(wants, max_wait: 0)
      ws = Raftpace.wants(wants)
      return reserve_grant(ws[0][0], n: ws[0][1], max_wait: max_wait) if ws.size == 1

      body = { "keys" => ws.map { |k, n| { "key" => k, "n" => n } }, "max_wait" => Float(max_wait) }
      ans, sent, recv = call(:post, "/v1/reserve", body)
      grant_from(ans, ws.map(&:first), ws.sum { |_, n| n }, sent, recv)
    end

    # The Grant an agent's answer ans describes, or Unavailable.
    private def grant_from(ans, key, n, sent, recv)
      ans ||= {}
      Grant.new(key, n, Float(ans.fetch("wait")), Float(ans.fetch("use_by")), Float(ans.fetch("held", 0.0)), sent, recv)
    rescue KeyError, TypeError, ArgumentError
      raise Unavailable.new("raftpace: malformed grant from the agent: #{ans.inspect}", code: "unreachable")
    end

    # #reserve over several keys (see #reserve_all_grant): the delay to honour.
    def reserve_all(wants, max_wait: 0)
      usable_grant(Raftpace.wants(wants), Float(max_wait)).delay(now)
    end

    # #wait over several keys: returns once the events of every key may go.
    # No key's slot is held while another is awaited: the fleet grants all
    # at one instant, or (LimitExceeded naming the key) none.
    def wait_all(wants, timeout: nil)
      wait_for(Raftpace.wants(wants), timeout)
    end

    # Reserves n events; returns the delay (Float seconds from now) to honour.
    #
    # Raises LimitExceeded when the wait would exceed max_wait, Paused when a
    # pause outlasts it (nothing consumed either way). The events must go
    # after the delay, and promptly: a caller that may be late should use
    # #reserve_grant and check Grant#late? itself, or use #wait.
    def reserve(key, n: 1, max_wait: 0)
      g = usable_grant([[key, Integer(n)]], Float(max_wait))
      g.delay(now)
    end

    # Tells the agent a grant went unused (best effort: never raises).
    def forfeit(key, n: 1)
      call(:post, "/v1/forfeit/#{Raftpace.escape_key(key)}", { "n" => Integer(n) })
      nil
    rescue StandardError => e
      log(:debug, "raftpace: forfeit of #{key.inspect} failed: #{e.message}")
      nil
    end

    # Blocks until the fleet may do n more events of key, then returns.
    #
    # Reserves with max_wait = what is left of +timeout+ and sleeps on this
    # process's monotonic clock. Raises LimitExceeded (nothing consumed) at
    # once when the wait would be longer than timeout, Paused when a pause
    # outlasts it; Unavailable answers are retried with backoff within the
    # timeout. timeout nil waits as long as it takes, reserving at most
    # UNBOUNDED_STEP seconds ahead per request.
    def wait(key, n: 1, timeout: nil)
      wait_for([[key, Integer(n)]], timeout)
    end

    # wait and wait_all: ws are [key, n] pairs.
    private def wait_for(ws, timeout)
      deadline = timeout.nil? ? nil : now + [0.0, Float(timeout)].max
      backoff = BACKOFF_MIN
      loop do
        left = deadline.nil? ? Float::INFINITY : [0.0, deadline - now].max
        step = [left, UNBOUNDED_STEP].min
        begin
          g = usable_grant(ws, step, deadline)
        rescue QuotaExhausted => e
          # A window is never reserved ahead: sleep to its reset.
          raise if !deadline.nil? && e.wait > left

          @sleeper.call([BACKOFF_MIN, e.wait].max)
          next
        rescue LimitExceeded => e # and Paused
          hint = e.wait
          raise if !deadline.nil? && (step >= left || hint > left)

          # only when the wait is beyond one step: come back closer to it
          @sleeper.call([BACKOFF_MIN, hint > step ? [hint - step, UNBOUNDED_STEP].min : BACKOFF_MIN].max)
          next
        rescue Unavailable => e
          d = [[backoff, e.code == "late" ? 0.0 : e.retry_after].max, 30.0].min
          raise if !deadline.nil? && now + d > deadline

          log(:debug, "raftpace: #{e.message}; retrying in #{format('%.2f', d)}s")
          @sleeper.call(d)
          backoff = [backoff * 2, BACKOFF_MAX].min
          next
        end
        sleep_until(g.go_at)
        if g.late?(now) # a GC pause or SIGSTOP ate the grace
          forfeit(ws[0][0], n: ws[0][1]) # one forfeit per grant: the agent counts grants
          next
        end
        return nil
      end
    end

    # Runs the block once the fleet has room for n events of key, waiting
    # at most wait_timeout seconds (nil: as long as it takes); returns the
    # block's value. Raises LimitExceeded (or Paused) instead of running it
    # when there is no room in time, in the spirit of
    # Delayed::Limit.within_limit.
    def within_limit(key, wait_timeout: 5, n: 1)
      raise ArgumentError, "within_limit needs a block" unless block_given?

      wait(key, n: n, timeout: wait_timeout)
      yield
    end

    # ------------------------------------------------------------------
    # pauses and limits

    # Pauses key fleet-wide for seconds in (0, 86400]; returns the pause in
    # force (a longer pause in force stays).
    def pause(key, seconds)
      ans, = call(:post, "/v1/pauses/#{Raftpace.escape_key(key)}", { "seconds" => Float(seconds) })
      Float((ans || {}).fetch("remaining_s", 0.0))
    end

    # Seconds the key's pause still lasts (0.0 when not paused).
    def paused_for(key)
      ans, = call(:get, "/v1/pauses/#{Raftpace.escape_key(key)}")
      Float((ans || {}).fetch("remaining_s", 0.0))
    end

    # [rate per second (Float), burst (Integer)] of key's limit; UnknownKey when unset.
    def limit(key)
      ans, = call(:get, "/v1/limits/#{Raftpace.escape_key(key)}")
      ans ||= {}
      [Float(ans["rate"]), Integer(ans["burst"])]
    end

    # What key's limit has left, as the leader counts it: a Hash with
    # "tokens" (events the rate would admit at once, fleet-wide) and
    # "burst", and for a limit with a quota "quota" ("100000/day"), "used",
    # "left", "window_start" and "reset" (RFC 3339, UTC). One round trip to
    # the leader: a read for planning, not a grant.
    def remaining(key)
      ans, = call(:get, "/v1/remaining/#{Raftpace.escape_key(key)}")
      ans || {}
    end

    # ------------------------------------------------------------------
    # concurrency slots

    # Takes one slot of each key's cap, all or none; ConcurrencyLimit when
    # they stay full for max_wait. Release it (or use #slot with a block).
    def acquire_slot(keys, ttl: 30, max_wait: 0)
      keys = keys.is_a?(String) ? [keys] : Array(keys)
      keys.each { |k| Raftpace.escape_key(k) } # validates
      ans, sent, = call(:post, "/v1/slots",
                        { "keys" => keys, "ttl" => Float(ttl), "max_wait" => Float(max_wait) },
                        extra_timeout: Float(max_wait), retry_unsent_only: true)
      ans ||= {}
      deadline = sent + Float(ans.fetch("held", 0.0)) + Float(ans.fetch("deadline", 0.0))
      Slot.new(self, ans["id"].to_s, Array(ans.fetch("keys", keys)), deadline)
    end

    # With a block: takes the slots (ConcurrencyLimit when they stay full for
    # max_wait), yields the Slot, gives the slots back when the block exits
    # (also on exceptions) and returns the block's value. Without a block:
    # the acquired Slot (release it yourself).
    def slot(keys, ttl: 30, max_wait: 0)
      s = acquire_slot(keys, ttl: ttl, max_wait: max_wait)
      return s unless block_given?

      begin
        yield s
      ensure
        # The block's outcome is what the caller acts on: a slot that could
        # not be given back (agent unreachable) ends at its deadline anyway.
        begin
          s.release
        rescue StandardError => e
          log(:warn, "raftpace: releasing slot #{s.id} failed (it ends at its deadline): #{e.message}")
        end
      end
    end

    private

    def presence(v)
      v.nil? || v.to_s.empty? ? nil : v
    end

    def now
      @clock.call
    end

    def log(level, msg)
      @logger&.public_send(level, msg)
    end

    def sleep_until(t)
      loop do
        d = t - now
        return if d <= 0

        @sleeper.call(d)
      end
    end

    # A grant whose window can still be met, forfeiting those that cannot.
    def usable_grant(ws, max_wait, deadline = nil)
      MAX_LATE.times do
        max_wait = [max_wait, [0.0, deadline - now].max].min unless deadline.nil?
        g = reserve_all_grant(ws, max_wait: max_wait)
        return g if g.usable? && !g.late?([now, g.go_at].max)

        forfeit(ws[0][0], n: ws[0][1])
      end
      raise Unavailable.new("raftpace: #{MAX_LATE} grants for #{ws.map(&:first).join(', ')} in a row came too late to be used " \
                            "(a round trip or a pause longer than the agent's --use-grace)",
                            code: "late", retry_after: 0.1)
    end

    METHODS = { get: Net::HTTP::Get, post: Net::HTTP::Post, delete: Net::HTTP::Delete }.freeze
    # Failures that happen before any answer on a connection the agent may
    # have closed while it was idle.
    REPEATABLE = [EOFError, Errno::ECONNRESET, Errno::EPIPE, Errno::ECONNABORTED].freeze
    TIMEOUTS = [Net::OpenTimeout, Net::ReadTimeout, Net::WriteTimeout].freeze
    BROKEN = [IOError, SystemCallError, SocketError, Net::HTTPBadResponse, Net::ProtocolError, Zlib::Error].freeze

    # Sends one request; returns [answer JSON or nil, sent, recv].
    #
    # Retry rule: a request that fails on a connection taken from the pool
    # (the agent may have closed it while it was idle) is sent once more on a
    # fresh connection if the failure came before any answer: nothing was
    # answered, nothing was admitted. If the agent did act on the first copy,
    # the repeat is still safe for the ceiling: a reserve consumes a second
    # slot and the first grant, never answered, is never used (lost capacity,
    # not extra events); pauses and forfeits are idempotent for the limit.
    # Taking slots (retry_unsent_only) is only repeated when the request
    # could not even be written (EPIPE), so a phantom slot does not hold a
    # cap until its ttl. A failure on a fresh connection, a timeout or a
    # partial answer is never repeated: it is raised as Unavailable (code
    # "unreachable"). A 5xx or a broken connection is never an admission.
    def call(method, path, body = nil, extra_timeout: 0.0, retry_unsent_only: false)
      data = body.nil? ? "" : JSON.generate(body)
      timeout = @timeout + [0.0, extra_timeout].max
      2.times do |attempt|
        conn, reused = @pool.checkout
        http = conn.http
        http.open_timeout = timeout
        http.read_timeout = timeout
        http.write_timeout = timeout if http.respond_to?(:write_timeout=)
        http.max_retries = 0 if http.respond_to?(:max_retries=)
        http.keep_alive_timeout = 30
        req = METHODS.fetch(method).new(path, @headers)
        req["Accept-Encoding"] = "identity"
        req.body = data
        sent = now
        begin
          http.start unless http.started?
          resp = http.request(req)
          recv = now
        rescue *TIMEOUTS => e
          Pool.discard(conn)
          raise Unavailable.new("raftpace: agent did not answer #{method.upcase} #{path} within " \
                                "#{format('%.3g', timeout)}s", code: "unreachable", retry_after: 1.0)
        rescue *BROKEN => e
          Pool.discard(conn)
          repeatable = REPEATABLE.any? { |k| e.is_a?(k) }
          repeatable &&= e.is_a?(Errno::EPIPE) if retry_unsent_only
          next if attempt.zero? && reused && repeatable

          raise Unavailable.new("raftpace: #{method.upcase} #{path}: #{e.class}: #{e.message}",
                                code: "unreachable", retry_after: 1.0)
        end
        if http.started? && !resp["connection"].to_s.casecmp("close").zero?
          @pool.checkin(conn)
        else
          Pool.discard(conn)
        end
        return [answer(resp), sent, recv]
      end
      raise "unreachable" # pragma: no cover
    end

    def answer(resp)
      status = resp.code.to_i
      text = resp.body.to_s
      text = text.dup.force_encoding(Encoding::UTF_8)
      ans = nil
      unless text.strip.empty?
        begin
          ans = JSON.parse(text)
        rescue JSON::ParserError
          ans = nil
        end
      end
      return ans if status >= 200 && status < 300

      raise Raftpace.error_from_answer(status, ans, resp["retry-after"], text)
    end
  end
end
