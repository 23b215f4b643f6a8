# frozen_string_literal: true

# raftpace: the agent's data plane (docs/dataplane.md) from Ruby.
#
#   client = Raftpace::Client.new(socket: "/run/raftpace.sock")
#   client.wait("acme", timeout: 10)
#   client.within_limit("acme") { call_acme }
#   client.slot(["global", "team:42"]) { |s| work }
require "zlib"
require_relative "raftpace/version"
require_relative "raftpace/errors"
require_relative "raftpace/transport"
require_relative "raftpace/client"
