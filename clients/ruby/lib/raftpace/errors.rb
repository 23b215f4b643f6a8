# frozen_string_literal: true

module Raftpace
  # The base of every raftpace error. Carries the agent's message
  # (#message), its #code ("limit_exceeded", "no_leader", ...), the HTTP
  # #status (nil for errors raised by the client itself) and the answer's
  # JSON #body.
  class Error < StandardError
    attr_reader :code, :status, :body

    def initialize(message = nil, code: nil, status: nil, body: nil)
      super(message)
      @code = code
      @status = status
      @body = body || {}
    end
  end

  # The client was not told where the agent is (or was told nonsense).
  class ConfigError < Error; end

  # The wait would exceed the caller's maximum. Nothing was consumed.
  # #wait is the agent's hint in seconds, not a grant.
  class LimitExceeded < Error
    # #key names the key that refused (of a reservation over several keys),
    # when the agent said.
    attr_reader :wait, :key

    def initialize(message = nil, code: "limit_exceeded", status: 429, body: nil, wait: 0.0)
      super(message, code: code, status: status, body: body)
      @wait = Float(wait || 0.0)
      @key = body.is_a?(Hash) ? body["key"] : nil
    end
  end

  # The key's fleet-wide pause outlasts the caller's maximum wait.
  # #remaining (also #wait) is how long the pause still lasts.
  class Paused < LimitExceeded
    attr_reader :remaining

    def initialize(message = nil, code: "paused", status: 429, body: nil, remaining: 0.0)
      super(message, code: code, status: status, body: body, wait: remaining)
      @remaining = Float(remaining || 0.0)
    end
  end

  # The key's quota (a budget per calendar window, UTC) is spent. #reset is
  # when the next window begins (RFC 3339, UTC), #wait the seconds until
  # then. A quota's next window is never reserved ahead: #wait sleeps to the
  # reset when its timeout allows, #reserve raises this at once.
  class QuotaExhausted < LimitExceeded
    attr_reader :reset

    def initialize(message = nil, code: "quota_exhausted", status: 429, body: nil, wait: 0.0)
      super(message, code: code, status: status, body: body, wait: wait)
      @reset = body.is_a?(Hash) ? body["reset"] : nil
    end
  end

  # The caps stayed full for the caller's maximum wait; #full names them.
  class ConcurrencyLimit < Error
    attr_reader :full

    def initialize(message = nil, code: "concurrency_limit", status: 429, body: nil, full: nil)
      super(message, code: code, status: status, body: body)
      @full = Array(full)
    end
  end

  # No limit (or cap) is set for the key.
  class UnknownKey < Error; end

  # The agent does not hold this slot (it restarted): it ends at its deadline.
  class UnknownSlot < Error; end

  # The agent cannot admit now; retry after #retry_after seconds. Never an
  # admission. Codes: "no_leader", "stopped" (fallback budget spent),
  # "overloaded", "closed" (the agent is shutting down), a 5xx without a
  # code, and the client's own "unreachable" (no connection, a broken one,
  # a timeout) and "late" (grants kept arriving too late to be used).
  class Unavailable < Error
    attr_reader :retry_after

    def initialize(message = nil, code: nil, status: nil, body: nil, retry_after: 1.0)
      super(message, code: code, status: status, body: body)
      @retry_after = Float(retry_after.nil? ? 1.0 : retry_after)
    end
  end

  # A field, key or body failed validation; #field names it when known.
  class InvalidRequest < Error
    attr_reader :field

    def initialize(message = nil, code: "invalid", status: 400, body: nil, field: nil)
      super(message, code: code, status: status, body: body)
      @field = field
    end
  end

  # TCP only: the token is missing or wrong.
  class Unauthorized < Error; end

  UNAVAILABLE_CODES = %w[no_leader stopped overloaded closed].freeze

  # Maps an error answer of the agent to the matching exception.
  # @api private
  def self.error_from_answer(status, body, retry_after_header = nil, text = "")
    body = {} unless body.is_a?(Hash)
    code = body["code"]
    code = nil unless code.is_a?(String)
    msg = body["error"].is_a?(String) && !body["error"].empty? ? body["error"] : nil
    msg ||= text.to_s.strip[0, 500]
    msg = "HTTP #{status}" if msg.nil? || msg.empty?
    ra = parse_retry_after(retry_after_header)
    if code == "quota_exhausted"
      w = body["wait"].is_a?(Numeric) ? body["wait"] : (ra || 0.0)
      QuotaExhausted.new(msg, code: code, status: status, body: body, wait: w)
    elsif code == "limit_exceeded" || (code.nil? && status == 429)
      w = body["wait"].is_a?(Numeric) ? body["wait"] : (ra || 0.0)
      LimitExceeded.new(msg, code: code || "limit_exceeded", status: status, body: body, wait: w)
    elsif code == "paused"
      r = body["remaining"].is_a?(Numeric) ? body["remaining"] : (ra || 0.0)
      Paused.new(msg, code: code, status: status, body: body, remaining: r)
    elsif code == "concurrency_limit"
      ConcurrencyLimit.new(msg, code: code, status: status, body: body, full: body["full"])
    elsif code == "unknown_key"
      UnknownKey.new(msg, code: code, status: status, body: body)
    elsif code == "unknown_slot"
      UnknownSlot.new(msg, code: code, status: status, body: body)
    elsif UNAVAILABLE_CODES.include?(code) || (code.nil? && status >= 500)
      Unavailable.new(msg, code: code, status: status, body: body, retry_after: ra.nil? ? 1.0 : ra)
    elsif code == "invalid" || (code.nil? && status == 400)
      InvalidRequest.new(msg, code: code || "invalid", status: status, body: body, field: body["field"])
    elsif code == "unauthorized" || (code.nil? && [401, 403].include?(status))
      Unauthorized.new(msg, code: code || "unauthorized", status: status, body: body)
    else
      Error.new(msg, code: code, status: status, body: body)
    end
  end

  # @api private
  def self.parse_retry_after(value)
    return nil if value.nil?

    Float(value.to_s.strip)
  rescue ArgumentError
    nil
  end
end
