# frozen_string_literal: true

require_relative "lib/raftpace/version"

Gem::Specification.new do |s|
  s.name = "raftpace"
  s.version = Raftpace::VERSION
  s.summary = "Client of the raftpace agent's data plane: fleet-wide rate limits, pauses and concurrency caps"
  s.description = "Talks to the raftpace agent beside the worker over its unix socket (--socket) or " \
                  "TCP (--http), as specified in docs/dataplane.md. Standard library only."
  s.authors = ["raftpace authors"]
  s.files = Dir["lib/**/*.rb"] + ["README.md", "raftpace.gemspec"]
  s.require_paths = ["lib"]
  s.required_ruby_version = ">= 2.7"
end
